//! Pages of a subscription: the events of its tables after one position per table,
//! interleaved by publication so that no table waits behind a busy one.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::sync::Mutex;

use uuid::Uuid;

use super::error::FeedError;
use super::events::EventSink;
use super::pull::{Feed, PageRequest};
use super::selection::Selection;
use crate::changes::{Position, subscription_cursor};
use crate::store::{SourceTable, TableId};

/// Where a subscription page stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionPageEnd {
    /// Events handed to the sink.
    pub count: usize,
    /// The position per table slot after the page.
    pub next: Vec<Position>,
    /// Whether more events are published after `next` right now.
    pub more: bool,
}

/// The current position per slot while a page is read, shared with the cursor function
/// that turns an event's table position into a subscription cursor.
pub struct Positions {
    subscription: Uuid,
    tables: Vec<TableId>,
    current: Mutex<Vec<Position>>,
}

impl Positions {
    /// Positions of subscription `subscription` over `tables` (slot order).
    pub fn new(subscription: Uuid, tables: Vec<TableId>, start: Vec<Position>) -> Self {
        Self {
            subscription,
            tables,
            current: Mutex::new(start),
        }
    }

    /// Appends the subscription cursor of `table` standing at `p` and every other table
    /// where the page currently is.
    pub fn write_cursor(&self, table: TableId, p: Position, out: &mut Vec<u8>) {
        let mut positions = self.current.lock().expect("positions").clone();
        if let Some(slot) = self.tables.iter().position(|t| *t == table) {
            positions[slot] = p;
        }
        let cursor = subscription_cursor::encode(self.subscription, &positions);
        out.extend_from_slice(cursor.as_bytes());
    }

    /// The positions now.
    pub fn snapshot(&self) -> Vec<Position> {
        self.current.lock().expect("positions").clone()
    }

    /// Starts over at `start` (a long poll reads again).
    pub fn reset(&self, start: Vec<Position>) {
        *self.current.lock().expect("positions") = start;
    }

    fn set(&self, slot: usize, p: Position) {
        self.current.lock().expect("positions")[slot] = p;
    }
}

impl Feed {
    /// Reads up to `limit` events of `tables` (slot order, matching `positions`) into
    /// `sink`, taking tables in the order their next events were published.
    pub async fn read_subscription(
        &self,
        tables: &[SourceTable],
        positions: &Positions,
        limit: usize,
        selection: &Selection,
        sink: &mut dyn EventSink,
    ) -> Result<SubscriptionPageEnd, FeedError> {
        let start = positions.snapshot();
        let ids: Vec<TableId> = tables.iter().map(|t| t.id).collect();
        let order = self.store().slots_by_next_publication(&ids, &start).await?;
        let mut end = SubscriptionPageEnd {
            count: 0,
            next: start.clone(),
            more: false,
        };
        for slot in order {
            let remaining = limit - end.count;
            if remaining == 0 {
                end.more = true;
                break;
            }
            let request = PageRequest {
                after: end.next[slot],
                limit: remaining,
                selection,
            };
            let page = self.read(&tables[slot], &request, sink).await?;
            end.count += page.count;
            end.next[slot] = page.next;
            positions.set(slot, page.next);
            if page.more {
                end.more = true;
                if page.count < remaining {
                    // The sink ended the page (a schema it cannot mix, or the scan budget).
                    break;
                }
            }
        }
        Ok(end)
    }
}
