//! Map tasks over partition groups too large to cancel in memory. Both sides are streamed
//! side by side, a batch at a time, through the in-order walk a window at a time
//! (`walk`): the copies it pairs cancel there, and only what it leaves is partitioned by
//! a hash of the whole row into spill runs in the change store, under the snapshot's
//! shuffle prefix; identical rows (carryover the walk did not pair) share a partition,
//! so cancelling one partition at a time is exact. Memory holds a window of each side
//! (an eighth of the budget each) and one run (a quarter) while streaming, then one
//! partition (sized from the manifests to a quarter of the budget; one that turns out
//! larger is split again) while cancelling, plus the bucket writer's quarter.
//! Must not reach: `api`, `delivery`.

use std::collections::{BTreeMap, BTreeSet};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::row::RowConverter;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::files::{
    DELETED, INSERTED, Partitioned, REGAINED, read_parts, read_sides, shuffled_schema, with_side,
};
use super::map::{Buckets, cancel};
use super::walk::{Sided, Windows};
use super::{BucketFile, MapTask};
use crate::change::{has_lineage, table_columns, table_width};
use crate::changelog::carryover::{row_hash, whole_row_converter};
use crate::changelog::read::stream_data_file;
use crate::changelog::{DeleteCache, FileRows};
use crate::store::ClaimedTask;
use crate::workers::task_context::{Opened, TaskContext, TaskError};

/// More partitions than this would mostly add per-file overhead.
const MAX_SPILL_PARTITIONS: u64 = 4096;

/// Cancels carryover of `map`'s files, estimated to take `estimate` bytes in memory,
/// through spill partitions, feeding survivors to `out`; deletes its spill files and
/// returns how many partitions it used.
pub(super) async fn cancel_spilled(
    ctx: &TaskContext,
    task: &ClaimedTask,
    opened: &Opened,
    map: &MapTask,
    estimate: u64,
    out: &mut Buckets<'_>,
) -> Result<u32, TaskError> {
    let budget = ctx.map_memory_bytes;
    let partitions = spill_partitions(estimate, budget);
    let schema = opened.read.batch_schema();
    let shuffled = shuffled_schema(&schema);
    let converter = whole_row_converter(&schema).map_err(TaskError::compute)?;
    let spill = Spill {
        ctx,
        task,
        schema: &schema,
        converter: &converter,
    };
    let mut runs = Runs::new("spill".into(), 0, partitions);
    let deletes = DeleteCache::default();
    // Each side's window: with the runs, a quarter of the budget.
    let window = usize::try_from(budget / 8).unwrap_or(usize::MAX);
    let compared = table_width(&schema) + usize::from(has_lineage(&schema));
    for (removed, added) in map.split_groups(map.removed.clone(), map.added.clone()) {
        let mut sides = [
            side_batches(opened, &removed, true, &deletes),
            side_batches(opened, &added, false, &deletes),
        ];
        let mut windows = Windows::new(window, compared);
        while !windows.done() {
            for (stream, removed) in sides.iter_mut().zip([true, false]) {
                while windows.wants(removed) {
                    match stream.try_next().await? {
                        Some((batch, side)) => {
                            if side == REGAINED {
                                out.resurrected += batch.num_rows() as i64;
                            }
                            windows.push(removed, batch, side);
                        }
                        None => windows.end(removed),
                    }
                }
            }
            // The walk is CPU work on up to two windows of rows.
            let (walked, unpaired) = tokio::task::spawn_blocking(move || {
                let unpaired = windows.walk();
                (windows, unpaired)
            })
            .await
            .map_err(TaskError::joined)?;
            windows = walked;
            for (rows, side) in unpaired.map_err(TaskError::compute)? {
                let shuffled = with_side(&shuffled, &rows, side).map_err(TaskError::compute)?;
                spill.push(&mut runs, &rows, shuffled).await?;
            }
        }
    }
    let written = spill.written(runs).await?;
    spill.cancel_runs(written, "spill", 0, out).await?;
    count_partitions(0, partitions);
    Ok(partitions)
}

