//! Reading the rows of an Iceberg data file, projected by field id onto a snapshot's schema.

use arrow::array::RecordBatch;
use iceberg::io::FileIO;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use crate::changes::segment::{conform, projection};
use crate::changes::{ChangeStoreError, ReadSchema};

/// All rows of the data file at `path`, in `schema`. The file is read whole: callers
/// bound memory by reading one partition group at a time.
pub async fn read_data_file(
    file_io: &FileIO,
    path: &str,
    schema: &ReadSchema,
) -> Result<Vec<RecordBatch>, ChangeStoreError> {
    let bytes = file_io.new_input(path)?.read().await?;
    let schema = schema.clone();
    // Decoding is CPU work: keep it off the async workers.
    tokio::task::spawn_blocking(move || {
        let metadata = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new())?;
        let mask = projection(&metadata, &schema);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, metadata)
            .with_projection(mask)
            .with_batch_size(8192)
            .build()?;
        reader
            .map(|batch| conform(&batch?, &schema))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ChangeStoreError::Corrupt(format!("reading {}: {e}", "data file")))?
}
