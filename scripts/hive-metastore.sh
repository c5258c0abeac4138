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

# shellcheck source=lib/java-test-server.sh
. scripts/lib/java-test-server.sh
build_java_server "$SRC" "$DIR" "Hive metastore test server"
echo "$DIR/build/classes:$(cat "$DIR/classpath")"
