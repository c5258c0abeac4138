# Sourced by the scripts that build a small Java test server with Maven (opensearch.sh,
# hive-metastore.sh). `build_java_server SRC DIR NAME` compiles the Maven project in SRC
# into DIR/build and writes its dependency classpath to DIR/classpath, only when the
# sources changed since the last build (a stamp of their hashes) or a jar of the
# classpath is gone; it installs a JDK and Maven from Debian's packages when missing.
# Progress goes to stderr.

build_java_server() {
    local src=$1 dir=$2 name=$3
    local stamp="$dir/.sources-sha256" want jar
    want=$(find "$src" -type f ! -path "$src/target/*" | LC_ALL=C sort | xargs sha256sum \
        | sha256sum | cut -d' ' -f1)
    if [[ -f $stamp && $(cat "$stamp") == "$want" && -f $dir/classpath ]]; then
        # The classpath names jars in the local Maven repository, which may have been cleaned.
        local whole=1
        while IFS= read -r jar; do [[ -f $jar ]] || whole=0; done < <(tr ':' '\n' <"$dir/classpath")
        [[ $whole == 1 ]] && return 0
    fi
    if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "installing a Java 17 JDK and Maven (Debian packages)" >&2
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null
    fi
    echo "building the $name into $dir" >&2
    rm -rf "$dir/build" "$dir/classpath" "$stamp"
    mkdir -p "$dir"
    mvn -q -B -f "$src/pom.xml" -Dicefeed.build.dir="$dir/build" \
        compile dependency:build-classpath -Dmdep.outputFile="$dir/classpath" >&2
    echo "$want" >"$stamp"
}
