//! The compare-and-swap of a table's metadata pointer in the SQLite catalog that
//! [`writer::open_sql_catalog`] lays out, as `SqlCatalog::update_table` runs it: how
//! [`crate::rewrite`] commits the snapshots it writes by hand.
//! Must not reach: `crate::rewrite` (it moves the pointer; the snapshot is written there).

use std::path::{Path, PathBuf};

use iceberg::{Error, ErrorKind, TableIdent};
use sqlx::Connection;

use crate::writer;

/// The `catalog.db` of the [`writer::open_sql_catalog`] layout whose warehouse holds
/// `table_location`, or of the catalog [`writer::open_sql_catalog_at`] opened on the
/// object-store warehouse that holds it.
fn sqlite_catalog_for(table_location: &str) -> iceberg::Result<PathBuf> {
    if let Some(db) = writer::remote_warehouse_catalog(table_location) {
        return Ok(db);
    }
    let path = Path::new(
        table_location
            .strip_prefix("file://")
            .unwrap_or(table_location),
    );
    for dir in path.ancestors().skip(1) {
        if let Ok((db, warehouse)) = writer::catalog_paths(dir)
            && db.is_file()
            && path.starts_with(&warehouse)
        {
            return Ok(db);
        }
    }
    Err(Error::new(
        ErrorKind::FeatureUnsupported,
        format!(
            "no SQLite catalog (`catalog.db` next to `warehouse/`) holds {table_location}; \
             rewrite commits only to catalogs opened with writer::open_sql_catalog"
        ),
    ))
}

/// Points the table's catalog row at `new` if it still points at `current`, as
/// `SqlCatalog::update_table` does.
pub(crate) async fn swap(
    ident: &TableIdent,
    table_location: &str,
    current: &str,
    new: &str,
) -> iceberg::Result<()> {
    let db = sqlite_catalog_for(table_location)?;
    let sql = |e: sqlx::Error| {
        Error::new(ErrorKind::Unexpected, "updating the SQLite catalog").with_source(e)
    };
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&db)
        .busy_timeout(std::time::Duration::from_secs(10));
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .map_err(sql)?;
    // Runtime-checked: the SQLite catalog of a fixture, not icefeed's schema, which is
    // what the compile-time checks know.
    let updated = sqlx::query(
        "UPDATE iceberg_tables
            SET metadata_location = ?, previous_metadata_location = ?
          WHERE table_namespace = ? AND table_name = ? AND metadata_location = ?
            AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
    )
    .bind(new)
    .bind(current)
    .bind(ident.namespace().join("."))
    .bind(ident.name())
    .bind(current)
    .execute(&mut conn)
    .await
    .map_err(sql)?
    .rows_affected();
    conn.close().await.map_err(sql)?;
    match updated {
        1 => Ok(()),
        0 => Err(Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!(
                "{ident} moved on from {current} (or is not in {})",
                db.display()
            ),
        )
        .with_retryable(true)),
        n => Err(Error::new(
            ErrorKind::Unexpected,
            format!("{n} catalog rows point at {current}"),
        )),
    }
}
