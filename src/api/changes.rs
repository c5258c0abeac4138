//! `/v1/tables/{id}/changes`: pages of change events as JSON, NDJSON or Arrow, and the schemas
//! the events were read with.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::extract::{Path, Query};
use super::pages::{
    ArrowStream, Format, PageQuery, PageSink, PageTail, long_poll_wait, page_limit, selection,
    start_position,
};
use super::pages_ahead::{FeedPage, PageKey};
use super::tables::load;
use crate::api::problem::problems;
use crate::delivery::PageRequest;
use crate::delivery::json_page::feed_cursor;
use crate::int64::Int64;
use crate::store::SourceTable;

const TAG: &str = "changes";

/// One change event (the canonical form; fields are added, never renamed).
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeEvent {
    /// Cursor of this event.
    pub position: String,
    /// `insert`, `update` or `delete`.
    #[schema(value_type = super::pages::Operation)]
    pub op: String,
    /// The Iceberg table, `namespace.table`.
    pub table: String,
    /// Identifier column values; absent for tables without identifier columns.
    #[schema(value_type = Option<Object>)]
    pub key: Option<serde_json::Value>,
    /// The row before the change (updates and deletes).
    #[schema(value_type = Option<Object>)]
    pub before: Option<serde_json::Value>,
    /// The row after the change (inserts and updates).
    #[schema(value_type = Option<Object>)]
    pub after: Option<serde_json::Value>,
    /// Row lineage, on events of tables of format version 3: each side's row id and
    /// the sequence number of its last update, as Iceberg's `_row_id` and
    /// `_last_updated_sequence_number` read them in the parent (`before`) and in the
    /// snapshot (`after`).
    #[schema(value_type = Option<EventLineage>)]
    pub lineage: Option<serde_json::Value>,
    /// Present only on a change no valid commit produces (see `EventAnomaly`): the
    /// change set still matches the table, but a writer or a metadata edit did
    /// something to look into.
    #[schema(value_type = Option<super::pages::EventAnomaly>)]
    pub anomaly: Option<String>,
    /// The snapshot that made the change.
    pub snapshot_id: Int64,
    /// Its sequence number.
    pub sequence_number: Int64,
    /// When it was committed (RFC 3339, UTC, milliseconds). In net changes: the snapshot
    /// of the key's last change in the range, and `position` is a cursor into them.
    #[schema(format = DateTime)]
    pub committed_at: String,
    /// The Iceberg schema the rows are read with (`GET /v1/tables/{id}/schemas/{schema_id}`).
    pub schema_id: i32,
}

/// The row lineage of an event's sides (tables of format version 3).
#[derive(Debug, Serialize, ToSchema)]
pub struct EventLineage {
    /// Lineage of `before`, on updates and deletes.
    pub before: Option<RowLineage>,
    /// Lineage of `after`, on inserts and updates.
    pub after: Option<RowLineage>,
}

/// One row's lineage: null where unknown (rows written before the table became v3).
#[derive(Debug, Serialize, ToSchema)]
pub struct RowLineage {
    /// The row's id: an update in place keeps it (Spark's UPDATE and MERGE); an
    /// equality-delete upsert does not.
    pub row_id: Option<Int64>,
    /// The sequence number of the snapshot that last added or updated the row.
    pub last_updated_sequence_number: Option<Int64>,
}

/// A page of events.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangePage {
    /// Events in feed order.
    pub events: Vec<ChangeEvent>,
    /// Cursor to pass as `after` for the next page (the same cursor when the page is empty).
    pub next: String,
    /// Whether more events are available right now.
    pub more: bool,
}

problems! {
    /// What `getChanges` answers besides success.
    GetChangesProblems = [
        TABLE,
        QUERY,
        CURSOR,
        &[
            LimitOutOfRange,
            WaitOutOfRange,
            UnknownOperation,
            UnknownColumn,
            InvalidColumns,
            PositionExpired,
        ],
        NET,
    ];
}

