//! Writing `changes` segments: Parquet files of `_op` (int8), `_before` and `_after`
//! (structs of the table's columns; null where a side is absent), in event order.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch, StructArray};
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::ChangeStoreError;
use crate::changelog::carryover::{ChangeRow, Survivors};

/// Column names of a `changes` segment.
pub const OP: &str = "_op";
/// The row before the change.
pub const BEFORE: &str = "_before";
/// The row after the change.
pub const AFTER: &str = "_after";

/// Encodes `changes` (indexes into `survivors`) as one Parquet segment.
pub fn encode_changes(
    survivors: &Survivors,
    changes: &[ChangeRow],
) -> Result<Bytes, ChangeStoreError> {
    let ops = Int8Array::from(changes.iter().map(|c| c.op.code()).collect::<Vec<_>>());
    let before = side(&survivors.deleted, changes.iter().map(|c| c.before))?;
    let after = side(&survivors.inserted, changes.iter().map(|c| c.after))?;
    let schema = Arc::new(Schema::new(vec![
        Field::new(OP, DataType::Int8, false),
        Field::new(BEFORE, before.data_type().clone(), true),
        Field::new(AFTER, after.data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ops), before, after])?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(Bytes::from(out))
}

/// A struct column taking row `i` of `rows` where `pick` says `Some(i)`, null elsewhere.
fn side(
    rows: &RecordBatch,
    pick: impl Iterator<Item = Option<u32>>,
) -> Result<ArrayRef, ArrowError> {
    let present = StructArray::from(rows.clone());
    let absent = StructArray::new_null(present.fields().clone(), 1);
    let indices: Vec<(usize, usize)> = pick
        .map(|p| match p {
            Some(i) => (0, i as usize),
            None => (1, 0),
        })
        .collect();
    interleave(&[&present as &dyn Array, &absent], &indices)
}
