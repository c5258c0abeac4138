//! The janitor: prunes change sets past their tables' retention, drops net ranges nobody
//! reads any more, moves on net ranges being computed, and deletes the garbage list's
//! prefixes once due: segments of pruned change sets, dropped net ranges and deleted
//! tables, and the shuffle files of published snapshots and computed ranges.
//! Must not reach: `catalog`, `api`.
//!
//! Every node runs one without a lease: pruning a table locks its row, so concurrent
//! passes serialize and the second finds nothing left to prune, and deleting objects
//! that are already gone is harmless.

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::net;
use crate::changes::ChangeStore;
use crate::config::{RetentionSettings, SchedulerSettings};
use crate::store::{Store, StoreError};

/// Garbage entries deleted per pass.
const GARBAGE_PER_PASS: i64 = 256;

/// Prunes and deletes on a timer.
#[derive(Clone)]
pub struct Janitor {
    pub store: Store,
    pub changes: ChangeStore,
    pub settings: RetentionSettings,
    /// How net ranges are shuffled.
    pub scheduler: SchedulerSettings,
}

impl Janitor {
    /// Runs passes every `settings.interval` (with jitter) until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            let jitter = rand::rng().random_range(0.8..1.2);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.settings.interval.mul_f64(jitter)) => {}
            }
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "retention pass failed");
            }
        }
    }

    /// One pass: prune what is past retention, then delete due garbage.
    pub async fn run_once(&self) -> Result<(), StoreError> {
        for pruned in self.store.prune(self.settings.grace).await? {
            tracing::info!(
                table = %pruned.table, through = pruned.through, change_sets = pruned.change_sets,
                "pruned change sets past retention"
            );
            metrics::counter!(crate::telemetry::metric::CHANGE_SETS_PRUNED.name)
                .increment(pruned.change_sets as u64);
        }
        let dropped = self
            .store
            .drop_idle_net_ranges(self.settings.net_idle)
            .await?;
        if dropped > 0 {
            tracing::info!(ranges = dropped, "dropped net ranges nobody read");
        }
        // A range whose last task's node died before planning the next step.
        for range in self.store.computing_net_ranges().await? {
            net::advance(&self.store, &self.scheduler, &range).await?;
        }
        // Batch after batch, so that a busy node's garbage does not pile up between passes;
        // a pass ends at a batch it could not delete all of (the store is failing).
        loop {
            let due = self.store.due_garbage(GARBAGE_PER_PASS).await?;
            let mut deleted = Vec::with_capacity(due.len());
            for (id, prefix) in &due {
                match self.changes.delete_prefix(prefix).await {
                    Ok(_) => deleted.push(*id),
                    Err(e) => tracing::warn!(%prefix, error = %e, "could not delete garbage"),
                }
            }
            self.store.forget_garbage(&deleted).await?;
            if due.len() < GARBAGE_PER_PASS as usize || deleted.len() < due.len() {
                return Ok(());
            }
        }
    }
}
