#!/usr/bin/env bash
# Refresh the query data the build checks queries against, after changing a query or a
# migration:
#
#   scripts/sqlx-prepare.sh          # rewrites .sqlx/ (commit it with the change)
#   scripts/sqlx-prepare.sh --check  # fails when .sqlx/ differs from what the queries
#                                    # and migrations give (CI runs this)
#
# The store's queries are `sqlx::query!` macros, checked while compiling against what
# .sqlx/ recorded of a database (builds set SQLX_OFFLINE=true, so no database is
# needed). This script makes sure PostgreSQL runs (scripts/postgres.sh) and sqlx-cli is
# installed (scripts/sqlx-cli.sh), creates the scratch database
# ${ICEFEED_SQLX_DATABASE:-icefeed_sqlx} afresh from migrations/ (dropping it first: it
# holds nothing else), and runs `cargo sqlx prepare --workspace` against it.
#
# Environment: CARGO_TARGET_DIR (default $HOME/.cache/icefeed/target).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { echo "sqlx-prepare.sh: $*" >&2; }

check=()
case ${1:-} in
    '') ;;
    --check) check=(--check) ;;
    *) log "error: unknown argument $1 (usage: scripts/sqlx-prepare.sh [--check])"; exit 2 ;;
esac

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/icefeed/target}
url=$(scripts/postgres.sh)
DATABASE_URL="${url%/*}/${ICEFEED_SQLX_DATABASE:-icefeed_sqlx}"
export DATABASE_URL
PATH="$(scripts/sqlx-cli.sh):$PATH"

log "migrating the scratch database ${DATABASE_URL##*/} from migrations/"
sqlx database reset -y --source migrations >&2
# The macros read the database here, whatever the caller's SQLX_OFFLINE says.
unset SQLX_OFFLINE
cargo sqlx prepare --workspace "${check[@]}"