/// Partitions split again at most this many times: rows that still fall in one
/// partition then are mostly copies of one row, which no hash separates.
const MAX_SPLITS: u32 = 3;

/// Spill runs being written at one `level`: rows by partition, written as files named
/// after `name`.
struct Runs {
    name: String,
    level: u32,
    partitions: u32,
    held: Partitioned,
}

impl Runs {
    fn new(name: String, level: u32, partitions: u32) -> Self {
        Self {
            name,
            level,
            partitions,
            held: Partitioned::new(partitions),
        }
    }
}

/// What writing and cancelling spill partitions works with.
struct Spill<'a> {
    ctx: &'a TaskContext,
    task: &'a ClaimedTask,
    schema: &'a SchemaRef,
    converter: &'a RowConverter,
}

impl Spill<'_> {
    /// Cancels carryover of each spill partition of `runs` (written as files named after
    /// `name`, at `level`) into `out`, then deletes them. A partition of more than a
    /// quarter of the budget (its rows decoded to more than their stored sizes promised)
    /// is split again, by another hash of the whole row, so identical rows still meet.
    fn cancel_runs<'a>(
        &'a self,
        runs: Vec<BucketFile>,
        name: &'a str,
        level: u32,
        out: &'a mut Buckets<'_>,
    ) -> BoxFuture<'a, Result<(), TaskError>> {
        Box::pin(async move {
            let mut by_partition: BTreeMap<u32, Vec<BucketFile>> = BTreeMap::new();
            for part in &runs {
                by_partition
                    .entry(part.bucket)
                    .or_default()
                    .push(part.clone());
            }
            let budget = self.ctx.map_memory_bytes;
            for (partition, parts) in by_partition {
                let bytes: u64 = parts.iter().map(BucketFile::memory).sum();
                if bytes > budget / 4 && level < MAX_SPLITS {
                    let name = format!("{name}.{partition}");
                    let runs = Runs::new(name.clone(), level + 1, spill_partitions(bytes, budget));
                    let split = self.split(&parts, runs).await?;
                    self.cancel_runs(split, &name, level + 1, out).await?;
                    continue;
                }
                let [deleted, inserted, regains] =
                    read_sides(&self.ctx.changes, &parts, self.schema).await?;
                let (removed, added) = (vec![deleted], vec![inserted, regains]);
                out.push(cancel(self.schema, removed, added, vec![false, true]).await?)
                    .await?;
            }
            // What a failure leaves behind goes with the snapshot's shuffle files.
            let files: BTreeSet<&str> = runs.iter().map(|p| p.path.as_str()).collect();
            for file in files {
                self.ctx
                    .changes
                    .delete(file)
                    .await
                    .map_err(TaskError::change_store)?;
            }
            Ok(())
        })
    }

    /// Writes the rows of one partition's `parts` into `runs`, a part at a time; returns
    /// where they are.
    async fn split(
        &self,
        parts: &[BucketFile],
        mut runs: Runs,
    ) -> Result<Vec<BucketFile>, TaskError> {
        for part in parts {
            for shuffled in read_parts(&self.ctx.changes, std::slice::from_ref(part)).await? {
                // Shuffled rows: their side, then the table's columns.
                let columns = shuffled.columns()[1..].to_vec();
                let rows = RecordBatch::try_new(self.schema.clone(), columns)
                    .map_err(TaskError::compute)?;
                self.push(&mut runs, &rows, shuffled).await?;
            }
        }
        let (level, partitions) = (runs.level, runs.partitions);
        let written = self.written(runs).await?;
        count_partitions(level, partitions);
        Ok(written)
    }

    /// Adds `rows` (as `shuffled`, with their side) to the partition of each in `runs`,
    /// writing the runs out whenever they hold a quarter of the budget.
    async fn push(
        &self,
        runs: &mut Runs,
        rows: &RecordBatch,
        shuffled: RecordBatch,
    ) -> Result<(), TaskError> {
        let of = partition_of(self.converter, rows, runs.partitions, runs.level)
            .map_err(TaskError::compute)?;
        runs.held.push(shuffled, &of);
        if runs.held.held_bytes() as u64 >= self.ctx.map_memory_bytes / 4 {
            self.flush(runs).await?;
        }
        Ok(())
    }

    /// Writes out what `runs` hold.
    async fn flush(&self, runs: &mut Runs) -> Result<(), TaskError> {
        let name = &runs.name;
        let key = |n: usize| self.task.shuffle_file(&format!("{name}-{n:04}"));
        runs.held.flush(&self.ctx.changes, key).await
    }

    /// Writes out the rest of `runs`; where all of them are.
    async fn written(&self, mut runs: Runs) -> Result<Vec<BucketFile>, TaskError> {
        self.flush(&mut runs).await?;
        Ok(runs.held.written)
    }
}

