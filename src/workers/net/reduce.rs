//! Net reduce task: read a run of buckets from every net map task, cancel identical
//! images (what a range changed and changed back), pair what is left by key, and write
//! one segment of the range's result, each event tagged with the last change set that
//! touched its key.
//! Must not reach: `catalog` (a range is read from the change store alone).

use std::collections::HashMap;

use arrow::array::{Array, AsArray, Int8Array, RecordBatch};
use arrow::compute::kernels::cmp::eq;
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{Int8Type, Int64Type, SchemaRef};
use arrow::error::ArrowError;
use arrow::row::RowConverter;

use super::{NetReduceResult, NetReduceTask};
use crate::change::{ChangeRow, Survivors, has_lineage, table_width};
use crate::changelog::carryover::{PairError, cancel_carryover, pair};
use crate::changes::ShuffleKey;
use crate::changes::writer::encode_net_changes;
use crate::failure::{Failure, FailureCode};
use crate::store::ClaimedTask;
use crate::workers::shuffle::files::{DELETED, INSERTED, read_parts};
use crate::workers::shuffle::{hashed_columns, key_converter};
use crate::workers::task_context::{TaskContext, TaskError};

/// Runs a net reduce task.
pub async fn run_net_reduce(
    ctx: &TaskContext,
    task: &ClaimedTask,
    reduce: NetReduceTask,
) -> Result<NetReduceResult, TaskError> {
    let Some(net) = task.net_key() else {
        return Err(TaskError::Permanent(Failure::new(
            FailureCode::Internal,
            "a net reduce task without its range",
        )));
    };
    let batches = read_parts(&ctx.changes, &reduce.inputs).await?;
    let key = reduce.key.clone();
    // Netting and encoding are CPU work on all of the task's rows: off the async workers.
    let encoded = tokio::task::spawn_blocking(move || {
        let Some((survivors, changes, ordinals)) = net_changes(&batches, &key)? else {
            return Ok(None);
        };
        let encoded =
            encode_net_changes(&survivors, &changes, ordinals).map_err(TaskError::compute)?;
        Ok::<_, TaskError>(Some((encoded, changes.len() as i64)))
    })
    .await
    .map_err(TaskError::joined)??;
    let Some((encoded, events)) = encoded else {
        return Ok(NetReduceResult {
            events: 0,
            path: None,
            size: 0,
            decoded: None,
        });
    };
    let path = net.segment(reduce.n);
    let size = encoded.bytes.len() as i64;
    ctx.changes
        .put(&path, encoded.bytes)
        .await
        .map_err(TaskError::change_store)?;
    Ok(NetReduceResult {
        events,
        path: Some(path),
        size,
        decoded: Some(encoded.decoded_bytes),
    })
}

/// The net changes of a bucket: the surviving images, the changes (indexes into them),
/// and the ordinal of each change's last change set.
type Netted = (Survivors, Vec<ChangeRow>, Vec<i64>);

