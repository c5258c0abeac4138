#!/usr/bin/env bash
# Builds the Iceberg Java writer of the merge-on-read tests (tests/iceberg-writer: Iceberg
# 1.10's Java API on a Hadoop catalog in a local directory, a small Java 17 program from
# Maven Central) into ${ICEFEED_ICEBERG_WRITER_DIR:-$HOME/.cache/icefeed/iceberg-writer},
# rebuilt only when its sources change, and prints the command that runs it. The tests
# (ICEFEED_TEST_ICEBERG_WRITER) run it with a JSON script of steps on stdin:
#   $(scripts/iceberg-writer.sh) < script.json
# (or with the script's path as the argument); see IcebergWriter.java for the steps.
# Stdout: the command only (java with its options, classpath and main class; no quoting
# needed, split at spaces); progress goes to stderr.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=${ICEFEED_ICEBERG_WRITER_DIR:-$HOME/.cache/icefeed/iceberg-writer}
SRC=tests/iceberg-writer

# shellcheck source=lib/java-test-server.sh
. scripts/lib/java-test-server.sh
build_java_server "$SRC" "$DIR" "Iceberg Java writer"
echo "java -XX:TieredStopAtLevel=1 -Xshare:auto -cp $DIR/build/classes:$(cat "$DIR/classpath") icefeed.testing.IcebergWriter"
