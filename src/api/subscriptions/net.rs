//! `?net=true` on `/v1/subscriptions/{id}/events`: the net changes of each of the
//! subscription's tables from its position to the table's head, table after table (the
//! same ranges, shared, as `/v1/tables/{id}/changes?net=true` computes). Cursors inside a
//! range are the subscription's net cursors; acknowledging one commits the ends of the
//! ranges read through, so acknowledging the last page's `next` commits every range's end.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::response::Response;

use super::{Loaded, SubscriptionPageQuery, record_delivered};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::net::{Opened, open_range, range_dropped, wait_for};
use crate::api::pages::{Format, PageSink, PageTail, long_poll_wait, page_limit};
use crate::changes::Position;
use crate::changes::subscription_cursor::{self, NetAt};
use crate::delivery::FeedError;
use crate::store::TableId;

/// The range of a net cursor whose table's range is yet to be opened (ids start at 1).
const NOT_OPENED: i64 = 0;

/// Whether a subscription page asks for net changes: `net=true`, or a cursor into them.
pub fn is_net(query: &SubscriptionPageQuery) -> bool {
    query.net.unwrap_or(false)
        || query
            .after
            .as_deref()
            .is_some_and(subscription_cursor::is_net)
}

/// Answers a subscription page request for net changes.
pub async fn net_events(
    state: &AppState,
    loaded: &Loaded,
    query: &SubscriptionPageQuery,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let format = Format::negotiate(query.format, headers);
    let limit = page_limit(state, query.limit, format)?;
    let deadline = Instant::now() + long_poll_wait(state, query.wait)?;
    let selection = loaded.selection()?;
    let options = query.longs.unwrap_or_default().options();
    let id = loaded.subscription.id;
    let (mut positions, mut at) = match query.after.as_deref() {
        None | Some("") => (loaded.committed(), None),
        Some(cursor) => {
            let (positions, at) = subscription_cursor::decode_net(cursor, id, loaded.slots.len())?;
            for (table, p) in loaded.tables.iter().zip(&positions) {
                crate::api::pages::ensure_published(state, table, *p).await?;
            }
            (positions, at)
        }
    };
    loaded.ensure_retained(state, &positions).await?;
    // Each event's cursor: the positions so far and where in the range being read.
    let reading = Mutex::new((
        positions.clone(),
        at.unwrap_or(NetAt {
            slot: 0,
            range: NOT_OPENED,
            consumed: 0,
        }),
    ));
    let cursor = |_: TableId, p: Position, out: &mut Vec<u8>| {
        let (positions, at) = &*reading.lock().expect("net cursor state");
        let cursor = subscription_cursor::encode_net(
            id,
            positions,
            NetAt {
                consumed: p.consumed,
                ..*at
            },
        );
        out.extend_from_slice(cursor.as_bytes());
    };
    let mut page = PageSink::new(format, &options, &cursor, limit);
    let mut count = 0;
    let mut inside: Option<NetAt> = None;
    let mut slot = at.map_or(0, |a| a.slot);
    while slot < loaded.tables.len() && inside.is_none() {
        if count == limit {
            // Full: the next page opens this table's range.
            inside = Some(NetAt {
                slot,
                range: NOT_OPENED,
                consumed: 0,
            });
            break;
        }
        let table = &loaded.tables[slot];
        let (range, consumed) = match at.take().filter(|a| a.range != NOT_OPENED) {
            Some(a) => {
                let range = state.store.net_range(table.id, a.range).await?;
                (range.ok_or_else(range_dropped)?, a.consumed)
            }
            None => {
                let head = state.store.feed_head(table.id).await?;
                if head <= positions[slot] {
                    slot += 1;
                    continue;
                }
                match open_range(state, table, positions[slot], head).await? {
                    Opened::Empty { until } => {
                        positions[slot] = until;
                        slot += 1;
                        continue;
                    }
                    Opened::Range(range) => (range, 0),
                }
            }
        };
        let here = NetAt {
            slot,
            range: range.key.range,
            consumed,
        };
        // Once the page has events, it does not wait for the next table's range.
        let wait = match count {
            0 => deadline.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        };
        let Some(event_count) = wait_for(state, range.clone(), wait).await? else {
            // Still being computed: the page ends, its cursor holding the range.
            inside = Some(here);
            break;
        };
        *reading.lock().expect("net cursor state") = (positions.clone(), here);
        let end = state
            .feed
            .read_net(
                table,
                &range,
                consumed,
                limit - count,
                &selection,
                page.sink(),
            )
            .await
            .map_err(|e| match e {
                FeedError::Pruned(_) => range_dropped(),
                other => other.into(),
            })?;
        count += end.count;
        if end.consumed >= event_count {
            positions[slot] = range.until;
            slot += 1;
        } else {
            inside = Some(NetAt {
                consumed: end.consumed,
                ..here
            });
        }
    }
    // A cursor of this page commits at most the ends of the ranges it read through.
    record_delivered(state, loaded, &positions).await?;
    let tail = match inside {
        Some(at) => PageTail {
            next: subscription_cursor::encode_net(id, &positions, at),
            more: true,
        },
        None => {
            let mut more = false;
            for (table, p) in loaded.tables.iter().zip(&positions) {
                more |= state.store.has_events_after(table.id, *p).await?;
            }
            PageTail {
                next: loaded.encode(&positions),
                more,
            }
        }
    };
    page.respond(state, tail, &loaded.tables[0], &selection)
        .await
}
