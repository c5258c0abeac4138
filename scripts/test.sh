#!/usr/bin/env bash
# The test command: scripts/test.sh [extra cargo test arguments]
#
# Makes sure the services the tests need are there (a local PostgreSQL via
# scripts/postgres.sh, the pyiceberg virtualenv via scripts/python-env.sh, the
# Iceberg REST fixture server via scripts/rest-fixture.sh, an OpenSearch node via
# scripts/opensearch.sh, a SeaweedFS S3 server and REST catalog via scripts/seaweedfs.sh,
# a GCS API server via scripts/fake-gcs.sh, an Azure Blob emulator via scripts/azurite.sh,
# schemathesis via scripts/schemathesis.sh, Chromium and the npm packages of tests/node
# via scripts/node-tools.sh, pyspark, the Iceberg Spark runtime jar and iceberg-aws-bundle via scripts/spark.sh), then
# runs `cargo test --locked --workspace "$@"` (the service and the test kit).
#
# Environment:
#   ICEFEED_TEST_DATABASE_URL  set it to test against another server (skips postgres.sh)
#   ICEFEED_TEST_PYTHON        set it to use another Python (skips python-env.sh)
#   ICEFEED_TEST_REST_FIXTURE  classpath of the REST fixture server (skips rest-fixture.sh)
#   ICEFEED_TEST_HIVE_METASTORE  classpath of the Hive metastore test server (skips hive-metastore.sh)
#   ICEFEED_TEST_ICEBERG_WRITER  command running the Iceberg Java writer of the merge-on-read
#                              tests (skips iceberg-writer.sh); ICEFEED_ROLLBACK_SEEDS picks
#                              the seeds of their random histories with rollbacks
#   ICEFEED_TEST_SPARK_JAR     the Iceberg Spark runtime jar of the Spark differential test
#                              (tests/it/spark.rs; skips spark.sh, which also puts pyspark in
#                              the venv); ICEFEED_SPARK_SEEDS and ICEFEED_SPARK_COW_SEEDS pick
#                              its merge-on-read and copy-on-write seeds
#   ICEFEED_TEST_SPARK_AWS_BUNDLE  the iceberg-aws-bundle jar (the AWS SDK of S3FileIO) of the
#                              Spark tables on SeaweedFS (skips `spark.sh --aws-bundle`);
#                              ICEFEED_SPARK_S3_SEEDS and ICEFEED_SPARK_S3_MOR_SEEDS pick
#                              their copy-on-write and merge-on-read seeds
#   ICEFEED_TEST_OPENSEARCH_URL  set it to test against another OpenSearch (skips opensearch.sh)
#   ICEFEED_TEST_S3_URL        set it (and ICEFEED_TEST_S3_REST_URL, ICEFEED_TEST_WEED: the
#                              `weed` binary) to test against another SeaweedFS (skips
#                              seaweedfs.sh)
#   ICEFEED_TEST_GCS_URL       set it to test against another GCS API server (skips fake-gcs.sh)
#   ICEFEED_TEST_AZURE_URL     set it to test against another Azure Blob emulator's account
#                              URL (skips azurite.sh)
#   ICEFEED_TEST_SCHEMATHESIS  the schemathesis command of the API fuzz test (skips
#                              schemathesis.sh)
#   ICEFEED_TEST_CHROMIUM      the Chromium of the dashboard test (with
#                              ICEFEED_TEST_NODE_MODULES, a node_modules holding the
#                              packages of tests/node; skips node-tools.sh)
#   CARGO_TARGET_DIR           default $HOME/.cache/icefeed/target, shared by all clones
# Queries compile against .sqlx/ (SQLX_OFFLINE=true), whatever DATABASE_URL says.
#
# Examples: scripts/test.sh
#           scripts/test.sh --lib changes::json
#           scripts/test.sh --test api -- --nocapture
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ -z ${ICEFEED_TEST_DATABASE_URL:-} ]]; then
    ICEFEED_TEST_DATABASE_URL=$(scripts/postgres.sh)
fi
if [[ -z ${ICEFEED_TEST_PYTHON:-} ]]; then
    ICEFEED_TEST_PYTHON=$(scripts/python-env.sh)
fi
if [[ -z ${ICEFEED_TEST_REST_FIXTURE:-} ]]; then
    ICEFEED_TEST_REST_FIXTURE=$(scripts/rest-fixture.sh)
