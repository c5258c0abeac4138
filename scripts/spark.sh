#!/usr/bin/env bash
# Makes sure the Spark differential test (tests/it/spark.rs, tests/python/spark_writer.py)
# can run Apache Spark 3.5 with Iceberg, and prints the Iceberg Spark runtime jar's path:
#   - pyspark 3.5 in the test virtualenv: it is in tests/python/requirements.txt, so
#     scripts/python-env.sh installs it (${ICEFEED_VENV:-$HOME/.cache/icefeed/venv}); or in
#     ICEFEED_TEST_PYTHON when that is set;
#   - a Java runtime (Spark 3.5 runs on Java 17): a JDK 17 and Maven from Debian's
#     packages when `java` or `mvn` is missing;
#   - org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:${ICEFEED_ICEBERG_SPARK_VERSION:-1.10.2}
#     in the local Maven repository ${ICEFEED_M2_REPOSITORY:-$HOME/.m2/repository}, outside
#     the clone, fetched with `mvn dependency:get` the first time and checked against its
#     .sha1.
# `scripts/spark.sh --aws-bundle` instead makes sure of org.apache.iceberg:iceberg-aws-bundle
# (the AWS SDK that the runtime's S3FileIO needs, for the Spark tables on S3) and prints its
# path: the runtime's version, else the newest earlier patch release of the same minor
# version that Maven Central serves (it refuses the bundle's 1.10.2 here: 1.10.1), or exactly
# ${ICEFEED_ICEBERG_AWS_BUNDLE_VERSION} when that is set; fetched and checked the same way.
# Idempotent; when all is there it only checks (about a second). The tests take the jars
# from ICEFEED_TEST_SPARK_JAR and ICEFEED_TEST_SPARK_AWS_BUNDLE, which scripts/test.sh sets
# from this script.
# Stdout: the jar's path only; progress goes to stderr.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=${ICEFEED_ICEBERG_SPARK_VERSION:-1.10.2}
M2=${ICEFEED_M2_REPOSITORY:-$HOME/.m2/repository}

log() { echo "spark.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

case ${1:-} in
    "")
        ARTIFACT=iceberg-spark-runtime-3.5_2.12
        VERSIONS=("$VERSION")
        # A class the jar must hold.
        CLASS=org/apache/iceberg/spark/SparkCatalog.class
        ;;
    --aws-bundle)
        ARTIFACT=iceberg-aws-bundle
        if [[ -n ${ICEFEED_ICEBERG_AWS_BUNDLE_VERSION:-} ]]; then
            VERSIONS=("$ICEFEED_ICEBERG_AWS_BUNDLE_VERSION")
        elif [[ $VERSION =~ ^([0-9]+\.[0-9]+)\.([0-9]+)$ ]]; then
            VERSIONS=()
            for ((patch = BASH_REMATCH[2]; patch >= 0; patch--)); do
                VERSIONS+=("${BASH_REMATCH[1]}.$patch")
            done
        else
            VERSIONS=("$VERSION")
        fi
        CLASS=software/amazon/awssdk/services/s3/S3Client.class
        ;;
    *) die "usage: scripts/spark.sh [--aws-bundle]" ;;
esac
jar_of() { echo "$M2/org/apache/iceberg/$ARTIFACT/$1/$ARTIFACT-$1.jar"; }

# The Python the tests run the writer with: ICEFEED_TEST_PYTHON when set, else the venv.
PY=${ICEFEED_TEST_PYTHON:-$(scripts/python-env.sh)}
if [[ $ARTIFACT != iceberg-aws-bundle ]]; then
    pyspark=$("$PY" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null) \
        || die "$PY cannot import pyspark (tests/python/requirements.txt has it: scripts/python-env.sh installs it)"
    [[ $pyspark == 3.5.* ]] || die "pyspark $pyspark in $PY; the Iceberg runtime $ARTIFACT needs Spark 3.5"
fi

# A stamp keeps the fast path from hashing 47 MB (the bundle: 60 MB) every time.
for version in "${VERSIONS[@]}"; do
    JAR=$(jar_of "$version")
    if [[ -f $JAR.icefeed-checked && -s $JAR && ! $JAR -nt $JAR.icefeed-checked ]]; then
        echo "$JAR"
        exit 0
    fi
done

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    [[ $EUID -eq 0 ]] || die "no java or mvn on PATH (install a JDK 17 and Maven)"
    log "installing a Java 17 JDK and Maven (Debian packages)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null
fi

# The jar is whole when its SHA-1 is the one Maven Central published beside it.
whole() {
    [[ -s $JAR && -s $JAR.sha1 ]] \
        && [[ $(sha1sum "$JAR" | cut -d' ' -f1) == "$(cut -c1-40 "$JAR.sha1")" ]]
}

mkdir -p "$HOME/.cache/icefeed"
exec 9>"$HOME/.cache/icefeed/spark.lock"
flock 9
found=
for version in "${VERSIONS[@]}"; do
    JAR=$(jar_of "$version")
    if whole; then
        found=$version
        break
    fi
    start=$SECONDS
    log "fetching org.apache.iceberg:$ARTIFACT:$version into $M2"
    rm -f "$JAR" "$JAR.sha1"
    mvn_log=$(mktemp)
    if ! mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$M2" dependency:get \
        -Dartifact="org.apache.iceberg:$ARTIFACT:$version" -Dtransitive=false >"$mvn_log" 2>&1; then
        if [[ $version == "${VERSIONS[-1]}" ]]; then
            cat "$mvn_log" >&2
            rm -f "$mvn_log"
            die "mvn could not fetch org.apache.iceberg:$ARTIFACT:${VERSIONS[*]}"
        fi
        rm -f "$mvn_log"
        log "mvn could not fetch org.apache.iceberg:$ARTIFACT:$version; trying an earlier one"
        continue
    fi
    rm -f "$mvn_log"
    whole || die "$JAR is missing or does not match its .sha1 after the download"
    log "fetched in $((SECONDS - start)) s"
    found=$version
    break
done
[[ -n $found ]] || die "no org.apache.iceberg:$ARTIFACT:${VERSIONS[*]}"
"$PY" - "$JAR" "$CLASS" <<'PY' || die "$JAR holds no $CLASS"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
sys.exit(0 if sys.argv[2] in names else 1)
PY
touch "$JAR.icefeed-checked"
if [[ $ARTIFACT == iceberg-aws-bundle ]]; then
    log "$(java -version 2>&1 | head -1), Iceberg AWS bundle $JAR"
else
    log "pyspark $pyspark, $(java -version 2>&1 | head -1), Iceberg runtime $JAR"
fi
echo "$JAR"