/// Counts `partitions` spill partitions at `level` (0: a task's, deeper: split again).
fn count_partitions(level: u32, partitions: u32) {
    metrics::counter!(
        crate::telemetry::metric::SPILLED_PARTITIONS.name,
        "level" => level.to_string()
    )
    .increment(partitions as u64);
}

/// The rows of `files` (of the removed side, or the added), in file order, a batch at a
/// time, each with its `_side`.
fn side_batches<'a>(
    opened: &'a Opened,
    files: &'a [FileRows],
    removed: bool,
    deletes: &'a DeleteCache,
) -> BoxStream<'a, Result<Sided, TaskError>> {
    futures::stream::iter(files)
        .then(move |rows| async move {
            let side = match (removed, rows.regains_rows()) {
                (true, _) => DELETED,
                (false, false) => INSERTED,
                (false, true) => REGAINED,
            };
            let batches = stream_data_file(&opened.file_io, rows, &opened.read, deletes)
                .await
                .map_err(TaskError::reading)?;
            Ok(batches
                .map_err(TaskError::reading)
                .map_ok(move |batch| (batch, side)))
        })
        .try_flatten()
        .boxed()
}

/// Partitions for `estimate` bytes of rows, each about a quarter of `budget`.
fn spill_partitions(estimate: u64, budget: u64) -> u32 {
    estimate
        .div_ceil((budget / 4).max(1))
        .clamp(2, MAX_SPILL_PARTITIONS) as u32
}

