#!/usr/bin/env bash
# Make sure a local PostgreSQL server runs on 127.0.0.1:${ICEFEED_PG_PORT:-5432}
# with a login role `icefeed` (password `icefeed`, CREATEDB: the tests create a
# database per test) and a database `icefeed` owned by it; print its URL.
#
# Idempotent and quick (one psql round trip) when all of that is already there.
# Otherwise, on Debian: installs the `postgresql` package if needed, creates a
# cluster if none uses the port, starts it with Debian's pg_ctlcluster (the
# server runs as the `postgres` user, never as root) and creates the role and
# database as the `postgres` superuser.
#
# Stdout: the database URL only. Progress messages go to stderr.
set -euo pipefail

PORT=${ICEFEED_PG_PORT:-5432}
URL="postgres://icefeed:icefeed@127.0.0.1:${PORT}/icefeed"

log() { echo "postgres.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Run as root / as the `postgres` user, whoever we are.
as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo -n "$@"; fi
}
as_postgres() {
    # cd /: the postgres user usually cannot read the caller's directory.
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    elif [[ $(id -un) == postgres ]]; then
        (cd / && "$@")
    else
        (cd / && sudo -n -u postgres -- "$@")
    fi
}

# The role can log in over TCP with its password, may create databases, and
# the `icefeed` database exists (we are connected to it).
ready() {
    command -v psql >/dev/null 2>&1 || return 1
    local out
    out=$(PGPASSWORD=icefeed PGCONNECT_TIMEOUT=3 psql -X -q -w \
        -h 127.0.0.1 -p "$PORT" -U icefeed -d icefeed -tA \
        -c "SELECT rolcreatedb FROM pg_roles WHERE rolname = current_user" 2>/dev/null) || return 1
    [[ $out == t ]]
}

if ready; then
    echo "$URL"
    exit 0
fi

# --- 1. installed? -----------------------------------------------------------
if ! command -v pg_lsclusters >/dev/null 2>&1 || ! command -v psql >/dev/null 2>&1 \
    || ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
    command -v apt-get >/dev/null 2>&1 \
        || die "PostgreSQL is not installed and this is not a Debian-like system; install and start PostgreSQL, then create role icefeed (password icefeed, LOGIN CREATEDB) and database icefeed owned by it"
    log "installing PostgreSQL from Debian's packages"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        postgresql postgresql-client >&2
fi

# --- 2. a cluster on our port -------------------------------------------------
# pg_lsclusters -h: "ver name port status owner datadir logfile"
find_cluster() {
    pg_lsclusters -h 2>/dev/null | awk -v port="$PORT" '$3 == port { print $1, $2, $4; exit }'
}

cluster=$(find_cluster)
if [[ -z $cluster ]]; then
    # Newest installed server version.
    ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
    [[ -n $ver ]] || die "no PostgreSQL server binaries under /usr/lib/postgresql"
    name=main
    if [[ -d /etc/postgresql/$ver/main ]]; then
        name="icefeed${PORT}"
    fi
    log "creating cluster $ver/$name on port $PORT"
    as_root pg_createcluster --port "$PORT" "$ver" "$name" >&2
    cluster=$(find_cluster)
    [[ -n $cluster ]] || die "pg_createcluster did not create a cluster on port $PORT"
fi
read -r ver name status <<<"$cluster"

# --- 3. running? --------------------------------------------------------------
if [[ $status != online* ]]; then
    log "starting cluster $ver/$name (port $PORT)"
    # setsid: the server gets its own session, so a Ctrl-C in this terminal
    # (e.g. stopping quickstart.sh) does not also stop PostgreSQL.
    # pg_ctlcluster removes a stale postmaster.pid left by a killed server.
    # Retry: right after a server was killed, its processes (or an unreaped
    # zombie whose pid is in the socket lock file) can block a start briefly.
    for attempt in 1 2 3 4 5 6; do
        rc=0
        # A server that was killed replays its WAL (and fsyncs every file) first:
        # on a large data directory that takes minutes, longer than pg_ctl's 60 s.
        as_root setsid --wait pg_ctlcluster "$ver" "$name" start -- -t 600 >&2 || rc=$?
        # 2 = "Cluster is already running."
        [[ $rc -eq 0 || $rc -eq 2 || $attempt -eq 6 ]] && break
        log "start attempt $attempt failed (exit $rc); retrying"
        sleep 2
    done
    if [[ $rc -ne 0 && $rc -ne 2 ]]; then
        logfile=$(pg_lsclusters -h | awk -v v="$ver" -v n="$name" '$1 == v && $2 == n { print $7 }')
        [[ -n $logfile && -r $logfile ]] && tail -n 20 "$logfile" >&2
        die "could not start cluster $ver/$name (pg_ctlcluster exit $rc)"
    fi
fi

# pg_isready: 0 accepting, 1 rejecting (still starting or recovering), 2 no answer.
# A server in crash recovery is waited for (up to 10 minutes); one that does not
# answer at all for 30 s is not coming.
silent=0
for _ in $(seq 1 1200); do
    rc=0
    pg_isready -q -h 127.0.0.1 -p "$PORT" || rc=$?
    [[ $rc -eq 0 ]] && break
    if [[ $rc -eq 2 ]]; then silent=$((silent + 1)); else silent=0; fi
    [[ $silent -ge 60 ]] && break
    sleep 0.5
done
pg_isready -q -h 127.0.0.1 -p "$PORT" \
    || die "PostgreSQL does not accept TCP connections on 127.0.0.1:$PORT (check listen_addresses in /etc/postgresql/$ver/$name/postgresql.conf)"

# --- 4. role and database -----------------------------------------------------
psql_admin() { as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@"; }

log "ensuring role and database icefeed"
psql_admin -d postgres >&2 <<'SQL'
SET password_encryption = 'scram-sha-256';
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'icefeed') THEN
        CREATE ROLE icefeed LOGIN CREATEDB PASSWORD 'icefeed';
    ELSE
        ALTER ROLE icefeed LOGIN CREATEDB PASSWORD 'icefeed';
    END IF;
END
$$;
SELECT 'CREATE DATABASE icefeed OWNER icefeed'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'icefeed')
\gexec
ALTER DATABASE icefeed OWNER TO icefeed;
SQL

# --- 5. password auth over TCP --------------------------------------------------
# Debian's pg_hba.conf allows scram-sha-256 for `host all all 127.0.0.1/32`.
# If a changed pg_hba.conf rejects us, put an explicit rule for icefeed first.
if ! ready; then
    hba=$(psql_admin -d postgres -tA -c 'SHOW hba_file')
    if ! grep -q '^host all icefeed 127.0.0.1/32 scram-sha-256' "$hba"; then
        log "adding a scram-sha-256 rule for icefeed on 127.0.0.1 to $hba"
        tmp=$(mktemp)
        { echo '# added by icefeed scripts/postgres.sh'
          echo 'host all icefeed 127.0.0.1/32 scram-sha-256'
          cat "$hba"; } >"$tmp"
        as_root cp "$tmp" "$hba"
        rm -f "$tmp"
        psql_admin -d postgres -tA -c 'SELECT pg_reload_conf()' >/dev/null
        sleep 0.5
    fi
    ready || die "cannot log in as icefeed at $URL (see pg_hba.conf: $hba)"
fi

echo "$URL"
