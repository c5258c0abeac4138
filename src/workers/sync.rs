//! Bringing one table's feed up to date under its lease: export or follow, one change
//! set per snapshot, each published in its own fenced transaction.
//! Must not reach: `api`, `delivery`.

use std::time::Instant;

use chrono::{DateTime, TimeZone, Utc};
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::SnapshotRef;
use iceberg::table::Table;
use roaring::RoaringTreemap;
use tokio_util::sync::CancellationToken;

use super::rewrite::Rewrite;
use super::sync_error::{SyncError, copy_error, lineage_error};
use crate::catalog::{CatalogCache, CatalogConfig, parse_ident};
use crate::changelog::read::stream_data_file;
use crate::changelog::{
    self, DataFileRef, DeleteCache, FileLineage, FileRows, Reset, SnapshotPlan, key_indexes,
};
use crate::changes::ShuffleKey;
use crate::changes::key::deleted_rows_of;
use crate::changes::{
    ChangeSetKey, ChangeStore, ChangeStoreError, ReadSchema, StoredSegment, deleted_rows,
};
use crate::config::SchedulerSettings;
use crate::failure::FailureCode;
use crate::store::{Lease, NewChangeSet, NewSegment, PollOutcome, SourceTable, Store};
use crate::telemetry::metric;

/// Everything one sync needs.
pub struct TableSync<'a> {
    pub store: &'a Store,
    pub changes: &'a ChangeStore,
    pub lease: &'a Lease,
    pub stop: &'a CancellationToken,
    pub settings: &'a SchedulerSettings,
    pub catalogs: &'a CatalogCache,
}

