//! Reading the rows of an Iceberg data file, projected by field id onto a snapshot's
//! schema: all of them, or those a [`FileRows`] selects under its deletes (as a Parquet
//! row selection, so that the page index skips pages no selected row is in).
//! Must not reach: `store`, `workers`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileIO;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::file::metadata::PageIndexPolicy;
use roaring::RoaringTreemap;

use super::batch_rows::batch_rows;
use super::deleted::{DataFileRef, DeleteCache};
use super::row_ids::inherit_lineage;
use super::{FileLineage, FileRows};
use crate::changes::segment::{conform, projection};
use crate::changes::{ChangeStoreError, ReadSchema};

/// The rows of a data file a read takes.
enum Selected {
    All,
    Rows(RoaringTreemap),
    Nothing,
}

/// Which rows of `rows`'s data file it selects, from its deletes.
async fn select(
    file_io: &FileIO,
    rows: &FileRows,
    schema: &ReadSchema,
    deletes: &DeleteCache,
) -> Result<Selected, ChangeStoreError> {
    if rows.is_whole() {
        return Ok(Selected::All);
    }
    let data = DataFileRef {
        path: &rows.path,
        record_count: rows.record_count,
    };
    let dead = deletes.dead(file_io, &data, &rows.deletes, schema).await?;
    let selected = match &rows.only_deleted_by {
        Some(others) => deletes.dead(file_io, &data, others, schema).await? - dead,
        None if dead.is_empty() => return Ok(Selected::All),
        None => {
            let mut all = RoaringTreemap::new();
            all.insert_range(0..rows.record_count);
            all - dead
        }
    };
    Ok(if selected.is_empty() {
        Selected::Nothing
    } else {
        Selected::Rows(selected)
    })
}

/// A Parquet row selection of exactly the `selected` positions of `total` rows.
fn row_selection(selected: &RoaringTreemap, total: u64) -> RowSelection {
    let mut selectors = Vec::new();
    let (mut cursor, mut run_start) = (0u64, None::<u64>);
    for p in selected.iter() {
        match run_start {
            Some(_) if p == cursor => {}
            _ => {
                if let Some(start) = run_start {
                    selectors.push(RowSelector::select((cursor - start) as usize));
                }
                if p > cursor {
                    selectors.push(RowSelector::skip((p - cursor) as usize));
                }
                run_start = Some(p);
            }
        }
        cursor = p + 1;
    }
    if let Some(start) = run_start {
        selectors.push(RowSelector::select((cursor - start) as usize));
    }
    if total > cursor {
        selectors.push(RowSelector::skip((total - cursor) as usize));
    }
    RowSelection::from(selectors)
}

/// Reader options: the page index only pays when pages can be skipped.
fn options(selected: &Selected) -> ArrowReaderOptions {
    let policy = match selected {
        Selected::Rows(_) => PageIndexPolicy::Optional,
        _ => PageIndexPolicy::Skip,
    };
    ArrowReaderOptions::new().with_page_index_policy(policy)
}

/// The selected rows of a data file, in `schema`, a batch at a time: memory holds one
/// row group's column chunks, whatever the file's size.
pub async fn stream_data_file(
    file_io: &FileIO,
    rows: &FileRows,
    schema: &ReadSchema,
    deletes: &DeleteCache,
) -> Result<BoxStream<'static, Result<RecordBatch, ChangeStoreError>>, ChangeStoreError> {
    let selected = select(file_io, rows, schema, deletes).await?;
    if let Selected::Nothing = selected {
        return Ok(futures::stream::empty().boxed());
    }
    let input = file_io.new_input(&rows.path)?;
    let mut file = ArrowFileReader::new(input.metadata().await?, Box::new(input.reader().await?));
    let metadata = ArrowReaderMetadata::load_async(&mut file, options(&selected)).await?;
    let mask = projection(&metadata, schema);
    let rows_per_batch = batch_rows(metadata.metadata(), &mask, BATCH_ROWS);
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(file, metadata)
        .with_projection(mask)
        .with_batch_size(rows_per_batch);
    if let Selected::Rows(positions) = &selected {
        builder = builder.with_row_selection(row_selection(positions, rows.record_count));
    }
    let mut rows_read = RowsRead::new(schema, rows, selected);
    Ok(builder
        .build()?
        .map(move |batch| rows_read.next(&batch?))
        .boxed())
}

/// Turns batches as the Parquet reader decodes them into rows in the read schema, with
/// their lineage inherited where the file did not materialize it.
struct RowsRead {
    schema: ReadSchema,
    lineage: Option<FileLineage>,
    positions: Box<dyn Iterator<Item = u64> + Send>,
}

