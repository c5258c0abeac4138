//! The push worker: every node claims push subscriptions no node is pushing, one lease
//! (`subscription:<id>`) each, and pushes their events into OpenSearch until the
//! subscription stops wanting a worker or the lease is lost.
//! Must not reach: `catalog`, `api`.

mod batch;
pub mod gauges;
mod redrive;

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Heartbeat;
use crate::config::PushSettings;
use crate::delivery::opensearch::{OpenSearchClient, PushTarget, RetryPolicy, SendError};
use crate::delivery::{ChangeNotifier, Feed};
use crate::network::HostPolicy;
use crate::store::{Lease, Store, StoreError, SubscriptionState};
pub use batch::{Batch, BatchError, BatchReader, Sent, Step};

/// Least time between two lag reports of a subscription while it is pushing.
const LAG_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Sets the lag gauges of a subscription; a failure only costs a stale figure.
async fn report_lag(pusher: &Pusher) {
    match pusher.lag().await {
        Ok(lag) => gauges::set_lag(pusher.reader.id, &pusher.name, &lag),
        Err(e) => {
            tracing::debug!(subscription = %pusher.name, error = %e, "reading the lag failed")
        }
    }
}

/// The subscriptions this node reports in its gauges.
#[derive(Default)]
struct Reported {
    /// Pushed by this node now.
    running: HashSet<Uuid>,
    /// Seen paused or failed by this node, by name: reported until resumed or deleted.
    parked: HashMap<Uuid, String>,
}

/// Why a pusher stopped.
enum Ended {
    /// The subscription is paused or failed; its gauges say so until it is resumed.
    Parked,
    /// Lease lost, node stopping, subscription deleted: another node (or none) reports it.
    GivenUp,
}

/// Why a claimed subscription cannot be pushed.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    /// The database failed, or the subscription is gone: not the subscription's fault.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its stored target cannot be used (a host no longer allowed): the subscription
    /// fails until an operator changes it or the settings.
    #[error("{0}")]
    Target(String),
}

/// Claims push subscriptions on a timer and runs one [`Pusher`] per claimed subscription.
#[derive(Clone)]
pub struct PushWorker {
    pub feed: Feed,
    pub notifier: ChangeNotifier,
    pub settings: PushSettings,
    pub lease_ttl: Duration,
    pub node: String,
    /// The hosts targets may be on (`network.allowed_hosts`).
    pub hosts: HostPolicy,
}

/// One push subscription, leased by this node.
pub struct Pusher {
    /// The subscription, its tables and its target: shared with the task reading ahead.
    pub reader: Arc<BatchReader>,
    pub name: String,
    pub lease: Lease,
    pub client: OpenSearchClient,
    pub policy: RetryPolicy,
    /// The next batch, read while the one before it was in flight.
    pub ahead: Option<Batch>,
    /// The batch sent last, committed while the next one is in flight.
    pub sent: Option<Sent>,
}

impl PushWorker {
    fn store(&self) -> &Store {
        self.feed.store()
    }

    /// Claims and pushes until `stop` is cancelled; leases are released on the way out.
    /// Claims every `claim_interval` (for leases of dead nodes running out) and whenever a
    /// subscription is announced (created, resumed, rewound, given up by a stopping node).
    pub async fn run(self, stop: CancellationToken) {
        let reported: Arc<Mutex<Reported>> = Arc::default();
        let mut announced = self.notifier.announcements();
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            match self.claim(&reported).await {
                Ok(claimed) => {
                    for pusher in claimed {
                        let worker = self.clone();
                        let reported = reported.clone();
                        let stop = stop.clone();
                        tasks.spawn(async move {
                            let (id, name) = (pusher.reader.id, pusher.name.clone());
                            let ended = worker.push(pusher, stop).await;
                            let mut reported = reported.lock().expect("reported set");
                            reported.running.remove(&id);
                            match ended {
                                Ended::Parked => {
                                    reported.parked.insert(id, name);
                                }
                                Ended::GivenUp => gauges::clear(id, &name),
                            }
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "looking for push subscriptions failed"),
            }
            if let Err(e) = self.unpark(&reported).await {
                tracing::warn!(error = %e, "checking parked push subscriptions failed");
            }
            while tasks.try_join_next().is_some() {}
            let jitter = rand::rng().random_range(0.8..1.2);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.settings.claim_interval.mul_f64(jitter)) => {}
                Ok(()) = announced.changed() => {}
            }
        }
        tasks.join_all().await;
    }

