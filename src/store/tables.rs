//! The registry of source tables.
//! Must not reach: `catalog`, `workers` (PostgreSQL only).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::leases::{Lease, fence};
use super::retention::{Floor, Retention};
use super::{Store, StoreError, TableId};
use crate::failure::Failure;

/// Whether the scheduler works on a table.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum TableState {
    /// Polled and published.
    Active,
    /// Paused by an operator.
    Paused,
    /// Stopped on an error that needs attention (see `last_error`).
    Error,
}

/// A registered source table as stored.
#[derive(Clone, Debug)]
pub struct SourceTable {
    pub id: TableId,
    pub table_name: String,
    pub namespace: Vec<String>,
    pub name: String,
    /// Catalog connection including secrets.
    pub catalog: serde_json::Value,
    pub branch: String,
    /// The identifier columns' names when the table was registered.
    pub identifier_columns: Vec<String>,
    /// Their field ids (`None` for tables registered before they were recorded).
    pub identifier_field_ids: Option<Vec<i32>>,
    pub start_position: serde_json::Value,
    pub poll_interval_ms: i64,
    pub state: TableState,
    pub mode: String,
    pub checkpoint_snapshot_id: Option<i64>,
    pub checkpoint_sequence_number: Option<i64>,
    pub checkpoint_committed_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// The kind of `last_error` (a [`FailureCode`] name).
    pub last_error_code: Option<String>,
    pub error_snapshot_id: Option<i64>,
    pub head_snapshot_id: Option<i64>,
    pub snapshots_behind: i64,
    pub oldest_pending_committed_at: Option<DateTime<Utc>>,
    pub last_polled_at: Option<DateTime<Utc>>,
    pub last_ordinal: i64,
    pub retention_max_age_ms: Option<i64>,
    pub retention_max_change_sets: Option<i64>,
    pub retention_hard_max_age_ms: Option<i64>,
    pub pruned_through_ordinal: i64,
    pub pruned_through_events: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SourceTable {
    /// True while the table's current state has not been exported yet.
    pub fn export_pending(&self) -> bool {
        self.mode == "export"
    }

    /// The table's retention limits.
    pub fn retention(&self) -> Retention {
        Retention {
            max_age_ms: self.retention_max_age_ms,
            max_change_sets: self.retention_max_change_sets,
            hard_max_age_ms: self.retention_hard_max_age_ms,
        }
    }

    /// The pruned prefix of the feed when the table was loaded.
    pub fn floor(&self) -> Floor {
        Floor {
            ordinal: self.pruned_through_ordinal,
            events: self.pruned_through_events,
        }
    }
}

/// What registration stores for a new table.
#[derive(Clone, Debug)]
pub struct NewSourceTable {
    pub id: TableId,
    pub namespace: Vec<String>,
    pub name: String,
    pub catalog: serde_json::Value,
    pub catalog_key: String,
    pub branch: String,
    pub identifier_columns: Vec<String>,
    /// Their field ids in the current schema: the key follows them through renames.
    pub identifier_field_ids: Vec<i32>,
    pub start_position: serde_json::Value,
    pub poll_interval_ms: i64,
    /// Export the current state first, or follow from `checkpoint_snapshot_id`.
    pub export: bool,
    pub checkpoint_snapshot_id: Option<i64>,
    pub checkpoint_sequence_number: Option<i64>,
    pub checkpoint_committed_at: Option<DateTime<Utc>>,
    /// The table's current schema at registration (id and Iceberg JSON), recorded so
    /// that projections can be checked before anything is published.
    pub schema_id: i32,
    pub schema: serde_json::Value,
    pub retention: Retention,
}

/// What one poll saw of the table, for lag reporting.
#[derive(Clone, Debug, Default)]
pub struct PollOutcome {
    pub head_snapshot_id: Option<i64>,
    pub snapshots_behind: i64,
    pub oldest_pending_committed_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Registers a table; `Conflict` when the same catalog table and branch exist already.
    pub async fn insert_table(&self, t: &NewSourceTable) -> Result<SourceTable, StoreError> {
        let mut tx = self.pool.begin().await?;
        let table = sqlx::query_as!(
            SourceTable,
            r#"INSERT INTO source_tables (id, table_name, namespace, name, catalog, catalog_key,
                      branch, identifier_columns, identifier_field_ids, start_position,
                      poll_interval_ms, state, mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, retention_max_age_ms,
                      retention_max_change_sets, retention_hard_max_age_ms)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'active', $12, $13, $14,
                       $15, $16, $17, $18)
               RETURNING id AS "id: TableId", table_name, namespace, name, catalog, branch,
                      identifier_columns, identifier_field_ids, start_position, poll_interval_ms,
                      state AS "state: TableState", mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, last_error,
                      last_error_code, error_snapshot_id, head_snapshot_id, snapshots_behind,
                      oldest_pending_committed_at, last_polled_at, last_ordinal,
                      retention_max_age_ms, retention_max_change_sets, retention_hard_max_age_ms,
                      pruned_through_ordinal, pruned_through_events, created_at, updated_at"#,
            t.id.0,
            display_name(&t.namespace, &t.name),
            &t.namespace,
            t.name,
            t.catalog,
            t.catalog_key,
            t.branch,
            &t.identifier_columns,
            &t.identifier_field_ids,
            t.start_position,
            t.poll_interval_ms,
            if t.export { "export" } else { "follow" },
            t.checkpoint_snapshot_id,
            t.checkpoint_sequence_number,
            t.checkpoint_committed_at,
            t.retention.max_age_ms,
            t.retention.max_change_sets,
            t.retention.hard_max_age_ms
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| StoreError::from_unique(e, "this table is already registered"))?;
        sqlx::query!(
            "INSERT INTO table_schemas (table_id, schema_id, schema) VALUES ($1, $2, $3)",
            t.id.0,
            t.schema_id,
            t.schema
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(table)
    }

