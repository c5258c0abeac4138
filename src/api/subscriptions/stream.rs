//! `/v1/subscriptions/{id}/stream`: a subscription's events as server-sent events, from
//! its committed position (or `Last-Event-ID`), recording what was delivered so that
//! the positions the stream sent can be acknowledged.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{load, record_delivered};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{Path, Query};
use crate::api::pages::{Format, Longs, page_limit};
use crate::api::problem::problems;
use crate::api::stream::{resume_cursor, sse_response, stream_page, stream_timing};
use crate::changes::Position;
use crate::delivery::{Framing, JsonSink, Positions, event_stream};
use crate::store::TableId;

/// Query parameters of a subscription stream.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionStreamQuery {
    /// Cursor of this subscription to start after when no `Last-Event-ID` header is
    /// sent; omit both to start after the committed position.
    pub after: Option<String>,
    /// Most events read and sent at a time (default 1000); at most `api.max_limit` (10000).
    #[param(minimum = 1)]
    pub limit: Option<u32>,
    /// How longs beyond ±2^53 are written: `auto` (default) or `number`.
    pub longs: Option<Longs>,
}

problems! {
    /// What `streamSubscription` answers besides success.
    StreamSubscriptionProblems = [
        SUBSCRIPTION,
        QUERY,
        CURSOR,
        &[LimitOutOfRange, PushSubscription, SubscriptionNotActive, PositionExpired],
    ];
}

/// Stream a subscription's events as server-sent events.
///
/// Like the table stream, with subscription cursors as event ids: every event after the
/// committed position (or after `Last-Event-ID`, which wins over `after`), then new
/// events as they are published on any of the subscription's tables. Acknowledge with
/// `POST …/ack` and an event's id; the committed position does not move by itself.
#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/stream", tag = "subscriptions", operation_id = "streamSubscription",
    params(
        ("id" = String, Path, description = "Subscription id or name"),
        ("Last-Event-ID" = Option<String>, Header, description = "The `id` of the last event received; the stream resumes right after it (wins over `after`)"),
        SubscriptionStreamQuery,
    ),
    responses(
        (status = 200, description = "An endless stream of server-sent events: `event: change` whose `data:` line is one `ChangeEvent` (schema `#/components/schemas/ChangeEvent`) and whose `id` is its position; `event: error` whose `data:` is a `Problem` and ends the stream", content_type = "text/event-stream", body = String),
        StreamSubscriptionProblems,
    )
)]
pub async fn stream_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<SubscriptionStreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let loaded = Arc::new(load(&state, &id).await?);
    super::push::ensure_pull(&loaded)?;
    loaded.ensure_active()?;
    // Events are sent as JSON, whatever the request accepts.
    let limit = page_limit(&state, query.limit, Format::Json)?;
    let cursor = resume_cursor(&headers, query.after.as_deref())?;
    let start = loaded.start(&state, cursor).await?;
    let selection = Arc::new(loaded.selection()?);
    let options = query.longs.unwrap_or_default().options();
    let ids: Vec<TableId> = loaded.tables.iter().map(|t| t.id).collect();
    // Subscribed before the first read, so a publish in between still wakes the stream.
    let waiter = state.notifier.subscribe_all(ids.clone());
    loaded.ensure_retained(&state, &start).await?;
    let events = event_stream(
        start,
        waiter,
        stream_timing(&state),
        move |after: Vec<Position>| {
            let (state, loaded, selection, ids) = (
                state.clone(),
                loaded.clone(),
                selection.clone(),
                ids.clone(),
            );
            async move {
                let positions = Positions::new(loaded.subscription.id, ids, after.clone());
                let cursor =
                    |t: TableId, p: Position, out: &mut Vec<u8>| positions.write_cursor(t, p, out);
                let mut sink = JsonSink::new(Framing::Sse, &options, &cursor, limit);
                let end = state
                    .feed
                    .read_subscription(&loaded.tables, &positions, limit, &selection, &mut sink)
                    .await;
                let end = match end {
                    Ok(end) => end,
                    Err(e) => return Err(loaded.read_failed(&state, &after, e).await),
                };
                loaded.ensure_retained(&state, &after).await?;
                record_delivered(&state, &loaded, &end.next).await?;
                Ok::<_, ApiError>(stream_page(sink, end.count, end.more, end.next))
            }
        },
    );
    Ok(sse_response(events))
}
