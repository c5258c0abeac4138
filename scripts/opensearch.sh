#!/usr/bin/env bash
# Make sure an OpenSearch 2.19 node answers on 127.0.0.1:${ICEFEED_OPENSEARCH_PORT:-9200}
# for the tests; print its URL.
#
# The node is tests/opensearch-node: a small Java 17 program embedding OpenSearch, built
# with Maven into ${ICEFEED_OPENSEARCH_DIR:-$HOME/.cache/icefeed/opensearch-node} (rebuilt
# only when its sources change). If nothing answers on the port, starts it in the
# background (its own session, so it outlives this script and a Ctrl-C) with a fresh data
# directory, and waits until the cluster is green or yellow.
#
# Idempotent and quick (one HTTP round trip) when the node already runs.
# Stdout: the URL only. Progress messages go to stderr; the node's log to
# $ICEFEED_OPENSEARCH_DIR/node-$PORT.log.
#
# Environment:
#   ICEFEED_OPENSEARCH_PORT       HTTP port (default 9200)
#   ICEFEED_OPENSEARCH_DIR        build and run directory
#   ICEFEED_OPENSEARCH_JAVA_OPTS  JVM options (default -Xms512m -Xmx1g)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PORT=${ICEFEED_OPENSEARCH_PORT:-9200}
URL="http://127.0.0.1:${PORT}"
DIR=${ICEFEED_OPENSEARCH_DIR:-$HOME/.cache/icefeed/opensearch-node}
SRC=tests/opensearch-node

log() { echo "opensearch.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The cluster answers and is usable (yellow: a single node cannot place replicas).
ready() {
    local health
    health=$(curl -fsS --max-time 3 "$URL/_cluster/health" 2>/dev/null) || return 1
    [[ $health == *'"status":"green"'* || $health == *'"status":"yellow"'* ]]
}

if ! command -v curl >/dev/null 2>&1; then
    log "installing curl (Debian package)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q curl >/dev/null
fi

if ready; then
    echo "$URL"
    exit 0
fi

# --- 1. build (cached) ----------------------------------------------------------
# shellcheck source=lib/java-test-server.sh
. scripts/lib/java-test-server.sh
build_java_server "$SRC" "$DIR" "OpenSearch test node"

# --- 2. start -------------------------------------------------------------------
# OpenSearch 2.19 runs on Java 17 to 21; prefer such a `java` when PATH has a newer one.
java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
JAVA=java
major=$(java_major java)
if [[ -z $major || $major -lt 17 || $major -gt 21 ]]; then
    for candidate in /usr/lib/jvm/java-{21,17}-openjdk-*/bin/java; do
        if [[ -x $candidate ]]; then JAVA=$candidate; break; fi
    done
    log "java on PATH is version ${major:-unknown}; using $JAVA"
fi
home="$DIR/node-$PORT"
logfile="$DIR/node-$PORT.log"
pidfile="$DIR/node-$PORT.pid"
# shellcheck source=lib/background-server.sh
. scripts/lib/background-server.sh
if server_running "$pidfile"; then
    log "node $(cat "$pidfile") is starting or unhealthy; waiting for it"
else
    log "starting OpenSearch on $URL (log: $logfile)"
    rm -rf "$home"
    # shellcheck disable=SC2086 # the options are a word list
    start_server "$pidfile" "$logfile" "$JAVA" ${ICEFEED_OPENSEARCH_JAVA_OPTS:--Xms512m -Xmx1g} \
        -Djava.locale.providers=SPI,COMPAT \
        -cp "$DIR/build/classes:$(cat "$DIR/classpath")" \
        icefeed.testing.OpenSearchNode "$PORT" "$home"
fi
await_server OpenSearch "$pidfile" "$logfile" 180 || die "no healthy cluster on $URL"
echo "$URL"
