//! Net map task: read a run of the range's segments a chunk of events at a time and
//! hash every before image (as deleted) and after image (as inserted), with its change
//! set's ordinal, by key into buckets, written as shuffle files.
//! Must not reach: `catalog` (a range is read from the change store alone).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int8Array, Int64Array, RecordBatch, new_null_array,
};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;

use super::{NetMapResult, NetMapTask};
use crate::change::table_width;
use crate::changes::writer::{AFTER, AFTER_LINEAGE, BEFORE, BEFORE_LINEAGE, ORDINAL};
use crate::delivery::FeedError;
use crate::store::{ClaimedTask, StoredSegment};
use crate::workers::shuffle::files::{DELETED, INSERTED, Partitioned};
use crate::workers::shuffle::{bucket_rows, hashed_columns, key_converter};
use crate::workers::task_context::{TaskContext, TaskError};

/// Events read from a segment at a time, at most: fewer of wide rows, as many as store
/// [`CHUNK_STORED_BYTES`].
const CHUNK_EVENTS: usize = 65_536;
const CHUNK_STORED_BYTES: u64 = 8 << 20;

/// `_side`, `_ordinal`, then the images' columns.
pub(super) fn net_shuffled_schema(rows: &SchemaRef) -> SchemaRef {
    let mut fields = vec![
        Field::new("_side", DataType::Int8, false),
        Field::new(ORDINAL, DataType::Int64, false),
    ];
    fields.extend(rows.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

/// Runs a net map task.
pub async fn run_net_map(
    ctx: &TaskContext,
    task: &ClaimedTask,
    map: NetMapTask,
) -> Result<NetMapResult, TaskError> {
    let entry = ctx
        .feed
        .schema(task.table_id, map.schema_id)
        .await
        .map_err(feed_error)?;
    // Rows of keyless tables are netted as whole rows: their lineage is left out, so that
    // a row deleted under one id and added back under another cancels.
    let rows = entry
        .read
        .clone()
        .with_lineage(!map.key.is_empty())
        .batch_schema();
    let shuffled = net_shuffled_schema(&rows);
    let columns = hashed_columns(&rows, &map.key);
    let converter = key_converter(&rows, &columns)?;
    let flush_bytes = usize::try_from(ctx.map_memory_bytes / 4).unwrap_or(usize::MAX);
    let mut held = Partitioned::new(map.buckets);
    let mut images = 0i64;
    for input in &map.inputs {
        let segment = &input.segment;
        let inserts = segment.layout == "inserts";
        let mut offset = input.offset;
        let chunk = segment.events_within(CHUNK_STORED_BYTES, CHUNK_EVENTS);
        while offset < input.offset + input.count {
            let count = chunk.min(input.offset + input.count - offset);
            let batches = ctx
                .feed
                .read_rows(segment, &entry, offset, count)
                .await
                .map_err(feed_error)?;
            let read: usize = batches.iter().map(|b| b.num_rows()).sum();
            if read != count {
                return Err(TaskError::Permanent(crate::failure::Failure::new(
                    crate::failure::FailureCode::DataInvalid,
                    format!("segment {} holds fewer events than indexed", segment.path),
                )));
            }
            for batch in &batches {
                for (side, image) in images_of(batch, inserts, &rows).map_err(TaskError::compute)? {
                    if image.num_rows() == 0 {
                        continue;
                    }
                    images += image.num_rows() as i64;
                    let buckets = bucket_rows(&converter, &image, &columns, false, map.buckets)?;
                    let n = image.num_rows();
                    let mut tagged: Vec<ArrayRef> = vec![
                        Arc::new(Int8Array::from(vec![side; n])),
                        Arc::new(Int64Array::from(vec![segment.ordinal; n])),
                    ];
                    tagged.extend(image.columns().iter().cloned());
                    let tagged = RecordBatch::try_new(shuffled.clone(), tagged)
                        .map_err(TaskError::compute)?;
                    held.push(tagged, &buckets);
                }
            }
            offset += count;
            if held.held_bytes() >= flush_bytes {
                held.flush(&ctx.changes, |n| task.shuffle_file(&format!("{n:04}")))
                    .await?;
            }
        }
    }
    held.flush(&ctx.changes, |n| task.shuffle_file(&format!("{n:04}")))
        .await?;
    Ok(NetMapResult {
        schema_id: map.schema_id,
        key: map.key,
        images,
        buckets: held.written,
    })
}

/// The before images (deleted) and after images (inserted) of a batch of events, as rows
/// of `rows` (the table's columns, and lineage when `rows` has it).
fn images_of(
    batch: &RecordBatch,
    inserts: bool,
    rows: &SchemaRef,
) -> Result<Vec<(i8, RecordBatch)>, ArrowError> {
    if inserts {
        // A copied data file: every row is an insert; lineage follows its columns.
        let width = table_width(batch.schema_ref());
        let lineage = match &batch.columns()[width..] {
            [ids, updated] => Some([ids.clone(), updated.clone()]),
            _ => None,
        };
        let image = conform(&batch.columns()[..width], lineage, rows)?;
        return Ok(vec![(INSERTED, image)]);
    }
    let corrupt = || ArrowError::InvalidArgumentError("a segment is corrupt".into());
    let mut images = Vec::with_capacity(2);
    for (side, name, lineage) in [
        (DELETED, BEFORE, BEFORE_LINEAGE),
        (INSERTED, AFTER, AFTER_LINEAGE),
    ] {
        let image = batch
            .column_by_name(name)
            .and_then(|c| c.as_struct_opt())
            .ok_or_else(corrupt)?;
        let lineage = match lineage.map(|n| batch.column_by_name(n)) {
            [Some(ids), Some(updated)] => Some([ids.clone(), updated.clone()]),
            _ => None,
        };
        let all = conform(image.columns(), lineage, rows)?;
        let present = match image.nulls() {
            Some(nulls) => {
                filter_record_batch(&all, &BooleanArray::new(nulls.inner().clone(), None))?
            }
            None => all,
        };
        images.push((side, present));
    }
    Ok(images)
}

/// `columns` (the table's) and `lineage` as a batch of `rows`: types as the schema reads
/// them, lineage null where the events had none.
fn conform(
    columns: &[ArrayRef],
    lineage: Option<[ArrayRef; 2]>,
    rows: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    let len = columns.first().map_or(0, |c| c.len());
    let width = table_width(rows);
    let mut out = Vec::with_capacity(rows.fields().len());
    for (column, field) in columns.iter().zip(&rows.fields()[..width]) {
        out.push(if column.data_type() == field.data_type() {
            column.clone()
        } else {
            cast(column, field.data_type())?
        });
    }
    if width < rows.fields().len() {
        match lineage {
            Some(lineage) => out.extend(lineage),
            None => out.extend(
                rows.fields()[width..]
                    .iter()
                    .map(|f| new_null_array(f.data_type(), len)),
            ),
        }
    }
    RecordBatch::try_new_with_options(
        rows.clone(),
        out,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(len)),
    )
}

fn feed_error(e: FeedError) -> TaskError {
    match e {
        FeedError::Corrupt(path) => TaskError::Permanent(crate::failure::Failure::new(
            crate::failure::FailureCode::DataInvalid,
            format!("segment {path} is corrupt"),
        )),
        other => TaskError::change_store(other),
    }
}
