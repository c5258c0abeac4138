//! Copy-on-write commits with the iceberg crate's public building blocks: one snapshot that
//! removes data files and adds others (`overwrite`, `delete`, `replace`), as Spark or
//! pyiceberg write them, so tests can produce the snapshots icefeed must turn into
//! updates, deletes and carried-over rows.
//! Must not reach: [`crate::demo`].
//!
//! The iceberg crate (0.10.1) has no action for this: `Transaction` only offers
//! `fast_append` among the snapshot-producing actions, its `TransactionAction` trait is
//! crate-private, and `TableCommit` cannot be built outside the crate (its builder's
//! `build` is `pub(crate)`), so `Catalog::update_table` cannot carry a hand-made
//! snapshot. This module therefore writes the manifests, the manifest list and the
//! next metadata file itself and swaps the catalog's pointer with the same
//! compare-and-swap `SqlCatalog::update_table` runs, on the SQLite catalog that
//! [`writer::open_sql_catalog`] lays out (`<dir>/catalog.db` next to `<dir>/warehouse`).

use std::collections::HashMap;
use std::str::FromStr;

use crate::catalog_pointer;
use crate::writer::{self, AppendOptions};
use arrow::array::RecordBatch;
use futures::TryStreamExt;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestWriterBuilder, Operation, Snapshot, SnapshotReference, SnapshotRetention,
    SnapshotSummaryCollector, Summary, TableMetadata, TableProperties,
};
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, MetadataLocation};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Writes `add` as new data files (one partition per file) and commits them together with
/// the removal of `remove` as ONE snapshot with the given `operation` (`"overwrite"`,
/// `"delete"` or `"replace"`); returns the table reloaded from `catalog`.
///
/// See [`commit_rewrite`] for what the snapshot holds.
pub async fn rewrite(
    catalog: &dyn Catalog,
    table: &Table,
    remove: &[DataFile],
    add: &[RecordBatch],
    operation: &str,
) -> iceberg::Result<Table> {
    rewrite_with(
        catalog,
        table,
        remove,
        add,
        operation,
        &AppendOptions::default(),
    )
    .await
}

/// [`rewrite`] with writer options, e.g. to split the new rows over several files.
pub async fn rewrite_with(
    catalog: &dyn Catalog,
    table: &Table,
    remove: &[DataFile],
    add: &[RecordBatch],
    operation: &str,
    options: &AppendOptions,
) -> iceberg::Result<Table> {
    let added = if add.iter().any(|b| b.num_rows() > 0) {
        writer::write_data_files(table, add, options).await?
    } else {
        Vec::new()
    };
    commit_rewrite(catalog, table, remove, added, operation).await
}

