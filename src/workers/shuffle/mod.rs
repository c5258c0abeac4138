//! The shuffle that computes a snapshot which removed data files, as tasks any node can
//! run: map tasks, each over whole partition groups, cancel carryover locally and hash
//! the surviving rows by key into buckets (shuffle files in the change store, sizes in
//! PostgreSQL); small buckets are coalesced into reduce tasks, which pair rows by key
//! and write the change set's segments. The node holding the table lease coordinates.
//! Must not reach: `api`, `delivery`.

pub(crate) mod files;
mod in_place;
mod map;
mod reduce;
mod spill;
mod walk;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use in_place::InPlace;
pub use map::run_map;
pub(crate) use map::{bucket_rows, hashed_columns, key_converter};
pub use reduce::run_reduce;

use super::sync_error::SyncError;
use crate::changelog::FileRows;
use crate::changes::{ChangeSetKey, ShuffleKey};
use crate::failure::{Failure, FailureCode};
use crate::store::{NewSegment, Store, TaskFailure, TaskKind, signalled_within};

/// Input of a map task: the removed and added files of whole partition groups.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MapTask {
    pub schema_id: i32,
    #[serde(deserialize_with = "task_files")]
    pub removed: Vec<FileRows>,
    #[serde(deserialize_with = "task_files")]
    pub added: Vec<FileRows>,
    /// Stored size of all those files, from the manifests.
    pub input_bytes: u64,
    /// Columns rows are hashed on (all columns when the table has no identifier).
    pub key: Vec<usize>,
    pub buckets: u32,
    /// Whether rows are read with their lineage (tables of format version 3).
    #[serde(default)]
    pub lineage: bool,
    /// How many of `removed` and of `added` each packed partition group has, in order.
    /// Carryover is cancelled group by group, so that a hash table holds one group's rows
    /// and stays in the CPU caches. Empty: all files are one group.
    #[serde(default)]
    pub groups: Vec<(usize, usize)>,
}

impl MapTask {
    /// Takes over the partition groups of `other`, after its own.
    pub(crate) fn absorb(&mut self, other: MapTask) {
        self.removed.extend(other.removed);
        self.added.extend(other.added);
        self.input_bytes += other.input_bytes;
        self.groups.extend(other.groups);
    }

    /// Stored bytes of the most a task holds at once: two consecutive partition groups
    /// (see `map::cancel_groups`). The whole input for tasks whose files do not say their
    /// sizes (planned by older versions).
    pub fn held_input_bytes(&self) -> u64 {
        let groups = self.group_bytes();
        let pairs = groups.windows(2).map(|w| w[0] + w[1]);
        match groups.iter().copied().chain(pairs).max().unwrap_or(0) {
            0 => self.input_bytes,
            held => held,
        }
    }

    /// Stored bytes of the first two partition groups, which a task reads first and
    /// together; the whole input for tasks whose files do not say their sizes.
    pub fn leading_bytes(&self) -> u64 {
        match self.group_bytes().iter().take(2).sum() {
            0 => self.input_bytes,
            leading => leading,
        }
    }

    /// Stored bytes of each partition group, from its files' sizes.
    fn group_bytes(&self) -> Vec<u64> {
        let sizes = |files: &[FileRows]| files.iter().map(|f| f.size).collect::<Vec<_>>();
        self.split_groups(sizes(&self.removed), sizes(&self.added))
            .iter()
            .map(|(r, a)| r.iter().chain(a).sum())
            .collect()
    }

    /// The task of its partition groups from the `first`th on.
    pub fn groups_from(&self, first: usize) -> MapTask {
        let skipped = &self.groups[..first.min(self.groups.len())];
        let (r, a) = skipped.iter().fold((0, 0), |(r, a), g| (r + g.0, a + g.1));
        let (removed, added) = (self.removed[r..].to_vec(), self.added[a..].to_vec());
        let skipped_bytes: u64 = (self.removed[..r].iter().chain(&self.added[..a]))
            .map(|f| f.size)
            .sum();
        MapTask {
            removed,
            added,
            input_bytes: self.input_bytes.saturating_sub(skipped_bytes),
            groups: self.groups[skipped.len()..].to_vec(),
            key: self.key.clone(),
            ..*self
        }
    }

