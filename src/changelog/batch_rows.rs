//! How many rows a decoded batch of a Parquet file holds: a fixed number for narrow rows,
//! fewer for wide ones, from what the file's footer says of its sizes.
//! Must not reach: `store`, `workers`.

use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;

use crate::changes::store::decoded_bytes;

/// Bytes a decoded batch holds about, at most: wide rows (documents, blobs) make batches
/// of fewer rows, so that memory budgets counted in batches hold whatever the width.
const BATCH_BYTES: u64 = 8 << 20;

/// Rows per decoded batch of the `mask` columns of a file: at most `max_rows`, and as many
/// as [`BATCH_BYTES`] hold at the widest of its row groups, as its footer records them
/// ([`decoded_bytes`]), at least one.
pub(super) fn batch_rows(
    parquet: &ParquetMetaData,
    mask: &ProjectionMask,
    max_rows: usize,
) -> usize {
    let widest = parquet
        .row_groups()
        .iter()
        .filter(|group| group.num_rows() > 0)
        .map(|group| {
            let bytes: i64 = (group.columns().iter().enumerate())
                .filter(|(leaf, _)| mask.leaf_included(*leaf))
                .map(|(_, column)| decoded_bytes(column))
                .sum();
            (bytes as u64).div_ceil(group.num_rows() as u64)
        })
        .max()
        .unwrap_or(0);
    (BATCH_BYTES / widest.max(1)).clamp(1, max_rows as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A Parquet file of an `id` column and a `doc` column, one row group per batch.
    fn file(groups: &[Vec<String>], props: WriterProperties) -> Bytes {
        let batch = |docs: &Vec<String>| {
            let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..docs.len() as i64));
            let docs: ArrayRef = Arc::new(StringArray::from(docs.clone()));
            RecordBatch::try_from_iter([("id", ids), ("doc", docs)]).unwrap()
        };
        let first = batch(&groups[0]);
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, first.schema(), Some(props)).unwrap();
        for docs in groups {
            writer.write(&batch(docs)).unwrap();
            writer.flush().unwrap();
        }
        writer.close().unwrap();
        Bytes::from(out)
    }

    /// `rows` documents of `bytes` letters each, all different.
    fn docs(rows: usize, bytes: usize) -> Vec<String> {
        (0..rows)
            .map(|i| {
                let letter = char::from(b'a' + (i % 26) as u8);
                format!("{i}{}", letter.to_string().repeat(bytes))
            })
            .collect()
    }

    /// Rows per batch of `columns` (leaf indexes) of `bytes`, with the largest batch's
    /// memory as decoded.
    fn decoded(bytes: &Bytes, columns: &[usize]) -> (usize, usize) {
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
        let mask = ProjectionMask::leaves(builder.parquet_schema(), columns.iter().copied());
        let rows = batch_rows(builder.metadata(), &mask, 8192);
        let largest = (builder.with_projection(mask).with_batch_size(rows).build())
            .unwrap()
            .map(|batch| batch.unwrap().get_array_memory_size())
            .max()
            .unwrap();
        (rows, largest)
    }

    fn plain() -> WriterProperties {
        WriterProperties::builder()
            .set_dictionary_enabled(false)
            .build()
    }

    #[test]
    fn narrow_rows_decode_the_usual_batches() {
        let bytes = file(&[docs(20_000, 10)], plain());
        assert_eq!(decoded(&bytes, &[0, 1]).0, 8192);
    }

    #[test]
    fn wide_rows_decode_batches_of_about_eight_mebibytes() {
        let bytes = file(&[docs(64, 1 << 20)], plain());
        let (rows, largest) = decoded(&bytes, &[0, 1]);
        assert_eq!(rows, 7, "rows of a little over 1 MiB");
        assert!(largest <= 9 << 20, "a batch of {largest} bytes");
        // Without the wide column the rows are narrow again.
        assert_eq!(decoded(&bytes, &[0]).0, 8192);
    }

    #[test]
    fn the_widest_row_group_sets_the_batch() {
        let bytes = file(&[docs(20_000, 10), docs(16, 1 << 20)], plain());
        assert_eq!(decoded(&bytes, &[0, 1]).0, 7);
    }

    #[test]
    fn a_dictionary_of_one_wide_value_counts_the_value_in_every_row() {
        // Encoded, the column is one dictionary entry and a few bits a row; decoded, every
        // row holds the value.
        let same = vec!["x".repeat(1 << 20); 64];
        let bytes = file(&[same], WriterProperties::builder().build());
        let (rows, largest) = decoded(&bytes, &[0, 1]);
        assert_eq!(rows, 7);
        assert!(largest <= 9 << 20, "a batch of {largest} bytes");
    }
}
