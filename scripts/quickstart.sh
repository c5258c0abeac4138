#!/usr/bin/env bash
# One command from a fresh clone to a running icefeed with a demo table:
#
#   scripts/quickstart.sh
#
# 1. makes sure PostgreSQL runs locally (scripts/postgres.sh), unless
#    ICEFEED_DATABASE_URL points somewhere already;
# 2. builds the release binary (cargo build --release --locked);
# 3. applies the migrations (icefeed migrate);
# 4. creates the demo Iceberg table demo.trips under .icefeed/demo;
# 5. starts `icefeed serve` in the background, logging to .icefeed/serve.log,
#    and waits for /readyz;
# 6. registers the demo table, prints a few curl commands to try, and keeps
#    the server in the foreground until Ctrl-C, which stops it cleanly.
#
# Environment: ICEFEED_LISTEN (default 127.0.0.1:8080), ICEFEED_DATABASE_URL,
# CARGO_TARGET_DIR (default $HOME/.cache/icefeed/target),
# ICEFEED_READY_TIMEOUT (seconds to wait for /readyz, default 60); the rest of
# icefeed's settings (ICEFEED_CHANGE_STORE, ICEFEED_CONFIG, RUST_LOG) pass through.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/icefeed/target}
# Queries compile against the committed .sqlx/, whatever DATABASE_URL says.
export SQLX_OFFLINE=true
export ICEFEED_LISTEN=${ICEFEED_LISTEN:-127.0.0.1:8080}
READY_TIMEOUT=${ICEFEED_READY_TIMEOUT:-60}
STATE=.icefeed
DEMO_DIR="$STATE/demo"
LOG="$STATE/serve.log"
BIN="$CARGO_TARGET_DIR/release/icefeed"

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
die() { printf '\nquickstart: error: %s\n' "$*" >&2; exit 1; }

# Where to reach the server: a wildcard listen address is reached on loopback.
listen_host=${ICEFEED_LISTEN%:*}
listen_port=${ICEFEED_LISTEN##*:}
case $listen_host in
    '' | 0.0.0.0 | '[::]' | '::') listen_host=127.0.0.1 ;;
esac
BASE="http://$listen_host:$listen_port"

if ! command -v curl >/dev/null 2>&1; then
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "Installing curl"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q curl >/dev/null \
            || { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q curl >/dev/null; }
    else
        die "curl is needed: install it first"
    fi
fi

step "PostgreSQL"
if [[ -z ${ICEFEED_DATABASE_URL:-} ]]; then
    ICEFEED_DATABASE_URL=$(scripts/postgres.sh)
fi
export ICEFEED_DATABASE_URL
echo "database: $(sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#' <<<"$ICEFEED_DATABASE_URL")"

step "Building icefeed (cargo build --release; the first build takes a while)"
cargo build --release --locked

step "Applying migrations"
"$BIN" migrate

step "Creating the demo Iceberg table demo.trips in $DEMO_DIR"
mkdir -p "$STATE"
registration=$("$BIN" demo init --dir "$DEMO_DIR")

# Any HTTP answer (even a 404) means the address is taken.
if curl -sS -o /dev/null --max-time 2 "$BASE/healthz" 2>/dev/null; then
    die "something already answers on $BASE (an earlier quickstart?). Stop it, or pick another address: ICEFEED_LISTEN=127.0.0.1:8081 scripts/quickstart.sh"
fi

# The node reads local tables only below the directories it is given.
export ICEFEED_CATALOG__LOCAL_PATHS=${ICEFEED_CATALOG__LOCAL_PATHS:-$ROOT/$DEMO_DIR}
step "Starting icefeed serve on $ICEFEED_LISTEN (log: $LOG)"
: >"$LOG"
"$BIN" serve >>"$LOG" 2>&1 &
server=$!

# Stop the server on Ctrl-C / SIGTERM, or when this script fails; give it
# 20 s to shut down cleanly before killing it. (Called from traps only.)
# shellcheck disable=SC2317
stop_server() {
    kill -0 "$server" 2>/dev/null || return 0
    kill -TERM "$server" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$server" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$server" 2>/dev/null; then
        echo "icefeed did not stop within 20 s; killing it" >&2
        kill -KILL "$server" 2>/dev/null || true
    fi
    wait "$server" 2>/dev/null || true
}
# shellcheck disable=SC2317
on_signal() {
    trap - INT TERM
    printf '\nStopping icefeed...\n'
    stop_server
    echo "Stopped. PostgreSQL keeps running; the demo table stays in $DEMO_DIR."
    exit 0
}
trap on_signal INT TERM
trap stop_server EXIT