impl TableSync<'_> {
    /// Publishes what is pending for `table` and returns what the poll saw.
    pub async fn run(&self, table: &SourceTable) -> Result<PollOutcome, SyncError> {
        let started = Instant::now();
        let iceberg = self.load(table).await?;
        tracing::debug!(load_ms = millis(started), "loaded the table's metadata");
        let metadata = iceberg.metadata_ref();

        // Each change set is planned for the ordinal after the last: its objects and
        // tasks are keyed by it, and it is published only if that still holds.
        let mut ordinal = table.last_ordinal + 1;
        let mut checkpoint = table.checkpoint_snapshot_id;
        if table.export_pending() {
            match metadata.snapshot_for_ref(&table.branch) {
                Some(head) => {
                    let plan = changelog::plan_export(&iceberg, head).await?;
                    self.publish(table, &iceberg, head, plan, Kind::Export, ordinal)
                        .await?;
                    ordinal += 1;
                    checkpoint = Some(head.snapshot_id());
                }
                // An empty table has nothing to export: follow it from its first commit.
                None => self.store.begin_following(table.id, self.lease).await?,
            }
        }

        let pending = changelog::pending_snapshots(&metadata, &table.branch, checkpoint)
            .map_err(|e| lineage_error(e, checkpoint))?;
        let moved_at = moved_at(&iceberg);
        if let Some(Reset { from, to }) = &pending.reset {
            let kind = Kind::Reset {
                from: from.snapshot_id(),
                at: moved_at,
            };
            let published = match changelog::plan_reset(&iceberg, from, to).await {
                Ok(plan) => self.publish(table, &iceberg, to, plan, kind, ordinal).await,
                Err(e) => Err(e.into()),
            };
            if let Err(e) = published {
                let behind = outcome(&pending.head, true, &pending.snapshots, moved_at);
                self.record_lag_while_waiting(table, &e, behind).await;
                return Err(e);
            }
            ordinal += 1;
        }
        for (i, snapshot) in pending.snapshots.iter().enumerate() {
            if self.stop.is_cancelled() {
                return Err(SyncError::Abandoned);
            }
            // A parent expired before its child was published may have taken files the
            // child's change needs with it.
            let expired_parent = snapshot
                .parent_snapshot_id()
                .filter(|p| metadata.snapshot_by_id(*p).is_none());
            let planning = Instant::now();
            let published = match changelog::plan_snapshot(&iceberg, snapshot).await {
                Ok(plan) => {
                    let snapshot_id = snapshot.snapshot_id();
                    tracing::debug!(snapshot_id, plan_ms = millis(planning), "planned");
                    self.publish(table, &iceberg, snapshot, plan, Kind::Snapshot, ordinal)
                        .await
                }
                Err(e) => Err(e.into()),
            };
            if let Err(e) = published.map_err(|e| e.in_gap(snapshot.snapshot_id(), expired_parent))
            {
                let behind = outcome(&pending.head, false, &pending.snapshots[i..], moved_at);
                self.record_lag_while_waiting(table, &e, behind).await;
                return Err(e);
            }
            ordinal += 1;
        }
        Ok(outcome(&pending.head, false, &[], moved_at))
    }

    /// Keeps the lag figures right when a publish has to wait.
    async fn record_lag_while_waiting(
        &self,
        table: &SourceTable,
        e: &SyncError,
        outcome: PollOutcome,
    ) {
        if let SyncError::Transient(_) = e {
            let _ = self.store.record_lag(table.id, self.lease, &outcome).await;
        }
    }

    /// What a poll of a paused table sees, publishing nothing: how far the feed is
    /// behind the table, so that lag keeps growing while the table is paused.
    pub async fn observe(&self, table: &SourceTable) -> Result<PollOutcome, SyncError> {
        let iceberg = self.load(table).await?;
        let metadata = iceberg.metadata_ref();
        if table.export_pending() {
            let head = metadata.snapshot_for_ref(&table.branch).cloned();
            let export: Vec<_> = head.iter().cloned().collect();
            return Ok(outcome(&head, false, &export, moved_at(&iceberg)));
        }
        let checkpoint = table.checkpoint_snapshot_id;
        let pending = changelog::pending_snapshots(&metadata, &table.branch, checkpoint)
            .map_err(|e| lineage_error(e, checkpoint))?;
        let reset = pending.reset.is_some();
        Ok(outcome(
            &pending.head,
            reset,
            &pending.snapshots,
            moved_at(&iceberg),
        ))
    }

    async fn load(&self, table: &SourceTable) -> Result<Table, SyncError> {
        let catalog = CatalogConfig::from_json(&table.catalog)?;
        let ident = parse_ident(&table.table_name)?;
        Ok(self.catalogs.load_table(&catalog, &ident).await?)
    }

    /// Copies added data files as `inserts` segments, concurrently but in order. A file
    /// with deletes (in an export) is copied too, its deleted rows recorded beside it;
    /// only the rows a surviving file regained are written anew.
    async fn copy_inserts(
        &self,
        iceberg: &Table,
        stored_as: ChangeSetKey,
        schema: &ReadSchema,
        files: Vec<FileRows>,
    ) -> Result<Vec<NewSegment>, SyncError> {
        let snapshot_id = stored_as.snapshot_id;
        let copy = InsertCopy {
            changes: self.changes,
            file_io: iceberg.file_io(),
            schema,
            // Decoded delete files serve every data file they apply to.
            deletes: DeleteCache::default(),
        };
        let (copy, stop) = (&copy, self.stop);
        // The copies run concurrently yet land in order.
        let copies = files
            .into_iter()
            .enumerate()
            .filter(|(_, f)| f.record_count > 0)
            .map(|(n, file)| async move {
                if stop.is_cancelled() {
                    return Err(SyncError::Abandoned);
                }
                let key = stored_as.segment(n);
                copy.segment(&file, &key)
                    .await
                    .map_err(|e| copy_error(e, snapshot_id))
            })
            .collect::<Vec<_>>();
        let segments: Vec<Option<NewSegment>> = futures::stream::iter(copies)
            .buffered(self.settings.file_concurrency)
            .try_collect()
            .await?;
        Ok(segments.into_iter().flatten().collect())
    }

    /// Computes the change set of `plan`, which holds the changes (or for a reset, the
    /// state) of `snapshot`, and publishes it at `ordinal`.
    async fn publish(
        &self,
        table: &SourceTable,
        iceberg: &Table,
        snapshot: &SnapshotRef,
        plan: SnapshotPlan,
        kind: Kind,
        ordinal: i64,
    ) -> Result<(), SyncError> {
        let started = Instant::now();
        let snapshot_id = snapshot.snapshot_id();
        let stored_as = ChangeSetKey {
            table: table.id,
            ordinal,
            snapshot_id,
        };
        let metadata = iceberg.metadata();
        let schema = snapshot
            .schema_id()
            .and_then(|id| metadata.schema_by_id(id))
            .unwrap_or_else(|| metadata.current_schema());
        // Even an append needs the key: consumers read it from every event.
        let key = key_indexes(
            schema,
            table.identifier_field_ids.as_deref(),
            &table.identifier_columns,
        )
        .map_err(|reason| {
            SyncError::unpublishable(snapshot_id, FailureCode::IdentifierColumnsInvalid, reason)
        })?;
        let shuffled = matches!(plan, SnapshotPlan::Rewrite { .. });
        let operation = snapshot.summary().operation.as_str();
        let (segments, regained) = match plan {
            SnapshotPlan::Inserts(files) => {
                let read = ReadSchema::new(schema)
                    .map_err(|e| {
                        SyncError::unpublishable(snapshot_id, FailureCode::Unsupported, e)
                    })?
                    // The planner gives every file of a v3 table its lineage.
                    .with_lineage(files.iter().any(|f| f.lineage.is_some()));
                let segments = self.copy_inserts(iceberg, stored_as, &read, files).await?;
                (segments, 0)
            }
            SnapshotPlan::Rewrite { removed, added } => {
                let rewrite = Rewrite {
                    store: self.store,
                    changes: self.changes,
                    iceberg,
                    change_set: stored_as,
                    compaction: matches!(kind, Kind::Snapshot) && operation == "replace",
                    schema,
                    key,
                    settings: self.settings,
                    stop: self.stop,
                };
                let outcome = rewrite.compute(removed, added).await?;
                (outcome.segments, outcome.resurrected)
            }
            SnapshotPlan::Unsupported(reason) => {
                return Err(SyncError::unpublishable(
                    snapshot_id,
                    FailureCode::Unsupported,
                    reason,
                ));
            }
        };
        // Rows a reset brings back are what going back means; rows a commit brings back
        // by dropping a delete without a replacement are an anomaly worth a word.
        let (operation, reset_from, committed_at, resurrected_rows) = match kind {
            Kind::Reset { from, at } => ("reset", Some(from), at, 0),
            _ => (operation, None, committed_at(snapshot), regained),
        };
        if resurrected_rows > 0 {
            metrics::counter!(metric::RESURRECTED_ROWS.name).increment(resurrected_rows as u64);
            tracing::warn!(
                table = %table.table_name, snapshot_id, resurrected_rows,
                "the snapshot dropped deletes without replacing them: rows they had deleted \
                 are live again and published as inserts"
            );
        }
        let compute_ms = millis(started);
        let change_set = NewChangeSet {
            key: stored_as,
            sequence_number: snapshot.sequence_number(),
            operation: operation.to_string(),
            kind: kind.as_str(),
            reset_from,
            committed_at,
            resurrected_rows,
            schema_id: schema.schema_id(),
            schema: serde_json::to_value(schema.as_ref())
                .map_err(|e| SyncError::transient(FailureCode::Internal, e))?,
            segments,
            garbage: if shuffled {
                vec![stored_as.shuffle_prefix()]
            } else {
                Vec::new()
            },
        };
        self.store
            .publish_change_set(self.lease, &change_set)
            .await?;
        let rows: i64 = change_set.segments.iter().map(|s| s.event_count).sum();
        metrics::counter!(metric::ROWS_PUBLISHED.name).increment(rows as u64);
        metrics::counter!(metric::CHANGE_SETS_PUBLISHED.name).increment(1);
        let kind = kind.as_str();
        // From the commit, by the writer's clock: a figure for people, not a measurement.
        let since_commit_ms = (Utc::now() - committed_at).num_milliseconds().max(0);
        tracing::info!(table = %table.table_name, snapshot_id, ordinal, rows, kind, compute_ms,
            since_commit_ms, "published change set");
        Ok(())
    }
}

