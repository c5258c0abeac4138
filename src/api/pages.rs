//! What every page endpoint shares: the query of a table page, where a cursor starts,
//! formats, limits and rendering a page in the format the client asked for.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::limits;
use crate::changes::Position;
use crate::changes::json::{JsonOptions, LongMode};
use crate::delivery::json_page::CursorFn;
use crate::delivery::selection::split_list;
use crate::delivery::{
    ArrowSink, EventSink, Framing, JsonSink, PageBody, Selection, SelectionError,
};
use crate::store::SourceTable;

/// NDJSON media type.
pub const NDJSON: &str = "application/x-ndjson";
/// Arrow IPC stream media type.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// Response header carrying the next cursor of an NDJSON or Arrow page.
pub const NEXT_CURSOR_HEADER: &str = "icefeed-next-cursor";
/// Response header telling whether more events are available now.
pub const MORE_HEADER: &str = "icefeed-more";
/// Response header carrying the number of events in the page.
pub const COUNT_HEADER: &str = "icefeed-count";

/// The body of an Arrow page: an Arrow IPC stream (`pyarrow.ipc.open_stream`,
/// `polars.read_ipc_stream`).
// Only describes the page in the OpenAPI document; pages are written by `ArrowSink`.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ArrowStream(pub Vec<u8>);

/// The operation a change event records.
// Only describes events and filters in the OpenAPI document; the feed writes and parses
// the names itself (`delivery::selection`), so fields typed `String` keep their behaviour.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// A row was added.
    Insert,
    /// A row with the same key changed.
    Update,
    /// A row was removed.
    Delete,
}

/// What is anomalous about a change event: something no valid commit produces.
// Describes events in the OpenAPI document; `change::Anomaly` writes them.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventAnomaly {
    /// An insert of a row that a data file regained: a delete that had removed it was
    /// dropped without a replacement (a metadata edit, not an engine's commit).
    Resurrected,
}

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

impl Longs {
    /// The JSON encoder options this choice means.
    pub fn options(self) -> JsonOptions {
        JsonOptions {
            longs: match self {
                Longs::Auto => LongMode::Auto,
                Longs::Number => LongMode::Number,
            },
        }
    }
}

/// The representation of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"events": [...], "next": ..., "more": ...}` (`application/json`).
    Json,
    /// One event per line (`application/x-ndjson`).
    Ndjson,
    /// An Arrow IPC stream (`application/vnd.apache.arrow.stream`).
    Arrow,
}

impl Format {
    /// The format named by the `format` parameter, else by the `Accept` header, else JSON.
    pub fn negotiate(explicit: Option<Format>, headers: &HeaderMap) -> Format {
        explicit.unwrap_or_else(|| {
            let accepts = |media: &str| {
                headers
                    .get_all(header::ACCEPT)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .any(|v| v.split(',').any(|t| t.trim().starts_with(media)))
            };
            if accepts(ARROW_STREAM) {
                Format::Arrow
            } else if accepts(NDJSON) {
                Format::Ndjson
            } else {
                Format::Json
            }
        })
    }
}

/// Checks a requested size of a page in `format` against the node's limits.
pub fn page_limit(state: &AppState, limit: Option<u32>, format: Format) -> Result<usize, ApiError> {
    let api = &state.settings.api;
    let max = match format {
        Format::Arrow => api.max_arrow_limit,
        Format::Json | Format::Ndjson => api.max_limit,
    };
    let limit = limit.unwrap_or(api.default_limit);
    if limit == 0 || limit > max {
        return Err(
            limits::out_of_range(ProblemCode::LimitOutOfRange, "limit", 1, max, "", limit)
                .with("max_limit", max),
        );
    }
    Ok(limit as usize)
}

/// How long a long poll may wait, within the configured bound.
pub fn long_poll_wait(state: &AppState, wait: Option<i64>) -> Result<Duration, ApiError> {
    let max = state.settings.api.max_wait.as_secs();
    match wait.unwrap_or(0) {
        wait @ 0.. if wait as u64 <= max => Ok(Duration::from_secs(wait as u64)),
        wait => Err(limits::out_of_range(
            ProblemCode::WaitOutOfRange,
            "wait",
            0,
            max,
            " seconds",
            wait,
        )
        .with("max_wait", max)),
    }
}

/// The operations and columns a request asks for (comma-separated lists), checked
/// against every column the table's schemas had.
pub async fn selection(
    state: &AppState,
    table: &SourceTable,
    ops: Option<&str>,
    columns: Option<&str>,
) -> Result<Selection, ApiError> {
    let ops = ops.map(split_list);
    let columns = columns.map(split_list);
    let available = match columns {
        Some(_) => state.store.table_column_names(table.id).await?,
        None => Default::default(),
    };
    Ok(Selection::new(
        ops.as_deref(),
        columns.as_deref(),
        &available,
    )?)
}

