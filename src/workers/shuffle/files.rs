//! Shuffle files: rows grouped by partition, each partition an Arrow IPC stream at a
//! byte range recorded in a [`BucketFile`], so a reader fetches only its partitions. Map
//! outputs (partition = key bucket) and spill runs (partition = whole-row hash) share
//! the format. Rows carry `_side` ([`DELETED`], [`INSERTED`] or [`REGAINED`]) before the
//! table's columns.
//! Must not reach: `store`, `catalog` (the file format only).

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int8Array, RecordBatch};
use arrow::compute::kernels::cmp::eq;
use arrow::compute::{concat_batches, filter_record_batch, interleave_record_batch};
use arrow::datatypes::{DataType, Field, Int8Type, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::CompressionType;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use bytes::Bytes;

use super::BucketFile;
use crate::changes::ChangeStore;
use crate::workers::task_context::TaskError;

/// Column telling which side of the rewrite a shuffled row is on.
const SIDE: &str = "_side";

/// `_side` of a removed row.
pub const DELETED: i8 = 0;
/// `_side` of an added row.
pub const INSERTED: i8 = 1;
/// `_side` of an added row that a data file regained (see `Survivors::regained`).
pub const REGAINED: i8 = 2;

/// `_side` followed by the table's columns.
pub fn shuffled_schema(schema: &SchemaRef) -> SchemaRef {
    let mut fields = vec![Field::new(SIDE, DataType::Int8, false)];
    fields.extend(schema.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

/// `batch` (in the table's schema) with `_side` set to `side`.
pub fn with_side(
    shuffled: &SchemaRef,
    batch: &RecordBatch,
    side: i8,
) -> Result<RecordBatch, ArrowError> {
    with_sides(shuffled, batch, vec![side; batch.num_rows()])
}

/// `batch` (in the table's schema) with `_side` of row `i` set to `sides[i]`.
pub fn with_sides(
    shuffled: &SchemaRef,
    batch: &RecordBatch,
    sides: Vec<i8>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int8Array::from(sides))];
    columns.extend(batch.columns().iter().cloned());
    RecordBatch::try_new(shuffled.clone(), columns)
}

/// The deleted, inserted and regained rows of the shuffled `parts`, in the table's
/// `schema`. The parts are put together before they are split: a reduce reads a part per
/// map task and bucket, often of a few rows, and filtering each of them apart cost more
/// than their rows.
pub async fn read_sides(
    changes: &ChangeStore,
    parts: &[BucketFile],
    schema: &SchemaRef,
) -> Result<[RecordBatch; 3], TaskError> {
    let batches = read_parts(changes, parts).await?;
    let all = concat_batches(&shuffled_schema(schema), &batches).map_err(TaskError::compute)?;
    split_sides(schema, &all)
}

/// The deleted, inserted and regained rows of a shuffled batch, in the table's `schema`.
fn split_sides(schema: &SchemaRef, batch: &RecordBatch) -> Result<[RecordBatch; 3], TaskError> {
    let side = batch
        .column_by_name(SIDE)
        .and_then(|c| c.as_primitive_opt::<Int8Type>())
        .ok_or_else(|| TaskError::change_store("a shuffle file is corrupt"))?;
    let pick = |value: i8| -> Result<RecordBatch, ArrowError> {
        let rows = filter_record_batch(batch, &eq(side, &Int8Array::new_scalar(value))?)?;
        RecordBatch::try_new(schema.clone(), rows.columns()[1..].to_vec())
    };
    Ok([
        pick(DELETED).map_err(TaskError::compute)?,
        pick(INSERTED).map_err(TaskError::compute)?,
        pick(REGAINED).map_err(TaskError::compute)?,
    ])
}

/// Rows held in memory by partition (as `(batch, row)` positions), written to one shuffle
/// file per flush: callers flush when [`Partitioned::held_bytes`] passes their budget.
pub struct Partitioned {
    held: Vec<RecordBatch>,
    rows: Vec<Vec<(usize, usize)>>,
    held_bytes: usize,
    /// Partitions written so far, in file order.
    pub written: Vec<BucketFile>,
    files: usize,
}

impl Partitioned {
    /// Nothing held yet, for `partitions` partitions.
    pub fn new(partitions: u32) -> Self {
        Self {
            held: Vec::new(),
            rows: vec![Vec::new(); partitions as usize],
            held_bytes: 0,
            written: Vec::new(),
            files: 0,
        }
    }

    /// Holds `batch`, whose row `i` belongs to partition `partition_of[i]`.
    pub fn push(&mut self, batch: RecordBatch, partition_of: &[u32]) {
        let b = self.held.len();
        for (i, &p) in partition_of.iter().enumerate() {
            self.rows[p as usize].push((b, i));
        }
        self.held_bytes += batch.get_array_memory_size();
        self.held.push(batch);
    }

    /// Bytes of the batches held.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Writes what is held to the file `key(n)` (n counts this writer's files).
    pub async fn flush(
        &mut self,
        changes: &ChangeStore,
        key: impl Fn(usize) -> String,
    ) -> Result<(), TaskError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held);
        let rows: Vec<_> = self.rows.iter_mut().map(std::mem::take).collect();
        self.held_bytes = 0;
        // Encoding is CPU work: keep it off the async workers.
        let (bytes, parts) = tokio::task::spawn_blocking(move || encode(&held, &rows))
            .await
            .map_err(TaskError::joined)?
            .map_err(TaskError::compute)?;
        let path = key(self.files);
        self.files += 1;
        changes
            .put(&path, bytes)
            .await
            .map_err(TaskError::change_store)?;
        self.written
            .extend(parts.into_iter().map(|part| BucketFile {
                path: path.clone(),
                ..part
            }));
        Ok(())
    }
}

