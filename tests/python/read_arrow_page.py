"""Reads an icefeed Arrow page (an Arrow IPC stream file) with pyarrow and prints its
rows as a JSON array, values rendered the way icefeed's JSON events render them."""

import datetime
import decimal
import json
import sys

import pyarrow as pa


def render(value):
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
            return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return value


with open(sys.argv[1], "rb") as f:
    table = pa.ipc.open_stream(f).read_all()
rows = [{k: render(v) for k, v in row.items()} for row in table.to_pylist()]
print(json.dumps(rows))