deadline=$((SECONDS + READY_TIMEOUT))
until curl -fsS -o /dev/null --max-time 2 "$BASE/readyz" 2>/dev/null; do
    if ! kill -0 "$server" 2>/dev/null; then
        tail -n 30 "$LOG" >&2 || true
        die "icefeed serve exited during start-up; the lines above are the end of $LOG"
    fi
    if ((SECONDS >= deadline)); then
        tail -n 30 "$LOG" >&2 || true
        die "icefeed was not ready at $BASE/readyz after ${READY_TIMEOUT} s; see $LOG (end shown above)"
    fi
    sleep 0.5
done
echo "ready: $BASE"

# POSTs the registration; prints the HTTP status, the answer goes to $response.
register() {
    curl -sS -o "$response" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' --data-binary "$registration" "$BASE/v1/tables"
}

# The id of the demo.trips registered from this directory's catalog (a quickstart run
# from another clone registers its own demo.trips in the same database).
demo_table_id() {
    curl -fsS "$BASE/v1/tables" | REGISTRATION="$registration" python3 -c '
import json, os, sys
mine = json.loads(os.environ["REGISTRATION"])["catalog"]["uri"]
tables = json.load(sys.stdin)["tables"]
print(next(t["id"] for t in tables
           if t["table"] == "demo.trips" and t["catalog"].get("uri") == mine))
'
}

# Whether the registration at $1 still matches the demo table and the change store:
# after `.icefeed` was deleted and made anew, its change sets are gone (reading them
# fails) or its checkpoint is not in the new table (it stops in `error`).
registration_is_stale() {
    local url=$1 page_status state
    page_status=$(curl -sS -o /dev/null -w '%{http_code}' "$url/changes?limit=1")
    [[ $page_status == 5* ]] && return 0
    for _ in 1 2 3 4 5 6; do
        state=$(curl -fsS "$url" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
        [[ $state == error ]] && return 0
        sleep 0.5
    done
    return 1
}

step "Registering demo.trips"
response=$(mktemp)
status=$(register)
if [[ $status == 409 ]]; then
    table_id=$(demo_table_id)
    if registration_is_stale "$BASE/v1/tables/$table_id"; then
        echo "the registration of an earlier run is stale (its demo table or change store was deleted); registering anew."
        curl -fsS -o /dev/null -X DELETE "$BASE/v1/tables/$table_id"
        status=$(register)
    fi
fi
case $status in
    200 | 201) echo "registered." ;;
    409) echo "already registered (from an earlier run)." ;;
    *)
        cat "$response" >&2
        echo >&2
        rm -f "$response"
        die "registering the demo table failed: HTTP $status from POST $BASE/v1/tables"
        ;;
esac
rm -f "$response"

table_id=$(demo_table_id)
TABLE_URL="$BASE/v1/tables/$table_id"

cat <<EOF

icefeed is running at $BASE with the demo table demo.trips registered.
Open the dashboard at $BASE/ui, or try, in another terminal:

  # list the registered tables
  curl -s $BASE/v1/tables
  # one table: its catalog, checkpoint and state
  curl -s $TABLE_URL

  # pull its changes: a page of events, the cursor to continue after, and whether more wait
  curl -s "$TABLE_URL/changes?limit=2"

  # remember where the feed ends, commit something new to the table, read what came after
  NEXT=\$(curl -s "$TABLE_URL/changes?limit=10000" | python3 -c 'import json,sys; print(json.load(sys.stdin)["next"])')
  $BIN demo append --dir $DEMO_DIR --rows 5
  sleep 2; curl -s "$TABLE_URL/changes?after=\$NEXT"

  # the same changes as newline-delimited JSON
  curl -s -H 'Accept: application/x-ndjson' $TABLE_URL/changes

  # the whole API
  $BIN openapi

Server log: $LOG    Press Ctrl-C to stop the server.
EOF

rc=0
wait "$server" || rc=$?
trap - EXIT
echo "icefeed serve exited with status $rc; see $LOG" >&2
exit "$rc"