    /// The files' contents (one item per file, in file order) split into the task's
    /// partition groups: (removed, added) per group.
    pub fn split_groups<R, A>(&self, removed: Vec<R>, added: Vec<A>) -> Vec<(Vec<R>, Vec<A>)> {
        let counted: (usize, usize) = self
            .groups
            .iter()
            .fold((0, 0), |(r, a), g| (r + g.0, a + g.1));
        if self.groups.is_empty() || counted != (removed.len(), added.len()) {
            return vec![(removed, added)];
        }
        let (mut removed, mut added) = (removed.into_iter(), added.into_iter());
        self.groups
            .iter()
            .map(|&(r, a)| {
                (
                    removed.by_ref().take(r).collect(),
                    added.by_ref().take(a).collect(),
                )
            })
            .collect()
    }
}

/// A map task's files: tasks planned before merge-on-read support name whole files by
/// path only.
fn task_files<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<FileRows>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TaskFile {
        Path(String),
        Rows(FileRows),
    }
    Ok(Vec::<TaskFile>::deserialize(d)?
        .into_iter()
        .map(|f| match f {
            TaskFile::Path(path) => FileRows::whole(path, 0, 0, String::new()),
            TaskFile::Rows(rows) => rows,
        })
        .collect())
}

/// The rows of one bucket (or spill partition) in a shuffle file: an Arrow IPC stream
/// of `bytes` bytes at `offset`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BucketFile {
    pub bucket: u32,
    pub rows: i64,
    pub offset: u64,
    pub bytes: i64,
    /// Bytes its rows take in memory, read back (0 in the files of earlier versions:
    /// their `bytes` stand for it).
    #[serde(default)]
    pub decoded: i64,
    pub path: String,
}

impl BucketFile {
    /// Bytes its rows take in memory once read.
    pub fn memory(&self) -> u64 {
        self.decoded.max(self.bytes).max(0) as u64
    }
}

/// What a map task reports: surviving rows per side and its buckets.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MapResult {
    pub deleted: i64,
    pub inserted: i64,
    pub buckets: Vec<BucketFile>,
    /// Spill partitions used (0: the input was cancelled in memory).
    #[serde(default)]
    pub spilled_partitions: u32,
    /// Rows read from files that regained them (a delete dropped without replacement).
    #[serde(default)]
    pub resurrected: i64,
}

/// Input of a reduce task: every map output of a run of buckets.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReduceTask {
    /// Position of the task's events in the change set.
    pub n: usize,
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub inputs: Vec<BucketFile>,
    /// Whether the rows carry their lineage (as the map tasks read them).
    #[serde(default)]
    pub lineage: bool,
}

/// What a reduce task reports: the segment it wrote, if it had any events.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReduceResult {
    pub rows: i64,
    pub path: Option<String>,
    pub size: i64,
    /// What its events take decoded (unknown for results of earlier versions).
    #[serde(default)]
    pub decoded: Option<i64>,
}

/// Everything the coordinator of one snapshot's shuffle needs.
pub struct Shuffle<'a> {
    pub store: &'a Store,
    /// The change set computed: the key of its tasks and files.
    pub change_set: ChangeSetKey,
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub buckets: u32,
    pub reduce_target_bytes: u64,
    pub map_memory_bytes: u64,
    pub stop: &'a CancellationToken,
}

/// Surviving rows per side, for the checks the coordinator makes.
#[derive(Default)]
pub struct ShuffleOutcome {
    pub deleted: i64,
    pub inserted: i64,
    /// Rows files regained, before carryover (see [`MapResult::resurrected`]).
    pub resurrected: i64,
    pub segments: Vec<NewSegment>,
}

