#!/usr/bin/env bash
# Make sure sqlx-cli (`sqlx`, and `cargo-sqlx` for `cargo sqlx`) at the version of the
# sqlx crate in Cargo.lock is installed under
# ${ICEFEED_SQLX_CLI_DIR:-$HOME/.cache/icefeed/sqlx-cli}; print its bin directory.
#
# Built from crates.io with `cargo install --locked` (PostgreSQL and rustls only), a few
# minutes on two cores, in a temporary target directory (not the project's), then
# reused. Idempotent and quick when that version is installed; after a sqlx upgrade in
# Cargo.lock the new version replaces the old one.
#
# Stdout: the bin directory only. Progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ICEFEED_SQLX_CLI_DIR:-$HOME/.cache/icefeed/sqlx-cli}

log() { echo "sqlx-cli.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The line after `name = "sqlx"` in Cargo.lock is its `version = "…"`.
VERSION=$(awk '$0 == "name = \"sqlx\"" { getline; gsub(/version = |"/, ""); print; exit }' \
    "$ROOT/Cargo.lock")
[[ -n $VERSION ]] || die "no sqlx package in Cargo.lock"

installed() {
    [[ -x $DIR/bin/sqlx && -x $DIR/bin/cargo-sqlx ]] \
        && [[ $("$DIR/bin/sqlx" --version 2>/dev/null) == "sqlx-cli $VERSION" ]]
}

if ! installed; then
    command -v cargo >/dev/null 2>&1 || die "no cargo on PATH: install Rust with rustup"
    log "installing sqlx-cli $VERSION into $DIR (a few minutes the first time)"
    # Without CARGO_TARGET_DIR, cargo install builds in a temporary directory it removes.
    env -u CARGO_TARGET_DIR cargo install sqlx-cli --version "=$VERSION" --locked --force \
        --no-default-features --features postgres,rustls --root "$DIR" >&2
    installed || die "sqlx-cli $VERSION is not in $DIR/bin after cargo install"
fi

echo "$DIR/bin"