/// Read a page of the table's change events.
///
/// Formats: JSON (default), NDJSON (`Accept: application/x-ndjson`) and an Arrow IPC
/// stream (`Accept: application/vnd.apache.arrow.stream`) whose rows are the table's
/// columns plus `_change_type` (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER),
/// `_change_ordinal`, `_commit_snapshot_id`, `_row_id` and `_last_updated_sequence_number`
/// (row lineage, v3 tables) and `_anomaly` (the event's `anomaly`, null for most);
/// `format` overrides `Accept`. With `net=true`, the net changes of a range
/// (see `net`, `until`). NDJSON and Arrow pages carry the next cursor and whether more events are available in the
/// `Icefeed-Next-Cursor` and `Icefeed-More` headers. An Arrow page holds events of one
/// schema; a schema change ends the page early.
#[utoipa::path(
    get, path = "/v1/tables/{id}/changes", tag = TAG, operation_id = "getChanges",
    params(("id" = uuid::Uuid, Path, description = "Table id"), PageQuery),
    responses(
        (status = 200, description = "A page of events", content(
            (ChangePage = "application/json"),
            (ChangeEvent = "application/x-ndjson"),
            (ArrowStream = "application/vnd.apache.arrow.stream"),
        ),
        headers(
            ("Icefeed-Next-Cursor" = String, description = "Cursor for the next page"),
            ("Icefeed-More" = bool, description = "Whether more events are available now"),
            ("Icefeed-Count" = u64, description = "Events in the page"),
        )),
        GetChangesProblems,
    )
)]
pub async fn get_changes(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let table = load(&state, &id).await?;
    if super::net::is_net(&query) {
        return super::net::net_page(&state, &table, &query, &headers).await;
    }
    if query.until.is_some() {
        return Err(ApiError::new(
            ProblemCode::RangeInvalid,
            "`until` ends a range of net changes: pass `net=true` with it",
        ));
    }
    let format = Format::negotiate(query.format, &headers);
    let limit = page_limit(&state, query.limit, format)?;
    let wait = long_poll_wait(&state, query.wait)?;
    let after = start_position(&state, &table, query.after.as_deref()).await?;
    let selection = selection(
        &state,
        &table,
        query.ops.as_deref(),
        query.columns.as_deref(),
    )
    .await?;
    let key = PageKey {
        table: table.id,
        registered: table.created_at,
        after,
        limit,
        format,
        options: query.longs.unwrap_or_default().options(),
        selection,
    };
    let page = match state.pages_ahead.take(&key, &table).await {
        Some(prepared) => prepared,
        None => {
            state
                .notifier
                .long_poll(
                    [table.id],
                    wait,
                    || read_page(&state, &table, &key),
                    |p| p.page.count == 0 && !p.page.more,
                )
                .await?
        }
    };
    prepare_next(&state, &table, &key, &page).await;
    Ok(page.page.response())
}

/// Reads the page at `key` of `table`'s feed.
async fn read_page(
    state: &AppState,
    table: &SourceTable,
    key: &PageKey,
) -> Result<FeedPage, ApiError> {
    let request = PageRequest {
        after: key.after,
        limit: key.limit,
        selection: &key.selection,
    };
    let mut page = PageSink::new(key.format, &key.options, &feed_cursor, key.limit);
    let end = state.feed.read(table, &request, page.sink()).await?;
    let tail = PageTail {
        next: end.next.to_cursor(table.id),
        more: end.more,
    };
    Ok(FeedPage {
        page: page.finish(state, tail, table, &key.selection).await?,
        next: end.next,
    })
}

/// Prepares the pages after `page` (read at `key`) while its consumer takes it, if more
/// events follow it.
async fn prepare_next(state: &AppState, table: &SourceTable, key: &PageKey, page: &FeedPage) {
    if !page.page.more {
        return;
    }
    let read = {
        let (state, table) = (state.clone(), table.clone());
        move |key: PageKey| {
            let (state, table) = (state.clone(), table.clone());
            async move { read_page(&state, &table, &key).await.ok() }
        }
    };
    state.pages_ahead.prepare_after(key, page.next, read).await;
}

problems! {
    /// What `getSchema` answers besides success.
    GetSchemaProblems = [TABLE, &[SchemaNotFound]];
}

/// Get an Iceberg schema that change events were read with.
#[utoipa::path(
    get, path = "/v1/tables/{id}/schemas/{schema_id}", tag = TAG, operation_id = "getSchema",
    params(("id" = uuid::Uuid, Path, description = "Table id"), ("schema_id" = i32, Path, description = "Schema id of an event")),
    responses(
        (status = 200, description = "The Iceberg schema as JSON (Iceberg table-metadata form)", body = Object),
        GetSchemaProblems,
    )
)]
pub async fn get_schema(
    State(state): State<AppState>,
    Path((id, schema_id)): Path<(String, i32)>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let table = load(&state, &id).await?;
    let schema = state.store.table_schema(table.id, schema_id).await?;
    schema.map(axum::Json).ok_or_else(|| {
        ApiError::new(
            ProblemCode::SchemaNotFound,
            format!("no change set of this table was read with schema {schema_id}"),
        )
    })
}
