//! A rewrite small enough to hold in memory, computed by the node that planned it: each
//! partition group's carryover is cancelled as a map task does, and what survives is
//! paired as one reduce task does, without tasks or shuffle files. For a rewrite of a
//! few files those cost more than the work itself: claims and waits in PostgreSQL, and
//! every surviving row written to the change store and read back once more.
//! Must not reach: `api`, `delivery`.

use std::sync::Arc;

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use futures::TryStreamExt;
use iceberg::table::Table;

use super::map::{CancelledGroup, cancel_groups, decoded_budget};
use super::reduce::pair_by_key;
use super::{ShuffleOutcome, partition_groups, stopped};
use crate::change::Survivors;
use crate::changelog::FileRows;
use crate::changes::writer::encode_changes;
use crate::changes::{ChangeSetKey, ChangeStore, ShuffleKey};
use crate::store::NewSegment;
use crate::workers::sync_error::SyncError;
use crate::workers::task_context::{Opened, TaskError};

/// A segment is split off for another thread only from this many events: encoding a
/// few thousand takes about as long as handing them over.
const EVENTS_PER_PART: usize = 8192;

/// One rewrite computed where it was planned.
pub struct InPlace<'a> {
    pub iceberg: &'a Table,
    /// The schema the snapshot is read with.
    pub schema_id: i32,
    /// Files read at the same time.
    pub file_concurrency: usize,
    pub changes: &'a ChangeStore,
    /// The change set computed: the key of its segments.
    pub change_set: ChangeSetKey,
    pub key: &'a [usize],
    /// Segments encoded at the same time (the node's task workers).
    pub parallelism: usize,
    /// Memory the rows may take once decoded (`scheduler.map_memory_bytes`).
    pub memory_bytes: u64,
}

impl InPlace<'_> {
    /// Computes the changes of `removed` and `added` and writes them as the change set's
    /// segments, in order; `None` when their rows decode to more than
    /// [`Self::memory_bytes`] holds: nothing is written then, and the rewrite is for the
    /// shuffle.
    pub async fn run(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<Option<ShuffleOutcome>, SyncError> {
        self.compute(removed, added).await.map_err(|e| {
            let snapshot_id = self.change_set.snapshot_id;
            match e {
                TaskError::Permanent(failure) => stopped(snapshot_id, failure, true),
                TaskError::Retryable(failure) => stopped(snapshot_id, failure, false),
            }
        })
    }

    async fn compute(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<Option<ShuffleOutcome>, TaskError> {
        // One map task over every partition group, cancelled group by group.
        let Some(map) = partition_groups(self.schema_id, self.key, 1, removed, added)
            .into_values()
            .reduce(|mut all, group| {
                all.absorb(group);
                all
            })
        else {
            return Ok(Some(ShuffleOutcome::default()));
        };
        let opened = Opened::new(
            self.iceberg,
            self.schema_id,
            map.lineage,
            self.file_concurrency,
        )?;
        let mut groups: Vec<CancelledGroup> = Vec::new();
        let mut cancelled = std::pin::pin!(cancel_groups(
            &opened,
            map,
            decoded_budget(self.memory_bytes)
        ));
        while let Some(group) = cancelled.try_next().await? {
            let Some(group) = group else {
                return Ok(None);
            };
            groups.push(group);
        }
        let resurrected = groups.iter().map(|g| g.resurrected).sum();
        let survivors = combine(&opened.read.batch_schema(), groups)
            .map_err(TaskError::compute)
            .map(Arc::new)?;
        let (deleted, inserted) = (
            survivors.deleted.num_rows() as i64,
            survivors.inserted.num_rows() as i64,
        );
        let changes = {
            let (survivors, key, schema) =
                (survivors.clone(), self.key.to_vec(), opened.schema.clone());
            tokio::task::spawn_blocking(move || pair_by_key(&survivors, &key, &schema))
                .await
                .map_err(TaskError::joined)??
        };
        // Parts of the changes are encoded on as many threads as tasks would use.
        let parts = changes
            .len()
            .div_ceil(EVENTS_PER_PART)
            .clamp(1, self.parallelism.max(1));
        let per_part = changes.len().div_ceil(parts).max(1);
        let changes = Arc::new(changes);
        let writes = (0..changes.len().div_ceil(per_part)).map(|n| {
            let (survivors, changes) = (survivors.clone(), changes.clone());
            async move {
                let range = n * per_part..((n + 1) * per_part).min(changes.len());
                let events = range.len() as i64;
                let encoded = tokio::task::spawn_blocking(move || {
                    encode_changes(&survivors, &changes[range])
                })
                .await
                .map_err(TaskError::joined)?
                .map_err(TaskError::compute)?;
                let path = self.change_set.segment(n);
                let size_bytes = encoded.bytes.len() as i64;
                self.changes
                    .put(&path, encoded.bytes)
                    .await
                    .map_err(TaskError::change_store)?;
                Ok::<_, TaskError>(NewSegment::changes(
                    path,
                    events,
                    size_bytes,
                    Some(encoded.decoded_bytes),
                ))
            }
        });
        Ok(Some(ShuffleOutcome {
            deleted,
            inserted,
            resurrected,
            segments: futures::future::try_join_all(writes).await?,
        }))
    }
}

/// The survivors of every partition group as one: rows in group order, the regained
/// rows' indexes moved along.
fn combine(schema: &SchemaRef, groups: Vec<CancelledGroup>) -> Result<Survivors, ArrowError> {
    let groups: Vec<Survivors> = groups.into_iter().map(|g| g.survivors).collect();
    let mut regained = Vec::new();
    let mut offset = 0;
    for group in &groups {
        regained.extend(group.regained.iter().map(|i| i + offset));
        offset += group.inserted.num_rows() as u32;
    }
    Ok(Survivors {
        deleted: concat_batches(schema, groups.iter().map(|g| &g.deleted))?,
        inserted: concat_batches(schema, groups.iter().map(|g| &g.inserted))?,
        regained,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn rows(schema: &SchemaRef, ids: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(ids.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn groups_combine_in_order_with_their_regained_rows_moved_along() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let group = |deleted: &[i64], inserted: &[i64], regained: Vec<u32>| CancelledGroup {
            survivors: Survivors {
                deleted: rows(&schema, deleted),
                inserted: rows(&schema, inserted),
                regained,
            },
            resurrected: 0,
        };
        let all = combine(
            &schema,
            vec![
                group(&[1], &[10, 11], vec![1]),
                group(&[], &[], vec![]),
                group(&[2, 3], &[12, 13, 14], vec![0, 2]),
            ],
        )
        .unwrap();
        let ids = |b: &RecordBatch| b.column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(ids(&all.deleted), [1, 2, 3]);
        assert_eq!(ids(&all.inserted), [10, 11, 12, 13, 14]);
        // Regained rows 11, 12 and 14: still ascending, as `Survivors::anomaly` searches.
        assert_eq!(all.regained, [1, 2, 4]);
        assert!(combine(&schema, Vec::new()).unwrap().inserted.num_rows() == 0);
    }
}