/// Partitions whose rows take at least this much are written LZ4-compressed: the files of
/// a shuffle or a spill hold rows decoded, several times their Parquet size and a
/// multiple of that for rows that compress well (a repeated document written whole),
/// all written to the change store and read back. Smaller ones (most of the buckets of
/// a rewrite that changed little) are not: compressing costs a frame per buffer.
const COMPRESS_FROM: usize = 1 << 20;

/// One IPC stream per non-empty partition, concatenated, and where each is (no path yet).
fn encode(
    held: &[RecordBatch],
    rows: &[Vec<(usize, usize)>],
) -> Result<(Bytes, Vec<BucketFile>), ArrowError> {
    let plain = IpcWriteOptions::default();
    let compressed = plain
        .clone()
        .try_with_compression(Some(CompressionType::LZ4_FRAME))?;
    let batches: Vec<&RecordBatch> = held.iter().collect();
    let mut out = Vec::new();
    let mut parts = Vec::new();
    for (p, rows) in rows.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let batch = interleave_record_batch(&batches, rows)?;
        let decoded = batch.get_array_memory_size();
        let options = if decoded >= COMPRESS_FROM {
            compressed.clone()
        } else {
            plain.clone()
        };
        let start = out.len();
        let mut writer = StreamWriter::try_new_with_options(&mut out, &batch.schema(), options)?;
        writer.write(&batch)?;
        writer.finish()?;
        drop(writer);
        let len = out.len() - start;
        parts.push(BucketFile {
            bucket: p as u32,
            rows: rows.len() as i64,
            offset: start as u64,
            bytes: len as i64,
            decoded: decoded as i64,
            path: String::new(),
        });
    }
    Ok((Bytes::from(out), parts))
}

