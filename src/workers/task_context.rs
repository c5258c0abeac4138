//! What a shuffle task runs with: the node's stores and catalogs ([`TaskContext`]), the
//! table it opened, and how a task fails ([`TaskError`]).
//! Must not reach: `workers::tasks`, `workers::shuffle` (claiming tasks, and what a task
//! computes).

use arrow::array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::SchemaRef;
use iceberg::table::Table;

use crate::catalog::{CatalogCache, CatalogConfig, CatalogError, StorageFault, parse_ident};
use crate::change::{table_columns, table_width};
use crate::changelog::read::{DecodedBudget, read_data_file};
use crate::changelog::{DeleteCache, FileRows};
use crate::changes::json::{JsonOptions, RecordEncoder};
use crate::changes::{ChangeStore, ChangeStoreError, ReadSchema};
use crate::failure::{Failure, FailureCode};
use crate::store::{Store, TableId};

/// Why a task failed, by kind.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Worth another attempt (I/O, a catalog hiccup).
    #[error("{0}")]
    Retryable(Failure),
    /// Will fail again whatever happens (the data is wrong): stop the table now.
    #[error("{0}")]
    Permanent(Failure),
}

impl TaskError {
    /// A catalog failure while opening the task's table: every kind is retried, since
    /// the sync that planned the task loaded the same table a moment ago.
    pub fn catalog(e: CatalogError) -> Self {
        TaskError::Retryable(e.failure())
    }

    /// A failure of the change store (reading or writing shuffle files and segments).
    pub fn change_store(e: impl std::fmt::Display) -> Self {
        TaskError::Retryable(Failure::new(
            FailureCode::ChangeStoreUnavailable,
            e.to_string(),
        ))
    }

    /// A failure of computing on rows already read: the same rows fail the same way,
    /// so another attempt would only repeat it.
    pub fn compute(e: impl std::fmt::Display) -> Self {
        TaskError::Permanent(Failure::new(FailureCode::Internal, e.to_string()))
    }

    /// A failure a thread of the blocking pool ended with (a panic): tried again.
    pub fn joined(e: tokio::task::JoinError) -> Self {
        TaskError::Retryable(Failure::new(FailureCode::Internal, e.to_string()))
    }

    /// A failure to read a table file: permanent when the file is gone or malformed,
    /// since the metadata that names it will not change; retried otherwise (a new
    /// attempt reopens the table, with fresh credentials).
    pub fn reading(e: ChangeStoreError) -> Self {
        match &e {
            ChangeStoreError::Corrupt(_) => {
                TaskError::Permanent(Failure::new(FailureCode::DataInvalid, e.to_string()))
            }
            ChangeStoreError::Source(source) => match StorageFault::of(source) {
                Some(fault) if fault.is_lasting() => TaskError::Permanent(Failure::new(
                    fault.failure_code(),
                    format!("{}: {e}", fault.code()),
                )),
                Some(fault) => {
                    TaskError::Retryable(Failure::new(fault.failure_code(), e.to_string()))
                }
                None => TaskError::Retryable(Failure::new(
                    FailureCode::StorageUnreachable,
                    e.to_string(),
                )),
            },
            _ => TaskError::change_store(e),
        }
    }

    /// What the task failed with.
    pub fn failure(&self) -> &Failure {
        match self {
            TaskError::Retryable(f) | TaskError::Permanent(f) => f,
        }
    }
}

/// The table a task works on, opened.
pub struct Opened {
    pub file_io: FileIO,
    pub read: ReadSchema,
    pub schema: SchemaRef,
    /// Files read at the same time (`scheduler.file_concurrency`).
    pub concurrency: usize,
}

/// What tasks need to run.
#[derive(Clone)]
pub struct TaskContext {
    pub store: Store,
    pub changes: ChangeStore,
    /// Reads published segments (net map tasks read a range's).
    pub feed: crate::delivery::Feed,
    pub catalogs: CatalogCache,
    pub file_concurrency: usize,
    /// Memory a map task may use before it spills (`scheduler.map_memory_bytes`).
    pub map_memory_bytes: u64,
}

impl TaskContext {
    /// Loads the task's table and the schema its snapshot is read with (with the row
    /// lineage columns if `lineage`).
    pub async fn open(
        &self,
        table: TableId,
        schema_id: i32,
        lineage: bool,
    ) -> Result<Opened, TaskError> {
        let source = self.store.get_table(table).await.map_err(|e| {
            TaskError::Retryable(Failure::new(
                FailureCode::DatabaseUnavailable,
                e.to_string(),
            ))
        })?;
        let config = CatalogConfig::from_json(&source.catalog).map_err(TaskError::catalog)?;
        let ident = parse_ident(&source.table_name).map_err(TaskError::catalog)?;
        let iceberg = self
            .catalogs
            .load_table(&config, &ident)
            .await
            .map_err(TaskError::catalog)?;
        Opened::new(&iceberg, schema_id, lineage, self.file_concurrency)
    }
}

impl Opened {
    /// `iceberg` to be read under its schema `schema_id` (with the row lineage columns
    /// if `lineage`), `concurrency` files at a time.
    pub fn new(
        iceberg: &Table,
        schema_id: i32,
        lineage: bool,
        concurrency: usize,
    ) -> Result<Self, TaskError> {
        let schema = iceberg
            .metadata()
            .schema_by_id(schema_id)
            .cloned()
            .ok_or_else(|| {
                TaskError::Permanent(Failure::new(
                    FailureCode::DataInvalid,
                    format!("schema {schema_id} is gone from the table"),
                ))
            })?;
        let read = ReadSchema::new(&schema)
            .map_err(TaskError::compute)?
            .with_lineage(lineage);
        Ok(Opened {
            file_io: iceberg.file_io().clone(),
            read,
            schema,
            concurrency,
        })
    }

    /// Reads the rows of data files concurrently: the batches of each, in file order; or
    /// `None` as soon as they would pass `budget`.
    pub async fn read_each_file(
        &self,
        files: &[FileRows],
        deletes: &DeleteCache,
        budget: &DecodedBudget,
    ) -> Result<Option<Vec<Vec<RecordBatch>>>, TaskError> {
        let reads: Vec<_> = files
            .iter()
            .map(|rows| read_data_file(&self.file_io, rows, &self.read, deletes, budget))
            .collect();
        let read = futures::stream::iter(reads)
            .buffered(self.concurrency)
            .try_collect()
            .await;
        match read {
            Ok(files) => Ok(Some(files)),
            Err(ChangeStoreError::OverBudget(_)) => Ok(None),
            Err(e) => Err(TaskError::reading(e)),
        }
    }
}

/// A key as JSON, for error messages.
pub fn render_key(schema: &SchemaRef, batch: &RecordBatch, row: usize, key: &[usize]) -> String {
    let fields = schema.as_struct().fields();
    let width = table_width(batch.schema_ref());
    let arrow_fields = &batch.schema_ref().fields()[..width];
    let rendered =
        RecordEncoder::try_new(fields, arrow_fields, &JsonOptions::default()).and_then(|encoder| {
            let mut out = Vec::new();
            encoder
                .bind(table_columns(batch))?
                .write_fields(row, key, &mut out);
            Ok(String::from_utf8_lossy(&out).into_owned())
        });
    rendered.unwrap_or_else(|e| format!("(unprintable: {e})"))
}
