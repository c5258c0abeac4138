"""Generates a Python SDK from icefeed's committed OpenAPI document with
openapi-python-client and drives a running node with it: create a subscription,
pull a page, ack its `next`, read the subscription back, and provoke errors.

Usage: sdk_client.py OPENAPI_JSON BASE_URL TABLE_ID

Prints one JSON object describing what the SDK saw; tests/it/sdk.rs checks it.
Exits non-zero when generation warns (a document generators choke on is a defect)
or when the SDK returns something other than its typed models."""

import importlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid

PACKAGE = "icefeed_client"


def generate(document, into):
    """Runs the generator exactly as the README says, failing on any warning."""
    env = dict(os.environ)
    # The generator formats its output with ruff, installed beside it in the venv.
    env["PATH"] = sysconfig.get_path("scripts") + os.pathsep + env.get("PATH", "")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate",
         "--path", document, "--meta", "none", "--output-path", PACKAGE,
         "--fail-on-warning"],
        cwd=into, env=env, capture_output=True, text=True,
    )
    if result.returncode != 0:
        sys.exit(f"openapi-python-client failed:\n{result.stdout}\n{result.stderr}")
    return time.monotonic() - started


def expect(value, kind, what):
    if not isinstance(value, kind):
        sys.exit(f"{what}: expected {kind.__name__}, got {type(value).__name__}: {value!r}")
    return value


def problem(response, models, what):
    body = expect(response.parsed, models.Problem, what)
    return {"http_status": int(response.status_code), "status": body.status,
            "code": body.code, "detail": body.detail,
            "extensions": body.additional_properties}


def main():
    document, base_url, table_id = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="icefeed-sdk-") as work:
        run(os.path.abspath(document), base_url, table_id, work)


def run(document, base_url, table_id, work):
    seconds = generate(document, work)
    sys.path.insert(0, work)
    client_mod = importlib.import_module(PACKAGE)
    models = importlib.import_module(f"{PACKAGE}.models")
    subs = importlib.import_module(f"{PACKAGE}.api.subscriptions")
    for name in ("create_subscription", "get_subscription_events", "ack_subscription",
                 "get_subscription"):
        importlib.import_module(f"{PACKAGE}.api.subscriptions.{name}")

    client = client_mod.Client(base_url=base_url, raise_on_unexpected_status=True)
    out = {"generate_seconds": round(seconds, 1)}

    created = subs.create_subscription.sync_detailed(
        client=client,
        body=models.CreateSubscription(name="sdk-orders", tables=[uuid.UUID(table_id)]),
    )
    view = expect(created.parsed, models.SubscriptionView, "createSubscription")
    out["created"] = {"http_status": int(created.status_code), "id": str(view.id),
                      "name": view.name, "state": view.state.value,
                      "start": view.start.value, "lag_events": view.lag.events,
                      "location": created.headers.get("location")}

    page = expect(
        subs.get_subscription_events.sync(view.name, client=client, limit=100),
        models.ChangePage, "getSubscriptionEvents",
    )
    out["page"] = {
        "ops": [e.op.value for e in page.events],
        "ids": [e.after["id"] for e in page.events],
        "committed_at_is_datetime": all(
            hasattr(e.committed_at, "tzinfo") for e in page.events),
        "next": page.next_, "more": page.more,
    }

    acked = expect(
        subs.ack_subscription.sync(view.name, client=client,
                                   body=models.Ack(position=page.next_)),
        models.SubscriptionView, "ackSubscription",
    )
    out["acked"] = {"committed": acked.committed, "lag_events": acked.lag.events}

    again = expect(
        subs.get_subscription_events.sync(view.name, client=client, limit=100),
        models.ChangePage, "getSubscriptionEvents after the ack",
    )
    out["after_ack"] = {"count": len(again.events), "more": again.more}

    got = expect(subs.get_subscription.sync(str(view.id), client=client),
                 models.SubscriptionView, "getSubscription")
    out["got"] = {"committed": got.committed, "lag_events": got.lag.events,
                  "lag_snapshots": got.lag.snapshots}

    # Errors come back as typed problem documents, not as exceptions or None.
    first = page.events[0].position
    # `next` shadows a Python builtin, so the generated model calls it `next_`.
    out["ack_backwards"] = problem(
        subs.ack_subscription.sync_detailed(view.name, client=client,
                                            body=models.Ack(position=first)),
        models, "ack backwards")
    out["not_found"] = problem(
        subs.get_subscription.sync_detailed("no-such-subscription", client=client),
        models, "unknown subscription")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
