//! Publishing a snapshot that removed data files: run its shuffle (see `shuffle`) and
//! check what a compaction may not do.
//! Must not reach: `api`, `delivery`.

use iceberg::spec::SchemaRef;
use iceberg::table::Table;
use tokio_util::sync::CancellationToken;

use super::shuffle::{InPlace, Shuffle, ShuffleOutcome, estimated_memory};
use super::sync_error::SyncError;
use crate::changelog::FileRows;
use crate::changes::{ChangeSetKey, ChangeStore};
use crate::config::SchedulerSettings;
use crate::failure::FailureCode;
use crate::store::Store;
use crate::telemetry::metric;

/// One change set of removed and added rows to compute.
pub struct Rewrite<'a> {
    pub store: &'a Store,
    pub changes: &'a ChangeStore,
    /// The table, read here when the rewrite is computed in place.
    pub iceberg: &'a Table,
    /// The change set computed.
    pub change_set: ChangeSetKey,
    /// A compaction (`replace`) snapshot: its rows must not differ.
    pub compaction: bool,
    pub schema: &'a SchemaRef,
    /// Indexes of the identifier columns in `schema`.
    pub key: Vec<usize>,
    pub settings: &'a SchedulerSettings,
    pub stop: &'a CancellationToken,
}

impl Rewrite<'_> {
    /// Computes the snapshot's changes: their segments in order, and what the shuffle
    /// counted.
    pub async fn compute(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<ShuffleOutcome, SyncError> {
        let snapshot_id = self.change_set.snapshot_id;
        let stored: u64 = removed.iter().chain(&added).map(|f| f.size).sum();
        let in_place = if computed_in_place(stored, self.settings) {
            self.in_place(removed.clone(), added.clone()).await?
        } else {
            None
        };
        let outcome = if let Some(outcome) = in_place {
            metrics::counter!(metric::REWRITES.name, "how" => "in_place").increment(1);
            outcome
        } else {
            metrics::counter!(metric::REWRITES.name, "how" => "shuffled").increment(1);
            let shuffle = Shuffle {
                store: self.store,
                change_set: self.change_set,
                schema_id: self.schema.schema_id(),
                key: self.key.clone(),
                buckets: self.settings.shuffle_buckets,
                reduce_target_bytes: self.settings.reduce_target_bytes,
                map_memory_bytes: self.settings.map_memory_bytes,
                stop: self.stop,
            };
            shuffle.run(removed, added).await?
        };
        if self.compaction && outcome.deleted + outcome.inserted > 0 {
            self.store.delete_change_set_tasks(&self.change_set).await?;
            return Err(SyncError::unpublishable(
                snapshot_id,
                FailureCode::DataInvalid,
                format!(
                    "it is a replace (compaction) snapshot but its rows differ from the files it \
                     replaced ({} rows removed, {} rows added); refusing to publish it as a no-op",
                    outcome.deleted, outcome.inserted
                ),
            ));
        }
        Ok(outcome)
    }

    /// Computes a small rewrite here, in memory (see `shuffle::in_place`); `None` when
    /// its rows decode to more than a map task may hold after all.
    async fn in_place(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<Option<ShuffleOutcome>, SyncError> {
        let in_place = InPlace {
            iceberg: self.iceberg,
            schema_id: self.schema.schema_id(),
            file_concurrency: self.settings.file_concurrency,
            changes: self.changes,
            change_set: self.change_set,
            key: &self.key,
            parallelism: self.settings.task_workers,
            memory_bytes: self.settings.map_memory_bytes,
        };
        let outcome = in_place.run(removed, added).await?;
        if outcome.is_none() {
            metrics::counter!(metric::OVER_ESTIMATE.name, "where" => "in_place").increment(1);
            tracing::info!(
                table_id = %self.change_set.table,
                snapshot_id = self.change_set.snapshot_id,
                "the rewrite's rows decode past scheduler.map_memory_bytes: shuffled instead \
                 of computed in place"
            );
        }
        Ok(outcome)
    }
}

/// Whether a rewrite of files holding `stored` bytes is computed in place: under
/// `shuffle_from_bytes`, and never with more in memory than one map task may hold.
fn computed_in_place(stored: u64, settings: &SchedulerSettings) -> bool {
    stored < settings.shuffle_from_bytes && estimated_memory(stored) <= settings.map_memory_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_rewrites_are_computed_in_place_within_a_map_tasks_memory() {
        let mut settings = SchedulerSettings::default();
        assert!(computed_in_place(1 << 20, &settings));
        assert!(!computed_in_place(settings.shuffle_from_bytes, &settings));
        settings.shuffle_from_bytes = 0;
        assert!(!computed_in_place(1, &settings), "0 shuffles every rewrite");
        // However high the threshold, what would not fit a map task is shuffled.
        settings.shuffle_from_bytes = u64::MAX;
        assert!(computed_in_place(16 << 20, &settings));
        assert!(!computed_in_place(64 << 20, &settings));
        assert!(!computed_in_place(u64::MAX - 1, &settings));
    }
}