impl Shuffle<'_> {
    /// Plans the map tasks, waits for them, plans the reduce tasks, waits for them, and
    /// returns the segments in order. Planning again after a failover is a no-op.
    pub async fn run(
        &self,
        removed: Vec<FileRows>,
        added: Vec<FileRows>,
    ) -> Result<ShuffleOutcome, SyncError> {
        let stored = removed.iter().chain(&added).map(|f| f.size).sum();
        let buckets = bucket_count(self.buckets, stored, self.reduce_target_bytes);
        let groups = partition_groups(self.schema_id, &self.key, buckets, removed, added);
        // Every group is read alike, so reduces read the rows as its maps do.
        let lineage = groups.values().any(|g| g.lineage);
        let maps: Vec<(String, serde_json::Value)> = pack(groups, self.map_memory_bytes)
            .into_iter()
            .enumerate()
            .map(|(g, t)| (self.change_set.task_id(TaskKind::Map, g), to_json(&t)))
            .collect();
        self.create_tasks(TaskKind::Map, &maps).await?;
        let results: Vec<MapResult> = self.wait(TaskKind::Map).await?;

        let buckets = results.iter().flat_map(|r| r.buckets.iter().cloned());
        let reduces: Vec<(String, serde_json::Value)> =
            reduce_inputs(buckets, self.reduce_target_bytes)
                .into_iter()
                .enumerate()
                .map(|(n, inputs)| {
                    let task = ReduceTask {
                        n,
                        schema_id: self.schema_id,
                        key: self.key.clone(),
                        inputs,
                        lineage,
                    };
                    (self.change_set.task_id(TaskKind::Reduce, n), to_json(&task))
                })
                .collect();
        self.create_tasks(TaskKind::Reduce, &reduces).await?;
        let outputs: Vec<ReduceResult> = self.wait(TaskKind::Reduce).await?;
        Ok(ShuffleOutcome {
            deleted: results.iter().map(|r| r.deleted).sum(),
            inserted: results.iter().map(|r| r.inserted).sum(),
            resurrected: results.iter().map(|r| r.resurrected).sum(),
            segments: outputs
                .into_iter()
                .filter_map(|r| {
                    r.path
                        .map(|path| NewSegment::changes(path, r.rows, r.size, r.decoded))
                })
                .collect(),
        })
    }

    /// Creates the tasks unless a coordinator before a failover did: the tasks of a kind
    /// are planned once, even if this node would pack them differently.
    async fn create_tasks(
        &self,
        kind: TaskKind,
        tasks: &[(String, serde_json::Value)],
    ) -> Result<(), SyncError> {
        let progress = self.store.task_progress(&self.change_set, kind).await?;
        if progress.planned == 0 {
            self.store
                .create_tasks(&self.change_set, kind, tasks)
                .await?;
        }
        Ok(())
    }

    /// Waits until every task of `kind` is done and returns their results in order. A
    /// failed task's tasks are forgotten, so that the next attempt replans the snapshot:
    /// one that failed for good stops the table with its error, one whose attempts ran
    /// out on passing failures (a store refusing writes for a while) is retried with the
    /// table's backoff.
    async fn wait<T: for<'de> Deserialize<'de>>(
        &self,
        kind: TaskKind,
    ) -> Result<Vec<T>, SyncError> {
        let mut settled = self.store.task_signals().settled();
        loop {
            // Seen before looking: a task settling from now on wakes the wait below.
            settled.borrow_and_update();
            let progress = self.store.task_progress(&self.change_set, kind).await?;
            if let Some(failure) = progress.failed {
                self.store.delete_change_set_tasks(&self.change_set).await?;
                let TaskFailure { failure, permanent } = failure;
                return Err(stopped(self.change_set.snapshot_id, failure, permanent));
            }
            if progress.done == progress.planned {
                // Results are read once, when every task is done.
                let tasks = self.store.tasks_of(&self.change_set, kind).await?;
                return tasks
                    .into_iter()
                    .map(|t| {
                        serde_json::from_value(t.result.unwrap_or_default()).map_err(|e| {
                            SyncError::Transient(Failure::new(
                                FailureCode::Internal,
                                format!("task {}: {e}", t.id),
                            ))
                        })
                    })
                    .collect();
            }
            tokio::select! {
                _ = self.stop.cancelled() => return Err(SyncError::Abandoned),
                _ = signalled_within(&mut settled, SETTLED_BACKSTOP) => {}
            }
        }
    }
}

/// How a failure to compute snapshot `snapshot_id` stops its sync: a permanent one stops
/// the table with it, a passing one is retried with the table's backoff.
fn stopped(snapshot_id: i64, failure: Failure, permanent: bool) -> SyncError {
    let stopped = SyncError::unpublishable(snapshot_id, failure.code, failure);
    if permanent {
        stopped
    } else {
        stopped.retried()
    }
}

