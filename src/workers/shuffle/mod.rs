//! The shuffle that computes a snapshot which removed data files, as tasks any node can
//! run: one map task per partition group cancels carryover locally and hashes the
//! surviving rows by key into buckets (shuffle files in the change store, sizes in
//! PostgreSQL); small buckets are coalesced into reduce tasks, which pair rows by key
//! and write the change set's segments. The node holding the table lease coordinates.

mod map;
mod reduce;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use map::run_map;
pub use reduce::run_reduce;

use super::sync::SyncError;
use crate::changelog::AddedFile;
use crate::store::{NewSegment, Store, TableId};

/// Input of a map task: one partition group's removed and added files.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MapTask {
    pub schema_id: i32,
    pub removed: Vec<String>,
    pub added: Vec<String>,
    /// Columns rows are hashed on (all columns when the table has no identifier).
    pub key: Vec<usize>,
    pub buckets: u32,
}

/// One bucket file a map task wrote.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BucketFile {
    pub bucket: u32,
    pub rows: i64,
    pub bytes: i64,
    pub path: String,
}

/// What a map task reports: surviving rows per side and its bucket files.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MapResult {
    pub deleted: i64,
    pub inserted: i64,
    pub buckets: Vec<BucketFile>,
}

/// Input of a reduce task: every map output of a run of buckets.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReduceTask {
    /// Position of the task's events in the change set.
    pub n: usize,
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub inputs: Vec<BucketFile>,
}

/// What a reduce task reports: the segment it wrote, if it had any events.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReduceResult {
    pub rows: i64,
    pub path: Option<String>,
    pub size: i64,
}

/// Everything the coordinator of one snapshot's shuffle needs.
pub struct Shuffle<'a> {
    pub store: &'a Store,
    pub table: TableId,
    pub snapshot_id: i64,
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub buckets: u32,
    pub reduce_target_bytes: u64,
    pub stop: &'a CancellationToken,
}

/// Surviving rows per side, for the checks the coordinator makes.
pub struct ShuffleOutcome {
    pub deleted: i64,
    pub inserted: i64,
    pub segments: Vec<NewSegment>,
}

