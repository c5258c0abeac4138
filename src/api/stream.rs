//! `/v1/tables/{id}/changes/stream`: a table's change events as server-sent events, and
//! what every SSE endpoint shares: resuming after `Last-Event-ID`, the response, and
//! the `error` event that ends a failed stream.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::extract::{Path, Query};
use super::pages::{Format, Longs, page_limit, selection};
use super::pages::{ensure_retained, start_position};
use super::tables::load;
use crate::api::problem::problems;
use crate::delivery::json_page::feed_cursor;
use crate::delivery::{Framing, JsonSink, PageRequest, StreamPage, StreamTiming, event_stream};

/// The media type of server-sent events.
pub const EVENT_STREAM: &str = "text/event-stream";
/// The header a reconnecting client sends with the `id` of the last event it received.
pub const LAST_EVENT_ID: &str = "last-event-id";

/// Query parameters of a stream.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Cursor to start after when no `Last-Event-ID` header is sent, or `now` to send
    /// only events published from now on; omit both to start at the beginning of the
    /// feed.
    pub after: Option<String>,
    /// Most events read and sent at a time (default 1000): what a slow client can hold
    /// in the server's memory. At most `api.max_limit` (10000).
    #[param(minimum = 1)]
    pub limit: Option<u32>,
    /// How longs beyond ±2^53 are written: `auto` (default) or `number`.
    pub longs: Option<Longs>,
    /// Only these operations, comma-separated (`insert`, `update`, `delete`).
    #[param(pattern = r"^(insert|update|delete)(,(insert|update|delete))*$")]
    pub ops: Option<String>,
    /// Only these top-level columns in `before`/`after`, comma-separated.
    #[param(min_length = 1)]
    pub columns: Option<String>,
}

problems! {
    /// What `streamChanges` answers besides success.
    StreamChangesProblems = [
        TABLE,
        QUERY,
        CURSOR,
        &[LimitOutOfRange, UnknownOperation, UnknownColumn, InvalidColumns, PositionExpired],
    ];
}

/// Stream the table's change events as server-sent events.
///
/// The stream starts with `retry:`, then sends every event after the start position as
/// `event: change` with the event's position as `id` and the canonical JSON event on one
/// `data:` line, and follows new change sets as they are published. An idle stream
/// sends a `: keep-alive` comment every `api.stream_heartbeat` (15 s). A reconnecting
/// client resumes right after its `Last-Event-ID`, which wins over `after`. If reading
/// fails, an `event: error` with a problem document ends the stream.
#[utoipa::path(
    get, path = "/v1/tables/{id}/changes/stream", tag = "changes", operation_id = "streamChanges",
    params(
        ("id" = uuid::Uuid, Path, description = "Table id"),
        ("Last-Event-ID" = Option<String>, Header, description = "The `id` of the last event received; the stream resumes right after it (wins over `after`)"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "An endless stream of server-sent events: `event: change` whose `data:` line is one `ChangeEvent` (schema `#/components/schemas/ChangeEvent`) and whose `id` is its position; `event: error` whose `data:` is a `Problem` and ends the stream", content_type = "text/event-stream", body = String),
        StreamChangesProblems,
    )
)]
pub async fn stream_changes(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let table = Arc::new(load(&state, &id).await?);
    // Events are sent as JSON, whatever the request accepts.
    let limit = page_limit(&state, query.limit, Format::Json)?;
    let cursor = resume_cursor(&headers, query.after.as_deref())?;
    let start = start_position(&state, &table, cursor).await?;
    let selection = Arc::new(
        selection(
            &state,
            &table,
            query.ops.as_deref(),
            query.columns.as_deref(),
        )
        .await?,
    );
    let options = query.longs.unwrap_or_default().options();
    // Subscribed before the first read, so a publish in between still wakes the stream.
    let waiter = state.notifier.subscribe(table.id);
    ensure_retained(&state, &table, start).await?;
    let timing = stream_timing(&state);
    let events = event_stream(start, waiter, timing, move |after| {
        let (state, table, selection) = (state.clone(), table.clone(), selection.clone());
        async move {
            let mut sink = JsonSink::new(Framing::Sse, &options, &feed_cursor, limit);
            let request = PageRequest {
                after,
                limit,
                selection: &selection,
            };
            let end = state.feed.read(&table, &request, &mut sink).await?;
            Ok::<_, ApiError>(stream_page(sink, end.count, end.more, end.next))
        }
    });
    Ok(sse_response(events))
}

/// What a stream sends for one page read into an SSE-framed sink.
pub fn stream_page<S>(sink: JsonSink<'_>, count: usize, more: bool, next: S) -> StreamPage<S> {
    StreamPage {
        body: sink.into_body(),
        count,
        more,
        next,
    }
}

/// The cursor a stream starts after: the `Last-Event-ID` header of a reconnecting
/// client wins over the `after` of the URL it reconnects to; empty means none.
pub fn resume_cursor<'a>(
    headers: &'a HeaderMap,
    after: Option<&'a str>,
) -> Result<Option<&'a str>, ApiError> {
    match headers.get(LAST_EVENT_ID) {
        Some(id) if !id.is_empty() => id.to_str().map(Some).map_err(|_| {
            ApiError::new(ProblemCode::MalformedCursor,
                "malformed cursor in Last-Event-ID: not ASCII; send the id of an event this stream sent",
            )
        }),
        _ => Ok(after.filter(|a| !a.is_empty())),
    }
}

/// Stream timing from the node's settings.
pub fn stream_timing(state: &AppState) -> StreamTiming {
    StreamTiming {
        retry: state.settings.api.stream_retry,
        heartbeat: state.settings.api.stream_heartbeat,
    }
}

/// A `text/event-stream` response over `events`; an error is sent as an `error` event
/// carrying its problem document, and ends the stream.
pub fn sse_response<E: Into<ApiError>>(
    events: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> Response {
    let body = events.map(|chunk| Ok::<_, Infallible>(chunk.unwrap_or_else(error_event)));
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Tells nginx-like proxies not to buffer the stream.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

fn error_event(error: impl Into<ApiError>) -> Bytes {
    let problem =
        serde_json::to_string(&error.into().into_problem()).expect("a problem serializes");
    Bytes::from(format!("event: error\ndata: {problem}\n\n"))
}
