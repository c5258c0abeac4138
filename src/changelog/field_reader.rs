//! Reading some columns of a Parquet file (a delete file, or a data file's equality
//! columns) by Iceberg field id, a batch at a time, checking the rows read against the
//! footer: positions are counted from them. Knows nothing of deletes.
//! Must not reach: `changelog::deletes`, `changelog::deleted` (it knows nothing of deletes).

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileIO;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};

use super::batch_rows::batch_rows;
use crate::changes::ChangeStoreError;
use crate::changes::segment::column_of;

/// A Parquet file opened to read some of its columns, found by Iceberg field id.
pub(super) struct FieldReader {
    pub(super) path: String,
    file: ArrowFileReader,
    metadata: ArrowReaderMetadata,
}

/// Per batch: its rows, and one column per field id asked for, `None` where the file has
/// no column with that id.
pub(super) type FieldBatch = (usize, Vec<Option<ArrayRef>>);
pub(super) type FieldResult = Result<FieldBatch, ChangeStoreError>;

impl FieldReader {
    pub(super) async fn open(file_io: &FileIO, path: &str) -> Result<Self, ChangeStoreError> {
        let input = file_io.new_input(path)?;
        let mut file =
            ArrowFileReader::new(input.metadata().await?, Box::new(input.reader().await?));
        let metadata =
            ArrowReaderMetadata::load_async(&mut file, ArrowReaderOptions::new()).await?;
        Ok(Self {
            path: path.to_string(),
            file,
            metadata,
        })
    }

    /// Rows the file's footer counts.
    pub(super) fn rows(&self) -> i64 {
        self.metadata.metadata().file_metadata().num_rows()
    }

    /// Row groups whose statistics for the column of `field_id` do not rule out `value`
    /// (all of them where the column has no statistics).
    pub(super) fn row_groups_bounding(&self, field_id: i32, value: &[u8]) -> Vec<usize> {
        let parquet = self.metadata.metadata();
        let column = parquet
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| {
                let info = c.self_type().get_basic_info();
                info.has_id() && info.id() == field_id
            });
        (0..parquet.num_row_groups())
            .filter(|&g| {
                let Some(stats) = column.and_then(|c| parquet.row_group(g).column(c).statistics())
                else {
                    return true;
                };
                stats.min_bytes_opt().is_none_or(|min| min <= value)
                    && stats.max_bytes_opt().is_none_or(|max| value <= max)
            })
            .collect()
    }

    /// The Arrow type of each field id's column.
    pub(super) fn types(&self, field_ids: &[i32]) -> Vec<Option<DataType>> {
        let schema = self.metadata.schema();
        field_ids
            .iter()
            .map(|id| column_of(schema, *id).map(|i| schema.field(i).data_type().clone()))
            .collect()
    }

    /// The file's batches, streamed; an error at the end if they did not hold the rows
    /// the file says it has (positions are counted from them).
    pub(super) fn batches(
        self,
        field_ids: &[i32],
    ) -> Result<BoxStream<'static, FieldResult>, ChangeStoreError> {
        self.batches_of(field_ids, None)
    }

    /// [`Self::batches`] of the row groups `groups` only (all when `None`).
    pub(super) fn batches_of(
        self,
        field_ids: &[i32],
        groups: Option<Vec<usize>>,
    ) -> Result<BoxStream<'static, FieldResult>, ChangeStoreError> {
        let roots: Vec<usize> = field_ids
            .iter()
            .filter_map(|id| column_of(self.metadata.schema(), *id))
            .collect();
        let descriptor = self.metadata.metadata().file_metadata().schema_descr();
        let mask = ProjectionMask::roots(descriptor, roots);
        let parquet = self.metadata.metadata().clone();
        let rows_per_batch = batch_rows(&parquet, &mask, 64 * 1024);
        let expected: i64 = match &groups {
            Some(groups) => groups
                .iter()
                .map(|&g| parquet.row_group(g).num_rows())
                .sum(),
            None => parquet.file_metadata().num_rows(),
        };
        let mut builder =
            ParquetRecordBatchStreamBuilder::new_with_metadata(self.file, self.metadata)
                .with_projection(mask)
                .with_batch_size(rows_per_batch);
        if let Some(groups) = groups {
            builder = builder.with_row_groups(groups);
        }
        let stream = builder.build()?;
        let state = (stream, 0i64, field_ids.to_vec(), self.path);
        Ok(
            futures::stream::try_unfold(state, move |(mut stream, read, ids, path)| async move {
                let Some(batch) = stream.try_next().await? else {
                    if read != expected {
                        return Err(ChangeStoreError::Corrupt(format!(
                            "{path}: {read} rows read of the {expected} its footer counts"
                        )));
                    }
                    return Ok(None);
                };
                let columns = ids
                    .iter()
                    .map(|id| column_of(batch.schema_ref(), *id).map(|i| batch.column(i).clone()))
                    .collect();
                let rows = batch.num_rows();
                Ok(Some((
                    (rows, columns),
                    (stream, read + rows as i64, ids, path),
                )))
            })
            .boxed(),
        )
    }
}