/// How long a coordinator waits for its tasks without hearing of one settling before it
/// looks anyway (the announcement may be lost with the listener's connection).
const SETTLED_BACKSTOP: Duration = Duration::from_millis(500);

/// Decoded rows take about this many times their stored (compressed Parquet) size, with
/// the row format of one side on top: Arrow is ~6x zstd Parquet on the taxi table.
const DECODED_PER_STORED_BYTE: u64 = 10;

/// Memory a map task over `stored` bytes of files needs to cancel carryover in memory.
pub(crate) fn estimated_memory(stored: u64) -> u64 {
    stored.saturating_mul(DECODED_PER_STORED_BYTE)
}

/// Map tasks have at least this many parts of a rewrite when its groups are small enough,
/// so that every task worker gets a share.
const MIN_MAP_TASKS: u64 = 8;

/// A map task holds two of its partition groups at a time (one read while the other is
/// cancelled), so it may take several memory budgets of groups; up to this many, which
/// keeps a task to about a second of work and leaves a large rewrite enough tasks for a
/// cluster to share. Fewer, larger tasks spend less of the rewrite between tasks
/// (recording one, claiming and opening the next: ~18 ms each on the cow benchmark,
/// while the other task worker, which started with it, does the same).
const BUDGETS_PER_MAP_TASK: u64 = 4;

/// Packs consecutive partition groups (never split, so carryover within each is complete)
/// into map tasks of about an eighth of the whole, of up to [`BUDGETS_PER_MAP_TASK`]
/// times `memory` estimated bytes, and in which any two consecutive groups fit in
/// `memory` together: hundreds of small groups make a few tasks, not hundreds.
fn pack(groups: BTreeMap<String, MapTask>, memory: u64) -> Vec<MapTask> {
    let total: u64 = groups
        .values()
        .map(|g| estimated_memory(g.input_bytes))
        .sum();
    let cap = memory.saturating_mul(BUDGETS_PER_MAP_TASK);
    let sized = groups
        .into_values()
        .map(|g| (estimated_memory(g.input_bytes), g));
    let fits = |run, last, size| run + size <= cap && last + size <= memory;
    cut_into_shares(sized, cap.min(total.div_ceil(MIN_MAP_TASKS)), fits)
        .into_iter()
        .filter_map(|run| {
            run.into_iter().reduce(|mut task, group| {
                task.absorb(group);
                task
            })
        })
        .collect()
}

/// The files of a rewrite by partition group (within which carryover is complete), each
/// group a map task holding that group's files.
pub(crate) fn partition_groups(
    schema_id: i32,
    key: &[usize],
    buckets: u32,
    removed: Vec<FileRows>,
    added: Vec<FileRows>,
) -> BTreeMap<String, MapTask> {
    // The planner gives every file of a v3 table its lineage.
    let lineage = removed.iter().chain(&added).any(|f| f.lineage.is_some());
    let task = || MapTask {
        schema_id,
        removed: Vec::new(),
        added: Vec::new(),
        input_bytes: 0,
        key: key.to_vec(),
        buckets,
        lineage,
        groups: Vec::new(),
    };
    let mut groups: BTreeMap<String, MapTask> = BTreeMap::new();
    for (f, is_removed) in removed
        .into_iter()
        .map(|f| (f, true))
        .chain(added.into_iter().map(|f| (f, false)))
    {
        let group = groups.entry(f.group.clone()).or_insert_with(task);
        group.input_bytes += f.size;
        let side = if is_removed {
            &mut group.removed
        } else {
            &mut group.added
        };
        side.push(f);
    }
    for group in groups.values_mut() {
        group.groups = vec![(group.removed.len(), group.added.len())];
    }
    groups
}

/// More buckets than this would mostly add per-part overhead.
const MAX_BUCKETS: u64 = 4096;

/// At least `configured` buckets, and enough that one bucket would hold about
/// `reduce_target` bytes even if every row of `stored` bytes of files survived: a reduce
/// task holds at least one whole bucket in memory.
pub(crate) fn bucket_count(configured: u32, stored: u64, reduce_target: u64) -> u32 {
    let needed = estimated_memory(stored).div_ceil(reduce_target.max(1));
    configured.max(needed.min(MAX_BUCKETS) as u32)
}

