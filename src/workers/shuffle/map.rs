//! Map task: cancel carryover within whole partition groups (one group at a time, so the
//! hash table stays small), then hash what survives by key into buckets, written as
//! shuffle files (see `files`). Tasks whose decoded rows fit in
//! `scheduler.map_memory_bytes` two groups at a time are cancelled in memory; others go
//! through `spill`, which feeds the same bucket writer one spill partition at a time.
//! Must not reach: `api`, `delivery`.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use futures::{Stream, StreamExt, TryStreamExt};

use super::files::{DELETED, INSERTED, Partitioned, REGAINED, shuffled_schema, with_sides};
use super::{MapResult, MapTask, estimated_memory, spill};
use crate::change::{Survivors, has_lineage, table_width};
use crate::changelog::DeleteCache;
use crate::changelog::carryover::cancel_carryover;
use crate::changelog::read::DecodedBudget;
use crate::store::ClaimedTask;
use crate::telemetry::metric::OVER_ESTIMATE;
use crate::workers::task_context::{Opened, TaskContext, TaskError};

/// Runs a map task.
pub async fn run_map(
    ctx: &TaskContext,
    task: &ClaimedTask,
    map: MapTask,
) -> Result<MapResult, TaskError> {
    let opened = ctx.open(task.table_id, map.schema_id, map.lineage).await?;
    let schema = opened.read.batch_schema();
    let budget = ctx.map_memory_bytes;
    let mut out = Buckets::new(ctx, task, &schema, &map, budget)?;
    let spilled_partitions = if estimated_memory(map.held_input_bytes()) <= budget {
        match cancel_in_memory(&opened, map, budget, &mut out).await? {
            None => 0,
            Some((rest, estimate)) => {
                metrics::counter!(OVER_ESTIMATE.name, "where" => "map").increment(1);
                tracing::info!(
                    task = %task.id,
                    groups_left = rest.groups.len().max(1),
                    estimate,
                    "the map task's rows decode past scheduler.map_memory_bytes: the groups \
                     left go through spill partitions"
                );
                spill::cancel_spilled(ctx, task, &opened, &rest, estimate, &mut out).await?
            }
        }
    } else {
        let estimate = estimated_memory(map.input_bytes);
        spill::cancel_spilled(ctx, task, &opened, &map, estimate, &mut out).await?
    };
    Ok(MapResult {
        spilled_partitions,
        ..out.finish().await?
    })
}

/// Cancels `map`'s partition groups in memory into `out`. When one would not fit
/// `budget` once decoded, returns the groups left from it, with the memory they are
/// estimated to take at the rate the groups in flight decoded at.
async fn cancel_in_memory(
    opened: &Opened,
    map: MapTask,
    budget: u64,
    out: &mut Buckets<'_>,
) -> Result<Option<(MapTask, u64)>, TaskError> {
    let all = map.clone();
    let decoded = decoded_budget(budget);
    let mut groups = std::pin::pin!(cancel_groups(opened, map, decoded.clone()));
    let mut cancelled = 0;
    while let Some(group) = groups.try_next().await? {
        let Some(group) = group else {
            // The groups in flight (this one and the next) decoded to more than the
            // budget holds: the rest is estimated at least at that rate.
            let rest = all.groups_from(cancelled);
            let seen = rest.input_bytes.saturating_mul(budget) / rest.leading_bytes().max(1);
            let estimate = seen.max(estimated_memory(rest.input_bytes));
            return Ok(Some((rest, estimate)));
        };
        cancelled += 1;
        out.resurrected += group.resurrected;
        // The bucket writer holds survivors within its own quarter of the budget.
        decoded.release(group.survivors.memory_size());
        out.push(group.survivors).await?;
    }
    Ok(None)
}

/// What cancelling carryover left of one partition group.
pub(super) struct CancelledGroup {
    pub survivors: Survivors,
    /// Rows read from files that regained them.
    pub resurrected: i64,
}