impl Shuffle<'_> {
    /// Plans the map tasks, waits for them, plans the reduce tasks, waits for them, and
    /// returns the segments in order. Planning again after a failover is a no-op.
    pub async fn run(
        &self,
        removed: Vec<AddedFile>,
        added: Vec<AddedFile>,
    ) -> Result<ShuffleOutcome, SyncError> {
        let mut groups: BTreeMap<String, MapTask> = BTreeMap::new();
        let task = || MapTask {
            schema_id: self.schema_id,
            removed: Vec::new(),
            added: Vec::new(),
            key: self.key.clone(),
            buckets: self.buckets,
        };
        for f in removed {
            groups
                .entry(f.group)
                .or_insert_with(task)
                .removed
                .push(f.path);
        }
        for f in added {
            groups
                .entry(f.group)
                .or_insert_with(task)
                .added
                .push(f.path);
        }
        let maps: Vec<(String, serde_json::Value)> = groups
            .into_values()
            .enumerate()
            .map(|(g, t)| (self.task_id("map", g), to_json(&t)))
            .collect();
        self.store
            .create_tasks(self.table, self.snapshot_id, "map", &maps)
            .await?;
        let results: Vec<MapResult> = self.wait("map").await?;

        let mut by_bucket: BTreeMap<u32, Vec<BucketFile>> = BTreeMap::new();
        for file in results.iter().flat_map(|r| r.buckets.iter().cloned()) {
            by_bucket.entry(file.bucket).or_default().push(file);
        }
        let reduces: Vec<(String, serde_json::Value)> =
            coalesce(by_bucket, self.reduce_target_bytes)
                .into_iter()
                .enumerate()
                .map(|(n, inputs)| {
                    let task = ReduceTask {
                        n,
                        schema_id: self.schema_id,
                        key: self.key.clone(),
                        inputs,
                    };
                    (self.task_id("reduce", n), to_json(&task))
                })
                .collect();
        self.store
            .create_tasks(self.table, self.snapshot_id, "reduce", &reduces)
            .await?;
        let outputs: Vec<ReduceResult> = self.wait("reduce").await?;
        Ok(ShuffleOutcome {
            deleted: results.iter().map(|r| r.deleted).sum(),
            inserted: results.iter().map(|r| r.inserted).sum(),
            segments: outputs
                .into_iter()
                .filter_map(|r| {
                    r.path.map(|path| NewSegment {
                        event_count: r.rows,
                        layout: "changes",
                        path,
                        size_bytes: r.size,
                    })
                })
                .collect(),
        })
    }

    /// Ids sort in task order: `<table>/<snapshot>/<kind>/<n>`.
    fn task_id(&self, kind: &str, n: usize) -> String {
        format!("{}/{}/{kind}/{n:06}", self.table, self.snapshot_id)
    }

    /// Waits until every task of `kind` is done and returns their results in order; a
    /// failed task stops the table with its error (and is forgotten, so a retry replans).
    async fn wait<T: for<'de> Deserialize<'de>>(&self, kind: &str) -> Result<Vec<T>, SyncError> {
        loop {
            let (total, done, failed) = self
                .store
                .task_progress(self.table, self.snapshot_id, kind)
                .await?;
            if let Some(error) = failed {
                self.store
                    .delete_snapshot_tasks(self.table, self.snapshot_id)
                    .await?;
                return Err(SyncError::Table {
                    message: format!("cannot publish snapshot {}: {error}", self.snapshot_id),
                    snapshot: Some(self.snapshot_id),
                });
            }
            if done == total {
                // Results are read once, when every task is done.
                let tasks = self
                    .store
                    .snapshot_tasks(self.table, self.snapshot_id, kind)
                    .await?;
                return tasks
                    .into_iter()
                    .map(|t| {
                        serde_json::from_value(t.result.unwrap_or_default())
                            .map_err(|e| SyncError::Transient(format!("task {}: {e}", t.id)))
                    })
                    .collect();
            }
            tokio::select! {
                _ = self.stop.cancelled() => return Err(SyncError::Abandoned),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }
}

/// Groups consecutive buckets into reduce inputs of up to `target` bytes (a bucket is
/// never split), as adaptive query execution coalesces small shuffle partitions.
fn coalesce(by_bucket: BTreeMap<u32, Vec<BucketFile>>, target: u64) -> Vec<Vec<BucketFile>> {
    let mut reduces = Vec::new();
    let mut current: Vec<BucketFile> = Vec::new();
    let mut bytes = 0u64;
    for files in by_bucket.into_values() {
        let size: u64 = files.iter().map(|f| f.bytes as u64).sum();
        if !current.is_empty() && bytes + size > target {
            reduces.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.extend(files);
    }
    if !current.is_empty() {
        reduces.push(current);
    }
    reduces
}

fn to_json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("task payloads serialize")
}

/// The key of a shuffle file.
pub fn shuffle_key(table: TableId, snapshot_id: i64, task: &str, bucket: u32) -> String {
    let n = task.rsplit('/').next().unwrap_or(task);
    format!(
        "{}/m{n}-b{bucket:05}.parquet",
        shuffle_prefix(table, snapshot_id)
    )
}

/// Where a snapshot's shuffle files live; deleted once the snapshot is published.
pub fn shuffle_prefix(table: TableId, snapshot_id: i64) -> String {
    format!("shuffle/{table}/{snapshot_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bucket: u32, bytes: i64) -> BucketFile {
        BucketFile {
            bucket,
            rows: 1,
            bytes,
            path: format!("b{bucket}"),
        }
    }

    #[test]
    fn small_buckets_coalesce_and_large_ones_stand_alone() {
        let mut by_bucket = BTreeMap::new();
        by_bucket.insert(0, vec![file(0, 10), file(0, 10)]);
        by_bucket.insert(3, vec![file(3, 30)]);
        by_bucket.insert(5, vec![file(5, 500)]);
        by_bucket.insert(9, vec![file(9, 5)]);
        let reduces = coalesce(by_bucket, 100);
        let buckets: Vec<Vec<u32>> = reduces
            .iter()
            .map(|r| r.iter().map(|f| f.bucket).collect())
            .collect();
        assert_eq!(buckets, vec![vec![0, 0, 3], vec![5], vec![9]]);
        assert!(coalesce(BTreeMap::new(), 100).is_empty());
    }
}
