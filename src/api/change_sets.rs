//! `/v1/tables/{id}/change-sets`: what a table's feed published, one change set per
//! snapshot, newest first, each with the cursor that reads from it.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::extract::{Path, Query};
use super::limits;
use super::tables::load;
use crate::api::problem::problems;
use crate::changes::Position;
use crate::int64::Int64;
use crate::store::ChangeSetRecord;

const TAG: &str = "changes";
/// Default and largest page size.
const LIMITS: (u32, u32) = (100, 1000);

/// Query parameters of a page of change sets.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChangeSetQuery {
    /// Only change sets older than this ordinal (a page's `next`).
    pub before: Option<Int64>,
    /// Change sets per page: 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// One published change set: the events of one snapshot (or of the export at
/// registration, or of a reset).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChangeSetView {
    /// Its place in the feed: 1 for the first change set, growing by one.
    pub ordinal: Int64,
    /// The snapshot whose changes it holds (for a reset: the snapshot the branch went
    /// back to).
    pub snapshot_id: Int64,
    /// Its sequence number.
    pub sequence_number: Int64,
    /// The snapshot's operation (`append`, `overwrite`, `delete`, `replace`), or `reset`.
    pub operation: String,
    /// `snapshot`; `export` for the table's state at registration; `reset` when the branch
    /// was rolled back (or reset to another lineage) past the last published snapshot:
    /// the events turn the state of `reset_from_snapshot_id` into the state of
    /// `snapshot_id`.
    pub kind: String,
    /// For a reset: the snapshot the feed had reached when the branch went back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_from_snapshot_id: Option<Int64>,
    /// When the snapshot was committed (for a reset: when the branch moved).
    pub committed_at: DateTime<Utc>,
    /// The Iceberg schema its rows were read with.
    pub schema_id: i32,
    /// Its events (0 for a compaction or a commit that changed no row).
    pub event_count: i64,
    /// Rows the snapshot brought back by dropping deletes without replacing them, a
    /// metadata edit no engine commits: they are among its inserts (or updates). Absent
    /// when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resurrected_rows: Option<i64>,
    /// A cursor just before its first event: pass it as `after` to read from this
    /// change set on.
    pub position: String,
}

/// A page of change sets.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChangeSetList {
    /// Newest first.
    pub change_sets: Vec<ChangeSetView>,
    /// Pass as `before` for older ones; absent on the last page.
    pub next: Option<Int64>,
}

problems! {
    /// What `listChangeSets` answers besides success.
    ListChangeSetsProblems = [TABLE, QUERY, &[LimitOutOfRange]];
}

/// List a table's published change sets, newest first.
///
/// Change sets that retention removed are not listed.
#[utoipa::path(
    get, path = "/v1/tables/{id}/change-sets", tag = TAG, operation_id = "listChangeSets",
    params(("id" = uuid::Uuid, Path, description = "Table id"), ChangeSetQuery),
    responses(
        (status = 200, description = "A page of change sets", body = ChangeSetList),
        ListChangeSetsProblems,
    )
)]
pub async fn list_change_sets(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<ChangeSetQuery>,
) -> Result<axum::Json<ChangeSetList>, ApiError> {
    let (default, max) = LIMITS;
    let limit = limits::check(
        ProblemCode::LimitOutOfRange,
        "limit",
        query.limit.unwrap_or(default),
        1,
        max,
    )?;
    let table = load(&state, &id).await?;
    let before = query.before.map_or(i64::MAX, i64::from);
    let rows = state
        .store
        .list_change_sets(table.id, before, i64::from(limit))
        .await?;
    let next = (rows.len() == limit as usize)
        .then(|| rows.last().map(|c| Int64(c.ordinal)))
        .flatten();
    let view = |c: ChangeSetRecord| ChangeSetView {
        ordinal: Int64(c.ordinal),
        snapshot_id: Int64(c.snapshot_id),
        sequence_number: Int64(c.sequence_number),
        operation: c.operation,
        kind: c.kind,
        reset_from_snapshot_id: c.reset_from_snapshot_id.map(Int64),
        committed_at: c.committed_at,
        schema_id: c.schema_id,
        event_count: c.event_count,
        resurrected_rows: (c.resurrected_rows > 0).then_some(c.resurrected_rows),
        position: Position {
            ordinal: c.ordinal,
            consumed: 0,
        }
        .to_cursor(table.id),
    };
    Ok(axum::Json(ChangeSetList {
        change_sets: rows.into_iter().map(view).collect(),
        next,
    }))
}