/// Makes one `inserts` segment of a data file's rows.
struct InsertCopy<'a> {
    changes: &'a ChangeStore,
    file_io: &'a FileIO,
    schema: &'a ReadSchema,
    deletes: DeleteCache,
}

impl InsertCopy<'_> {
    /// The segment of `file`'s rows at `key`; `None` when no row is left.
    async fn segment(
        &self,
        file: &FileRows,
        key: &str,
    ) -> Result<Option<NewSegment>, ChangeStoreError> {
        if file.only_deleted_by.is_some() {
            // The rows that are events, written as a data file of their own.
            let rows =
                stream_data_file(self.file_io, file, self.schema, &DeleteCache::default()).await?;
            let stored = self
                .changes
                .write_batches(key, self.schema.file_schema(), rows)
                .await?;
            if stored.rows == 0 {
                self.changes.delete(key).await?;
                return Ok(None);
            }
            // The rows were written with their lineage: none is left to inherit.
            let lineage = file.lineage.map(|l| FileLineage {
                first_row_id: None,
                ..l
            });
            return Ok(Some(inserts(stored, 0, None, lineage)));
        }
        let deleted = if file.deletes.is_empty() {
            RoaringTreemap::new()
        } else {
            let data = DataFileRef {
                path: &file.path,
                record_count: file.record_count,
            };
            self.deletes
                .dead(self.file_io, &data, &file.deletes, self.schema)
                .await?
        };
        if deleted.len() >= file.record_count {
            return Ok(None);
        }
        let stored = self
            .changes
            .copy_data_file(self.file_io, &file.path, file.record_count, file.size, key)
            .await?;
        let deleted_rows = if deleted.is_empty() {
            None
        } else {
            let deleted_key = deleted_rows_of(key);
            self.changes
                .put(&deleted_key, deleted_rows::encode(&deleted))
                .await?;
            Some(deleted_key)
        };
        Ok(Some(inserts(
            stored,
            deleted.len(),
            deleted_rows,
            file.lineage,
        )))
    }
}

