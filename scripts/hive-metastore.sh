#!/usr/bin/env bash
# Builds the Hive metastore of the Hive catalog test (tests/hive-metastore: Apache Hive's
# standalone metastore 3.1 in a small Java 17 program, from Maven Central) into
# ${ICEFEED_HIVE_METASTORE_DIR:-$HOME/.cache/icefeed/hive-metastore}, rebuilt only when
# its sources change, and prints the Java classpath to run it with. The test starts it:
#   java -cp "$(scripts/hive-metastore.sh)" icefeed.testing.HiveMetastore <port> <data-dir>
# Stdout: the classpath only; progress goes to stderr.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=${ICEFEED_HIVE_METASTORE_DIR:-$HOME/.cache/icefeed/hive-metastore}
SRC=tests/hive-metastore

log() { echo "hive-metastore.sh: $*" >&2; }

stamp="$DIR/.sources-sha256"
want=$(find "$SRC" -type f ! -path "$SRC/target/*" | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
built() {
    [[ -f $stamp && $(cat "$stamp") == "$want" && -f $DIR/classpath ]] || return 1
    # The classpath names jars in the local Maven repository, which may have been cleaned.
    local jar
    while IFS= read -r jar; do [[ -f $jar ]] || return 1; done < <(tr ':' '\n' <"$DIR/classpath")
}
if ! built; then
    if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        log "installing a Java 17 JDK and Maven (Debian packages)"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null
    fi
    log "building the Hive metastore test server into $DIR"
    rm -rf "$DIR/build" "$DIR/classpath" "$stamp"
    mkdir -p "$DIR"
    mvn -q -B -f "$SRC/pom.xml" -Dicefeed.build.dir="$DIR/build" \
        compile dependency:build-classpath -Dmdep.outputFile="$DIR/classpath" >&2
    echo "$want" >"$stamp"
fi
echo "$DIR/build/classes:$(cat "$DIR/classpath")"