/// Commits one snapshot that removes the live data files `remove` (matched by path) and
/// adds the already written data files `add`.
///
/// The snapshot's parent is the table's current snapshot and its sequence number the
/// table's next one. Its manifest list holds:
/// - every data manifest of the parent that lists none of `remove`, unchanged (manifests
///   holding only DELETED entries of earlier snapshots are dropped);
/// - for every data manifest that lists a removed file, a rewritten manifest (written by
///   this snapshot) where that file is DELETED (snapshot id: this snapshot; data and file
///   sequence numbers: the file's own) and the other live files are EXISTING (their
///   snapshot id and sequence numbers unchanged);
/// - one manifest of `add` as ADDED entries, whose snapshot id and sequence numbers are
///   inherited from the manifest list (this snapshot);
/// - the parent's delete manifests, unchanged.
///
/// The summary has the operation, the `added-*`/`deleted-*` counts of the collector the
/// iceberg crate uses, and `total-*` values carried from the parent's summary.
pub async fn commit_rewrite(
    catalog: &dyn Catalog,
    table: &Table,
    remove: &[DataFile],
    add: Vec<DataFile>,
    operation: &str,
) -> iceberg::Result<Table> {
    let operation = parse_operation(operation)?;
    let metadata = table.metadata();
    if metadata.format_version() != FormatVersion::V2 {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!(
                "rewrite writes format version 2 tables only; this one is {:?}",
                metadata.format_version()
            ),
        ));
    }
    if remove.is_empty() && add.is_empty() {
        return Err(Error::new(
            ErrorKind::PreconditionFailed,
            "a rewrite must remove or add at least one data file",
        ));
    }
    let parent = metadata.current_snapshot();
    let parent_id = parent.map(|s| s.snapshot_id());
    let snapshot_id = unused_snapshot_id(metadata);
    let sequence_number = metadata.next_sequence_number();
    let commit_uuid = uuid::Uuid::now_v7();
    let file_io = table.file_io();
    let schema = metadata.current_schema().clone();
    let manifest_path = |n: usize| {
        format!(
            "{}/metadata/{commit_uuid}-m{n}.avro",
            metadata.location().trim_end_matches('/')
        )
    };

    let mut to_remove: HashMap<&str, &DataFile> =
        remove.iter().map(|f| (f.file_path(), f)).collect();
    if to_remove.len() != remove.len() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "a data file is listed twice in `remove`",
        ));
    }
    let mut manifests: Vec<ManifestFile> = Vec::new();
    if let Some(parent) = parent {
        let list = table.manifest_list_reader(parent).load().await?;
        for manifest in list.entries() {
            if manifest.content != ManifestContentType::Data {
                manifests.push(manifest.clone());
                continue;
            }
            let loaded = manifest.load_manifest(file_io).await?;
            let hits = loaded
                .entries()
                .iter()
                .filter(|e| e.is_alive() && to_remove.contains_key(e.file_path()))
                .count();
            if hits == 0 {
                if manifest.has_added_files() || manifest.has_existing_files() {
                    manifests.push(manifest.clone());
                }
                continue;
            }
            let spec = metadata
                .partition_spec_by_id(manifest.partition_spec_id)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("unknown partition spec {}", manifest.partition_spec_id),
                    )
                })?;
            let output = file_io.new_output(manifest_path(manifests.len()))?;
            let mut out = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                schema.clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data();
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                let sequence_number = entry.sequence_number().ok_or_else(|| {
                    Error::new(ErrorKind::DataInvalid, "live entry without sequence number")
                })?;
                if to_remove.remove(entry.file_path()).is_some() {
                    out.add_delete_file(
                        entry.data_file().clone(),
                        sequence_number,
                        entry.file_sequence_number,
                    )?;
                } else {
                    let added_by = entry.snapshot_id().ok_or_else(|| {
                        Error::new(ErrorKind::DataInvalid, "live entry without snapshot id")
                    })?;
                    out.add_existing_file(
                        entry.data_file().clone(),
                        added_by,
                        sequence_number,
                        entry.file_sequence_number,
                    )?;
                }
            }
            manifests.push(out.write_manifest_file().await?);
        }
    }
    if let Some(missing) = to_remove.keys().next() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("data file {missing} is not live in the current snapshot"),
        ));
    }

    let mut summary = SnapshotSummaryCollector::default();
    summary.set_partition_summary_limit(
        metadata
            .properties()
            .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT),
    );
    let default_spec = metadata.default_partition_spec().clone();
    for file in remove {
        summary.remove_file(file, schema.clone(), default_spec.clone());
    }
    for file in &add {
        summary.add_file(file, schema.clone(), default_spec.clone());
    }
    if !add.is_empty() {
        let output = file_io.new_output(manifest_path(manifests.len()))?;
        let mut out = ManifestWriterBuilder::new(
            output,
            Some(snapshot_id),
            schema.clone(),
            default_spec.as_ref().clone(),
        )
        .build_v2_data();
        for file in add {
            // A negative sequence number leaves it null: inherited from the manifest list.
            out.add_file(file, -1)?;
        }
        manifests.push(out.write_manifest_file().await?);
    }

    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_uuid}.avro",
        metadata.location().trim_end_matches('/')
    );
    let mut list = ManifestListWriter::v2(
        file_io.new_output(&list_path)?.writer().await?,
        snapshot_id,
        parent_id,
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;

    let mut properties = summary.build();
    let previous = parent.map(|s| s.summary());
    for (total, added, removed) in [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ] {
        let get = |map: &HashMap<String, String>, key: &str| -> i64 {
            map.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let before = previous.map_or(0, |s| get(&s.additional_properties, total));
        let value = before + get(&properties, added) - get(&properties, removed);
        properties.insert(total.to_string(), value.max(0).to_string());
    }
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent_id)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation,
            additional_properties: properties,
        })
        .with_schema_id(metadata.current_schema_id())
        .build();

    let current_location = table.metadata_location_result()?.to_string();
    let new_metadata = metadata
        .clone()
        .into_builder(Some(current_location.clone()))
        .add_snapshot(snapshot)?
        .set_ref(
            MAIN_BRANCH,
            SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
        )?
        .build()?
        .metadata;
    // `with_new_metadata` alone keeps the version and uuid of the current file, i.e. it
    // names the current metadata file: always take the next version first.
    let new_location = MetadataLocation::from_str(&current_location)?
        .with_next_version()
        .with_new_metadata(&new_metadata);
    new_metadata.write_to(file_io, &new_location).await?;
    catalog_pointer::swap(
        table.identifier(),
        metadata.location(),
        &current_location,
        &new_location.to_string(),
    )
    .await?;

    let reloaded = catalog.load_table(table.identifier()).await?;
    if reloaded.metadata().current_snapshot_id() != Some(snapshot_id) {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!(
                "committed snapshot {snapshot_id} to the SQLite catalog next to the warehouse, \
                 but the given catalog does not show it: is it another catalog?"
            ),
        ));
    }
    Ok(reloaded)
}

