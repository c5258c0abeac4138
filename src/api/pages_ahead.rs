//! The next page of a table feed, prepared while a consumer takes the one before it.
//!
//! A consumer catching up pages one request at a time: while it receives and parses a
//! page, the node would sit idle until the next request, then look up the segments,
//! copy the events into a body and only then answer. After answering a full page, the
//! node prepares the page after it on the other core, keyed by everything that decides
//! a page's body; the request for it is answered from memory.
//!
//! A prepared page stays exact: it holds published events only (change sets never
//! change), and only pages with more events after them are kept, whose `more` cannot
//! turn false. Retention prunes only a prefix of a feed, so a page is answered from
//! memory only while the table's floor, as the request loaded it, keeps its start.
//! Each page is answered once; a table registered anew under the same id has its own
//! keys.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use moka::future::Cache;
use tokio::sync::Semaphore;

use super::pages::{Format, ReadyPage};
use crate::changes::Position;
use crate::changes::json::JsonOptions;
use crate::delivery::Selection;
use crate::store::{SourceTable, TableId};
use crate::telemetry::metric::PAGES_AHEAD;

/// Bytes of prepared pages a node keeps at most.
const CACHE_BYTES: u64 = 32 << 20;
/// How long a prepared page waits for its consumer.
const KEPT_FOR: Duration = Duration::from_secs(30);
/// Pages being prepared at once, at most: preparing is work no one asked for yet.
const PREPARING: usize = 2;

/// Everything that decides a page's body.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct PageKey {
    pub table: TableId,
    /// The table's registration (a table registered anew under the same id starts over).
    pub registered: DateTime<Utc>,
    pub after: Position,
    pub limit: usize,
    pub format: Format,
    pub options: JsonOptions,
    pub selection: Selection,
}

impl PageKey {
    /// The key of the page after this one, which ended at `next`.
    pub fn after(&self, next: Position) -> Self {
        Self {
            after: next,
            ..self.clone()
        }
    }
}

/// A table page ready to send, and the position it ends at.
#[derive(Debug)]
pub struct FeedPage {
    pub page: ReadyPage,
    pub next: Position,
}

/// A prepared page, until its consumer takes it out: the cache may hold a removed entry
/// a while longer, and a page's body is megabytes (its buffer goes to the next body once
/// sent, see [`crate::delivery::bodies`]).
struct Prepared {
    bytes: u32,
    page: Mutex<Option<FeedPage>>,
}

/// The pages a node prepared ahead of their consumers; cheap to clone.
#[derive(Clone)]
pub struct PagesAhead {
    /// `None` while a preparation found nothing worth keeping, until it is dropped.
    pages: Cache<PageKey, Option<Arc<Prepared>>>,
    /// Pages being prepared: their consumer waits for them instead of reading again.
    preparing: Arc<Mutex<HashSet<PageKey>>>,
    permits: Arc<Semaphore>,
}

impl Default for PagesAhead {
    fn default() -> Self {
        Self {
            pages: Cache::builder()
                .max_capacity(CACHE_BYTES)
                .weigher(|_, prepared: &Option<Arc<Prepared>>| {
                    prepared.as_ref().map_or(0, |p| p.bytes)
                })
                .time_to_live(KEPT_FOR)
                .build(),
            preparing: Arc::default(),
            permits: Arc::new(Semaphore::new(PREPARING)),
        }
    }
}

impl PagesAhead {
    /// The page at `key`, if one was prepared (or is being prepared: then once it is)
    /// and `table`, as just loaded, still keeps its start. Each page is taken once.
    pub async fn take(&self, key: &PageKey, table: &SourceTable) -> Option<FeedPage> {
        if table.floor().is_gone(key.after) {
            // Pruned since: the page's own read answers that, as it would have.
            self.pages.invalidate(key).await;
            return None;
        }
        let pending = self
            .preparing
            .lock()
            .expect("pages preparing")
            .contains(key);
        if !pending && !self.pages.contains_key(key) {
            return None;
        }
        // Waits for a preparation in flight; otherwise finds the page or nothing.
        let prepared = self.pages.get_with(key.clone(), async { None }).await;
        self.pages.invalidate(key).await;
        let page = prepared.and_then(|p| p.page.lock().expect("prepared page").take());
        if page.is_some() {
            metrics::counter!(PAGES_AHEAD.name, "outcome" => "answered").increment(1);
        }
        page
    }

    /// Prepares the page at `key` in the background with `read` unless it is prepared
    /// already or the node is busy preparing others. `read` answers the page; pages
    /// without more events after them are not kept.
    pub fn prepare<F>(&self, key: PageKey, read: F)
    where
        F: Future<Output = Option<FeedPage>> + Send + 'static,
    {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return;
        };
        if self.pages.contains_key(&key)
            || !self
                .preparing
                .lock()
                .expect("pages preparing")
                .insert(key.clone())
        {
            return;
        }
        let ahead = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let page = ahead
                .pages
                .get_with(key.clone(), async {
                    let page = read.await.filter(|p| p.page.more).map(|page| {
                        Arc::new(Prepared {
                            bytes: page.page.body.len().try_into().unwrap_or(u32::MAX),
                            page: Mutex::new(Some(page)),
                        })
                    });
                    if page.is_some() {
                        metrics::counter!(PAGES_AHEAD.name, "outcome" => "prepared").increment(1);
                    }
                    page
                })
                .await;
            if page.is_none() {
                ahead.pages.invalidate(&key).await;
            }
            ahead
                .preparing
                .lock()
                .expect("pages preparing")
                .remove(&key);
        });
    }
}
