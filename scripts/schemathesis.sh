#!/usr/bin/env bash
# Make sure schemathesis (pinned below, from PyPI) is installed in its own virtualenv at
# ${ICEFEED_SCHEMATHESIS_VENV:-$HOME/.cache/icefeed/schemathesis-venv}, outside the clone,
# apart from the tests' main venv (their pins of httpx differ). Prints the path of its
# `schemathesis` command. Quick when it is already there.
set -euo pipefail

VERSION=4.32.5
VENV=${ICEFEED_SCHEMATHESIS_VENV:-$HOME/.cache/icefeed/schemathesis-venv}
BIN="$VENV/bin/schemathesis"

log() { echo "schemathesis.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

installed() { [[ -x $BIN ]] && [[ $("$VENV/bin/python" -m pip show schemathesis 2>/dev/null | sed -n 's/^Version: //p') == "$VERSION" ]]; }

if ! installed; then
    mkdir -p "$(dirname "$VENV")"
    exec 9>"$VENV.lock"
    flock 9
    if ! installed; then
        log "installing schemathesis $VERSION into $VENV"
        python3 -m venv "$VENV" >&2 || die "cannot create $VENV"
        "$VENV/bin/python" -m pip install -q "schemathesis==$VERSION" >&2 || die "pip install failed"
    fi
fi
echo "$BIN"
