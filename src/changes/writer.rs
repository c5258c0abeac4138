//! Writing `changes` segments: Parquet files of `_op` (int8), `_before` and `_after`
//! (structs of the table's columns; null where a side is absent), in event order; the row
//! lineage of each side (v3 tables) as four int64 columns; `_anomaly` (int8, null for
//! most events) in the segments that have an anomaly; and `_ordinal` (int64) in the
//! segments of net changes.
//! Must not reach: `changelog`, `store`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch, StructArray, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::ChangeStoreError;
use crate::change::{Anomaly, ChangeRow, Survivors, table_width};

/// Column names of a `changes` segment.
pub const OP: &str = "_op";
/// The row before the change.
pub const BEFORE: &str = "_before";
/// The row after the change.
pub const AFTER: &str = "_after";
/// What is anomalous about the change ([`crate::change::Anomaly`]), if anything.
pub const ANOMALY: &str = "_anomaly";
/// In the segments of a range's net changes: the ordinal of the change set that last
/// changed the event's key.
pub const ORDINAL: &str = "_ordinal";
/// Row lineage (v3) of the row before the change: its `_row_id` and
/// `_last_updated_sequence_number`.
pub const BEFORE_LINEAGE: [&str; 2] = ["_before_row_id", "_before_last_updated"];
/// Row lineage of the row after the change.
pub const AFTER_LINEAGE: [&str; 2] = ["_after_row_id", "_after_last_updated"];

/// Events per data page (the limit is checked once per write batch of this many).
const PAGE_ROWS: usize = 1024;

/// A segment's file and what its events take decoded.
pub struct EncodedSegment {
    pub bytes: Bytes,
    /// Bytes of the arrays the file was written from: about what reading it decodes to.
    pub decoded_bytes: i64,
}

/// Encodes `changes` (indexes into `survivors`) as one Parquet segment.
pub fn encode_changes(
    survivors: &Survivors,
    changes: &[ChangeRow],
) -> Result<EncodedSegment, ChangeStoreError> {
    encode_changes_with(survivors, changes, None)
}

/// [`encode_changes`] for the net changes of a range: `ordinals[i]`, the last change
/// set that touched event `i`'s key, goes into [`ORDINAL`].
pub fn encode_net_changes(
    survivors: &Survivors,
    changes: &[ChangeRow],
    ordinals: Vec<i64>,
) -> Result<EncodedSegment, ChangeStoreError> {
    encode_changes_with(survivors, changes, Some(ordinals))
}