impl RowsRead {
    fn new(schema: &ReadSchema, rows: &FileRows, selected: Selected) -> Self {
        let positions: Box<dyn Iterator<Item = u64> + Send> = match selected {
            Selected::Rows(rows) => Box::new(rows.into_iter()),
            _ => Box::new(0..),
        };
        Self {
            schema: schema.clone(),
            lineage: rows.lineage.filter(|_| schema.lineage),
            positions,
        }
    }

    fn next(&mut self, batch: &RecordBatch) -> Result<RecordBatch, ChangeStoreError> {
        let rows = conform(batch, &self.schema)?;
        Ok(match &self.lineage {
            Some(file) => inherit_lineage(&rows, file, &mut self.positions)?,
            None => rows,
        })
    }
}

/// Rows a decoded batch of narrow rows holds.
const BATCH_ROWS: usize = 8192;

/// Bytes of decoded rows that the reads sharing it may hold at once. Memory budgets are
/// planned from stored sizes, and rows may decode to any multiple of those (a column of a
/// few distinct strings is stored as a few bits a row): reads count what they decode, and
/// stop with [`ChangeStoreError::OverBudget`] as soon as it passes the limit.
#[derive(Debug, Clone)]
pub struct DecodedBudget {
    held: Arc<AtomicU64>,
    limit: u64,
}

impl DecodedBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            held: Arc::default(),
            limit,
        }
    }

    /// Counts `bytes` more as held; fails when that passes the limit.
    fn hold(&self, bytes: u64) -> Result<(), ChangeStoreError> {
        let held = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if held > self.limit {
            return Err(ChangeStoreError::OverBudget(self.limit));
        }
        Ok(())
    }

    /// Counts `bytes` as no longer held.
    pub fn release(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The selected rows of a data file, in `schema`. The file is read whole, and every batch
/// it decodes is counted in `budget`, which it must stay within.
pub async fn read_data_file(
    file_io: &FileIO,
    rows: &FileRows,
    schema: &ReadSchema,
    deletes: &DeleteCache,
    budget: &DecodedBudget,
) -> Result<Vec<RecordBatch>, ChangeStoreError> {
    let selected = select(file_io, rows, schema, deletes).await?;
    if let Selected::Nothing = selected {
        return Ok(Vec::new());
    }
    let bytes = file_io.new_input(&rows.path)?.read().await?;
    let (schema, rows, budget) = (schema.clone(), rows.clone(), budget.clone());
    // Decoding is CPU work: keep it off the async workers.
    tokio::task::spawn_blocking(move || {
        let metadata = ArrowReaderMetadata::load(&bytes, options(&selected))?;
        let mask = projection(&metadata, &schema);
        let rows_per_batch = batch_rows(metadata.metadata(), &mask, BATCH_ROWS);
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, metadata)
            .with_projection(mask)
            .with_batch_size(rows_per_batch);
        if let Selected::Rows(positions) = &selected {
            builder = builder.with_row_selection(row_selection(positions, rows.record_count));
        }
        let reader = builder.build()?;
        let mut rows_read = RowsRead::new(&schema, &rows, selected);
        reader
            .map(|batch| {
                let batch = rows_read.next(&batch?)?;
                budget.hold(batch.get_array_memory_size() as u64)?;
                Ok(batch)
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ChangeStoreError::Corrupt(format!("reading {}: {e}", "data file")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_holds_up_to_its_limit_and_what_is_released_is_held_again() {
        let budget = DecodedBudget::new(100);
        let shared = budget.clone();
        assert!(budget.hold(60).is_ok());
        assert!(
            shared.hold(40).is_ok(),
            "reads sharing a budget count together"
        );
        assert!(matches!(
            budget.hold(1),
            Err(ChangeStoreError::OverBudget(100))
        ));
        budget.release(61);
        assert!(shared.hold(60).is_ok());
        assert!(budget.hold(1).is_err());
    }

    #[test]
    fn a_row_selection_takes_exactly_the_selected_positions() {
        let selected: RoaringTreemap = [0u64, 1, 2, 5, 9].into_iter().collect();
        let selection = row_selection(&selected, 12);
        let selectors: Vec<RowSelector> = selection.into();
        assert_eq!(
            selectors,
            vec![
                RowSelector::select(3),
                RowSelector::skip(2),
                RowSelector::select(1),
                RowSelector::skip(3),
                RowSelector::select(1),
                RowSelector::skip(2),
            ]
        );
        let tail: RoaringTreemap = [11u64].into_iter().collect();
        let selectors: Vec<RowSelector> = row_selection(&tail, 12).into();
        assert_eq!(
            selectors,
            vec![RowSelector::skip(11), RowSelector::select(1)]
        );
    }
}
