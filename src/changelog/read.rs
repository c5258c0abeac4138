//! Reading the rows of an Iceberg data file, projected by field id onto a snapshot's schema.

use arrow::array::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileIO;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use crate::changes::segment::{conform, projection};
use crate::changes::{ChangeStoreError, ReadSchema};

/// Rows of the data file at `path`, in `schema`, a batch at a time: memory holds one row
/// group's column chunks, whatever the file's size.
pub async fn stream_data_file(
    file_io: &FileIO,
    path: &str,
    schema: &ReadSchema,
) -> Result<BoxStream<'static, Result<RecordBatch, ChangeStoreError>>, ChangeStoreError> {
    let input = file_io.new_input(path)?;
    let mut file = ArrowFileReader::new(input.metadata().await?, Box::new(input.reader().await?));
    let metadata = ArrowReaderMetadata::load_async(&mut file, ArrowReaderOptions::new()).await?;
    let mask = projection(&metadata, schema);
    let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(file, metadata)
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()?;
    let schema = schema.clone();
    Ok(stream.map(move |batch| conform(&batch?, &schema)).boxed())
}

const BATCH_ROWS: usize = 8192;

/// All rows of the data file at `path`, in `schema`. The file is read whole: map tasks
/// use it only for inputs that fit their memory budget.
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
            .with_batch_size(BATCH_ROWS)
            .build()?;
        reader
            .map(|batch| conform(&batch?, &schema))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ChangeStoreError::Corrupt(format!("reading {}: {e}", "data file")))?
}
