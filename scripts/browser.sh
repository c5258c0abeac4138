#!/usr/bin/env bash
# Make sure the dashboard test can drive a headless browser: Debian's Chromium (package
# `chromium`, installed with apt-get when missing) and playwright-core (from npm, as
# pinned in tests/ui/package-lock.json, installed into
# ${ICEFEED_BROWSER_DIR:-$HOME/.cache/icefeed/browser} once, outside the clone).
# Prints two lines: the Chromium binary, then the node_modules directory.
# Idempotent and quick when both are there. Progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ICEFEED_BROWSER_DIR:-$HOME/.cache/icefeed/browser}

log() { echo "browser.sh: $*" >&2; }
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
LOCK="$ROOT/tests/ui/package-lock.json"
STAMP="$DIR/$(sha256sum "$LOCK" | cut -c1-16)"
if [[ ! -d $STAMP/node_modules/playwright-core ]]; then
    command -v npm >/dev/null 2>&1 || die "no npm on PATH"
    log "installing playwright-core into $STAMP"
    rm -rf "$STAMP.tmp"
    mkdir -p "$STAMP.tmp"
    cp "$ROOT/tests/ui/package.json" "$LOCK" "$STAMP.tmp/"
    (cd "$STAMP.tmp" && npm ci --no-audit --no-fund --loglevel=error >&2) || die "npm ci failed"
    rm -rf "$STAMP"
    mv "$STAMP.tmp" "$STAMP"
fi

echo "$CHROMIUM"
echo "$STAMP/node_modules"
