#!/usr/bin/env bash
# Make sure an Azurite Blob service answers on 127.0.0.1:${ICEFEED_AZURITE_PORT:-10000}
# for the Azure change-store tests, with the emulator's well-known account
# `devstoreaccount1` and the container `changes`. Prints the account's URL.
#
# Azurite (MIT, Node.js) is installed from npm into
# ${ICEFEED_AZURITE_DIR:-$HOME/.cache/icefeed/azurite} once, then reused. If nothing answers
# on the port, starts it in the background in memory, so every start is empty.
# Idempotent and quick when the service already runs. Stdout: the URL only. Progress
# goes to stderr; the service's log to $ICEFEED_AZURITE_DIR/azurite.log.
set -euo pipefail

VERSION=3.37.0
DIR=${ICEFEED_AZURITE_DIR:-$HOME/.cache/icefeed/azurite}
PORT=${ICEFEED_AZURITE_PORT:-10000}
ACCOUNT=devstoreaccount1
# The emulator's published development key (not a secret).
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
URL="http://127.0.0.1:${PORT}/${ACCOUNT}"
AZURITE="$DIR/$VERSION/node_modules/.bin/azurite-blob"

log() { echo "azurite.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Creates the container `changes` (SharedKey-signed; 409 when it exists). Prints the
# HTTP status.
create_container() {
    python3 - "$URL" "$ACCOUNT" "$KEY" changes <<'PY'
import base64, hashlib, hmac, sys, urllib.error, urllib.request
from email.utils import formatdate
url, account, key, container = sys.argv[1:5]
date, version = formatdate(usegmt=True), "2021-08-06"
# The string to sign of a PUT without body or conditional headers: 11 empty lines.
to_sign = (f"PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
           f"/{account}/{account}/{container}\nrestype:container")
signature = base64.b64encode(
    hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()).decode()
request = urllib.request.Request(
    f"{url}/{container}?restype=container", method="PUT",
    headers={"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
             "Authorization": f"SharedKey {account}:{signature}"})
try:
    print(urllib.request.urlopen(request, timeout=5).status)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print(0)
PY
}

ready() { [[ $(create_container) =~ ^(201|409)$ ]]; }

if ready; then
    echo "$URL"
    exit 0
fi

if [[ ! -x $AZURITE ]]; then
    command -v npm >/dev/null 2>&1 || die "no npm on PATH (Azurite is installed from npm)"
    log "installing Azurite $VERSION from npm into $DIR/$VERSION"
    mkdir -p "$DIR/$VERSION"
    # Azurite declares Node 22 but runs on 20, which is what this machine has.
    npm install --prefix "$DIR/$VERSION" --no-audit --no-fund --loglevel=error \
        "azurite@$VERSION" >&2
fi

# shellcheck source=lib/background-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/background-server.sh"
logfile="$DIR/azurite.log"
pidfile="$DIR/azurite.pid"
if server_running "$pidfile"; then
    log "Azurite $(cat "$pidfile") is starting; waiting for it"
else
    log "starting Azurite on $URL (log: $logfile)"
    start_server "$pidfile" "$logfile" "$AZURITE" --blobHost 127.0.0.1 --blobPort "$PORT" \
        --inMemoryPersistence --skipApiVersionCheck
fi
await_server Azurite "$pidfile" "$logfile" 60 || die "Azurite did not start on $URL"
echo "$URL"
