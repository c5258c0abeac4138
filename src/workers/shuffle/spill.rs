//! Map tasks over partition groups too large to cancel in memory. Both sides are streamed
//! side by side, a batch at a time, through the in-order walk a window at a time
//! (`walk`): the copies it pairs cancel there, and only what it leaves is partitioned by
//! a hash of the whole row into spill runs in the change store, under the snapshot's
//! shuffle prefix; identical rows (carryover the walk did not pair) share a partition,
//! so cancelling one partition at a time is exact. Memory holds a window of each side
//! (an eighth of the budget each) and one run (a quarter) while streaming, then one
//! partition (sized from the manifests to a quarter of the budget) while cancelling,
//! plus the bucket writer's quarter.
//! Must not reach: `api`, `delivery`.

use std::collections::BTreeSet;

use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use arrow::row::RowConverter;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::files::{
    DELETED, INSERTED, Partitioned, REGAINED, read_sides, shuffled_schema, with_side,
};
use super::map::{Buckets, cancel};
use super::walk::{Sided, Windows};
use super::{BucketFile, MapTask, estimated_memory};
use crate::change::{has_lineage, table_columns, table_width};
use crate::changelog::carryover::{row_hash, whole_row_converter};
use crate::changelog::read::stream_data_file;
use crate::changelog::{DeleteCache, FileRows};
use crate::store::ClaimedTask;
use crate::workers::task_context::{Opened, TaskContext, TaskError};

/// More partitions than this would mostly add per-file overhead.
const MAX_SPILL_PARTITIONS: u64 = 4096;

/// Cancels carryover of `map`'s files through spill partitions, feeding survivors to
/// `out`; deletes its spill files and returns how many partitions it used.
pub(super) async fn cancel_spilled(
    ctx: &TaskContext,
    task: &ClaimedTask,
    opened: &Opened,
    map: &MapTask,
    out: &mut Buckets<'_>,
) -> Result<u32, TaskError> {
    let budget = ctx.map_memory_bytes;
    let partitions = spill_partitions(estimated_memory(map.input_bytes), budget);
    let schema = opened.read.batch_schema();
    let shuffled = shuffled_schema(&schema);
    let converter = whole_row_converter(&schema).map_err(TaskError::compute)?;
    let flush_bytes = usize::try_from(budget / 4).unwrap_or(usize::MAX);
    let key = |n: usize| {
        let name = format!("spill-{n:04}");
        task.shuffle_file(&name)
    };
    let mut runs = Partitioned::new(partitions);
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
            for (batch, side) in unpaired.map_err(TaskError::compute)? {
                let of =
                    partition_of(&converter, &batch, partitions).map_err(TaskError::compute)?;
                let batch = with_side(&shuffled, &batch, side).map_err(TaskError::compute)?;
                runs.push(batch, &of);
                if runs.held_bytes() >= flush_bytes {
                    runs.flush(&ctx.changes, key).await?;
                }
            }
        }
    }
    runs.flush(&ctx.changes, key).await?;

    let mut by_partition: Vec<Vec<BucketFile>> = vec![Vec::new(); partitions as usize];
    for part in &runs.written {
        by_partition[part.bucket as usize].push(part.clone());
    }
    for parts in by_partition.iter().filter(|p| !p.is_empty()) {
        let [deleted, inserted, regains] = read_sides(&ctx.changes, parts, &schema).await?;
        let (removed, added) = (vec![deleted], vec![inserted, regains]);
        out.push(cancel(&schema, removed, added, vec![false, true]).await?)
            .await?;
    }
    // What a failure leaves behind goes with the snapshot's shuffle files.
    let files: BTreeSet<&str> = runs.written.iter().map(|p| p.path.as_str()).collect();
    for file in files {
        ctx.changes
            .delete(file)
            .await
            .map_err(TaskError::change_store)?;
    }
    metrics::counter!(crate::telemetry::metric::SPILLED_PARTITIONS.name)
        .increment(partitions as u64);
    Ok(partitions)
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

/// The spill partition of each row of `batch`, from a hash of the whole row.
fn partition_of(
    converter: &RowConverter,
    batch: &RecordBatch,
    partitions: u32,
) -> Result<Vec<u32>, ArrowError> {
    let rows = converter.convert_columns(table_columns(batch))?;
    Ok(rows
        .iter()
        .map(|row| ((row_hash(row.as_ref()) >> 32) as u32) % partitions)
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::{Array, AsArray, Int64Array, StringArray};
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
            partition_of(&converter, &a, 64).unwrap(),
            partition_of(&converter, &b, 64).unwrap(),
        );
        assert_eq!((pa[0], pa[1], pa[2]), (pb[1], pb[2], pb[0]));
        let many: Vec<(i64, Option<&str>)> = (0..1000).map(|i| (i, Some("v"))).collect();
        let spread: BTreeSet<u32> = partition_of(&converter, &batch(&many), 64)
            .unwrap()
            .into_iter()
            .collect();
        assert!(
            spread.len() > 48,
            "1000 rows fell in {} of 64",
            spread.len()
        );
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
                for (r, p) in partition_of(&converter, batch, 5)
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