    /// Takes the leases of unclaimed push subscriptions.
    async fn claim(&self, reported: &Mutex<Reported>) -> Result<Vec<Pusher>, StoreError> {
        let mut claimed = Vec::new();
        for id in self.store().unclaimed_push_subscriptions().await? {
            if reported.lock().expect("reported set").running.contains(&id) {
                continue;
            }
            let name = format!("subscription:{id}");
            let Some(lease) = self
                .store()
                .try_acquire_lease(&name, &self.node, self.lease_ttl)
                .await?
            else {
                continue;
            };
            match self.prepare(id, lease.clone()).await {
                Ok(pusher) => {
                    let mut reported = reported.lock().expect("reported set");
                    reported.running.insert(id);
                    reported.parked.remove(&id);
                    tracing::info!(subscription = %pusher.name, epoch = lease.epoch, "pushing subscription");
                    claimed.push(pusher);
                }
                Err(PrepareError::Target(reason)) => {
                    tracing::warn!(subscription = %id, %reason, "cannot push subscription");
                    self.store().push_failed(&lease, id, &reason).await?;
                    self.store().release_lease(&lease).await?;
                }
                // Deleted meanwhile, or the database failed: nothing to record; this or
                // another node claims it again later if it is still there.
                Err(PrepareError::Store(e)) => {
                    if !matches!(e, StoreError::NotFound) {
                        tracing::warn!(subscription = %id, error = %e, "loading a push subscription failed; retrying at the next claim");
                    }
                    if let Err(e) = self.store().release_lease(&lease).await {
                        tracing::debug!(subscription = %id, error = %e, "releasing the lease failed; it expires");
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// Clears the gauges of parked subscriptions that were resumed or deleted since: the
    /// node that pushes them now reports them.
    async fn unpark(&self, reported: &Mutex<Reported>) -> Result<(), StoreError> {
        let parked: Vec<(Uuid, String)> = {
            let reported = reported.lock().expect("reported set");
            reported
                .parked
                .iter()
                .map(|(id, n)| (*id, n.clone()))
                .collect()
        };
        for (id, name) in parked {
            let still = match self.store().find_subscription(&id.to_string()).await {
                Ok(s) => matches!(
                    s.state,
                    SubscriptionState::Paused | SubscriptionState::Failed
                ),
                Err(StoreError::NotFound) => false,
                Err(e) => return Err(e),
            };
            let mut reported = reported.lock().expect("reported set");
            if !still && reported.parked.remove(&id).is_some() {
                gauges::clear(id, &name);
            }
        }
        Ok(())
    }

    /// Loads what pushing a subscription needs.
    async fn prepare(&self, id: Uuid, lease: Lease) -> Result<Pusher, PrepareError> {
        let store = self.store();
        let subscription = store.find_subscription(&id.to_string()).await?;
        let record = store.push_record(id).await?;
        let target = PushTarget::from_json(&record.target)
            .map_err(|e| PrepareError::Target(e.to_string()))?;
        let client = OpenSearchClient::new(&target, &self.hosts)
            .map_err(|e| PrepareError::Target(e.to_string()))?;
        let mut tables = Vec::new();
        for slot in store.subscribed_tables(id).await? {
            tables.push(store.get_table(slot.table_id).await?);
        }
        Ok(Pusher {
            reader: Arc::new(BatchReader {
                feed: self.feed.clone(),
                id,
                tables,
                target,
            }),
            name: subscription.name,
            lease,
            client,
            policy: RetryPolicy {
                initial_delay: self.settings.retry_initial,
                max_delay: self.settings.retry_max,
                max_retries: self.settings.max_retries,
            },
            ahead: None,
            sent: None,
        })
    }

    /// Pushes one subscription until it stops, the lease is lost or the node stops.
    async fn push(&self, mut pusher: Pusher, stop: CancellationToken) -> Ended {
        let lost = stop.child_token();
        let store = self.store().clone();
        let (lease, ttl) = (pusher.lease.clone(), self.lease_ttl);
        let _heartbeat = Heartbeat::start(lease.name.clone(), ttl / 3, lost.clone(), move || {
            let (store, lease) = (store.clone(), lease.clone());
            async move { store.renew_lease(&lease, ttl).await }
        });
        let table_ids: Vec<_> = pusher.reader.tables.iter().map(|t| t.id).collect();
        let mut lag_reported: Option<Instant> = None;
        // Announcements wake it for redrives the API queued.
        let mut announced = self.notifier.announcements();
        let ended = loop {
            // Subscribe before reading: a publish during the batch wakes the wait after it.
            let mut waiter = self.notifier.subscribe_all(table_ids.iter().copied());
            announced.mark_unchanged();
            // Queued redrives go between batches, a round at a time.
            let step = match pusher.redrive_queued(&lost).await {
                Ok(0) => pusher.run_once(&lost).await,
                Ok(_) => continue,
                Err(e) => Err(e),
            };
            let wait = match step {
                Ok(Step::Pushed { .. }) => {
                    gauges::set_state(pusher.reader.id, &pusher.name, SubscriptionState::Active);
                    if lag_reported.is_none_or(|at| at.elapsed() >= LAG_REPORT_INTERVAL) {
                        report_lag(&pusher).await;
                        lag_reported = Some(Instant::now());
                    }
                    continue;
                }
                Ok(Step::Idle) => {
                    gauges::set_state(pusher.reader.id, &pusher.name, SubscriptionState::Active);
                    report_lag(&pusher).await;
                    lag_reported = Some(Instant::now());
                    self.settings.idle_recheck
                }
                Ok(Step::Stop(Some(state))) => {
                    gauges::set_state(pusher.reader.id, &pusher.name, state);
                    report_lag(&pusher).await;
                    break Ended::Parked;
                }
                Ok(Step::Stop(None))
                | Err(BatchError::Send(SendError::Cancelled))
                | Err(BatchError::Store(StoreError::LeaseLost(_))) => break Ended::GivenUp,
                Err(e) => match self.on_error(&pusher, e).await {
                    ControlFlow::Continue(backoff) => backoff,
                    ControlFlow::Break(ended) => break ended,
                },
            };
            tokio::select! {
                _ = waiter.changed() => {}
                Ok(()) = announced.changed() => {}
                _ = lost.cancelled() => break Ended::GivenUp,
                _ = tokio::time::sleep(wait) => {}
            }
        };
        // Still holding the lease: what was sent last need not be sent again.
        if let Err(e) = pusher.commit_sent().await {
            tracing::debug!(subscription = %pusher.name, error = %e, "committing the last batch failed");
        }
        if let Err(e) = self
            .store()
            .release_push_lease(&pusher.lease, pusher.reader.id)
            .await
        {
            tracing::warn!(subscription = %pusher.name, error = %e, "releasing the lease failed");
        }
        tracing::info!(subscription = %pusher.name, "stopped pushing subscription");
        ended
    }

    /// Records a failed batch; the wait before the next attempt, or why to stop.
    async fn on_error(&self, pusher: &Pusher, error: BatchError) -> ControlFlow<Ended, Duration> {
        let message = error.to_string();
        let result = match &error {
            BatchError::Send(SendError::Refused(_) | SendError::Encode(_))
            | BatchError::Fatal(_) => {
                tracing::error!(subscription = %pusher.name, error = %message, "push subscription failed");
                self.store()
                    .push_failed(&pusher.lease, pusher.reader.id, &message)
                    .await
                    .map(|_| {
                        gauges::set_state(
                            pusher.reader.id,
                            &pusher.name,
                            SubscriptionState::Failed,
                        );
                        ControlFlow::Break(Ended::Parked)
                    })
            }
            _ => {
                let backoff = self.settings.backoff;
                tracing::warn!(subscription = %pusher.name, error = %message, backoff_ms = backoff.as_millis() as u64, "push failed; backing off");
                let retry_at = chrono::Utc::now()
                    + chrono::Duration::from_std(backoff).unwrap_or(chrono::Duration::MAX);
                self.store()
                    .push_backing_off(&pusher.lease, pusher.reader.id, &message, retry_at)
                    .await
                    .map(|_| {
                        gauges::set_state(
                            pusher.reader.id,
                            &pusher.name,
                            SubscriptionState::BackingOff,
                        );
                        ControlFlow::Continue(backoff)
                    })
            }
        };
        result.unwrap_or_else(|e| {
            tracing::warn!(subscription = %pusher.name, error = %e, "recording a push failure failed");
            ControlFlow::Break(Ended::GivenUp)
        })
    }
}
