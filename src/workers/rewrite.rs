//! Publishing a snapshot that removed data files: read the removed and added files one
//! partition group at a time, cancel carryover within the group, pair what survives by
//! key across groups (a partition-moving update meets here), and write `changes` segments.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::{SchemaRef, SnapshotRef};

use super::sync::{SyncError, copy_error};
use crate::changelog::AddedFile;
use crate::changelog::carryover::{PairError, Survivors, cancel_carryover, pair};
use crate::changelog::read::read_data_file;
use crate::changes::json::{JsonOptions, RecordEncoder};
use crate::changes::writer::encode_changes;
use crate::changes::{ChangeStore, ReadSchema};
use crate::store::{NewSegment, SourceTable};

/// Events per `changes` segment.
const ROWS_PER_SEGMENT: usize = 250_000;

/// One rewrite snapshot to compute.
pub struct Rewrite<'a> {
    pub table: &'a SourceTable,
    pub file_io: &'a FileIO,
    pub snapshot: &'a SnapshotRef,
    pub schema: &'a SchemaRef,
    pub changes: &'a ChangeStore,
    pub file_concurrency: usize,
}

impl Rewrite<'_> {
    /// Computes the snapshot's changes and writes them as segments.
    pub async fn compute(
        &self,
        removed: Vec<AddedFile>,
        added: Vec<AddedFile>,
    ) -> Result<Vec<NewSegment>, SyncError> {
        let snapshot_id = self.snapshot.snapshot_id();
        let read = ReadSchema::new(self.schema).map_err(|e| self.table_error(e.to_string()))?;
        let batch_schema = read.batch_schema();

        let mut groups: BTreeMap<String, (Vec<AddedFile>, Vec<AddedFile>)> = BTreeMap::new();
        for f in removed {
            groups.entry(f.group.clone()).or_default().0.push(f);
        }
        for f in added {
            groups.entry(f.group.clone()).or_default().1.push(f);
        }
        let (mut deleted, mut inserted) = (Vec::new(), Vec::new());
        for (removed, added) in groups.into_values() {
            let removed = self.read_all(&removed, &read).await?;
            let added = self.read_all(&added, &read).await?;
            let survivors = cancel_carryover(&batch_schema, &removed, &added)
                .map_err(|e| self.table_error(e.to_string()))?;
            deleted.push(survivors.deleted);
            inserted.push(survivors.inserted);
        }
        let survivors = Survivors {
            deleted: concat_batches(&batch_schema, &deleted)
                .map_err(|e| self.table_error(e.to_string()))?,
            inserted: concat_batches(&batch_schema, &inserted)
                .map_err(|e| self.table_error(e.to_string()))?,
        };
        let operation = self.snapshot.summary().operation.as_str();
        let changed = survivors.deleted.num_rows() + survivors.inserted.num_rows();
        if operation == "replace" && changed > 0 {
            return Err(self.table_error(format!(
                "it is a replace (compaction) snapshot but its rows differ from the files it replaced \
                 ({} rows removed, {} rows added); refusing to publish it as a no-op",
                survivors.deleted.num_rows(),
                survivors.inserted.num_rows()
            )));
        }

        let key = crate::changelog::key_indexes(self.schema, &self.table.identifier_columns);
        let rows = pair(&survivors, &key).map_err(|e| match e {
            PairError::DuplicateKey(d) => {
                let batch = if d.side == "deleted" {
                    &survivors.deleted
                } else {
                    &survivors.inserted
                };
                self.table_error(format!(
                    "the identifier columns ({}) are not unique: two {} rows have the key {}",
                    self.table.identifier_columns.join(", "),
                    d.side,
                    render_key(self.schema, batch, d.second as usize, &key)
                ))
            }
            PairError::Arrow(e) => self.table_error(e.to_string()),
        })?;

        let mut segments = Vec::new();
        for (n, chunk) in rows.chunks(ROWS_PER_SEGMENT).enumerate() {
            let bytes =
                encode_changes(&survivors, chunk).map_err(|e| copy_error(e, snapshot_id))?;
            let key = ChangeStore::segment_key(self.table.id, snapshot_id, n);
            let size = bytes.len() as i64;
            self.changes
                .put(&key, bytes)
                .await
                .map_err(|e| SyncError::Transient(format!("snapshot {snapshot_id}: {e}")))?;
            segments.push(NewSegment {
                event_count: chunk.len() as i64,
                layout: "changes",
                path: key,
                size_bytes: size,
            });
        }
        Ok(segments)
    }

    async fn read_all(
        &self,
        files: &[AddedFile],
        read: &ReadSchema,
    ) -> Result<Vec<RecordBatch>, SyncError> {
        let snapshot_id = self.snapshot.snapshot_id();
        let reads: Vec<_> = files
            .iter()
            .map(|f| {
                let (file_io, path, read) = (self.file_io.clone(), f.path.clone(), read.clone());
                async move {
                    read_data_file(&file_io, &path, &read)
                        .await
                        .map_err(|e| copy_error(e, snapshot_id))
                }
            })
            .collect();
        let batches: Vec<Vec<RecordBatch>> = futures::stream::iter(reads)
            .buffered(self.file_concurrency)
            .try_collect()
            .await?;
        Ok(batches.into_iter().flatten().collect())
    }

    fn table_error(&self, reason: String) -> SyncError {
        let snapshot = self.snapshot.snapshot_id();
        SyncError::Table {
            message: format!("cannot publish snapshot {snapshot}: {reason}"),
            snapshot: Some(snapshot),
        }
    }
}

/// A key as JSON, for error messages.
fn render_key(schema: &SchemaRef, batch: &RecordBatch, row: usize, key: &[usize]) -> String {
    let fields = schema.as_struct().fields();
    let rendered = RecordEncoder::try_new(fields, batch.schema().fields(), &JsonOptions::default())
        .and_then(|encoder| {
            let mut out = Vec::new();
            encoder
                .bind(batch.columns())?
                .write_fields(row, key, &mut out);
            Ok(String::from_utf8_lossy(&out).into_owned())
        });
    rendered.unwrap_or_else(|e| format!("(unprintable: {e})"))
}