/// Reduce tasks have at least this many parts of a shuffle of more than
/// [`SPLIT_REDUCES_FROM`] bytes, so that every task worker shares the pairing and the
/// writing of the segments, instead of one of them doing all while the others idle.
const MIN_REDUCE_TASKS: u64 = 4;

/// Shuffles smaller than this are reduced by one task: one segment, not a few tiny ones.
const SPLIT_REDUCES_FROM: u64 = 1 << 20;

/// The map tasks' bucket files grouped into the inputs of reduce tasks, bucket by
/// bucket (see [`coalesce`]), of up to `target` bytes each and of about a quarter of the
/// whole when that is less.
pub(crate) fn reduce_inputs(
    files: impl Iterator<Item = BucketFile>,
    target: u64,
) -> Vec<Vec<BucketFile>> {
    let mut by_bucket: BTreeMap<u32, Vec<BucketFile>> = BTreeMap::new();
    let mut total = 0u64;
    for file in files {
        total += file.memory();
        by_bucket.entry(file.bucket).or_default().push(file);
    }
    let share = total.div_ceil(MIN_REDUCE_TASKS).max(SPLIT_REDUCES_FROM);
    coalesce(by_bucket, target.min(share), target)
}

/// Groups consecutive buckets into reduce inputs of about `share` bytes and never more
/// than `target` (a bucket is never split), as adaptive query execution coalesces small
/// shuffle partitions.
fn coalesce(
    by_bucket: BTreeMap<u32, Vec<BucketFile>>,
    share: u64,
    target: u64,
) -> Vec<Vec<BucketFile>> {
    let sized = by_bucket
        .into_values()
        .map(|files| (files.iter().map(BucketFile::memory).sum(), files));
    cut_into_shares(sized, share, |run, _, size| run + size <= target)
        .into_iter()
        .map(|run| run.into_iter().flatten().collect())
        .collect()
}

/// Cuts `items` (each with its size, in order) into runs of about `share`: an item joins
/// the run of the share its middle falls in, if `joins(run's size, size of the run's
/// last item, its size)` lets it. Cutting wherever the next item would overflow a share
/// instead leaves every run a little short and their shortfalls a tiny run of their own
/// (one more round of tasks for nothing).
fn cut_into_shares<T>(
    items: impl IntoIterator<Item = (u64, T)>,
    share: u64,
    joins: impl Fn(u64, u64, u64) -> bool,
) -> Vec<Vec<T>> {
    let share = share.max(1);
    let mut runs: Vec<Vec<T>> = Vec::new();
    let (mut run, mut last, mut before, mut run_share) = (0u64, 0u64, 0u64, 0u64);
    for (size, item) in items {
        let middle_share = (before + size / 2) / share;
        match runs.last_mut() {
            Some(current) if middle_share == run_share && joins(run, last, size) => {
                current.push(item);
                run += size;
            }
            _ => {
                runs.push(vec![item]);
                run = size;
            }
        }
        (last, run_share) = (size, middle_share);
        before += size;
    }
    runs
}

