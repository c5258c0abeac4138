//! The next pages of a table feed, prepared while a consumer takes the one before them.
//!
//! A consumer catching up pages one request at a time: while it receives and parses a
//! page, the node would sit idle until the next request, then look up the segments,
//! copy the events into a body and only then answer. After answering a full page, the
//! node keeps the two pages after it prepared, keyed by everything that decides a
//! page's body; the requests for them are answered from memory. Two, not one: while
//! the consumer takes a prepared page, the next one is ready too, and the core that
//! prepared it prepares the one after.
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
/// Pages kept prepared after the page a consumer was just answered: the next one, and
/// the one after it, so that a core prepares while the consumer takes a prepared page.
const KEPT_AHEAD: usize = 2;

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
/// a while longer (until its housekeeping runs), and a page's body is megabytes.
struct Prepared {
    /// The memory its body keeps alive (`PageBody::held`).
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
        self.take_prepared(key).await
    }

    /// The page at `key` if one was prepared (or is being prepared: then once it is).
    async fn take_prepared(&self, key: &PageKey) -> Option<FeedPage> {
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

    /// Keeps [`KEPT_AHEAD`] pages prepared after the page at `key`, which ended at
    /// `next` and has more after it, reading each with `read` (see [`Self::prepare`]).
    pub async fn prepare_after<R, Fut>(&self, key: &PageKey, next: Position, read: R)
    where
        R: Fn(PageKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<FeedPage>> + Send + 'static,
    {
        let key = key.after(next);
        // Prepared already (the consumer took the one before it from memory): from the
        // one after it.
        match self.prepared_end(&key).await {
            Some(end) => self.prepare_pages(key.after(end), KEPT_AHEAD - 1, Arc::new(read)),
            None => self.prepare_pages(key, KEPT_AHEAD, Arc::new(read)),
        }
    }

    /// Prepares the page at `key` and, once it is read, the `pages - 1` after it.
    fn prepare_pages<R, Fut>(&self, key: PageKey, pages: usize, read: Arc<R>)
    where
        R: Fn(PageKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<FeedPage>> + Send + 'static,
    {
        let page = {
            let (ahead, key) = (self.clone(), key.clone());
            async move {
                let page = read(key.clone()).await?;
                if pages > 1 && page.page.more {
                    ahead.prepare_pages(key.after(page.next), pages - 1, read);
                }
                Some(page)
            }
        };
        self.prepare(key, page);
    }

    /// Where the page at `key` ends, if it is prepared and not taken yet.
    async fn prepared_end(&self, key: &PageKey) -> Option<Position> {
        let prepared = self.pages.get(key).await??;
        let page = prepared.page.lock().expect("prepared page");
        page.as_ref().map(|p| p.next)
    }

    /// Prepares the page at `key` in the background with `read` unless it is prepared
    /// already or the node is busy preparing others. `read` answers the page; pages
    /// without more events after them are not kept.
    fn prepare<F>(&self, key: PageKey, read: F)
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
                            bytes: page.page.body.held().try_into().unwrap_or(u32::MAX),
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

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: i64 = 100;

    fn at(consumed: i64) -> Position {
        Position {
            ordinal: 1,
            consumed,
        }
    }

    fn key(after: i64) -> PageKey {
        PageKey {
            table: TableId(uuid::Uuid::nil()),
            registered: DateTime::UNIX_EPOCH,
            after: at(after),
            limit: 10,
            format: Format::Ndjson,
            options: JsonOptions::default(),
            selection: Selection::default(),
        }
    }

    /// A reader of pages of 10 of a feed of [`EVENTS`] events that notes what it reads.
    fn reader(
        reads: Arc<Mutex<Vec<i64>>>,
    ) -> impl Fn(PageKey) -> std::future::Ready<Option<FeedPage>> + Send + Sync + 'static {
        move |key: PageKey| {
            let after = key.after.consumed;
            reads.lock().unwrap().push(after);
            let next = (after + 10).min(EVENTS);
            std::future::ready(Some(FeedPage {
                page: ReadyPage {
                    content_type: "application/x-ndjson",
                    body: after.to_string().into_bytes().into(),
                    count: (next - after) as usize,
                    next: String::new(),
                    more: next < EVENTS,
                },
                next: at(next),
            }))
        }
    }

    /// Waits up to 5 s for `done`; panics with `what` otherwise.
    async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
        let wait = async {
            while !done().await {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .unwrap_or_else(|_| panic!("{what}"));
    }

    async fn prepared(ahead: &PagesAhead, after: i64) {
        let what = format!("the page after {after} was not prepared");
        eventually(&what, async || {
            ahead.prepared_end(&key(after)).await.is_some()
        })
        .await;
    }

    #[tokio::test]
    async fn the_two_pages_after_the_one_answered_are_kept_prepared() {
        let ahead = PagesAhead::default();
        let reads = Arc::new(Mutex::new(Vec::new()));
        // Events 0..10 answered: 10..20 and 20..30 are prepared, one after the other.
        ahead
            .prepare_after(&key(0), at(10), reader(reads.clone()))
            .await;
        prepared(&ahead, 10).await;
        prepared(&ahead, 20).await;
        assert_eq!(ahead.prepared_end(&key(10)).await, Some(at(20)));
        assert_eq!(ahead.prepared_end(&key(20)).await, Some(at(30)));
        assert_eq!(*reads.lock().unwrap(), [10, 20]);

        // 10..20 answered from memory: 30..40 is prepared; nothing is read twice.
        let page = ahead.take_prepared(&key(10)).await.unwrap();
        assert_eq!(page.page.body.to_vec(), b"10");
        assert_eq!(ahead.take_prepared(&key(10)).await.map(|p| p.next), None);
        ahead
            .prepare_after(&key(10), page.next, reader(reads.clone()))
            .await;
        prepared(&ahead, 30).await;
        assert_eq!(*reads.lock().unwrap(), [10, 20, 30]);
        assert_eq!(ahead.prepared_end(&key(40)).await, None);
    }

    #[tokio::test]
    async fn the_last_page_is_not_kept() {
        let ahead = PagesAhead::default();
        let reads = Arc::new(Mutex::new(Vec::new()));
        ahead
            .prepare_after(&key(70), at(80), reader(reads.clone()))
            .await;
        prepared(&ahead, 80).await;
        // 90..100 was prepared after 80..90, and not kept: nothing follows it.
        eventually("the last page was not prepared", async || {
            reads.lock().unwrap().len() >= 2 && !ahead.preparing.lock().unwrap().contains(&key(90))
        })
        .await;
        assert_eq!(*reads.lock().unwrap(), [80, 90]);
        assert_eq!(ahead.prepared_end(&key(90)).await, None);
    }
}
