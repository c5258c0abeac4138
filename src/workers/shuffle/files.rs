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
    compressed: bool,
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
            compressed: false,
        }
    }

    /// Writes its files LZ4-compressed: for shuffles of whole ranges of a feed, whose
    /// files would otherwise take several times the table's size; a snapshot's shuffle
    /// holds only what survived carryover and stays uncompressed, sparing its CPU.
    pub fn compressed(mut self) -> Self {
        self.compressed = true;
        self
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
        let compression = self.compressed.then_some(CompressionType::LZ4_FRAME);
        let (bytes, parts) = tokio::task::spawn_blocking(move || encode(&held, &rows, compression))
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

/// One IPC stream per non-empty partition, concatenated, and where each is (no path yet).
fn encode(
    held: &[RecordBatch],
    rows: &[Vec<(usize, usize)>],
    compression: Option<CompressionType>,
) -> Result<(Bytes, Vec<BucketFile>), ArrowError> {
    let options = IpcWriteOptions::default().try_with_compression(compression)?;
    let batches: Vec<&RecordBatch> = held.iter().collect();
    let mut out = Vec::new();
    let mut parts = Vec::new();
    for (p, rows) in rows.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let batch = interleave_record_batch(&batches, rows)?;
        let start = out.len();
        let mut writer =
            StreamWriter::try_new_with_options(&mut out, &batch.schema(), options.clone())?;
        writer.write(&batch)?;
        writer.finish()?;
        drop(writer);
        let len = out.len() - start;
        parts.push(BucketFile {
            bucket: p as u32,
            rows: rows.len() as i64,
            offset: start as u64,
            bytes: len as i64,
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
    async fn compressed_partitions_read_back_the_same_in_fewer_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let changes = ChangeStore::open(dir.path().to_str().unwrap(), &Default::default()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let shuffled = shuffled_schema(&schema);
        let ids: Vec<i64> = (0..10_000).map(|i| i % 7).collect();
        let plain = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(ids.clone()))],
        );
        let batch = with_side(&shuffled, &plain.unwrap(), DELETED).unwrap();
        let mut sizes = Vec::new();
        for compressed in [false, true] {
            let mut out = Partitioned::new(1);
            if compressed {
                out = out.compressed();
            }
            out.push(batch.clone(), &vec![0; ids.len()]);
            out.flush(&changes, |n| format!("{compressed}-{n}"))
                .await
                .unwrap();
            let read = read_parts(&changes, &out.written).await.unwrap();
            assert_eq!(self::ids(&read), ids);
            sizes.push(out.written[0].bytes);
        }
        assert!(sizes[1] * 4 < sizes[0], "{sizes:?}");
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
