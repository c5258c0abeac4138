#!/usr/bin/env bash
# Fetches Apache Iceberg's REST catalog fixture server (Java, from Maven Central) for the
# REST catalog tests; prints its classpath. Idempotent: a second run only checks a stamp.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
lib=${ICEFEED_REST_FIXTURE_DIR:-$HOME/.cache/icefeed/rest-fixture}/lib
stamp="$lib/.pom-sha256"
want=$(sha256sum tests/rest-fixture/pom.xml | cut -d' ' -f1)

if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "installing Java 17 and Maven (Debian packages)" >&2
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless maven >/dev/null
    fi
    rm -rf "$lib"
    mkdir -p "$lib"
    echo "fetching the Iceberg REST fixture server into $lib" >&2
    mvn -q -B -f tests/rest-fixture/pom.xml dependency:copy-dependencies \
        -DoutputDirectory="$lib" >&2
    echo "$want" >"$stamp"
fi
echo "$lib/*"
