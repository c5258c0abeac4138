//! Wakes waiters when a change set is published on any node: one PostgreSQL `LISTEN`
//! connection per node fans notifications out to in-process waiters, per table.
//!
//! A waiter is a `watch` receiver of a per-table generation counter, so thousands of
//! waiters cost one map entry per table and no database connection each. Subscribing
//! marks the current generation as seen: a caller that subscribes, then reads the feed,
//! then waits, is woken by any publish after its subscription — none slips between the
//! read and the wait.
//!
//! The same connection hears subscriptions being announced (created, resumed, rewound,
//! given up by a stopping node), which wakes the push claim loops, and tasks being
//! created and settled, which it passes on to the store's task signals.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store::{
    CHANGES_CHANNEL, SUBSCRIPTIONS_CHANNEL, Store, TASKS_CHANNEL, TableId, TaskEvent, TaskSignals,
};

/// First and longest pause before reconnecting the listener.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Fans publish notifications out to waiters; cheap to clone.
#[derive(Clone)]
pub struct ChangeNotifier {
    inner: Arc<Inner>,
}

struct Inner {
    tables: Mutex<HashMap<TableId, watch::Sender<u64>>>,
    /// Counts subscription announcements.
    subscriptions: watch::Sender<u64>,
    stop: CancellationToken,
}

/// The node is stopping: waiters return this instead of waiting on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the node is stopping")]
pub struct Stopped;

impl ChangeNotifier {
    /// A notifier whose waiters give up once `stop` is cancelled; [`run`](Self::run) feeds it.
    pub fn new(stop: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                tables: Mutex::default(),
                subscriptions: watch::channel(0).0,
                stop,
            }),
        }
    }

    /// Starts waiting for publishes of `table`. Subscribe before reading the feed.
    pub fn subscribe(&self, table: TableId) -> ChangeWaiter {
        self.subscribe_all([table])
    }

    /// Starts waiting for publishes of any of `tables`. Subscribe before reading the feed.
    pub fn subscribe_all(&self, tables: impl IntoIterator<Item = TableId>) -> ChangeWaiter {
        let mut map = self.inner.tables.lock().expect("notifier map");
        let receivers = tables
            .into_iter()
            .map(|table| {
                let sender = map.entry(table).or_insert_with(|| watch::channel(0).0);
                (table, sender.subscribe())
            })
            .collect();
        ChangeWaiter {
            receivers,
            inner: self.inner.clone(),
        }
    }

    /// Wakes the waiters of `table`.
    pub fn notify(&self, table: TableId) {
        let map = self.inner.tables.lock().expect("notifier map");
        if let Some(sender) = map.get(&table) {
            sender.send_modify(|generation| *generation += 1);
        }
    }

    /// Wakes every waiter (after a reconnect, when notifications may have been missed).
    pub fn notify_all(&self) {
        let map = self.inner.tables.lock().expect("notifier map");
        for sender in map.values() {
            sender.send_modify(|generation| *generation += 1);
        }
        self.announce();
    }

    /// A receiver that changes whenever a subscription is announced on any node; what it
    /// has seen starts at now.
    pub fn announcements(&self) -> watch::Receiver<u64> {
        self.inner.subscriptions.subscribe()
    }

    /// Wakes the receivers of [`announcements`](Self::announcements).
    fn announce(&self) {
        self.inner
            .subscriptions
            .send_modify(|generation| *generation += 1);
    }

    /// Calls `fetch` until `is_empty` says it found something or `wait` has passed, waking
    /// on publishes of `tables`; returns the last result. With no wait, fetches once.
    pub async fn long_poll<T, E, Fut>(
        &self,
        tables: impl IntoIterator<Item = TableId>,
        wait: Duration,
        mut fetch: impl FnMut() -> Fut,
        is_empty: impl Fn(&T) -> bool,
    ) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        if wait.is_zero() {
            return fetch().await;
        }
        let mut waiter = self.subscribe_all(tables);
        let deadline = Instant::now() + wait;
        loop {
            let found = fetch().await?;
            if !is_empty(&found) {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, waiter.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(Stopped)) | Err(_) => return Ok(found),
            }
        }
    }

    /// Listens on [`CHANGES_CHANNEL`], [`SUBSCRIPTIONS_CHANNEL`] and [`TASKS_CHANNEL`] with
    /// one connection of `store`'s pool until the node stops, reconnecting with backoff
    /// whenever the connection is lost.
    pub async fn run(self, store: Store) {
        let (pool, tasks) = (store.pool(), store.task_signals());
        let stop = self.inner.stop.clone();
        let mut backoff = BACKOFF.0;
        loop {
            let connected = tokio::select! {
                _ = stop.cancelled() => return,
                connected = listen(pool) => connected,
            };
            match connected {
                Ok(listener) => {
                    backoff = BACKOFF.0;
                    // Publishes while nobody listened were missed: every waiter re-reads.
                    self.notify_all();
                    tasks.signal_all();
                    tracing::debug!("listening for published change sets");
                    let lost = tokio::select! {
                        _ = stop.cancelled() => return,
                        lost = self.forward(listener, tasks) => lost,
                    };
                    tracing::warn!(error = %lost, "lost the notification connection; reconnecting");
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for notifications");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(BACKOFF.1);
                }
            }
        }
    }

    /// Wakes waiters for each notification until the connection fails; returns why.
    async fn forward(&self, mut listener: PgListener, tasks: &TaskSignals) -> String {
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) if notification.channel() == SUBSCRIPTIONS_CHANNEL => {
                    self.announce()
                }
                Ok(Some(notification)) if notification.channel() == TASKS_CHANNEL => {
                    match TaskEvent::parse(notification.payload()) {
                        Some(event) => tasks.signal(event),
                        None => tracing::warn!(
                            payload = notification.payload(),
                            "unexpected task notification"
                        ),
                    }
                }
                Ok(Some(notification)) => match Uuid::parse_str(notification.payload()) {
                    Ok(table) => self.notify(TableId(table)),
                    Err(_) => {
                        tracing::warn!(payload = notification.payload(), "unexpected notification")
                    }
                },
                // The listener could reconnect by itself, but then we could not tell
                // when to wake everyone; `run` builds a fresh one instead.
                Ok(None) => return "connection closed".into(),
                Err(e) => return e.to_string(),
            }
        }
    }
}