/// Where a table feed starts when no cursor is given: its oldest retained event.
pub fn feed_start(table: &SourceTable) -> Position {
    let floor = table.floor();
    if floor.ordinal == 0 {
        Position::START
    } else {
        floor.earliest()
    }
}

/// Where a page ended, as the client sees it.
pub struct PageTail {
    /// Cursor to continue after.
    pub next: String,
    /// Whether more events are available now.
    pub more: bool,
}

/// A page being assembled in the format the client asked for.
pub enum PageSink<'a> {
    Json(JsonSink<'a>, Format),
    Arrow(ArrowSink),
}

impl<'a> PageSink<'a> {
    /// An empty page of up to `limit` events in `format`.
    pub fn new(
        format: Format,
        options: &'a JsonOptions,
        cursor: CursorFn<'a>,
        limit: usize,
    ) -> Self {
        let json = |framing| JsonSink::new(framing, options, cursor, limit);
        match format {
            Format::Json => Self::Json(
                json(Framing::JsonArray).with_prefix(ENVELOPE_OPENING),
                format,
            ),
            Format::Ndjson => Self::Json(json(Framing::Ndjson), format),
            Format::Arrow => Self::Arrow(ArrowSink::new()),
        }
    }

    /// The sink to read events into.
    pub fn sink(&mut self) -> &mut dyn EventSink {
        match self {
            Self::Json(sink, _) => sink,
            Self::Arrow(sink) => sink,
        }
    }

    /// The response: the page ending at `tail`. An empty Arrow page describes the newest
    /// schema of `table` with the selected columns.
    pub async fn respond(
        self,
        state: &AppState,
        tail: PageTail,
        table: &SourceTable,
        selection: &Selection,
    ) -> Result<Response, ApiError> {
        Ok(self.finish(state, tail, table, selection).await?.response())
    }

    /// The page ending at `tail`, ready to send (see [`Self::respond`]).
    pub async fn finish(
        self,
        state: &AppState,
        tail: PageTail,
        table: &SourceTable,
        selection: &Selection,
    ) -> Result<ReadyPage, ApiError> {
        let (content_type, body, count) = match self {
            Self::Json(sink, format) => {
                let count = sink.count();
                let mut body = sink.into_body();
                match format {
                    Format::Ndjson => (NDJSON, body.into(), count),
                    _ => {
                        close_envelope(&mut body, &tail);
                        ("application/json", body.into(), count)
                    }
                }
            }
            Self::Arrow(sink) => {
                let count = sink.events();
                let empty = match sink.is_empty() {
                    false => None,
                    true => match state.store.newest_schema_id(table.id).await? {
                        Some(id) => Some(state.feed.schema(table.id, id).await?),
                        None => None,
                    },
                };
                let columns = empty
                    .as_ref()
                    .map(|e| selection.column_indexes(e.schema.as_struct().fields()))
                    .unwrap_or_default();
                let body = sink.finish(empty.as_ref().map(|e| (&e.read, &columns[..])))?;
                (ARROW_STREAM, body, count)
            }
        };
        Ok(ReadyPage {
            content_type,
            body,
            count,
            next: tail.next,
            more: tail.more,
        })
    }
}

/// A page ready to send.
#[derive(Debug)]
pub struct ReadyPage {
    pub content_type: &'static str,
    pub body: PageBody,
    pub count: usize,
    /// The cursor to continue after.
    pub next: String,
    /// Whether more events were available when the page was read.
    pub more: bool,
}

impl ReadyPage {
    pub fn response(&self) -> Response {
        let mut response = (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.content_type),
            )],
            Body::new(self.body.clone()),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(
            NEXT_CURSOR_HEADER,
            HeaderValue::from_str(&self.next).expect("cursors are URL-safe ASCII"),
        );
        headers.insert(
            MORE_HEADER,
            HeaderValue::from_static(if self.more { "true" } else { "false" }),
        );
        headers.insert(COUNT_HEADER, HeaderValue::from(self.count));
        response
    }
}

/// How a JSON page opens: `{"events":[`, then the events.
const ENVELOPE_OPENING: &[u8] = b"{\"events\":[";

/// Closes a JSON page opened with [`ENVELOPE_OPENING`] and its events:
/// `],"next":"…","more":…}`.
fn close_envelope(body: &mut Vec<u8>, tail: &PageTail) {
    body.extend_from_slice(b"],\"next\":\"");
    body.extend_from_slice(tail.next.as_bytes());
    body.extend_from_slice(b"\",\"more\":");
    body.extend_from_slice(if tail.more { b"true}" } else { b"false}" });
}

