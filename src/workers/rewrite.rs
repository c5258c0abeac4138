//! Publishing a snapshot that removed data files: run its shuffle (see `shuffle`) and
//! check what a compaction may not do.

use iceberg::spec::{SchemaRef, SnapshotRef};
use tokio_util::sync::CancellationToken;

use super::shuffle::Shuffle;
use super::sync::SyncError;
use crate::changelog::FileRows;
use crate::config::SchedulerSettings;
use crate::failure::FailureCode;
use crate::store::{NewSegment, SourceTable, Store};

/// One rewrite snapshot to compute.
pub struct Rewrite<'a> {
    pub store: &'a Store,
    pub table: &'a SourceTable,
    pub snapshot: &'a SnapshotRef,
    pub schema: &'a SchemaRef,
    /// Indexes of the identifier columns in `schema`.
    pub key: Vec<usize>,
    pub settings: &'a SchedulerSettings,
    pub stop: &'a CancellationToken,
}

impl Rewrite<'_> {
    /// Computes the snapshot's changes and returns their segments in order.
    pub async fn compute(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<Vec<NewSegment>, SyncError> {
        let snapshot_id = self.snapshot.snapshot_id();
        let shuffle = Shuffle {
            store: self.store,
            table: self.table.id,
            snapshot_id,
            schema_id: self.schema.schema_id(),
            key: self.key.clone(),
            buckets: self.settings.shuffle_buckets,
            reduce_target_bytes: self.settings.reduce_target_bytes,
            map_memory_bytes: self.settings.map_memory_bytes,
            stop: self.stop,
        };
        let outcome = shuffle.run(removed, added).await?;
        if self.snapshot.summary().operation.as_str() == "replace"
            && outcome.deleted + outcome.inserted > 0
        {
            self.store
                .delete_snapshot_tasks(self.table.id, snapshot_id)
                .await?;
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
        Ok(outcome.segments)
    }
}