fn to_json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("task payloads serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bucket: u32, bytes: i64) -> BucketFile {
        BucketFile {
            bucket,
            rows: 1,
            offset: 0,
            bytes,
            decoded: 0,
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
        let reduces = coalesce(by_bucket, 100, 100);
        let buckets: Vec<Vec<u32>> = reduces
            .iter()
            .map(|r| r.iter().map(|f| f.bucket).collect())
            .collect();
        assert_eq!(buckets, vec![vec![0, 0, 3], vec![5], vec![9]]);
        assert!(coalesce(BTreeMap::new(), 100, 100).is_empty());
    }

    #[test]
    fn large_shuffles_get_a_few_reduce_tasks_and_small_ones_one() {
        let buckets = |n: u32, bytes: i64| (0..n).map(move |b| file(b, bytes));
        // 16 buckets of 1 MB under a 64 MB target: four reduces of four buckets.
        let reduces = reduce_inputs(buckets(16, 1 << 20), 64 << 20);
        assert_eq!(
            reduces.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 4, 4, 4]
        );
        // 16 buckets of 1 KB: one reduce, one segment.
        assert_eq!(reduce_inputs(buckets(16, 1 << 10), 64 << 20).len(), 1);
        // The target still bounds a reduce.
        assert_eq!(reduce_inputs(buckets(16, 1 << 20), 2 << 20).len(), 8);
    }

    #[test]
    fn buckets_of_uneven_sizes_make_as_many_reduces_as_shares() {
        // 64 buckets of 1 MiB to 1.2 MB: four reduces of about a quarter each, not four
        // a little short of it and a fifth of the two buckets left over.
        let files = (0..64u32).map(|b| file(b, (1 << 20) + i64::from(b * 37 % 200) * 1000));
        let reduces = reduce_inputs(files, 64 << 20);
        assert_eq!(
            reduces.iter().map(Vec::len).collect::<Vec<_>>(),
            [16, 16, 16, 16]
        );
        // A bucket never joins an input it would take past the target.
        let by_bucket = (0..8u32).map(|b| (b, vec![file(b, 60)])).collect();
        assert_eq!(coalesce(by_bucket, 100, 100).len(), 8);
    }

    #[test]
    fn map_tasks_planned_before_delete_support_still_read() {
        let task: MapTask = serde_json::from_value(serde_json::json!({
            "schema_id": 0, "removed": ["r1"], "added": ["a1", "a2"],
            "input_bytes": 3, "key": [0], "buckets": 4,
        }))
        .unwrap();
        assert_eq!(task.removed[0].path, "r1");
        assert!(task.added.iter().all(FileRows::is_whole));
        let round_trip: MapTask = serde_json::from_value(to_json(&task)).unwrap();
        assert_eq!(round_trip.added, task.added);
    }

    #[test]
    fn large_rewrites_get_more_buckets() {
        assert_eq!(bucket_count(64, 0, 64 << 20), 64);
        assert_eq!(bucket_count(64, 1 << 30, 64 << 20), 160);
        assert_eq!(bucket_count(64, u64::MAX, 64 << 20), 4096);
        assert_eq!(bucket_count(5000, u64::MAX, 64 << 20), 5000);
    }

    fn whole(path: &str) -> FileRows {
        FileRows::whole(path.to_string(), 1, 1, String::new())
    }

    fn group(files: &[&str], input_bytes: u64) -> MapTask {
        MapTask {
            schema_id: 0,
            removed: files.iter().map(|f| whole(f)).collect(),
            added: Vec::new(),
            input_bytes,
            key: vec![0],
            buckets: 4,
            lineage: false,
            groups: vec![(files.len(), 0)],
        }
    }

    #[test]
    fn small_groups_pack_into_few_tasks_and_large_ones_stand_alone() {
        let groups: BTreeMap<String, MapTask> = [
            ("a", group(&["a"], 10)),
            ("b", group(&["b"], 10)),
            ("c", group(&["c"], 500)),
            ("d", group(&["d"], 10)),
            ("e", group(&["e"], 10)),
        ]
        .into_iter()
        .map(|(k, g)| (k.to_string(), g))
        .collect();
        // 200 bytes of memory hold 20 stored bytes.
        let tasks = pack(groups, 200);
        let files: Vec<Vec<&str>> = tasks
            .iter()
            .map(|t| t.removed.iter().map(|f| f.path.as_str()).collect())
            .collect();
        assert_eq!(files, vec![vec!["a", "b"], vec!["c"], vec!["d", "e"]]);
        assert_eq!(tasks[0].input_bytes, 20);
        assert_eq!(tasks[0].groups, vec![(1, 0), (1, 0)]);
        // Plenty of memory: still about an eighth of the whole per task.
        let many: BTreeMap<String, MapTask> = (0..16)
            .map(|i| (format!("{i:02}"), group(&["x"], 10)))
            .collect();
        assert_eq!(pack(many, u64::MAX).len(), 8);
    }

    #[test]
    fn tasks_take_several_budgets_of_groups_that_fit_two_at_a_time() {
        let groups = |sizes: &[u64]| -> BTreeMap<String, MapTask> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| (format!("{i:03}"), group(&[&format!("g{i}")], size)))
                .collect()
        };
        // 40 groups of 10 stored bytes (100 in memory) under a budget of 200: an eighth
        // of the whole per task (five groups), not two groups per task.
        let tasks = pack(groups(&[10; 40]), 200);
        assert_eq!(tasks.len(), 8);
        assert!(tasks.iter().all(|t| t.groups.len() == 5));
        // Groups of uneven sizes: eight tasks, not eight a little short and a ninth of
        // what they left.
        let uneven: Vec<u64> = (0..101).map(|i| [9, 10, 11, 12][i % 4]).collect();
        assert_eq!(pack(groups(&uneven), u64::MAX).len(), 8);
        // A large rewrite: no task takes more than four budgets.
        let tasks = pack(groups(&[10; 400]), 200);
        assert_eq!(tasks.len(), 50);
        // Two consecutive groups that do not fit together go to different tasks.
        let sizes: Vec<u64> = (0..80).map(|i| [15, 15, 5, 5, 10][i % 5]).collect();
        let tasks = pack(groups(&sizes), 200);
        let size_of = |f: &FileRows| sizes[f.path[1..].parse::<usize>().unwrap()];
        for task in &tasks {
            let held: Vec<u64> = task.removed.iter().map(size_of).collect();
            assert!(held.windows(2).all(|w| w[0] + w[1] <= 20), "{held:?}");
        }
        assert_eq!(tasks.iter().map(|t| t.removed.len()).sum::<usize>(), 80);
        assert!(tasks.len() < 40, "{} tasks", tasks.len());
    }

    fn sized(path: &str, size: u64) -> FileRows {
        FileRows::whole(path.into(), 1, size, String::new())
    }

    /// A task of three partition groups of 20, 30 and 45 stored bytes.
    fn three_groups() -> MapTask {
        let mut task = group(&[], 0);
        task.removed = vec![sized("r1", 10), sized("r2", 30), sized("r3", 5)];
        task.added = vec![sized("a1", 10), sized("a3", 40)];
        task.input_bytes = 95;
        task.groups = vec![(1, 1), (1, 0), (1, 1)];
        task
    }

    #[test]
    fn a_task_holds_its_largest_two_consecutive_groups() {
        let mut task = three_groups();
        assert_eq!(task.held_input_bytes(), 75);
        task.groups = vec![(3, 2)];
        assert_eq!(task.held_input_bytes(), 95);
        // Files planned without their sizes: the whole input.
        task.removed = vec![sized("r1", 0), sized("r2", 0), sized("r3", 0)];
        task.added = vec![sized("a1", 0), sized("a3", 0)];
        task.groups = vec![(1, 1), (1, 0), (1, 1)];
        assert_eq!(task.held_input_bytes(), 95);
    }

    #[test]
    fn the_rest_of_a_task_from_a_group_on_keeps_its_files_and_sizes() {
        let mut task = three_groups();
        assert_eq!(task.leading_bytes(), 50);
        let rest = task.groups_from(1);
        let paths = |files: &[FileRows]| files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&rest.removed), ["r2", "r3"]);
        assert_eq!(paths(&rest.added), ["a3"]);
        assert_eq!(
            (rest.groups.clone(), rest.input_bytes),
            (vec![(1, 0), (1, 1)], 75)
        );
        assert_eq!(rest.leading_bytes(), 75);
        assert_eq!(task.groups_from(0).input_bytes, 95);
        assert!(task.groups_from(3).removed.is_empty());
        // One group only (tasks without groups): the whole task.
        task.groups.clear();
        assert_eq!(task.groups_from(0).removed.len(), 3);
        assert_eq!(task.leading_bytes(), 95);
    }

    #[test]
    fn packed_groups_split_back_into_their_files() {
        let mut task = group(&["r1", "r2", "r3"], 30);
        task.added = vec![whole("a1"), whole("a2")];
        task.groups = vec![(2, 1), (0, 0), (1, 1)];
        let split = task.split_groups(vec!["r1", "r2", "r3"], vec!["a1", "a2"]);
        assert_eq!(
            split,
            vec![
                (vec!["r1", "r2"], vec!["a1"]),
                (vec![], vec![]),
                (vec!["r3"], vec!["a2"])
            ]
        );
        // Tasks planned before groups were recorded, or counts that do not add up: one group.
        for groups in [vec![], vec![(1, 1)]] {
            task.groups = groups;
            assert_eq!(
                task.split_groups(vec!["r1", "r2", "r3"], vec!["a1", "a2"]),
                vec![(vec!["r1", "r2", "r3"], vec!["a1", "a2"])]
            );
        }
    }
}