/// The `inserts` segment of a stored file, `deleted` of whose rows are not events.
fn inserts(
    stored: StoredSegment,
    deleted: u64,
    deleted_rows: Option<String>,
    lineage: Option<FileLineage>,
) -> NewSegment {
    NewSegment {
        event_count: stored.rows - deleted as i64,
        layout: "inserts",
        path: stored.path,
        size_bytes: stored.size,
        decoded_bytes: Some(stored.decoded),
        deleted_rows,
        lineage,
    }
}

/// What a change set is of.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The table's state at registration, as inserts.
    Export,
    /// One snapshot's changes.
    Snapshot,
    /// From the state of checkpoint `from` to the snapshot's: the branch moved there at
    /// `at`.
    Reset { from: i64, at: DateTime<Utc> },
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Export => "export",
            Kind::Snapshot => "snapshot",
            Kind::Reset { .. } => "reset",
        }
    }
}

/// What a poll saw: the head, and what is not published yet: a reset (one change set,
/// behind since the branch moved at `moved_at`) and the snapshots `waiting`.
fn outcome(
    head: &Option<SnapshotRef>,
    reset: bool,
    waiting: &[SnapshotRef],
    moved_at: DateTime<Utc>,
) -> PollOutcome {
    PollOutcome {
        head_snapshot_id: head.as_ref().map(|h| h.snapshot_id()),
        snapshots_behind: waiting.len() as i64 + i64::from(reset),
        oldest_pending_committed_at: if reset {
            Some(moved_at)
        } else {
            waiting.first().map(committed_at)
        },
    }
}

/// When the table's metadata last changed: for a branch rolled back, when it moved.
fn moved_at(iceberg: &Table) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(iceberg.metadata().last_updated_ms())
        .single()
        .unwrap_or_default()
}

/// When a snapshot was committed.
/// Milliseconds since `started`, for logs.
fn millis(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

pub fn committed_at(snapshot: &SnapshotRef) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(snapshot.timestamp_ms())
        .single()
        .unwrap_or_default()
}
