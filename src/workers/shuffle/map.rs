//! Map task: cancel carryover within one partition group, then hash what survives by
//! key into bucket files (`_side` 0 = deleted, 1 = inserted, then the table's columns).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int8Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;

use super::{BucketFile, MapResult, MapTask, shuffle_key};
use crate::changelog::carryover::cancel_carryover;
use crate::workers::tasks::{TaskContext, TaskError};

/// Column telling which side of the rewrite a shuffled row is on.
pub(super) const SIDE: &str = "_side";

/// Runs a map task.
pub async fn run_map(
    ctx: &TaskContext,
    task: &crate::store::ClaimedTask,
    map: MapTask,
) -> Result<MapResult, TaskError> {
    let opened = ctx.open(task.table_id, map.schema_id).await?;
    let removed = ctx.read_files(&opened, &map.removed).await?;
    let added = ctx.read_files(&opened, &map.added).await?;
    let schema = opened.read.batch_schema();
    let survivors = cancel_carryover(&schema, &removed, &added).map_err(TaskError::retryable)?;

    let columns: Vec<usize> = if map.key.is_empty() {
        (0..schema.fields().len()).collect()
    } else {
        map.key.clone()
    };
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )
    .map_err(TaskError::retryable)?;
    let mut rows_by_bucket: Vec<[Vec<u32>; 2]> =
        vec![[Vec::new(), Vec::new()]; map.buckets as usize];
    for (side, batch) in [&survivors.deleted, &survivors.inserted]
        .into_iter()
        .enumerate()
    {
        let keys: Vec<ArrayRef> = columns.iter().map(|&i| batch.column(i).clone()).collect();
        let rows = converter
            .convert_columns(&keys)
            .map_err(TaskError::retryable)?;
        for (i, row) in rows.iter().enumerate() {
            let bucket = (fnv1a(row.as_ref()) % map.buckets as u64) as usize;
            rows_by_bucket[bucket][side].push(i as u32);
        }
    }

    let shuffled = shuffled_schema(&schema);
    let mut buckets = Vec::new();
    for (bucket, [deleted, inserted]) in rows_by_bucket.into_iter().enumerate() {
        if deleted.is_empty() && inserted.is_empty() {
            continue;
        }
        let parts = [
            with_side(&shuffled, &survivors.deleted, deleted, 0)?,
            with_side(&shuffled, &survivors.inserted, inserted, 1)?,
        ];
        let batch = concat_batches(&shuffled, &parts).map_err(TaskError::retryable)?;
        let bytes = encode(&batch)?;
        let path = shuffle_key(task.table_id, task.snapshot_id, &task.id, bucket as u32);
        let size = bytes.len() as i64;
        ctx.changes
            .put(&path, bytes)
            .await
            .map_err(TaskError::retryable)?;
        buckets.push(BucketFile {
            bucket: bucket as u32,
            rows: batch.num_rows() as i64,
            bytes: size,
            path,
        });
    }
    Ok(MapResult {
        deleted: survivors.deleted.num_rows() as i64,
        inserted: survivors.inserted.num_rows() as i64,
        buckets,
    })
}

/// `_side` followed by the table's columns.
fn shuffled_schema(schema: &SchemaRef) -> SchemaRef {
    let mut fields = vec![Field::new(SIDE, DataType::Int8, false)];
    fields.extend(schema.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

fn with_side(
    shuffled: &SchemaRef,
    batch: &RecordBatch,
    rows: Vec<u32>,
    side: i8,
) -> Result<RecordBatch, TaskError> {
    let picked =
        take_record_batch(batch, &UInt32Array::from(rows)).map_err(TaskError::retryable)?;
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int8Array::from(vec![side; picked.num_rows()]))];
    columns.extend(picked.columns().iter().cloned());
    RecordBatch::try_new(shuffled.clone(), columns).map_err(TaskError::retryable)
}

fn encode(batch: &RecordBatch) -> Result<Bytes, TaskError> {
    let mut out = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut out, batch.schema(), None).map_err(TaskError::retryable)?;
    writer.write(batch).map_err(TaskError::retryable)?;
    writer.close().map_err(TaskError::retryable)?;
    Ok(Bytes::from(out))
}

/// A hash that every node computes alike (std's hasher is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
