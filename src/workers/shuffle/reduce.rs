//! Reduce task: read a run of buckets from every map task, pair rows by key, and write
//! one segment of the change set.
//! Must not reach: `catalog`, `api` (it reads shuffle files, never the table).

use arrow::compute::concat_batches;

use super::files::read_sides;
use super::{ReduceResult, ReduceTask};
use crate::change::{ChangeRow, Survivors};
use crate::changelog::carryover::{PairError, pair};
use crate::changes::ShuffleKey;
use crate::changes::writer::{EncodedSegment, encode_changes};
use crate::failure::{Failure, FailureCode};
use crate::store::ClaimedTask;
use crate::workers::task_context::{TaskContext, TaskError, render_key};

/// Runs a reduce task.
pub async fn run_reduce(
    ctx: &TaskContext,
    task: &ClaimedTask,
    reduce: ReduceTask,
) -> Result<ReduceResult, TaskError> {
    let opened = ctx
        .open(task.table_id, reduce.schema_id, reduce.lineage)
        .await?;
    let schema = opened.read.batch_schema();
    let [deleted, inserted, regained] = read_sides(&ctx.changes, &reduce.inputs, &schema).await?;
    // Regained rows follow the others; pairing orders changes by key, not by row.
    let gained = inserted.num_rows();
    let all = gained + regained.num_rows();
    let survivors = Survivors {
        deleted,
        inserted: concat_batches(&schema, [&inserted, &regained]).map_err(TaskError::compute)?,
        regained: (gained as u32..all as u32).collect(),
    };
    // Pairing and encoding are CPU work on all of the task's rows: off the async workers.
    let (key, table_schema) = (reduce.key.clone(), opened.schema.clone());
    let encoded = tokio::task::spawn_blocking(move || encode(&survivors, &key, &table_schema))
        .await
        .map_err(TaskError::joined)??;
    let Some((encoded, rows)) = encoded else {
        return Ok(ReduceResult {
            rows: 0,
            path: None,
            size: 0,
            decoded: None,
        });
    };
    let path = task.key().segment(reduce.n);
    let size = encoded.bytes.len() as i64;
    ctx.changes
        .put(&path, encoded.bytes)
        .await
        .map_err(TaskError::change_store)?;
    Ok(ReduceResult {
        rows,
        path: Some(path),
        size,
        decoded: Some(encoded.decoded_bytes),
    })
}

/// The segment of the changes `survivors` pair into by `key`, with how many there are;
/// None when there are none.
fn encode(
    survivors: &Survivors,
    key: &[usize],
    table_schema: &iceberg::spec::SchemaRef,
) -> Result<Option<(EncodedSegment, i64)>, TaskError> {
    let changes = pair_by_key(survivors, key, table_schema)?;
    if changes.is_empty() {
        return Ok(None);
    }
    let encoded = encode_changes(survivors, &changes).map_err(TaskError::compute)?;
    Ok(Some((encoded, changes.len() as i64)))
}

/// The changes `survivors` pair into by `key`; two rows of one side with the same key
/// stop the table (`table_schema` renders the key for the message).
pub(super) fn pair_by_key(
    survivors: &Survivors,
    key: &[usize],
    table_schema: &iceberg::spec::SchemaRef,
) -> Result<Vec<ChangeRow>, TaskError> {
    pair(survivors, key).map_err(|e| match e {
        PairError::DuplicateKey(d) => {
            let batch = if d.side == "deleted" {
                &survivors.deleted
            } else {
                &survivors.inserted
            };
            let key = render_key(table_schema, batch, d.second as usize, key);
            TaskError::Permanent(Failure::new(
                FailureCode::IdentifierColumnsInvalid,
                format!(
                    "the identifier columns are not unique: two {} rows have the key {key}",
                    d.side
                ),
            ))
        }
        PairError::Arrow(e) => TaskError::compute(e),
    })
}
