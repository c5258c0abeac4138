//! The scheduler: every node runs one; tables due for a poll are claimed through leases
//! in PostgreSQL, so any number of nodes share the tables and never publish twice.
//! Must not reach: `api`, `delivery`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::heartbeat::Heartbeat;
use super::sync::TableSync;
use super::sync_error::SyncError;
use crate::catalog::CatalogCache;
use crate::changes::ChangeStore;
use crate::config::SchedulerSettings;
use crate::failure::FailureCode;
use crate::store::{SourceTable, Store, TableId};
use crate::telemetry::metric;

/// Longest wait before retrying a table after a transient failure.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Shortest wait between two looks for due tables: tables falling due within it are
/// started together.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// The syncs this node runs, by the task running each.
#[derive(Default)]
struct Syncing {
    running: JoinSet<()>,
    tables: HashMap<tokio::task::Id, TableId>,
}

impl Syncing {
    /// Forgets a sync that ended, however it ended.
    fn ended(&mut self, done: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let id = match done {
            Ok((id, ())) => id,
            Err(e) => {
                tracing::error!(error = %e, "a table's sync panicked");
                e.id()
            }
        };
        self.tables.remove(&id);
    }
}

/// Polls due tables and publishes their change sets.
#[derive(Clone)]
pub struct Scheduler {
    store: Store,
    changes: ChangeStore,
    settings: SchedulerSettings,
    node: String,
    catalogs: CatalogCache,
}

impl Scheduler {
    /// A scheduler for node `node`.
    pub fn new(
        store: Store,
        changes: ChangeStore,
        settings: SchedulerSettings,
        node: String,
        catalogs: CatalogCache,
    ) -> Self {
        Self {
            store,
            changes,
            settings,
            node,
            catalogs,
        }
    }