/// The budget of decoded rows of carryover cancelled in `memory` bytes: two thirds, since
/// cancelling a group adds the row format of one of its sides.
pub(super) fn decoded_budget(memory: u64) -> DecodedBudget {
    DecodedBudget::new(memory / 3 * 2)
}

/// Cancels carryover in memory, partition group by group: each group's survivors, in
/// order, while decoded rows stay within `budget` (memory is planned from stored sizes;
/// see [`DecodedBudget`]); `None` for the first group they would not. The survivors stay
/// counted in `budget` until their holder releases them.
pub(super) fn cancel_groups(
    opened: &Opened,
    mut map: MapTask,
    budget: DecodedBudget,
) -> impl Stream<Item = Result<Option<CancelledGroup>, TaskError>> + '_ {
    let schema = opened.read.batch_schema();
    let deletes = DeleteCache::default();
    // Two groups are in flight: one is read while the other is cancelled, or both are
    // cancelled on two threads; memory holds two groups, not the task's every file.
    let (removed, added) = (
        std::mem::take(&mut map.removed),
        std::mem::take(&mut map.added),
    );
    futures::stream::iter(map.split_groups(removed, added))
        .map(move |(removed, files)| {
            let (deletes, schema, budget) = (deletes.clone(), schema.clone(), budget.clone());
            async move {
                let read = futures::try_join!(
                    opened.read_each_file(&removed, &deletes, &budget),
                    opened.read_each_file(&files, &deletes, &budget)
                )?;
                let (Some(removed), Some(added)) = read else {
                    return Ok(None);
                };
                let held: u64 = [&removed, &added]
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|b| b.get_array_memory_size() as u64)
                    .sum();
                let (mut batches, mut regained) = (Vec::new(), Vec::new());
                let mut resurrected = 0;
                for (file, rows) in files.iter().zip(added) {
                    let regains = file.regains_rows();
                    if regains {
                        resurrected += rows.iter().map(|b| b.num_rows() as i64).sum::<i64>();
                    }
                    regained.extend(std::iter::repeat_n(regains, rows.len()));
                    batches.extend(rows);
                }
                let survivors = cancel(&schema, removed.concat(), batches, regained).await?;
                budget.release(held.saturating_sub(survivors.memory_size()));
                Ok(Some(CancelledGroup {
                    survivors,
                    resurrected,
                }))
            }
        })
        .buffered(2)
}

/// Cancels carryover off the async workers: it is CPU work on up to a budget of rows.
/// `regained[b]`: whether added batch `b` holds rows a data file regained.
pub(super) async fn cancel(
    schema: &SchemaRef,
    removed: Vec<RecordBatch>,
    added: Vec<RecordBatch>,
    regained: Vec<bool>,
) -> Result<Survivors, TaskError> {
    let schema = schema.clone();
    tokio::task::spawn_blocking(move || cancel_carryover(&schema, &removed, &added, &regained))
        .await
        .map_err(TaskError::joined)?
        .map_err(TaskError::compute)
}

/// Surviving rows hashed by key into buckets; written as a shuffle file whenever a
/// quarter of the memory budget of them is held, and at the end.
pub(super) struct Buckets<'a> {
    ctx: &'a TaskContext,
    task: &'a ClaimedTask,
    shuffled: SchemaRef,
    columns: Vec<usize>,
    converter: RowConverter,
    buckets: u32,
    /// Whether rows with a row id are bucketed by it: without a key, a delete and an
    /// insert of one row id pair into an update, so they must meet.
    by_row_id: bool,
    flush_bytes: usize,
    held: Partitioned,
    deleted: i64,
    inserted: i64,
    /// Rows read from files that regained them.
    pub(super) resurrected: i64,
}

