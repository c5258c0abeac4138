#!/usr/bin/env bash
# Make sure the Python virtualenv used by the integration tests exists and has
# tests/python/requirements.txt installed; print its python's path on stdout.
#
# The venv lives outside the clone, at ${ICEFEED_VENV:-$HOME/.cache/icefeed/venv},
# so fresh clones (CI) reuse it. A stamp file holds a hash of the requirements
# and of the base interpreter's version: when both match and the venv's python
# runs, nothing is done (fast path). Otherwise pip brings the venv up to date.
# The base interpreter is ${ICEFEED_PYTHON_BASE:-python3}.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ="$ROOT/tests/python/requirements.txt"
VENV=${ICEFEED_VENV:-$HOME/.cache/icefeed/venv}
BASE=${ICEFEED_PYTHON_BASE:-python3}
PY="$VENV/bin/python"
STAMP="$VENV/.icefeed-requirements.sha256"

log() { echo "python-env.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -f $REQ ]] || die "missing $REQ"
command -v "$BASE" >/dev/null 2>&1 || die "no '$BASE' on PATH (set ICEFEED_PYTHON_BASE to a Python >= 3.10)"

want=$( { cat "$REQ"; "$BASE" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)

up_to_date() {
    [[ -f $STAMP && $(cat "$STAMP") == "$want" ]] && "$PY" -c 'import sys' >/dev/null 2>&1
}

if up_to_date; then
    echo "$PY"
    exit 0
fi

# One builder at a time (two test runs may start together).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if up_to_date; then
    echo "$PY"
    exit 0
fi

start=$SECONDS
if ! "$PY" -c 'import sys' >/dev/null 2>&1; then
    log "creating virtualenv $VENV with $("$BASE" --version 2>&1)"
    rm -rf "$VENV"
    if ! "$BASE" -m venv "$VENV" >&2; then
        # Debian's own python3 needs python3-venv for ensurepip.
        if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
            log "installing python3-venv"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2 \
                || { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 \
                     && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2; }
            rm -rf "$VENV"
            "$BASE" -m venv "$VENV" >&2
        else
            die "'$BASE -m venv' failed (on Debian: apt-get install python3-venv)"
        fi
    fi
else
    log "requirements or base Python changed: updating $VENV"
fi

rm -f "$STAMP"
log "installing $REQ"
"$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off -q \
    --upgrade pip >&2
"$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off -q \
    -r "$REQ" >&2
"$PY" -c 'import pyiceberg, pyarrow, openapi_python_client; from pyiceberg.catalog.sql import SqlCatalog' \
    || die "the venv at $VENV cannot import pyiceberg/pyarrow/openapi_python_client after install"
echo "$want" >"$STAMP"
log "ready in $((SECONDS - start)) s: $("$PY" -c 'import pyiceberg, pyarrow; print("pyiceberg", pyiceberg.__version__, "pyarrow", pyarrow.__version__)')"

echo "$PY"
