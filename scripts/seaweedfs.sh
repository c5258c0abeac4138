#!/usr/bin/env bash
# Make sure a SeaweedFS server answers on 127.0.0.1 for the object-storage tests: a real
# S3 API on port ${ICEFEED_S3_PORT:-8333} and a real Iceberg REST catalog over its S3
# Tables bucket `lake` on port ${ICEFEED_S3_REST_PORT:-8181}. Prints the S3 endpoint URL.
#
# SeaweedFS (Apache-2.0, Go) is built from its Go module into
# ${ICEFEED_SEAWEEDFS_DIR:-$HOME/.cache/icefeed/seaweedfs}/weed once (about 13 minutes on
# two cores), then reused. If nothing answers on the S3 port, starts `weed mini` in the
# background (its own session, so it outlives this script) with a fresh data directory,
# access key `admin` / secret `adminsecret`, bucket `warehouse` and table bucket `lake`.
#
# Idempotent and quick when the server already runs. `--build-only` builds and exits;
# `--binary` builds and prints the `weed` binary's path (tests run `weed shell` with it).
# Stdout: the S3 URL only. Progress goes to stderr; the server's log to
# $ICEFEED_SEAWEEDFS_DIR/weed.log.
set -euo pipefail

VERSION=v0.0.0-20261109003541-7506e5f91cd6
DIR=${ICEFEED_SEAWEEDFS_DIR:-$HOME/.cache/icefeed/seaweedfs}
S3_PORT=${ICEFEED_S3_PORT:-8333}
REST_PORT=${ICEFEED_S3_REST_PORT:-8181}
S3_URL="http://127.0.0.1:${S3_PORT}"
REST_URL="http://127.0.0.1:${REST_PORT}"
WEED="$DIR/weed-$VERSION"

log() { echo "seaweedfs.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# S3 answers (an unsigned request is refused with 403, which is an answer) and the REST
# catalog lists the namespaces of the table bucket, which exists once start-up is done.
ready() {
    curl -sS --max-time 3 -o /dev/null "$S3_URL/" 2>/dev/null || return 1
    local token
    token=$(curl -fsS --max-time 3 -X POST "$REST_URL/v1/oauth/tokens" \
        -d "grant_type=client_credentials&client_id=admin&client_secret=adminsecret" 2>/dev/null \
        | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p') || return 1
    [[ -n $token ]] || return 1
    curl -fsS --max-time 3 -o /dev/null -H "Authorization: Bearer $token" \
        "$REST_URL/v1/lake/namespaces" 2>/dev/null
}

MODE=${1:-start}
if [[ $MODE == start ]] && ready; then
    echo "$S3_URL"
    exit 0
fi

# --- 1. build (cached) ----------------------------------------------------------
if [[ ! -x $WEED ]]; then
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (SeaweedFS is built from source)"
    log "building SeaweedFS $VERSION into $DIR (about 13 minutes the first time)"
    src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [[ -d $src ]] || die "go mod download gave no module directory"
    build="$DIR/src"
    rm -rf "$build"
    mkdir -p "$DIR"
    cp -r "$src" "$build"
    chmod -R u+w "$build"
    # `go install …@version` refuses modules with replace directives: build in place.
    (cd "$build" && go build -o "$WEED.tmp" ./weed) >&2
    mv "$WEED.tmp" "$WEED"
    rm -rf "$build"
fi
case $MODE in
    --build-only) exit 0 ;;
    --binary) echo "$WEED"; exit 0 ;;
esac

# --- 2. start -------------------------------------------------------------------
# shellcheck source=lib/background-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/background-server.sh"
data="$DIR/data"
logfile="$DIR/weed.log"
pidfile="$DIR/weed.pid"
if server_running "$pidfile"; then
    log "server $(cat "$pidfile") is starting; waiting for it"
else
    log "starting SeaweedFS: S3 on $S3_URL, REST catalog on $REST_URL (log: $logfile)"
    rm -rf "$data"
    mkdir -p "$data"
    # Bound to loopback: without -ip it advertises the machine's own address.
    AWS_ACCESS_KEY_ID=admin AWS_SECRET_ACCESS_KEY=adminsecret \
        start_server "$pidfile" "$logfile" "$WEED" mini -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -dir="$data" -s3.port="$S3_PORT" -s3.port.iceberg="$REST_PORT" \
        -bucket=warehouse -tableBucket=lake
fi
await_server SeaweedFS "$pidfile" "$logfile" 120 || die "SeaweedFS did not start on $S3_URL"
echo "$S3_URL"