async fn listen(pool: &sqlx::PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // `run` builds a fresh listener after a loss; this one must not reconnect first.
    listener.eager_reconnect(false);
    listener
        .listen_all([CHANGES_CHANNEL, SUBSCRIPTIONS_CHANNEL, TASKS_CHANNEL])
        .await?;
    Ok(listener)
}

/// Waits for publishes of some tables; dropping it unsubscribes.
pub struct ChangeWaiter {
    receivers: Vec<(TableId, watch::Receiver<u64>)>,
    inner: Arc<Inner>,
}

impl ChangeWaiter {
    /// Returns once a change set of a subscribed table was published after the
    /// subscription or the previous return; `Err(Stopped)` when the node stops.
    pub async fn changed(&mut self) -> Result<(), Stopped> {
        let any = futures::future::select_all(
            self.receivers
                .iter_mut()
                .map(|(_, receiver)| Box::pin(receiver.changed())),
        );
        tokio::select! {
            _ = self.inner.stop.cancelled() => Err(Stopped),
            (changed, _, _) = any => changed.map_err(|_| Stopped),
        }
    }

    /// Whether the node is stopping.
    pub fn is_stopped(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}

impl Drop for ChangeWaiter {
    fn drop(&mut self) {
        let mut map = self.inner.tables.lock().expect("notifier map");
        for (table, receiver) in self.receivers.drain(..) {
            drop(receiver);
            if map.get(&table).is_some_and(|s| s.receiver_count() == 0) {
                map.remove(&table);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn woken(waiter: &mut ChangeWaiter) -> bool {
        tokio::time::timeout(Duration::from_millis(50), waiter.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_publish_after_subscribing_is_never_missed() {
        let notifier = ChangeNotifier::new(CancellationToken::new());
        let (a, b) = (TableId::new(), TableId::new());
        let mut waiter = notifier.subscribe(a);
        // Published between the subscriber's read and its wait: still seen.
        notifier.notify(a);
        assert!(woken(&mut waiter).await);
        assert!(!woken(&mut waiter).await, "each publish wakes once");
        notifier.notify(b);
        assert!(!woken(&mut waiter).await, "other tables do not wake it");
        notifier.notify_all();
        assert!(woken(&mut waiter).await);

        let mut both = notifier.subscribe_all([a, b]);
        notifier.notify(b);
        assert!(woken(&mut both).await);
    }

    #[tokio::test]
    async fn publishes_do_not_announce_subscriptions_but_a_reconnect_does() {
        let notifier = ChangeNotifier::new(CancellationToken::new());
        let mut announcements = notifier.announcements();
        notifier.notify(TableId::new());
        assert!(!announcements.has_changed().unwrap());
        notifier.announce();
        assert!(announcements.has_changed().unwrap());
        announcements.borrow_and_update();
        // After a reconnect, announcements may have been missed too.
        notifier.notify_all();
        assert!(announcements.has_changed().unwrap());
    }

    #[tokio::test]
    async fn waiters_unsubscribe_on_drop_and_stop_with_the_node() {
        let stop = CancellationToken::new();
        let notifier = ChangeNotifier::new(stop.clone());
        let table = TableId::new();
        let first = notifier.subscribe(table);
        let mut second = notifier.subscribe(table);
        drop(first);
        assert_eq!(notifier.inner.tables.lock().unwrap().len(), 1);
        stop.cancel();
        assert_eq!(second.changed().await, Err(Stopped));
        assert!(second.is_stopped());
        drop(second);
        assert!(notifier.inner.tables.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn long_poll_returns_early_on_publish_and_the_last_result_on_timeout() {
        let notifier = ChangeNotifier::new(CancellationToken::new());
        let table = TableId::new();
        let calls = Arc::new(Mutex::new(0));
        let fetch = || {
            let calls = calls.clone();
            async move {
                let mut calls = calls.lock().unwrap();
                *calls += 1;
                Ok::<_, ()>(*calls)
            }
        };
        let started = Instant::now();
        let waker = notifier.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waker.notify(table);
        });
        let found = notifier
            .long_poll([table], Duration::from_secs(10), fetch, |n| *n < 2)
            .await;
        assert_eq!(found, Ok(2));
        assert!(started.elapsed() < Duration::from_secs(5));

        let started = Instant::now();
        let found = notifier
            .long_poll([table], Duration::from_millis(200), fetch, |_| true)
            .await;
        assert_eq!(found, Ok(3), "one read, then the deadline");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
