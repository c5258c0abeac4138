//! Request and response bodies of the table resource.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::catalog::redact;
use crate::int64::Int64;
use crate::store::{Retention, SourceTable, TableState};

/// Where a new table's feed starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StartPosition {
    /// `snapshot` (default: the current table state as inserts, then every later commit),
    /// `latest` (only commits after registration) or `earliest` (every retained snapshot).
    Named(StartName),
    /// Start after this snapshot (exclusive); it must be an ancestor of the branch head.
    #[schema(title = "TableSnapshotStart")]
    SnapshotId {
        /// The snapshot whose successors are published.
        snapshot_id: Int64,
    },
    /// Start with the first snapshot committed at or after this time.
    #[schema(title = "TableTimestampStart")]
    Timestamp {
        /// RFC 3339 time, e.g. `2026-07-13T08:00:00Z`.
        timestamp: DateTime<Utc>,
    },
}

/// The named start positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StartName {
    /// Export the current state as inserts, then follow.
    Snapshot,
    /// Only commits after registration.
    Latest,
    /// Replay every retained snapshot.
    Earliest,
}

/// Body of `POST /v1/tables`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterTable {
    /// Catalog connection; `type` is `sql`, `rest` or `filesystem`.
    #[schema(value_type = crate::catalog::CatalogConfig)]
    pub catalog: serde_json::Value,
    /// Table identifier, `namespace.table` (nested namespaces: `a.b.table`).
    #[schema(example = "shop.orders")]
    pub table: String,
    /// Columns that identify a row; default: the table's Iceberg identifier fields.
    #[serde(default)]
    pub identifier_columns: Option<Vec<String>>,
    /// Where the feed starts; default `snapshot`.
    #[serde(default)]
    pub start: Option<StartPosition>,
    /// How often to look for new snapshots, in milliseconds (100 ms to 1 day).
    #[serde(default)]
    #[schema(minimum = 100, maximum = 86_400_000)]
    pub poll_interval_ms: Option<u64>,
    /// The branch to follow; default `main`.
    #[serde(default)]
    pub branch: Option<String>,
    /// How long and how many change sets are kept; default: forever.
    #[serde(default)]
    pub retention: Option<Retention>,
}

/// Body of `PATCH /v1/tables/{id}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTable {
    /// `true` pauses publishing (the node still reads the table's metadata at the poll
    /// interval, so that its lag stays true); `false` resumes it (and retries a table in
    /// the error state).
    #[serde(default)]
    pub paused: Option<bool>,
    /// A new poll interval in milliseconds (100 ms to 1 day).
    #[serde(default)]
    #[schema(minimum = 100, maximum = 86_400_000)]
    pub poll_interval_ms: Option<u64>,
    /// New retention limits (replacing the old ones; `{}` keeps everything forever).
    #[serde(default)]
    pub retention: Option<Retention>,
    /// New catalog settings for the same table (a rotated secret, a moved endpoint),
    /// replacing the old ones whole; a secret given as `********` keeps its stored value.
    /// The feed keeps its position: the settings must reach a table that holds the
    /// feed's checkpoint snapshot.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub catalog: Option<serde_json::Value>,
}

/// The last published snapshot.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Checkpoint {
    /// Snapshot id.
    pub snapshot_id: Int64,
    /// Its sequence number.
    pub sequence_number: Option<Int64>,
    /// When it was committed.
    pub committed_at: Option<DateTime<Utc>>,
}

/// How far the feed is behind the table, as of the last poll.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Lag {
    /// Snapshots committed but not yet published.
    pub snapshots: i64,
    /// Age of the oldest unpublished snapshot, in seconds (0 when caught up).
    pub seconds: f64,
}