/// The live data files of the table's current snapshot (none without a snapshot).
pub async fn live_data_files(table: &Table) -> iceberg::Result<Vec<DataFile>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        files.extend(
            loaded
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.data_file().clone()),
        );
    }
    Ok(files)
}

/// Every row of one data file, read straight from its Parquet file (no deletes applied).
pub async fn read_data_file(table: &Table, file: &DataFile) -> iceberg::Result<Vec<RecordBatch>> {
    let bytes = table.file_io().new_input(file.file_path())?.read().await?;
    let parquet = |e: parquet::errors::ParquetError| {
        Error::new(ErrorKind::DataInvalid, "reading a Parquet data file").with_source(e)
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(parquet)?
        .build()
        .map_err(parquet)?;
    reader.collect::<Result<Vec<_>, _>>().map_err(|e| {
        Error::new(ErrorKind::DataInvalid, "decoding a Parquet data file").with_source(e)
    })
}

/// Every row of the table at `snapshot_id` (current snapshot when `None`), from a scan.
pub async fn scan_rows(
    table: &Table,
    snapshot_id: Option<i64>,
) -> iceberg::Result<Vec<RecordBatch>> {
    let mut scan = table.scan();
    if let Some(id) = snapshot_id {
        scan = scan.snapshot_id(id);
    }
    scan.build()?.to_arrow().await?.try_collect().await
}

fn parse_operation(operation: &str) -> iceberg::Result<Operation> {
    match operation {
        "overwrite" => Ok(Operation::Overwrite),
        "delete" => Ok(Operation::Delete),
        "replace" => Ok(Operation::Replace),
        "append" => Ok(Operation::Append),
        other => Err(Error::new(
            ErrorKind::DataInvalid,
            format!("unknown snapshot operation {other:?}: use overwrite, delete or replace"),
        )),
    }
}

fn unused_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int32Array, Int64Array, StringArray};
    use arrow::datatypes::{Int32Type, Int64Type};
    use iceberg::TableIdent;
    use iceberg::spec::{
        ManifestStatus, NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec,
    };

    use super::*;
    use std::collections::HashSet;

    fn schema() -> Schema {
        Schema::builder()
            .with_schema_id(0)
            .with_identifier_field_ids([1])
            .with_fields([
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::required(2, "part", Type::Primitive(PrimitiveType::Int)).into(),
                NestedField::optional(3, "payload", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap()
    }

    fn spec() -> UnboundPartitionSpec {
        UnboundPartitionSpec::builder()
            .add_partition_field(2, "part", Transform::Identity)
            .unwrap()
            .build()
    }

    fn batch(rows: &[(i64, i32, &str)]) -> RecordBatch {
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema()).unwrap());
        RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    fn rows_of(batches: &[RecordBatch]) -> Vec<(i64, i32, String)> {
        let mut rows = Vec::new();
        for b in batches {
            let ids = b.column(0).as_primitive::<Int64Type>();
            let parts = b.column(1).as_primitive::<Int32Type>();
            let payloads = b.column(2).as_string::<i32>();
            for i in 0..b.num_rows() {
                rows.push((ids.value(i), parts.value(i), payloads.value(i).to_string()));
            }
        }
        rows.sort();
        rows
    }

    async fn file_rows(table: &Table, file: &DataFile) -> Vec<(i64, i32, String)> {
        rows_of(&read_data_file(table, file).await.unwrap())
    }

    fn prop(table: &Table, key: &str) -> String {
        table
            .metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .additional_properties
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn rewrite_commits_one_copy_on_write_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = writer::open_sql_catalog(dir.path(), "test").await.unwrap();
        let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
        let table = writer::create_table(&catalog, &ident, schema(), Some(spec()))
            .await
            .unwrap();
        let table = writer::append(
            &catalog,
            &table,
            &[batch(&[(1, 0, "a"), (2, 0, "b"), (3, 1, "c"), (4, 1, "d")])],
            &AppendOptions::default(),
        )
        .await
        .unwrap();
        let table = writer::append(
            &catalog,
            &table,
            &[batch(&[(5, 2, "e")])],
            &AppendOptions::default(),
        )
        .await
        .unwrap();
        let parent = table.metadata().current_snapshot().unwrap().clone();
        let parent_location = table.metadata_location().unwrap().to_string();
        let files = live_data_files(&table).await.unwrap();
        assert_eq!(files.len(), 3);

        // Update id 2 (part 0) and delete id 3 (part 1): rewrite both files; the part-1
        // file keeps id 4, the part-0 file keeps id 1 (carryover).
        let mut remove = Vec::new();
        for f in &files {
            let ids: Vec<i64> = file_rows(&table, f).await.iter().map(|r| r.0).collect();
            if ids.contains(&2) || ids.contains(&3) {
                remove.push(f.clone());
            }
        }
        assert_eq!(remove.len(), 2);
        let after = rewrite(
            &catalog,
            &table,
            &remove,
            &[batch(&[(1, 0, "a"), (2, 0, "B"), (4, 1, "d")])],
            "overwrite",
        )
        .await
        .unwrap();

        // The scan sees exactly the new state; the old snapshot still reads the old one.
        assert_eq!(
            rows_of(&scan_rows(&after, None).await.unwrap()),
            vec![
                (1, 0, "a".into()),
                (2, 0, "B".into()),
                (4, 1, "d".into()),
                (5, 2, "e".into())
            ]
        );
        assert_eq!(
            rows_of(&scan_rows(&after, Some(parent.snapshot_id())).await.unwrap()).len(),
            5
        );
        let head = after.metadata().current_snapshot().unwrap();
        assert_eq!(head.parent_snapshot_id(), Some(parent.snapshot_id()));
        assert_eq!(head.sequence_number(), parent.sequence_number() + 1);
        assert_eq!(head.summary().operation, Operation::Overwrite);
        assert_eq!(after.metadata().snapshots().count(), 3);
        assert_eq!(prop(&after, "deleted-data-files"), "2");
        assert_eq!(prop(&after, "added-data-files"), "2");
        assert_eq!(prop(&after, "deleted-records"), "4");
        assert_eq!(prop(&after, "added-records"), "3");
        assert_eq!(prop(&after, "total-records"), "4");
        assert_eq!(prop(&after, "total-data-files"), "3");
        assert_eq!(prop(&after, "changed-partition-count"), "2");
        let size: u64 = live_data_files(&after)
            .await
            .unwrap()
            .iter()
            .map(|f| f.file_size_in_bytes())
            .sum();
        assert_eq!(prop(&after, "total-files-size"), size.to_string());

        // The previous metadata file is untouched and the catalog row remembers it.
        let old = TableMetadata::read_from(after.file_io(), &parent_location)
            .await
            .unwrap();
        assert_eq!(old.snapshots().count(), 2);
        assert_ne!(after.metadata_location().unwrap(), parent_location);
        assert!(
            after
                .metadata_location()
                .unwrap()
                .contains("/metadata/00003-")
        );

        // Manifests as a reader of snapshot entries sees them.
        let list = after.manifest_list_reader(head).load().await.unwrap();
        let mut seen = Vec::new();
        for manifest in list.entries() {
            let loaded = manifest.load_manifest(after.file_io()).await.unwrap();
            for e in loaded.entries() {
                seen.push((
                    manifest.added_snapshot_id == head.snapshot_id(),
                    e.status(),
                    e.snapshot_id(),
                    e.sequence_number(),
                    e.file_sequence_number,
                    e.file_path().to_string(),
                ));
            }
        }
        let removed: HashSet<&str> = remove.iter().map(|f| f.file_path()).collect();
        let first_seq = parent.sequence_number() - 1;
        for (own, status, snap, seq, file_seq, path) in &seen {
            match status {
                ManifestStatus::Deleted => {
                    assert!(removed.contains(path.as_str()));
                    assert!(own);
                    assert_eq!(*snap, Some(head.snapshot_id()));
                    // The removed files' own sequence numbers are kept.
                    assert_eq!((*seq, *file_seq), (Some(first_seq), Some(first_seq)));
                }
                ManifestStatus::Existing => {
                    // The part-2 file shared no manifest with a removed one: untouched.
                    unreachable!("no manifest mixed removed and surviving files: {path}");
                }
                ManifestStatus::Added if *own => {
                    assert_eq!(*snap, Some(head.snapshot_id()));
                    assert_eq!(*seq, Some(head.sequence_number()));
                }
                ManifestStatus::Added => {
                    assert_eq!(*snap, Some(parent.snapshot_id()));
                    assert_eq!(*seq, Some(parent.sequence_number()));
                }
            }
        }
        // Two DELETED, the parent's own ADDED file, two ADDED by the rewrite; the first
        // append's manifest became delete-only in this snapshot and is listed once.
        assert_eq!(seen.len(), 5, "{seen:?}");

        // Removing one file of a multi-file manifest keeps the others as EXISTING with
        // their original snapshot and sequence numbers.
        let after_seq = head.sequence_number();
        let head_id = head.snapshot_id();
        let mut part0 = None;
        for f in live_data_files(&after).await.unwrap() {
            if file_rows(&after, &f).await.iter().any(|r| r.0 == 2) {
                part0 = Some(f);
            }
        }
        let again = rewrite(&catalog, &after, &[part0.unwrap()], &[], "delete")
            .await
            .unwrap();
        assert_eq!(again.metadata().snapshots().count(), 4);
        let head = again.metadata().current_snapshot().unwrap();
        assert_eq!(head.summary().operation, Operation::Delete);
        assert_eq!(head.parent_snapshot_id(), Some(head_id));
        assert_eq!(prop(&again, "total-records"), "2");
        let list = again.manifest_list_reader(head).load().await.unwrap();
        let mut entries = Vec::new();
        for manifest in list.entries() {
            let loaded = manifest.load_manifest(again.file_io()).await.unwrap();
            for e in loaded.entries() {
                entries.push((e.status(), e.snapshot_id(), e.sequence_number()));
            }
        }
        assert!(entries.contains(&(
            ManifestStatus::Deleted,
            Some(head.snapshot_id()),
            Some(after_seq)
        )));
        assert!(entries.contains(&(ManifestStatus::Existing, Some(head_id), Some(after_seq))));
        assert_eq!(
            rows_of(&scan_rows(&again, None).await.unwrap()),
            vec![(4, 1, "d".into()), (5, 2, "e".into())]
        );

        // A pure compaction: same rows, new files, operation replace.
        let all = live_data_files(&again).await.unwrap();
        let compacted = rewrite(
            &catalog,
            &again,
            &all,
            &[batch(&[(4, 1, "d"), (5, 2, "e")])],
            "replace",
        )
        .await
        .unwrap();
        assert_eq!(
            compacted
                .metadata()
                .current_snapshot()
                .unwrap()
                .summary()
                .operation,
            Operation::Replace
        );
        assert_eq!(
            rows_of(&scan_rows(&compacted, None).await.unwrap()),
            vec![(4, 1, "d".into()), (5, 2, "e".into())]
        );

        // Files that are not live are refused, and nothing is committed.
        let err = rewrite(&catalog, &compacted, &all[..1], &[], "delete")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not live"), "{err}");
        assert_eq!(
            catalog
                .load_table(&ident)
                .await
                .unwrap()
                .metadata()
                .snapshots()
                .count(),
            5
        );
    }

    #[tokio::test]
    async fn a_later_fast_append_carries_delete_only_manifests() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = writer::open_sql_catalog(dir.path(), "test").await.unwrap();
        let ident = TableIdent::from_strs(["ns", "u"]).unwrap();
        let table = writer::create_table(&catalog, &ident, schema(), None)
            .await
            .unwrap();
        let table = writer::append(
            &catalog,
            &table,
            &[batch(&[(1, 0, "a"), (2, 0, "b")])],
            &AppendOptions::default(),
        )
        .await
        .unwrap();
        let files = live_data_files(&table).await.unwrap();
        let table = rewrite(&catalog, &table, &files, &[], "delete")
            .await
            .unwrap();
        let deleted_in = table.metadata().current_snapshot_id().unwrap();
        assert!(
            scan_rows(&table, None)
                .await
                .unwrap()
                .iter()
                .all(|b| b.num_rows() == 0)
        );
        let table = writer::append(
            &catalog,
            &table,
            &[batch(&[(3, 0, "c")])],
            &AppendOptions::default(),
        )
        .await
        .unwrap();
        let head = table.metadata().current_snapshot().unwrap();
        let list = table.manifest_list_reader(head).load().await.unwrap();
        let mut carried = Vec::new();
        for manifest in list.entries() {
            let loaded = manifest.load_manifest(table.file_io()).await.unwrap();
            for e in loaded.entries() {
                if e.status() == ManifestStatus::Deleted {
                    carried.push((manifest.added_snapshot_id, e.snapshot_id()));
                }
            }
        }
        // fast_append keeps the delete-only manifest of the previous snapshot: its DELETED
        // entry shows up in the append's manifest list, tagged with the earlier snapshot.
        assert_eq!(carried, vec![(deleted_in, Some(deleted_in))]);
        assert_eq!(
            rows_of(&scan_rows(&table, None).await.unwrap()),
            vec![(3, 0, "c".into())]
        );
    }
}