/// The spill partition of each row of `batch`, from a hash of the whole row, mixed
/// differently at each `level` of splitting.
fn partition_of(
    converter: &RowConverter,
    batch: &RecordBatch,
    partitions: u32,
    level: u32,
) -> Result<Vec<u32>, ArrowError> {
    let rows = converter.convert_columns(table_columns(batch))?;
    let mix = |hash: u64| match level {
        0 => hash,
        _ => (hash ^ u64::from(level)).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    };
    Ok(rows
        .iter()
        .map(|row| ((mix(row_hash(row.as_ref())) >> 32) as u32) % partitions)
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::{Array, AsArray, Int64Array, StringArray, UInt32Array};
    use arrow::datatypes::Int64Type;

    use super::*;
    use crate::changelog::carryover::tests::schema;
    use crate::changelog::carryover::{cancel_carryover, gather};

    fn batch(rows: &[(i64, Option<&str>)]) -> RecordBatch {
        let ids: Int64Array = rows.iter().map(|r| Some(r.0)).collect();
        let values: StringArray = rows.iter().map(|r| r.1).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(values)]).unwrap()
    }

    /// Rows as a multiset.
    fn counted(batch: &RecordBatch) -> BTreeMap<(i64, Option<String>), usize> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let values = batch.column(1).as_string::<i32>();
        let mut out = BTreeMap::new();
        for i in 0..batch.num_rows() {
            let value = (!values.is_null(i)).then(|| values.value(i).to_string());
            *out.entry((ids.value(i), value)).or_default() += 1;
        }
        out
    }

    #[test]
    fn partitions_hold_about_a_quarter_of_the_budget() {
        assert_eq!(spill_partitions(1000, 400), 10);
        assert_eq!(spill_partitions(10, 400), 2, "never fewer than two");
        assert_eq!(spill_partitions(u64::MAX, 4), 4096, "nor more than the cap");
    }

    #[test]
    fn identical_rows_share_a_partition_and_others_spread() {
        let converter = whole_row_converter(&schema()).unwrap();
        let a = batch(&[(1, Some("x")), (2, None), (3, Some("y"))]);
        let b = batch(&[(3, Some("y")), (1, Some("x")), (2, None), (1, Some("X"))]);
        let (pa, pb) = (
            partition_of(&converter, &a, 64, 0).unwrap(),
            partition_of(&converter, &b, 64, 0).unwrap(),
        );
        assert_eq!((pa[0], pa[1], pa[2]), (pb[1], pb[2], pb[0]));
        let many: Vec<(i64, Option<&str>)> = (0..1000).map(|i| (i, Some("v"))).collect();
        let spread: BTreeSet<u32> = partition_of(&converter, &batch(&many), 64, 0)
            .unwrap()
            .into_iter()
            .collect();
        assert!(
            spread.len() > 48,
            "1000 rows fell in {} of 64",
            spread.len()
        );
    }

    #[test]
    fn a_partition_split_again_spreads_its_rows_and_keeps_identical_ones_together() {
        let converter = whole_row_converter(&schema()).unwrap();
        let many: Vec<(i64, Option<&str>)> = (0..4000).map(|i| (i, Some("v"))).collect();
        let rows = batch(&many);
        let top = partition_of(&converter, &rows, 4, 0).unwrap();
        let first: Vec<u32> = (0..4000).filter(|&i| top[i as usize] == 0).collect();
        let first = arrow::compute::take_record_batch(&rows, &UInt32Array::from(first)).unwrap();
        let again = partition_of(&converter, &first, 8, 1).unwrap();
        let spread: BTreeSet<u32> = again.iter().copied().collect();
        assert_eq!(spread.len(), 8, "one partition's rows go to all 8 again");
        let twice = arrow::compute::concat_batches(&first.schema(), [&first, &first]).unwrap();
        let both = partition_of(&converter, &twice, 8, 1).unwrap();
        assert_eq!(both[..first.num_rows()], both[first.num_rows()..]);
    }

    /// Cancelling partition by partition gives what cancelling everything at once gives,
    /// duplicates counted.
    #[test]
    fn cancelling_per_partition_is_exact() {
        let value = |i: i64| ["a", "b", "c"][(i % 3) as usize];
        let removed: Vec<(i64, Option<&str>)> =
            (0..300).map(|i| (i % 120, Some(value(i)))).collect();
        let added: Vec<(i64, Option<&str>)> = (0..300)
            .map(|i| (i % 110, (i % 7 != 0).then(|| value(i + 1))))
            .collect();
        let (removed, added) = (
            vec![batch(&removed[..150]), batch(&removed[150..])],
            vec![batch(&added)],
        );
        let whole = cancel_carryover(&schema(), &removed, &added, &[]).unwrap();

        let converter = whole_row_converter(&schema()).unwrap();
        let split = |batches: &[RecordBatch]| -> Vec<Vec<(usize, usize)>> {
            let mut by = vec![Vec::new(); 5];
            for (b, batch) in batches.iter().enumerate() {
                for (r, p) in partition_of(&converter, batch, 5, 0)
                    .unwrap()
                    .into_iter()
                    .enumerate()
                {
                    by[p as usize].push((b, r));
                }
            }
            by
        };
        let (mut deleted, mut inserted) = (BTreeMap::new(), BTreeMap::new());
        for (r, a) in split(&removed).into_iter().zip(split(&added)) {
            let part = cancel_carryover(
                &schema(),
                &[gather(&schema(), &removed, &r).unwrap()],
                &[gather(&schema(), &added, &a).unwrap()],
                &[],
            )
            .unwrap();
            for (k, n) in counted(&part.deleted) {
                *deleted.entry(k).or_default() += n;
            }
            for (k, n) in counted(&part.inserted) {
                *inserted.entry(k).or_default() += n;
            }
        }
        assert!(!deleted.is_empty() && !inserted.is_empty());
        assert_eq!(deleted, counted(&whole.deleted));
        assert_eq!(inserted, counted(&whole.inserted));
    }
}