    /// Every top-level column name any recorded schema of the table has.
    pub async fn table_column_names(
        &self,
        table: TableId,
    ) -> Result<std::collections::BTreeSet<String>, StoreError> {
        // `!`: a field without a name would fail to decode, as it did before the macros.
        let names: Vec<String> = sqlx::query_scalar!(
            r#"SELECT DISTINCT f->>'name' AS "name!" FROM table_schemas,
                      jsonb_array_elements(schema->'fields') AS f
                WHERE table_id = $1"#,
            table.0
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(names.into_iter().collect())
    }

    /// The newest schema recorded for the table (the one its next events are read with,
    /// unless the table evolves again).
    pub async fn newest_schema_id(&self, table: TableId) -> Result<Option<i32>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT max(schema_id) FROM table_schemas WHERE table_id = $1",
            table.0
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// All registered tables, oldest first.
    pub async fn list_tables(&self) -> Result<Vec<SourceTable>, StoreError> {
        Ok(sqlx::query_as!(
            SourceTable,
            r#"SELECT id AS "id: TableId", table_name, namespace, name, catalog, branch,
                      identifier_columns, identifier_field_ids, start_position, poll_interval_ms,
                      state AS "state: TableState", mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, last_error,
                      last_error_code, error_snapshot_id, head_snapshot_id, snapshots_behind,
                      oldest_pending_committed_at, last_polled_at, last_ordinal,
                      retention_max_age_ms, retention_max_change_sets, retention_hard_max_age_ms,
                      pruned_through_ordinal, pruned_through_events, created_at, updated_at
                 FROM source_tables ORDER BY created_at, id"#
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// One table by id.
    pub async fn get_table(&self, id: TableId) -> Result<SourceTable, StoreError> {
        sqlx::query_as!(
            SourceTable,
            r#"SELECT id AS "id: TableId", table_name, namespace, name, catalog, branch,
                      identifier_columns, identifier_field_ids, start_position, poll_interval_ms,
                      state AS "state: TableState", mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, last_error,
                      last_error_code, error_snapshot_id, head_snapshot_id, snapshots_behind,
                      oldest_pending_committed_at, last_polled_at, last_ordinal,
                      retention_max_age_ms, retention_max_change_sets, retention_hard_max_age_ms,
                      pruned_through_ordinal, pruned_through_events, created_at, updated_at
                 FROM source_tables WHERE id = $1"#,
            id.0
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// Pauses or resumes a table and/or changes its poll interval. Resuming a table in
    /// the error state clears the error, so the scheduler retries it.
    pub async fn update_table(
        &self,
        id: TableId,
        paused: Option<bool>,
        poll_interval_ms: Option<i64>,
    ) -> Result<SourceTable, StoreError> {
        sqlx::query_as!(
            SourceTable,
            r#"UPDATE source_tables SET
                 state = CASE WHEN $2::bool IS NULL THEN state WHEN $2 THEN 'paused' ELSE 'active' END,
                 last_error = CASE WHEN $2 = false THEN NULL ELSE last_error END,
                 last_error_code = CASE WHEN $2 = false THEN NULL ELSE last_error_code END,
                 error_snapshot_id = CASE WHEN $2 = false THEN NULL ELSE error_snapshot_id END,
                 next_poll_at = CASE WHEN $2 = false THEN now() ELSE next_poll_at END,
                 poll_interval_ms = COALESCE($3, poll_interval_ms),
                 updated_at = now()
               WHERE id = $1
               RETURNING id AS "id: TableId", table_name, namespace, name, catalog, branch,
                      identifier_columns, identifier_field_ids, start_position, poll_interval_ms,
                      state AS "state: TableState", mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, last_error,
                      last_error_code, error_snapshot_id, head_snapshot_id, snapshots_behind,
                      oldest_pending_committed_at, last_polled_at, last_ordinal,
                      retention_max_age_ms, retention_max_change_sets, retention_hard_max_age_ms,
                      pruned_through_ordinal, pruned_through_events, created_at, updated_at"#,
            id.0,
            paused,
            poll_interval_ms
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// Replaces a table's catalog settings; its position and feed stay as they are. The
    /// next poll is due at once, so the new settings are tried without waiting.
    pub async fn set_catalog(
        &self,
        id: TableId,
        catalog: &serde_json::Value,
        catalog_key: &str,
    ) -> Result<(), StoreError> {
        sqlx::query!(
            "UPDATE source_tables SET catalog = $2, catalog_key = $3, next_poll_at = now(), \
               updated_at = now() WHERE id = $1",
            id.0,
            catalog,
            catalog_key
        )
        .execute(&self.pool)
        .await
        .map_err(|e| {
            StoreError::from_unique(
                e,
                "another registration follows this table through these catalog settings",
            )
        })?;
        Ok(())
    }

    /// Removes a table with its change-set index and queues the change-store `prefixes`
    /// holding its objects for deletion after `grace` (reads that found a segment just
    /// before may finish); returns false when it did not exist.
    pub async fn delete_table(
        &self,
        id: TableId,
        prefixes: &[String],
        grace: Duration,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // The lease first: a publish locks the lease, then the table (see `fence`); the
        // same order here keeps a concurrent publish from deadlocking with the delete.
        sqlx::query!("DELETE FROM leases WHERE name = $1", id.lease_name())
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query!("DELETE FROM source_tables WHERE id = $1", id.0)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 1 {
            super::retention::queue_garbage(&mut tx, prefixes, grace).await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Active tables whose next poll is due, most overdue first, but those in `busy`
    /// (the ones this node is syncing already).
    pub async fn due_tables(
        &self,
        limit: i64,
        busy: &[TableId],
    ) -> Result<Vec<SourceTable>, StoreError> {
        let busy: Vec<Uuid> = busy.iter().map(|id| id.0).collect();
        Ok(sqlx::query_as!(
            SourceTable,
            r#"SELECT id AS "id: TableId", table_name, namespace, name, catalog, branch,
                      identifier_columns, identifier_field_ids, start_position, poll_interval_ms,
                      state AS "state: TableState", mode, checkpoint_snapshot_id,
                      checkpoint_sequence_number, checkpoint_committed_at, last_error,
                      last_error_code, error_snapshot_id, head_snapshot_id, snapshots_behind,
                      oldest_pending_committed_at, last_polled_at, last_ordinal,
                      retention_max_age_ms, retention_max_change_sets, retention_hard_max_age_ms,
                      pruned_through_ordinal, pruned_through_events, created_at, updated_at
                 FROM source_tables
                WHERE state IN ('active', 'paused') AND next_poll_at <= now()
                  AND id <> ALL($2::uuid[])
                ORDER BY next_poll_at LIMIT $1"#,
            limit,
            &busy
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// How long until the next table falls due; None when none will (every table due
    /// already, stopped, or none registered).
    pub async fn next_poll_in(&self) -> Result<Option<Duration>, StoreError> {
        let millis = sqlx::query_scalar!(
            "SELECT ceil(extract(epoch FROM min(next_poll_at) - now()) * 1000)::bigint \
               FROM source_tables \
              WHERE state IN ('active', 'paused') AND next_poll_at > now()"
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(millis.map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }

    /// Records how far a failing poll found the feed behind, leaving its error and next
    /// poll to [`postpone_poll`](Self::postpone_poll); fenced by the table lease.
    pub async fn record_lag(
        &self,
        id: TableId,
        lease: &Lease,
        outcome: &PollOutcome,
    ) -> Result<(), StoreError> {
        self.record_outcome(id, lease, outcome, false).await
    }

    /// Records what a poll saw and schedules the next one; fenced by the table lease.
    pub async fn record_poll(
        &self,
        id: TableId,
        lease: &Lease,
        outcome: &PollOutcome,
    ) -> Result<(), StoreError> {
        self.record_outcome(id, lease, outcome, true).await
    }

    /// The lag a poll found and, when it `succeeded`, its end: no error, next poll due.
    async fn record_outcome(
        &self,
        id: TableId,
        lease: &Lease,
        outcome: &PollOutcome,
        succeeded: bool,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query!(
            "UPDATE source_tables SET head_snapshot_id = $2, snapshots_behind = $3, \
               oldest_pending_committed_at = $4, \
               last_polled_at = CASE WHEN $5 THEN now() ELSE last_polled_at END, \
               last_error = CASE WHEN $5 THEN NULL ELSE last_error END, \
               last_error_code = CASE WHEN $5 THEN NULL ELSE last_error_code END, \
               next_poll_at = CASE WHEN $5 \
                 THEN now() + make_interval(secs => poll_interval_ms / 1000.0) \
                 ELSE next_poll_at END \
             WHERE id = $1",
            id.0,
            outcome.head_snapshot_id,
            outcome.snapshots_behind,
            outcome.oldest_pending_committed_at,
            succeeded
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Switches an export that found an empty table to following it from its first commit.
    pub async fn begin_following(&self, id: TableId, lease: &Lease) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query!(
            "UPDATE source_tables SET mode = 'follow', updated_at = now() WHERE id = $1",
            id.0
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Parks a table in the error state with a message; fenced by the table lease.
    pub async fn set_table_error(
        &self,
        id: TableId,
        lease: &Lease,
        failure: &Failure,
        snapshot_id: Option<i64>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query!(
            "UPDATE source_tables SET state = 'error', last_error = $2, last_error_code = $4, \
               error_snapshot_id = $3, last_polled_at = now(), updated_at = now() \
             WHERE id = $1 AND state = 'active'",
            id.0,
            failure.message,
            snapshot_id,
            failure.code.as_str()
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a transient failure (the table stays active) and postpones the next poll.
    pub async fn postpone_poll(
        &self,
        id: TableId,
        delay_ms: i64,
        failure: &Failure,
    ) -> Result<(), StoreError> {
        let delay_secs = delay_ms as f64 / 1000.0;
        sqlx::query!(
            "UPDATE source_tables SET last_error = $3, last_error_code = $4, \
               last_polled_at = now(), \
               next_poll_at = now() + make_interval(secs => $2) \
             WHERE id = $1 AND state = 'active'",
            id.0,
            delay_secs,
            failure.message,
            failure.code.as_str()
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// "namespace.name", the table's name in events.
pub fn display_name(namespace: &[String], name: &str) -> String {
    let mut s = namespace.join(".");
    if !s.is_empty() {
        s.push('.');
    }
    s.push_str(name);
    s
}
