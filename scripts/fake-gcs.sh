#!/usr/bin/env bash
# Make sure a fake-gcs-server answers on 127.0.0.1:${ICEFEED_GCS_PORT:-4443} for the
# Google Cloud Storage tests: the JSON and upload APIs of GCS over plain HTTP, without
# authentication, with the bucket `warehouse`. Prints its URL.
#
# fake-gcs-server (BSD-2-Clause, Go) is built from its Go module into
# ${ICEFEED_GCS_DIR:-$HOME/.cache/icefeed/fake-gcs}/ once (a minute or two), then reused.
# If nothing answers on the port, starts it in the background with an in-memory backend,
# so every start is empty. Idempotent and quick when the server already runs.
# Stdout: the URL only. Progress goes to stderr; the server's log to $ICEFEED_GCS_DIR/server.log.
set -euo pipefail

VERSION=v1.56.1
DIR=${ICEFEED_GCS_DIR:-$HOME/.cache/icefeed/fake-gcs}
PORT=${ICEFEED_GCS_PORT:-4443}
URL="http://127.0.0.1:${PORT}"
SERVER="$DIR/fake-gcs-server-$VERSION"

log() { echo "fake-gcs.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

ready() { curl -fsS --max-time 3 -o /dev/null "$URL/storage/v1/b/warehouse" 2>/dev/null; }

if ready; then
    echo "$URL"
    exit 0
fi

if [[ ! -x $SERVER ]]; then
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (fake-gcs-server is built from source)"
    log "building fake-gcs-server $VERSION into $DIR"
    mkdir -p "$DIR/bin"
    GOBIN="$DIR/bin" go install "github.com/fsouza/fake-gcs-server@$VERSION" >&2
    mv "$DIR/bin/fake-gcs-server" "$SERVER"
fi

# shellcheck source=lib/background-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/background-server.sh"
logfile="$DIR/server.log"
pidfile="$DIR/server.pid"
if server_running "$pidfile"; then
    log "server $(cat "$pidfile") is starting; waiting for it"
else
    log "starting fake-gcs-server on $URL (log: $logfile)"
    # Each directory below -data is a bucket at start.
    rm -rf "$DIR/data"
    mkdir -p "$DIR/data/warehouse"
    start_server "$pidfile" "$logfile" "$SERVER" -scheme http -host 127.0.0.1 -port "$PORT" \
        -backend memory -data "$DIR/data" -external-url "$URL" -public-host "127.0.0.1:$PORT" \
        -log-level warn
fi
await_server fake-gcs-server "$pidfile" "$logfile" 60 || die "fake-gcs-server did not start on $URL"
echo "$URL"
