#!/usr/bin/env bash
# Make sure the Node tools of the tests are there: Debian's Chromium (package `chromium`,
# installed with apt-get when missing) for the dashboard test, and the npm packages
# pinned in tests/node/package-lock.json (playwright-core, openapi-typescript,
# openapi-fetch, typescript), installed into
# ${ICEFEED_NODE_TOOLS_DIR:-$HOME/.cache/icefeed/node-tools} once, outside the clone.
# Prints two lines: the Chromium binary, then the node_modules directory.
# Idempotent and quick when both are there. Progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ICEFEED_NODE_TOOLS_DIR:-$HOME/.cache/icefeed/node-tools}

log() { echo "node-tools.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

CHROMIUM=$(command -v chromium || true)
if [[ -z $CHROMIUM ]]; then
    log "installing Debian's chromium"
    SUDO=
    [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2 ||
        { $SUDO apt-get update -q >&2 &&
          $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2; } ||
        die "could not install chromium"
    CHROMIUM=$(command -v chromium) || die "chromium is not on PATH after installing it"
fi

# Reinstalled when the lock file changes.
LOCK="$ROOT/tests/node/package-lock.json"
STAMP="$DIR/$(sha256sum "$LOCK" | cut -c1-16)"
if [[ ! -d $STAMP/node_modules/.bin ]]; then
    command -v npm >/dev/null 2>&1 || die "no npm on PATH"
    log "installing the npm packages of tests/node into $STAMP"
    rm -rf "$STAMP.tmp"
    mkdir -p "$STAMP.tmp"
    cp "$ROOT/tests/node/package.json" "$LOCK" "$STAMP.tmp/"
    (cd "$STAMP.tmp" && npm ci --no-audit --no-fund --loglevel=error >&2) || die "npm ci failed"
    rm -rf "$STAMP"
    mv "$STAMP.tmp" "$STAMP"
fi

echo "$CHROMIUM"
echo "$STAMP/node_modules"