impl From<SelectionError> for ApiError {
    fn from(e: SelectionError) -> Self {
        let detail = e.to_string();
        match e {
            SelectionError::UnknownOp(_) | SelectionError::NoOps => {
                Self::new(ProblemCode::UnknownOperation, detail)
            }
            SelectionError::UnknownColumn { available, .. } => {
                Self::new(ProblemCode::UnknownColumn, detail).with("columns", available)
            }
            SelectionError::NoColumns | SelectionError::DuplicateColumn(_) => {
                Self::new(ProblemCode::InvalidColumns, detail)
            }
        }
    }
}

/// The `after` that starts a feed at its head.
const AFTER_NOW: &str = "now";

/// Query parameters of a page request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Cursor to continue after (the `next` of the previous page or an event's
    /// `position`); `now` to start at the head (only events published from now on);
    /// omit to start at the oldest retained event.
    pub after: Option<String>,
    /// Events per page (default 1000); at most `api.max_limit` (10000), or for Arrow
    /// pages `api.max_arrow_limit` (100000). A page ends
    /// earlier, with `more`, once its events store 8 MiB in the change store or decode
    /// to 32 MiB (wide rows), holding at least one.
    #[param(minimum = 1)]
    pub limit: Option<u32>,
    /// How longs beyond ±2^53 are written: `auto` (default) or `number`.
    pub longs: Option<Longs>,
    /// Only these operations, comma-separated (`insert`, `update`, `delete`); events of
    /// other operations are skipped. Default: all.
    #[param(pattern = r"^(insert|update|delete)(,(insert|update|delete))*$")]
    pub ops: Option<String>,
    /// Only these top-level columns in `before`/`after` (and Arrow rows),
    /// comma-separated; `key` always carries the identifier columns. Default: all.
    #[param(min_length = 1)]
    pub columns: Option<String>,
    /// `json`, `ndjson` or `arrow`; overrides the `Accept` header.
    pub format: Option<Format>,
    /// Seconds to wait for events when none are available (a long poll): the answer
    /// comes as soon as events are published, or as an empty page with the same cursor
    /// when the wait ends. 0 (default) answers at once; at most `api.max_wait` (60 s).
    /// With `net=true`: how long to wait for the range's net changes to be computed (an
    /// empty page with `more` when they are not yet).
    #[param(minimum = 0)]
    pub wait: Option<i64>,
    /// `true`: the net changes of the range after `after` up to `until`, at most one
    /// event per key (the multiset difference of whole rows without identifier
    /// columns), each with the snapshot of its key's last change. Computed once per
    /// range and shared; while being computed, pages are empty with `more` and a `next`
    /// that holds the range. The last page's `next` is the feed cursor of `until`. A
    /// cursor into net changes continues them without it.
    pub net: Option<bool>,
    /// With `net=true`: the feed cursor the range ends at (included); default: the head
    /// of the feed when the range is first asked for.
    pub until: Option<String>,
}

/// The position a cursor names; none or empty is the oldest retained event, `now` the
/// head of the feed as `table` was loaded. A cursor beyond what the feed published
/// answers `400 cursor_ahead`.
pub(crate) async fn start_position(
    state: &AppState,
    table: &SourceTable,
    cursor: Option<&str>,
) -> Result<Position, ApiError> {
    match cursor {
        None | Some("") => Ok(feed_start(table)),
        Some(AFTER_NOW) => Ok(Position {
            ordinal: table.last_ordinal + 1,
            consumed: 0,
        }),
        Some(cursor) => {
            let position = Position::from_cursor(cursor, table.id)?;
            ensure_published(state, table, position).await?;
            Ok(position)
        }
    }
}

/// Answers `400 cursor_ahead` when `p` lies beyond what `table`'s feed published: such
/// a cursor was never handed out (forged, or of a table registered anew under the same
/// id), and reading after it would answer empty pages forever, then skip the events
/// published up to it. The position a caught-up reader holds is not beyond.
pub(crate) async fn ensure_published(
    state: &AppState,
    table: &SourceTable,
    p: Position,
) -> Result<(), ApiError> {
    if !state.feed.is_beyond(table, p).await? {
        return Ok(());
    }
    Err(ApiError::new(
        ProblemCode::CursorAhead,
        format!(
            "the cursor points past the end of the feed of table {}: no such position was \
             published; pass a cursor the feed returned, or omit it to start where the feed \
             starts",
            table.table_name
        ),
    )
    .with("table_id", table.id.to_string()))
}

/// Answers 410 when retention removed events after `after`. Checked after reading:
/// retention only ever prunes a prefix, so if the position is still retained now, nothing
/// after it went missing while the page was read.
pub(crate) async fn ensure_retained(
    state: &AppState,
    table: &SourceTable,
    after: Position,
) -> Result<(), ApiError> {
    let floor = state.store.floor(table.id).await?;
    if floor.is_gone(after) {
        return Err(ApiError::position_expired(
            floor.earliest().to_cursor(table.id),
        ));
    }
    Ok(())
}
