//! `?net=true` on `/v1/tables/{id}/changes`: the net changes of a range of the feed. The
//! first request for a range has leased tasks compute it (see `workers::net`); until
//! they are done, pages are empty with `more` and a cursor that holds the range (a long
//! poll waits for them). Every request for the same range reads the one result, page by
//! page, with cursors of its own; the last page's `next` is the feed cursor of the
//! range's end.
//! Must not reach: `catalog`
//! (ranges are computed from published change sets, never from table files).

use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::response::Response;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::pages::{Format, PageSink, PageTail, long_poll_wait, page_limit, selection};
use super::pages::{PageQuery, ensure_published, ensure_retained, start_position};
use crate::changelog::key_indexes;
use crate::changes::{Cursor, NetPosition, Position};
use crate::delivery::FeedError;
use crate::delivery::json_page::feed_cursor;
use crate::failure::{Failure, FailureCode};
use crate::store::{NetRange, NetState, SourceTable, TableId, signalled_within};
use crate::workers::net;

/// How long a request waiting for a range goes without hearing of one of its tasks
/// settling before it looks at the range anyway.
const SETTLED_BACKSTOP: Duration = Duration::from_millis(500);
/// Whether a page request asks for net changes: `net=true`, or a cursor into them.
pub fn is_net(query: &PageQuery) -> bool {
    query.net.unwrap_or(false)
        || query
            .after
            .as_deref()
            .is_some_and(NetPosition::is_net_cursor)
}

/// Answers a page request for net changes.
pub async fn net_page(
    state: &AppState,
    table: &SourceTable,
    query: &PageQuery,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let format = Format::negotiate(query.format, headers);
    let limit = page_limit(state, query.limit, format)?;
    let wait = long_poll_wait(state, query.wait)?;
    let selection = selection(state, table, query.ops.as_deref(), query.columns.as_deref()).await?;
    // Feed cursors (and `now`) start a range; a cursor into net changes continues one.
    let continued = query
        .after
        .as_deref()
        .filter(|c| NetPosition::is_net_cursor(c))
        .map(|c| Cursor::parse(c, table.id))
        .transpose()?;
    let (range, consumed) = match continued {
        Some(Cursor::Net(at)) => {
            if query.until.is_some() {
                return Err(ApiError::new(
                    ProblemCode::RangeInvalid,
                    "a cursor into net changes continues its range: omit `until`",
                ));
            }
            let range = state
                .store
                .net_range(table.id, at.range)
                .await?
                .ok_or_else(range_dropped)?;
            (range, at.consumed)
        }
        _ => match range_of_query(state, table, query).await? {
            Opened::Range(range) => (range, 0),
            Opened::Empty { until } => {
                let more = state.store.has_events_after(table.id, until).await?;
                let tail = PageTail {
                    next: until.to_cursor(table.id),
                    more,
                };
                let options = query.longs.unwrap_or_default().options();
                let page = PageSink::new(format, &options, &feed_cursor, 0);
                return page.respond(state, tail, table, &selection).await;
            }
        },
    };
    let options = query.longs.unwrap_or_default().options();
    let range_id = range.key.range;
    let at = |consumed| {
        NetPosition {
            range: range_id,
            consumed,
        }
        .to_cursor(table.id)
    };
    let Some(event_count) = wait_for(state, range.clone(), wait).await? else {
        // Still being computed: an empty page whose cursor holds the range.
        let page = PageSink::new(format, &options, &feed_cursor, 0);
        let tail = PageTail {
            next: at(consumed),
            more: true,
        };
        return page.respond(state, tail, table, &selection).await;
    };
    let cursor = move |t: TableId, p: Position, out: &mut Vec<u8>| {
        NetPosition {
            range: range_id,
            consumed: p.consumed,
        }
        .write_cursor(t, out)
    };
    let mut page = PageSink::new(format, &options, &cursor, limit);
    let end = state
        .feed
        .read_net(table, &range, consumed, limit, &selection, page.sink())
        .await
        .map_err(|e| match e {
            FeedError::Pruned(_) => range_dropped(),
            other => other.into(),
        })?;
    let tail = if end.consumed >= event_count {
        PageTail {
            next: range.until.to_cursor(table.id),
            more: state.store.has_events_after(table.id, range.until).await?,
        }
    } else {
        PageTail {
            next: at(end.consumed),
            more: true,
        }
    };
    page.respond(state, tail, table, &selection).await
}

/// A range to read, or the end of one without events.
pub(crate) enum Opened {
    Range(NetRange),
    Empty { until: Position },
}