/// The rows of `parts`, fetching adjacent byte ranges of one file in one request.
pub async fn read_parts(
    changes: &ChangeStore,
    parts: &[BucketFile],
) -> Result<Vec<RecordBatch>, TaskError> {
    let mut sorted: Vec<&BucketFile> = parts.iter().collect();
    sorted.sort_by(|a, b| (&a.path, a.offset).cmp(&(&b.path, b.offset)));
    let mut batches = Vec::new();
    let mut start = 0;
    while start < sorted.len() {
        let first = sorted[start];
        let mut end = start + 1;
        let mut until = first.offset + first.bytes as u64;
        while end < sorted.len() && sorted[end].path == first.path && sorted[end].offset == until {
            until += sorted[end].bytes as u64;
            end += 1;
        }
        let bytes = changes
            .get_range(&first.path, first.offset..until)
            .await
            .map_err(TaskError::change_store)?;
        for part in &sorted[start..end] {
            let at = (part.offset - first.offset) as usize;
            let stream = bytes.slice(at..at + part.bytes as usize);
            let reader = StreamReader::try_new(Cursor::new(stream), None)
                .map_err(TaskError::change_store)?;
            for batch in reader {
                batches.push(batch.map_err(TaskError::change_store)?);
            }
        }
        start = end;
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;

    fn ids(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                b.column(1)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    #[tokio::test]
    async fn large_partitions_are_stored_compressed_and_all_know_what_they_decode_to() {
        let dir = tempfile::tempdir().unwrap();
        let changes = ChangeStore::open(dir.path().to_str().unwrap(), &Default::default()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let shuffled = shuffled_schema(&schema);
        // 200,000 ids and sides decode to 1.8 MB; 10,000 of them to 90 KB.
        let ids: Vec<i64> = (0..200_000).map(|i| i % 7).collect();
        let plain = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(ids.clone()))],
        );
        let batch = with_side(&shuffled, &plain.unwrap(), DELETED).unwrap();
        let mut partition_of = vec![0; ids.len()];
        partition_of[..10_000].fill(1);
        let mut out = Partitioned::new(2);
        out.push(batch.clone(), &partition_of);
        out.flush(&changes, |n| format!("f{n}")).await.unwrap();
        let [large, small] = &out.written[..] else {
            panic!("{:?}", out.written)
        };
        let read = read_parts(&changes, std::slice::from_ref(large))
            .await
            .unwrap();
        assert_eq!(self::ids(&read), ids[10_000..]);
        assert!(
            large.decoded >= 1_710_000,
            "{} bytes decoded",
            large.decoded
        );
        assert!(
            large.bytes * 4 < large.decoded,
            "{} bytes stored",
            large.bytes
        );
        assert_eq!(large.memory(), large.decoded as u64);
        let read = read_parts(&changes, std::slice::from_ref(small))
            .await
            .unwrap();
        assert_eq!(self::ids(&read), ids[..10_000]);
        assert!(small.decoded >= 90_000, "{} bytes decoded", small.decoded);
        assert!(small.bytes >= 90_000, "{} bytes stored", small.bytes);
    }

    #[tokio::test]
    async fn partitions_are_read_back_alone_or_together() {
        let dir = tempfile::tempdir().unwrap();
        let changes = ChangeStore::open(dir.path().to_str().unwrap(), &Default::default()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let shuffled = shuffled_schema(&schema);
        let batch = |ids: Vec<i64>, side| {
            let plain = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids))]);
            with_side(&shuffled, &plain.unwrap(), side).unwrap()
        };
        let mut out = Partitioned::new(3);
        out.push(batch(vec![1, 2, 3], DELETED), &[2, 0, 2]);
        out.push(batch(vec![4, 5], INSERTED), &[0, 2]);
        out.flush(&changes, |n| format!("f{n}")).await.unwrap();
        out.push(batch(vec![6], REGAINED), &[1]);
        out.flush(&changes, |n| format!("f{n}")).await.unwrap();
        let got: Vec<(u32, i64, &str)> = out
            .written
            .iter()
            .map(|p| (p.bucket, p.rows, p.path.as_str()))
            .collect();
        assert_eq!(got, vec![(0, 2, "f0"), (2, 3, "f0"), (1, 1, "f1")]);

        let read = |parts: Vec<BucketFile>| {
            let changes = changes.clone();
            async move { ids(&read_parts(&changes, &parts).await.unwrap()) }
        };
        assert_eq!(read(vec![out.written[1].clone()]).await, vec![1, 3, 5]);
        assert_eq!(read(out.written.clone()).await, vec![2, 4, 1, 3, 5, 6]);

        let all = read_parts(&changes, &out.written).await.unwrap();
        let [deleted, inserted, regained] = split_sides(&schema, &all[1]).unwrap();
        assert_eq!((ids_of(&deleted), ids_of(&inserted)), (vec![1, 3], vec![5]));
        assert!(ids_of(&regained).is_empty());
        let [_, inserted, regained] = split_sides(&schema, &all[2]).unwrap();
        assert_eq!((ids_of(&inserted), ids_of(&regained)), (vec![], vec![6]));
    }

    fn ids_of(batch: &RecordBatch) -> Vec<i64> {
        batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }
}