/// The net changes of shuffled images (`_side`, `_ordinal`, then the rows), ordered by
/// the change set of their last change; `None` when nothing changed.
fn net_changes(batches: &[RecordBatch], key: &[usize]) -> Result<Option<Netted>, TaskError> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let all = concat_batches(first.schema_ref(), batches).map_err(TaskError::compute)?;
    let rows: SchemaRef = std::sync::Arc::new(arrow::datatypes::Schema::new(
        all.schema().fields()[2..].to_vec(),
    ));
    let [(deleted, deleted_at), (inserted, inserted_at)] =
        [DELETED, INSERTED].map(|side| side_of(&all, &rows, side));
    let (deleted, deleted_at) = (deleted.map_err(TaskError::compute)?, deleted_at);
    let (inserted, inserted_at) = (inserted.map_err(TaskError::compute)?, inserted_at);

    // The last change set that touched each key, over every image (cancelled ones too:
    // a key changed and changed back last changed when it changed back).
    let columns = hashed_columns(&rows, key);
    let converter = key_converter(&rows, &columns)?;
    let mut last: HashMap<Box<[u8]>, i64> = HashMap::new();
    for (batch, ordinals) in [(&deleted, &deleted_at), (&inserted, &inserted_at)] {
        let keys = keys_of(&converter, batch, &columns).map_err(TaskError::compute)?;
        for (row, &ordinal) in keys.iter().zip(ordinals) {
            let at = last.entry(row.as_ref().into()).or_insert(ordinal);
            *at = (*at).max(ordinal);
        }
    }

    let survivors =
        cancel_carryover(&rows, &[deleted], &[inserted], &[]).map_err(TaskError::compute)?;
    let survivors = without_unknown_lineage(survivors).map_err(TaskError::compute)?;
    let changes = pair(&survivors, key).map_err(|e| match e {
        PairError::DuplicateKey(d) => TaskError::Permanent(Failure::new(
            FailureCode::IdentifierColumnsInvalid,
            format!(
                "the identifier columns are not unique at one end of the range: two {} rows \
                 share a key",
                d.side
            ),
        )),
        PairError::Arrow(e) => TaskError::compute(e),
    })?;
    if changes.is_empty() {
        return Ok(None);
    }
    let [before_keys, after_keys] = [&survivors.deleted, &survivors.inserted]
        .map(|batch| keys_of(&converter, batch, &columns).map_err(TaskError::compute));
    let (before_keys, after_keys) = (before_keys?, after_keys?);
    let ordinal_of = |row: arrow::row::Row<'_>| last.get(row.as_ref()).copied().unwrap_or(0);
    let mut ordered: Vec<(i64, ChangeRow)> = changes
        .into_iter()
        .map(|c| {
            let before = c
                .before
                .map_or(0, |b| ordinal_of(before_keys.row(b as usize)));
            let after = c
                .after
                .map_or(0, |a| ordinal_of(after_keys.row(a as usize)));
            (before.max(after), c)
        })
        .collect();
    ordered.sort_by_key(|(ordinal, _)| *ordinal);
    let (ordinals, changes) = ordered.into_iter().unzip();
    Ok(Some((survivors, changes, ordinals)))
}

/// The rows of one side of shuffled images, and their change sets' ordinals.
fn side_of(
    all: &RecordBatch,
    rows: &SchemaRef,
    side: i8,
) -> (Result<RecordBatch, ArrowError>, Vec<i64>) {
    let picked = all.column(0).as_primitive_opt::<Int8Type>().map_or_else(
        || {
            Err(ArrowError::InvalidArgumentError(
                "a shuffle file is corrupt".into(),
            ))
        },
        |sides| {
            let mask = eq(sides, &Int8Array::new_scalar(side))?;
            filter_record_batch(all, &mask)
        },
    );
    match picked {
        Ok(picked) => {
            let ordinals = picked
                .column(1)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec();
            let rows = RecordBatch::try_new(rows.clone(), picked.columns()[2..].to_vec());
            (rows, ordinals)
        }
        Err(e) => (Err(e), Vec::new()),
    }
}

fn keys_of(
    converter: &RowConverter,
    batch: &RecordBatch,
    columns: &[usize],
) -> Result<arrow::row::Rows, ArrowError> {
    let keys: Vec<_> = columns.iter().map(|&i| batch.column(i).clone()).collect();
    converter.convert_columns(&keys)
}

/// `survivors` without their lineage columns when no row has lineage (tables of format
/// version 2), so that their events carry none, as the feed's do.
fn without_unknown_lineage(survivors: Survivors) -> Result<Survivors, ArrowError> {
    let schema = survivors.deleted.schema();
    if !has_lineage(&schema) {
        return Ok(survivors);
    }
    let width = table_width(&schema);
    let known = [&survivors.deleted, &survivors.inserted].iter().any(|b| {
        b.columns()[width..]
            .iter()
            .any(|c| c.null_count() < c.len())
    });
    if known {
        return Ok(survivors);
    }
    let table: Vec<usize> = (0..width).collect();
    Ok(Survivors {
        deleted: survivors.deleted.project(&table)?,
        inserted: survivors.inserted.project(&table)?,
        regained: survivors.regained,
    })
}