fi
if [[ -z ${ICEFEED_TEST_HIVE_METASTORE:-} ]]; then
    ICEFEED_TEST_HIVE_METASTORE=$(scripts/hive-metastore.sh)
fi
if [[ -z ${ICEFEED_TEST_ICEBERG_WRITER:-} ]]; then
    ICEFEED_TEST_ICEBERG_WRITER=$(scripts/iceberg-writer.sh)
fi
if [[ -z ${ICEFEED_TEST_SPARK_JAR:-} ]]; then
    ICEFEED_TEST_SPARK_JAR=$(scripts/spark.sh)
fi
if [[ -z ${ICEFEED_TEST_SPARK_AWS_BUNDLE:-} ]]; then
    ICEFEED_TEST_SPARK_AWS_BUNDLE=$(scripts/spark.sh --aws-bundle)
fi
if [[ -z ${ICEFEED_TEST_OPENSEARCH_URL:-} ]]; then
    ICEFEED_TEST_OPENSEARCH_URL=$(scripts/opensearch.sh)
fi
if [[ -z ${ICEFEED_TEST_S3_URL:-} ]]; then
    ICEFEED_TEST_S3_URL=$(scripts/seaweedfs.sh)
    ICEFEED_TEST_S3_REST_URL=http://127.0.0.1:${ICEFEED_S3_REST_PORT:-8181}
    ICEFEED_TEST_WEED=$(scripts/seaweedfs.sh --binary)
fi
if [[ -z ${ICEFEED_TEST_GCS_URL:-} ]]; then
    ICEFEED_TEST_GCS_URL=$(scripts/fake-gcs.sh)
fi
if [[ -z ${ICEFEED_TEST_AZURE_URL:-} ]]; then
    ICEFEED_TEST_AZURE_URL=$(scripts/azurite.sh)
fi
if [[ -z ${ICEFEED_TEST_SCHEMATHESIS:-} ]]; then
    ICEFEED_TEST_SCHEMATHESIS=$(scripts/schemathesis.sh)
fi
if [[ -z ${ICEFEED_TEST_CHROMIUM:-} ]]; then
    NODE_TOOLS=$(scripts/node-tools.sh)
    ICEFEED_TEST_CHROMIUM=$(sed -n 1p <<<"$NODE_TOOLS")
    ICEFEED_TEST_NODE_MODULES=$(sed -n 2p <<<"$NODE_TOOLS")
fi
export ICEFEED_TEST_DATABASE_URL ICEFEED_TEST_PYTHON ICEFEED_TEST_REST_FIXTURE ICEFEED_TEST_OPENSEARCH_URL
export ICEFEED_TEST_HIVE_METASTORE ICEFEED_TEST_ICEBERG_WRITER
export ICEFEED_TEST_S3_URL ICEFEED_TEST_S3_REST_URL ICEFEED_TEST_WEED ICEFEED_TEST_GCS_URL
export ICEFEED_TEST_AZURE_URL ICEFEED_TEST_CHROMIUM ICEFEED_TEST_NODE_MODULES ICEFEED_TEST_SCHEMATHESIS
export ICEFEED_TEST_SPARK_JAR ICEFEED_TEST_SPARK_AWS_BUNDLE
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/icefeed/target}
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
export SQLX_OFFLINE=true

echo "test.sh: database $ICEFEED_TEST_DATABASE_URL" >&2
echo "test.sh: python   $ICEFEED_TEST_PYTHON" >&2
echo "test.sh: opensearch $ICEFEED_TEST_OPENSEARCH_URL" >&2
echo "test.sh: s3       $ICEFEED_TEST_S3_URL (REST catalog $ICEFEED_TEST_S3_REST_URL)" >&2
echo "test.sh: gcs      $ICEFEED_TEST_GCS_URL" >&2
echo "test.sh: azure    $ICEFEED_TEST_AZURE_URL" >&2
echo "test.sh: chromium $ICEFEED_TEST_CHROMIUM (playwright-core in $ICEFEED_TEST_NODE_MODULES)" >&2
echo "test.sh: spark    $ICEFEED_TEST_SPARK_JAR" >&2
echo "test.sh: spark s3 $ICEFEED_TEST_SPARK_AWS_BUNDLE" >&2
echo "test.sh: target   $CARGO_TARGET_DIR" >&2

exec cargo test --locked --workspace "$@"