impl<'a> Buckets<'a> {
    fn new(
        ctx: &'a TaskContext,
        task: &'a ClaimedTask,
        schema: &SchemaRef,
        map: &MapTask,
        budget: u64,
    ) -> Result<Self, TaskError> {
        let columns = hashed_columns(schema, &map.key);
        let converter = key_converter(schema, &columns)?;
        Ok(Self {
            ctx,
            task,
            shuffled: shuffled_schema(schema),
            columns,
            converter,
            buckets: map.buckets,
            by_row_id: map.key.is_empty() && has_lineage(schema),
            flush_bytes: usize::try_from(budget / 4).unwrap_or(usize::MAX),
            held: Partitioned::new(map.buckets),
            deleted: 0,
            inserted: 0,
            resurrected: 0,
        })
    }

    /// Adds surviving rows.
    pub(super) async fn push(&mut self, survivors: Survivors) -> Result<(), TaskError> {
        self.deleted += survivors.deleted.num_rows() as i64;
        self.inserted += survivors.inserted.num_rows() as i64;
        for (deleted, batch) in [(true, &survivors.deleted), (false, &survivors.inserted)] {
            if batch.num_rows() == 0 {
                continue;
            }
            let buckets = bucket_rows(
                &self.converter,
                batch,
                &self.columns,
                self.by_row_id,
                self.buckets,
            )?;
            let mut sides = vec![if deleted { DELETED } else { INSERTED }; batch.num_rows()];
            if !deleted {
                for &i in &survivors.regained {
                    sides[i as usize] = REGAINED;
                }
            }
            let batch = with_sides(&self.shuffled, batch, sides).map_err(TaskError::compute)?;
            self.held.push(batch, &buckets);
        }
        if self.held.held_bytes() >= self.flush_bytes {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), TaskError> {
        let task = self.task;
        self.held
            .flush(&self.ctx.changes, |n| task.shuffle_file(&format!("{n:04}")))
            .await
    }

    async fn finish(mut self) -> Result<MapResult, TaskError> {
        self.flush().await?;
        Ok(MapResult {
            deleted: self.deleted,
            inserted: self.inserted,
            buckets: self.held.written,
            spilled_partitions: 0,
            resurrected: self.resurrected,
        })
    }
}

/// The columns rows are bucketed on: the key's, or the table's when it has none.
pub(crate) fn hashed_columns(schema: &SchemaRef, key: &[usize]) -> Vec<usize> {
    if key.is_empty() {
        (0..table_width(schema)).collect()
    } else {
        key.to_vec()
    }
}

/// Converts the `columns` of rows of `schema` into comparable bytes.
pub(crate) fn key_converter(
    schema: &SchemaRef,
    columns: &[usize],
) -> Result<RowConverter, TaskError> {
    RowConverter::new(
        columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )
    .map_err(TaskError::compute)
}

/// The bucket of each row of `batch`: by the hash of its `columns` (converted by
/// `converter`), or of its row id when `by_row_id` and it has one.
pub(crate) fn bucket_rows(
    converter: &RowConverter,
    batch: &RecordBatch,
    columns: &[usize],
    by_row_id: bool,
    buckets: u32,
) -> Result<Vec<u32>, TaskError> {
    let keys: Vec<ArrayRef> = columns.iter().map(|&i| batch.column(i).clone()).collect();
    let rows = converter
        .convert_columns(&keys)
        .map_err(TaskError::compute)?;
    let ids = by_row_id.then(|| {
        batch
            .column(table_width(batch.schema_ref()))
            .as_primitive::<Int64Type>()
    });
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let hash = match ids.filter(|ids| ids.is_valid(i)) {
                Some(ids) => fnv1a(&ids.value(i).to_le_bytes()),
                None => fnv1a(row.as_ref()),
            };
            (hash % buckets as u64) as u32
        })
        .collect())
}

/// A hash that every node computes alike: std's hasher is seeded per process, and the
/// output of foldhash (the in-process hash of carryover and spills) may change between
/// its versions; FNV-1a's never does.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