    /// Runs until `stop` is cancelled; in-flight syncs see the same token and stop
    /// between files, releasing their leases. Tables sync side by side: one that takes
    /// long (a large rewrite) holds up none of the others.
    pub async fn run(self, stop: CancellationToken, wake: Arc<Notify>) {
        tracing::info!(node = %self.node, "scheduler started");
        let mut syncing = Syncing::default();
        loop {
            if let Err(e) = self.start_due(&stop, &mut syncing).await {
                tracing::warn!(error = %e, "scheduler tick failed");
            }
            let pause = self.pause().await;
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
                _ = wake.notified() => {}
                Some(done) = syncing.running.join_next_with_id() => syncing.ended(done),
            }
            while let Some(done) = syncing.running.try_join_next_with_id() {
                syncing.ended(done);
            }
        }
        while let Some(done) = syncing.running.join_next_with_id().await {
            syncing.ended(done);
        }
        tracing::info!(node = %self.node, "scheduler stopped");
    }

    /// Claims due tables, up to the concurrency limit, and starts syncing them.
    async fn start_due(
        &self,
        stop: &CancellationToken,
        syncing: &mut Syncing,
    ) -> Result<(), crate::store::StoreError> {
        let free = self
            .settings
            .max_concurrent_tables
            .saturating_sub(syncing.tables.len());
        if free == 0 {
            return Ok(());
        }
        let busy: Vec<TableId> = syncing.tables.values().copied().collect();
        for table in self.store.due_tables(free as i64 * 4, &busy).await? {
            if syncing.tables.len() >= self.settings.max_concurrent_tables {
                break;
            }
            let Some(lease) = self
                .store
                .try_acquire_lease(&table.id.lease_name(), &self.node, self.settings.lease_ttl)
                .await?
            else {
                continue;
            };
            // The table may have been published by the previous holder since we listed it.
            let table = match self.store.get_table(table.id).await {
                Ok(t) if t.state != crate::store::TableState::Error => t,
                _ => {
                    let _ = self.store.release_lease(&lease).await;
                    continue;
                }
            };
            let (this, stop, id) = (self.clone(), stop.child_token(), table.id);
            let task = syncing
                .running
                .spawn(async move { this.sync(table, lease, stop).await });
            syncing.tables.insert(task.id(), id);
        }
        Ok(())
    }

    /// How long to wait before looking for due tables again: until the next table falls
    /// due, so that a table is polled on its own interval rather than on the next tick,
    /// and at most a tick (tables another node holds, registrations elsewhere).
    async fn pause(&self) -> Duration {
        let tick = self
            .settings
            .tick
            .mul_f64(rand::rng().random_range(0.8..1.2));
        match self.store.next_poll_in().await {
            Ok(Some(due)) => due.clamp(MIN_PAUSE, tick.max(MIN_PAUSE)),
            Ok(None) => tick,
            Err(e) => {
                tracing::debug!(error = %e, "could not ask when the next table is due");
                tick
            }
        }
    }

    async fn sync(&self, table: SourceTable, lease: crate::store::Lease, stop: CancellationToken) {
        let _heartbeat = {
            let (store, held, ttl) = (self.store.clone(), lease.clone(), self.settings.lease_ttl);
            Heartbeat::start(lease.name.clone(), ttl / 3, stop.clone(), move || {
                let (store, held) = (store.clone(), held.clone());
                async move { store.renew_lease(&held, ttl).await }
            })
        };
        let sync = TableSync {
            store: &self.store,
            changes: &self.changes,
            lease: &lease,
            stop: &stop,
            settings: &self.settings,
            catalogs: &self.catalogs,
        };
        let span = tracing::info_span!("sync", table = %table.table_name, id = %table.id);
        let result = if table.state == crate::store::TableState::Paused {
            // Only looked at, for its lag; what it cannot read now waits for the resume.
            sync.observe(&table)
                .instrument(span)
                .await
                .map_err(SyncError::retried)
        } else {
            sync.run(&table).instrument(span).await.map_err(|e| {
                e.after(
                    table
                        .last_error_code
                        .as_deref()
                        .and_then(FailureCode::parse),
                )
            })
        };
        let name = table.table_name.clone();
        // By id, which no other registration shares; the name for people.
        let labels = [("table_id", table.id.to_string()), ("table", name.clone())];
        match result {
            Ok(outcome) => {
                let behind = outcome
                    .oldest_pending_committed_at
                    .map(|t| (chrono::Utc::now() - t).num_milliseconds() as f64 / 1000.0)
                    .unwrap_or(0.0);
                metrics::gauge!(metric::TABLE_LAG_SNAPSHOTS.name, &labels)
                    .set(outcome.snapshots_behind as f64);
                metrics::gauge!(metric::TABLE_LAG_SECONDS.name, &labels).set(behind);
                if let Err(e) = self.store.record_poll(table.id, &lease, &outcome).await {
                    tracing::debug!(error = %e, "could not record poll");
                }
            }
            Err(SyncError::Abandoned) => {
                tracing::info!(table = %name, "sync abandoned");
            }
            Err(SyncError::Transient(failure)) => {
                metrics::counter!(metric::POLL_ERRORS.name, &labels).increment(1);
                tracing::warn!(table = %name, code = %failure.code, error = %failure, "poll failed; will retry");
                let backoff = self.backoff(&table);
                let _ = self
                    .store
                    .postpone_poll(table.id, backoff.as_millis() as i64, &failure)
                    .await;
            }
            Err(SyncError::Table { failure, snapshot }) => {
                metrics::counter!(metric::POLL_ERRORS.name, &labels).increment(1);
                tracing::error!(table = %name, code = %failure.code, error = %failure, "table stopped");
                let _ = self
                    .store
                    .set_table_error(table.id, &lease, &failure, snapshot)
                    .await;
            }
        }
        let _ = self.store.release_lease(&lease).await;
    }

    /// Waits longer while a table keeps failing, up to a minute.
    fn backoff(&self, table: &SourceTable) -> Duration {
        let base = Duration::from_millis(table.poll_interval_ms.max(100) as u64);
        let failing = table.last_error.is_some();
        let wait = if failing { base * 4 } else { base };
        wait.min(MAX_BACKOFF)
    }
}