fn encode_changes_with(
    survivors: &Survivors,
    changes: &[ChangeRow],
    ordinals: Option<Vec<i64>>,
) -> Result<EncodedSegment, ChangeStoreError> {
    let ops = Int8Array::from(changes.iter().map(|c| c.op.code()).collect::<Vec<_>>());
    let befores: Vec<Option<u32>> = changes.iter().map(|c| c.before).collect();
    let afters: Vec<Option<u32>> = changes.iter().map(|c| c.after).collect();
    let before = side(&survivors.deleted, &befores)?;
    let after = side(&survivors.inserted, &afters)?;
    let mut fields = vec![
        Field::new(OP, DataType::Int8, false),
        Field::new(BEFORE, before.data_type().clone(), true),
        Field::new(AFTER, after.data_type().clone(), true),
    ];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(ops), before, after];
    for (names, rows, pick) in [
        (BEFORE_LINEAGE, &survivors.deleted, &befores),
        (AFTER_LINEAGE, &survivors.inserted, &afters),
    ] {
        let lineage = &rows.columns()[table_width(rows.schema_ref())..];
        if lineage.is_empty() {
            continue;
        }
        // Row `i` where `pick` says `Some(i)`, null elsewhere.
        let indices = UInt32Array::from(pick.clone());
        for (name, column) in names.into_iter().zip(lineage) {
            fields.push(Field::new(name, DataType::Int64, true));
            columns.push(take(column, &indices, None)?);
        }
    }
    if !survivors.regained.is_empty() {
        let anomalies: Int8Array = changes
            .iter()
            .map(|c| survivors.anomaly(c.after).map(Anomaly::code))
            .collect();
        fields.push(Field::new(ANOMALY, DataType::Int8, true));
        columns.push(Arc::new(anomalies));
    }
    if let Some(ordinals) = ordinals {
        fields.push(Field::new(ORDINAL, DataType::Int64, false));
        columns.push(Arc::new(arrow::array::Int64Array::from(ordinals)));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    // Feeds read a segment a page of events at a time (a push batch is 1000 by default)
    // from anywhere in it, and a read decodes every data page its range touches plus
    // each column's dictionary: with the defaults (pages of up to 20,000 rows,
    // dictionaries of up to 1 MB per column) a 1000-event read of a large segment
    // decoded megabytes. Small plain pages keep it to the rows asked for. LZ4 rather
    // than zstd: a segment is written once on the path from commit to publish and read
    // by every consumer, and LZ4 halves both (1.5x the bytes, on the taxi table).
    let props = WriterProperties::builder()
        .set_compression(Compression::LZ4_RAW)
        .set_dictionary_enabled(false)
        .set_write_batch_size(PAGE_ROWS)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(EncodedSegment {
        bytes: Bytes::from(out),
        decoded_bytes: batch.get_array_memory_size() as i64,
    })
}

/// A struct column of the table's columns, taking row `i` of `rows` where `pick` says
/// `Some(i)`, null elsewhere.
fn side(rows: &RecordBatch, pick: &[Option<u32>]) -> Result<ArrayRef, ArrowError> {
    let width = table_width(rows.schema_ref());
    let present = StructArray::from(rows.project(&(0..width).collect::<Vec<_>>())?);
    let absent = StructArray::new_null(present.fields().clone(), 1);
    let indices: Vec<(usize, usize)> = pick
        .iter()
        .map(|p| match *p {
            Some(i) => (0, i as usize),
            None => (1, 0),
        })
        .collect();
    interleave(&[&present as &dyn Array, &absent], &indices)
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
    use parquet::file::metadata::PageIndexPolicy;

    use super::*;
    use crate::change::Op;

    #[test]
    fn segments_have_small_pages_and_no_dictionaries() {
        let rows = 5000;
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let deleted = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))],
        )
        .unwrap();
        let survivors = Survivors {
            deleted,
            inserted: RecordBatch::new_empty(schema),
            regained: Vec::new(),
        };
        let changes: Vec<ChangeRow> = (0..rows as u32)
            .map(|i| ChangeRow {
                op: Op::Delete,
                before: Some(i),
                after: None,
            })
            .collect();
        let bytes = encode_changes(&survivors, &changes).unwrap().bytes;

        let options = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Required);
        let metadata = ArrowReaderMetadata::load(&bytes, options).unwrap();
        let metadata = metadata.metadata();
        assert_eq!(metadata.file_metadata().num_rows(), rows as i64);
        for chunk in metadata.row_group(0).columns() {
            assert_eq!(
                chunk.dictionary_page_offset(),
                None,
                "{}",
                chunk.column_path()
            );
        }
        let offsets = &metadata.offset_index().expect("an offset index")[0];
        assert_eq!(offsets.len(), 3, "_op, _before.id, _after.id");
        for (column, index) in offsets.iter().enumerate() {
            let starts: Vec<i64> = index
                .page_locations()
                .iter()
                .map(|p| p.first_row_index)
                .chain([rows as i64])
                .collect();
            let longest = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap();
            assert!(
                longest <= PAGE_ROWS as i64,
                "column {column}: a page of {longest} rows"
            );
            assert!(
                starts.len() > rows / PAGE_ROWS,
                "column {column}: {starts:?}"
            );
        }
    }
}