/// The range `query` names by feed cursors.
async fn range_of_query(
    state: &AppState,
    table: &SourceTable,
    query: &PageQuery,
) -> Result<Opened, ApiError> {
    let after = start_position(state, table, query.after.as_deref()).await?;
    let until = match query.until.as_deref() {
        // After the head (`now`): nothing yet.
        None => state.store.feed_head(table.id).await?.max(after),
        Some(cursor) => match Cursor::parse(cursor, table.id)? {
            Cursor::Feed(until) => {
                ensure_published(state, table, until).await?;
                until
            }
            Cursor::Net(_) => {
                return Err(ApiError::new(
                    ProblemCode::RangeInvalid,
                    "`until` takes a feed cursor (an event's `position` or a page's `next`), \
                     not a cursor into net changes",
                ));
            }
        },
    };
    if until < after {
        return Err(ApiError::new(
            ProblemCode::RangeInvalid,
            "`until` lies before `after`: a range runs forward from `after` to `until`",
        ));
    }
    open_range(state, table, after, until).await
}

/// The range of `table` from `after` to `until`, created (and its computation started)
/// if no one asked for it before.
pub(crate) async fn open_range(
    state: &AppState,
    table: &SourceTable,
    after: Position,
    until: Position,
) -> Result<Opened, ApiError> {
    ensure_retained(state, table, after).await?;
    let schemas = state.store.schemas_between(table.id, after, until).await?;
    let schema_id = match schemas[..] {
        [] => return Ok(Opened::Empty { until }),
        [(_, schema_id)] => schema_id,
        [_, (ordinal, _), ..] => {
            let split = Position {
                ordinal,
                consumed: 0,
            }
            .to_cursor(table.id);
            return Err(ApiError::new(
                ProblemCode::NetRangeSpansSchemas,
                "the table's schema changed within the range, and net changes compare rows \
                 of one schema: ask for the range up to `split_at` (as `until`), then for \
                 the rest (with `split_at` as `after`)",
            )
            .with("split_at", split));
        }
    };
    let entry = state.feed.schema(table.id, schema_id).await?;
    let key = key_indexes(
        &entry.schema,
        table.identifier_field_ids.as_deref(),
        &table.identifier_columns,
    )
    .map_err(|reason| ApiError::from(FeedError::Schema(schema_id, reason)))?;
    let (range, created) = state
        .store
        .net_range_for(table.id, after, until, schema_id, &key)
        .await?;
    if created {
        net::advance(&state.store, &state.settings.scheduler, &range).await?;
    }
    Ok(Opened::Range(range))
}

/// Waits up to `wait` for `range` to be computed, moving it on meanwhile: its event
/// count, or `None` when it is still being computed. A range that failed is dropped
/// (the next request computes it afresh) and answered with its failure.
pub(crate) async fn wait_for(
    state: &AppState,
    mut range: NetRange,
    wait: Duration,
) -> Result<Option<i64>, ApiError> {
    let deadline = Instant::now() + wait;
    let mut settled = state.store.task_signals().settled();
    loop {
        match &range.state {
            NetState::Ready { event_count } => return Ok(Some(*event_count)),
            NetState::Failed(failure) => {
                state.store.drop_net_range(&range.key).await?;
                return Err(computation_failed(failure));
            }
            NetState::Computing => {}
        }
        net::advance(&state.store, &state.settings.scheduler, &range).await?;
        if Instant::now() >= deadline {
            return Ok(None);
        }
        signalled_within(
            &mut settled,
            SETTLED_BACKSTOP.min(deadline - Instant::now()),
        )
        .await;
        // Seen before looking: a task settling from now on wakes the next wait.
        settled.borrow_and_update();
        range = state
            .store
            .net_range(range.key.table, range.key.range)
            .await?
            .ok_or_else(range_dropped)?;
    }
}

/// The answer for a range whose computation failed: `422` with the reason when the data
/// is at fault (identifier columns not unique at one end), else `503` whose cause goes
/// to the log only, as for other 5xx answers.
fn computation_failed(failure: &Failure) -> ApiError {
    if failure.code == FailureCode::IdentifierColumnsInvalid {
        return ApiError::new(
            ProblemCode::NetChangesFailed,
            format!(
                "the net changes of the range cannot be computed: {}",
                failure.message
            ),
        )
        .with("failure_code", failure.code.as_str());
    }
    let id = uuid::Uuid::new_v4();
    tracing::warn!(error_id = %id, code = failure.code.as_str(), error = %failure.message,
        "computing net changes failed");
    ApiError::new(
        ProblemCode::NetChangesInterrupted,
        format!(
            "computing the net changes of the range failed for a passing reason ({}); asking \
             again computes them afresh; reference {id} in the log",
            failure.code.as_str()
        ),
    )
    .with("failure_code", failure.code.as_str())
    .with("error_id", id.to_string())
}

/// `410`: a range's result is no longer kept.
pub(crate) fn range_dropped() -> ApiError {
    ApiError::new(
        ProblemCode::NetRangeExpired,
        "the net changes of this range are no longer kept (unread for `retention.net_idle`, \
         or a change set they name was pruned): ask for the range again with its `after` \
         and `until`",
    )
}
