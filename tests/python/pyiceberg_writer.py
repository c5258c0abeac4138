"""Writes an Iceberg table with pyiceberg (a third-party writer) for icefeed's tests.

Usage: pyiceberg_writer.py <catalog-dir> <catalog-name> <command> [args]
  The catalog is the SQL catalog <catalog-dir>/catalog.db, or, when ICEFEED_CATALOG is
  set, the catalog its JSON object of pyiceberg properties describes (a REST or Glue
  catalog: {"type": "rest", "uri": …}; <catalog-dir> is then unused). ICEFEED_TABLE
  names the table (default shop.orders).
  create                 create shop.orders (id long identifier, name string)
  append <first> <last>  append rows with ids first..last; prints the new snapshot id
  append-twice <id>      append two rows with this id in one snapshot (a key that is not unique)
  delete <id>            delete the row with this id; prints the new snapshot id
  expire <snapshot-id>   expire one snapshot (it must not be the current one)
"""

import json
import os
import sys

import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def open_catalog(directory: str, name: str):
    described = os.environ.get("ICEFEED_CATALOG")
    if described:
        return load_catalog(name, **json.loads(described))
    return SqlCatalog(name, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")


def main() -> None:
    directory, name, command, *args = sys.argv[1:]
    catalog = open_catalog(directory, name)
    identifier = os.environ.get("ICEFEED_TABLE", "shop.orders")
    if command == "create":
        catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
        schema = Schema(
            NestedField(1, "id", LongType(), required=True),
            NestedField(2, "name", StringType(), required=False),
            identifier_field_ids=[1],
        )
        catalog.create_table(identifier, schema=schema)
        return
    table = catalog.load_table(identifier)
    if command == "append":
        first, last = int(args[0]), int(args[1])
        ids = list(range(first, last + 1))
        table.append(pa.Table.from_pylist([{"id": i, "name": f"py{i}"} for i in ids], schema=ARROW))
    elif command == "append-twice":
        rows = [{"id": int(args[0]), "name": f"py{args[0]}{suffix}"} for suffix in "ab"]
        table.append(pa.Table.from_pylist(rows, schema=ARROW))
    elif command == "delete":
        table.delete(f"id == {int(args[0])}")
    elif command == "expire":
        table.maintenance.expire_snapshots().by_id(int(args[0])).commit()
    else:
        raise SystemExit(f"unknown command {command}")
    print(table.current_snapshot().snapshot_id)


if __name__ == "__main__":
    main()
