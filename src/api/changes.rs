//! `/v1/tables/{id}/changes`: pages of change events as JSON or NDJSON, and the schemas
//! the events were read with.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{Path, Query};
use super::tables::load;
use crate::changes::Position;
use crate::changes::json::{JsonOptions, LongMode};
use crate::delivery::Framing;
use crate::store::SourceTable;

const TAG: &str = "changes";
const NDJSON: &str = "application/x-ndjson";
/// Response header carrying the next cursor of an NDJSON page.
pub const NEXT_CURSOR_HEADER: &str = "icefeed-next-cursor";
/// Response header telling whether more events are available now.
pub const MORE_HEADER: &str = "icefeed-more";

/// How 64-bit integers beyond ±2^53 are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Longs {
    /// As numbers while exactly representable as a double, otherwise as strings.
    #[default]
    Auto,
    /// Always as numbers (exact in the text; some JSON parsers round them).
    Number,
}

/// Query parameters of a page request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Cursor to continue after (the `next` of the previous page or an event's
    /// `position`); omit to start at the beginning of the feed.
    pub after: Option<String>,
    /// Events per page (default 1000).
    pub limit: Option<u32>,
    /// How longs beyond ±2^53 are written: `auto` (default) or `number`.
    pub longs: Option<Longs>,
    /// Seconds to wait for events when none are available (a long poll): the answer
    /// comes as soon as events are published, or as an empty page with the same cursor
    /// when the wait ends. 0 (default) answers at once; at most `api.max_wait` (60 s).
    #[param(minimum = 0)]
    pub wait: Option<i64>,
}

/// One change event (the canonical form; fields are added, never renamed).
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeEvent {
    /// Cursor of this event.
    pub position: String,
    /// `insert`, `update` or `delete`.
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
    /// The snapshot that made the change.
    pub snapshot_id: i64,
    /// Its sequence number.
    pub sequence_number: i64,
    /// When it was committed (RFC 3339, UTC, milliseconds).
    pub committed_at: String,
    /// The Iceberg schema the rows are read with (`GET /v1/tables/{id}/schemas/{schema_id}`).
    pub schema_id: i32,
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

/// Read a page of the table's change events.
///
/// Send `Accept: application/x-ndjson` for one event per line; the next cursor and
/// whether more events are available are then in the `Icefeed-Next-Cursor` and
/// `Icefeed-More` headers.
#[utoipa::path(
    get, path = "/v1/tables/{id}/changes", tag = TAG, operation_id = "getChanges",
    params(("id" = String, Path, description = "Table id"), PageQuery),
    responses(
        (status = 200, description = "A page of events", content(
            (ChangePage = "application/json"),
            (ChangeEvent = "application/x-ndjson"),
        ),
        headers(
            ("Icefeed-Next-Cursor" = String, description = "Cursor for the next page"),
            ("Icefeed-More" = bool, description = "Whether more events are available now"),
        )),
        (status = 400, description = "Malformed or foreign cursor, limit or wait out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such table", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_changes(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let table = load(&state, &id).await?;
    let limit = page_limit(&state, query.limit)?;
    let wait = long_poll_wait(&state, query.wait)?;
    let after = start_position(&table, query.after.as_deref())?;
    let options = json_options(query.longs);
    let framing = if wants_ndjson(&headers) {
        Framing::Ndjson
    } else {
        Framing::JsonArray
    };
    let page = state
        .notifier
        .long_poll(
            [table.id],
            wait,
            || state.feed.page(&table, after, limit, &options, framing),
            |page| page.count == 0,
        )
        .await?;
    let next = page.next.to_cursor(table.id);
    let mut response = match framing {
        Framing::Ndjson => (
            [(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON))],
            page.body,
        )
            .into_response(),
        Framing::JsonArray => {
            let mut body = Vec::with_capacity(page.body.len() + 128);
            body.extend_from_slice(b"{\"events\":[");
            body.extend_from_slice(&page.body);
            body.extend_from_slice(b"],\"next\":\"");
            body.extend_from_slice(next.as_bytes());
            body.extend_from_slice(b"\",\"more\":");
            body.extend_from_slice(if page.more { b"true}" } else { b"false}" });
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response()
        }
        Framing::Sse => unreachable!("pages are JSON or NDJSON; streams are in api::stream"),
    };
    let headers = response.headers_mut();
    headers.insert(
        NEXT_CURSOR_HEADER,
        HeaderValue::from_str(&next).expect("cursor is ASCII"),
    );
    headers.insert(
        MORE_HEADER,
        HeaderValue::from_static(if page.more { "true" } else { "false" }),
    );
    Ok(response)
}

/// The page size a request asks for, within the configured bounds.
pub(crate) fn page_limit(state: &AppState, limit: Option<u32>) -> Result<usize, ApiError> {
    let max = state.settings.api.max_limit;
    let limit = limit.unwrap_or(state.settings.api.default_limit);
    if limit == 0 || limit > max {
        return Err(ApiError::bad_request(
            "limit_out_of_range",
            format!("limit must be between 1 and {max}; got {limit}"),
        )
        .with("max_limit", max));
    }
    Ok(limit as usize)
}

/// How long a long poll may wait, within the configured bound.
fn long_poll_wait(state: &AppState, wait: Option<i64>) -> Result<Duration, ApiError> {
    let max = state.settings.api.max_wait.as_secs();
    match wait.unwrap_or(0) {
        wait @ 0.. if wait as u64 <= max => Ok(Duration::from_secs(wait as u64)),
        wait => Err(ApiError::bad_request(
            "wait_out_of_range",
            format!("wait must be between 0 and {max} seconds; got {wait}"),
        )
        .with("max_wait", max)),
    }
}

/// The position a cursor names; none or empty is the start of the feed.
pub(crate) fn start_position(
    table: &SourceTable,
    cursor: Option<&str>,
) -> Result<Position, ApiError> {
    match cursor {
        None | Some("") => Ok(Position::START),
        Some(cursor) => Ok(Position::from_cursor(cursor, table.id)?),
    }
}

/// Encoding options of a request.
pub(crate) fn json_options(longs: Option<Longs>) -> JsonOptions {
    JsonOptions {
        longs: match longs.unwrap_or_default() {
            Longs::Auto => LongMode::Auto,
            Longs::Number => LongMode::Number,
        },
    }
}

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with(NDJSON)))
}

/// Get an Iceberg schema that change events were read with.
#[utoipa::path(
    get, path = "/v1/tables/{id}/schemas/{schema_id}", tag = TAG, operation_id = "getSchema",
    params(("id" = String, Path, description = "Table id"), ("schema_id" = i32, Path, description = "Schema id of an event")),
    responses(
        (status = 200, description = "The Iceberg schema as JSON (Iceberg table-metadata form)", body = Object),
        (status = 404, description = "No such table or schema", body = Problem, content_type = "application/problem+json"),
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
            StatusCode::NOT_FOUND,
            "schema_not_found",
            format!("no change set of this table was read with schema {schema_id}"),
        )
    })
}