/// A registered table.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TableView {
    /// Id of the registration.
    pub id: Uuid,
    /// The Iceberg table, `namespace.table`.
    pub table: String,
    /// Catalog connection with secrets masked.
    #[schema(value_type = Object)]
    pub catalog: serde_json::Value,
    /// Branch followed.
    pub branch: String,
    /// Columns that identify a row (may be empty: no keys, no update pairing).
    pub identifier_columns: Vec<String>,
    /// The start position given at registration.
    #[schema(value_type = StartPosition)]
    pub start: serde_json::Value,
    /// Poll interval in milliseconds.
    pub poll_interval_ms: i64,
    /// `active`, `paused` or `error`.
    pub state: TableState,
    /// True until the initial export is published.
    pub export_pending: bool,
    /// Last published snapshot; null before the first.
    pub checkpoint: Option<Checkpoint>,
    /// Branch head seen by the last poll.
    pub head_snapshot_id: Option<Int64>,
    /// Lag behind the table.
    pub lag: Lag,
    /// Last error: why the table is in the error state, or the last transient failure.
    pub last_error: Option<String>,
    /// The kind of `last_error`, a stable code to act on (new codes may be added):
    /// `gap` (the history no longer reaches the checkpoint: snapshots expired before they
    /// were published, or the table was replaced; re-register), `branch_missing`,
    /// `iceberg_table_not_found`, `catalog_timeout`, `catalog_unavailable`,
    /// `host_not_allowed`, `catalog_type_not_allowed`, `storage_access_denied`,
    /// `storage_not_found`, `storage_settings_invalid`, `storage_unreachable`,
    /// `storage_not_a_file`, `storage_file_too_large`, `local_path_not_allowed`,
    /// `change_store_unavailable`, `database_unavailable`, `data_invalid` (the table's
    /// files contradict its metadata), `identifier_columns_invalid`, `unsupported`,
    /// `worker_lost` (a task kept killing its workers), `internal_error`.
    #[schema(example = "storage_not_found")]
    pub last_error_code: Option<String>,
    /// The snapshot the error is about, if any.
    pub error_snapshot_id: Option<Int64>,
    /// Change sets published so far.
    pub change_sets: i64,
    /// Retention limits.
    pub retention: Retention,
    /// Change sets removed by retention so far (every ordinal up to this one).
    pub pruned_through: i64,
    /// When the table was last polled.
    pub last_polled_at: Option<DateTime<Utc>>,
    /// Registration time.
    pub created_at: DateTime<Utc>,
    /// Last change of the registration or its state.
    pub updated_at: DateTime<Utc>,
}

impl From<&SourceTable> for TableView {
    fn from(t: &SourceTable) -> Self {
        let seconds = match (t.snapshots_behind, t.oldest_pending_committed_at) {
            (n, Some(oldest)) if n > 0 => {
                ((Utc::now() - oldest).num_milliseconds().max(0) as f64) / 1000.0
            }
            _ => 0.0,
        };
        Self {
            id: t.id.0,
            table: t.table_name.clone(),
            catalog: redact(&t.catalog),
            branch: t.branch.clone(),
            identifier_columns: t.identifier_columns.clone(),
            start: t.start_position.clone(),
            poll_interval_ms: t.poll_interval_ms,
            state: t.state,
            export_pending: t.export_pending(),
            checkpoint: t.checkpoint_snapshot_id.map(|snapshot_id| Checkpoint {
                snapshot_id: Int64(snapshot_id),
                sequence_number: t.checkpoint_sequence_number.map(Int64),
                committed_at: t.checkpoint_committed_at,
            }),
            head_snapshot_id: t.head_snapshot_id.map(Int64),
            lag: Lag {
                snapshots: t.snapshots_behind,
                seconds,
            },
            last_error: t.last_error.clone(),
            last_error_code: t.last_error_code.clone(),
            error_snapshot_id: t.error_snapshot_id.map(Int64),
            change_sets: t.last_ordinal,
            retention: t.retention(),
            pruned_through: t.pruned_through_ordinal,
            last_polled_at: t.last_polled_at,
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

/// A list of registered tables.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TableList {
    /// The tables, oldest registration first.
    pub tables: Vec<TableView>,
}

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;
    use utoipa::openapi::{RefOr, Schema};

    use crate::failure::FailureCode;

    #[test]
    fn the_document_names_every_failure_code() {
        let RefOr::T(Schema::Object(table)) = super::TableView::schema() else {
            panic!("TableView is an object");
        };
        let Some(RefOr::T(Schema::Object(code))) = table.properties.get("last_error_code") else {
            panic!("TableView has last_error_code");
        };
        let described = code.description.clone().unwrap_or_default();
        for code in FailureCode::ALL {
            assert!(
                described.contains(&format!("`{code}`")),
                "last_error_code's description lacks {code}"
            );
        }
    }
}
