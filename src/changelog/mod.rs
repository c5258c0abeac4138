//! Planning change sets from Iceberg metadata: which snapshots are new since the
//! checkpoint, and which data files each one added or removed.

pub mod carryover;
mod lineage;
pub mod read;

use iceberg::spec::{
    DataContentType, DataFileFormat, ManifestContentType, ManifestStatus, SnapshotRef,
};
use iceberg::table::Table;

pub use lineage::{LineageError, Pending, pending_snapshots};

/// A data file a snapshot added or removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedFile {
    /// Location of the data file.
    pub path: String,
    /// Rows in the file, from its manifest entry.
    pub record_count: u64,
    /// Size of the file in bytes, from its manifest entry.
    pub size: u64,
    /// Partition spec id and partition tuple: rows can only be carried over between
    /// files of the same group.
    pub group: String,
}

/// What publishing one snapshot takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotPlan {
    /// Only data files were added: every row is an insert.
    Inserts(Vec<AddedFile>),
    /// Data files were removed (copy-on-write delete, overwrite or compaction): rows of
    /// removed and added files are compared.
    Rewrite {
        /// Files the snapshot removed.
        removed: Vec<AddedFile>,
        /// Files the snapshot added.
        added: Vec<AddedFile>,
    },
    /// The snapshot changes rows in a way this version cannot compute yet.
    Unsupported(String),
}

/// Failures while reading manifests.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Reading the manifest list or a manifest failed.
    #[error("reading manifests of snapshot {snapshot}: {source}")]
    Iceberg {
        /// The snapshot being planned.
        snapshot: i64,
        /// The underlying error.
        source: iceberg::Error,
    },
}

/// The changes `snapshot` made relative to its parent, from the manifests it wrote.
pub async fn plan_snapshot(
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<SnapshotPlan, PlanError> {
    let id = snapshot.snapshot_id();
    let err = |source| PlanError::Iceberg {
        snapshot: id,
        source,
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(err)?;
    let mut added = Vec::new();
    let mut removed = Vec::new();
    for manifest in list.entries() {
        // Only manifests this snapshot wrote can hold entries it added or deleted.
        if manifest.added_snapshot_id != id {
            continue;
        }
        let removes = manifest.deleted_files_count.unwrap_or(1) > 0;
        let adds = manifest.added_files_count.unwrap_or(1) > 0;
        if !removes && !adds {
            continue;
        }
        let entries = manifest.load_manifest(table.file_io()).await.map_err(err)?;
        for entry in entries.entries() {
            if entry.snapshot_id() != Some(id) || entry.status() == ManifestStatus::Existing {
                continue;
            }
            if manifest.content == ManifestContentType::Deletes
                || entry.content_type() != DataContentType::Data
            {
                return Ok(SnapshotPlan::Unsupported(
                    "it adds delete files (merge-on-read); computing their changes is not supported yet"
                        .into(),
                ));
            }
            if let Some(reason) = unreadable(entry.file_format()) {
                return Ok(SnapshotPlan::Unsupported(reason));
            }
            let file = AddedFile {
                path: entry.file_path().to_string(),
                record_count: entry.record_count(),
                size: entry.file_size_in_bytes(),
                group: format!(
                    "{}:{:?}",
                    manifest.partition_spec_id,
                    entry.data_file().partition()
                ),
            };
            match entry.status() {
                ManifestStatus::Deleted => removed.push(file),
                _ => added.push(file),
            }
        }
    }
    if removed.is_empty() {
        Ok(SnapshotPlan::Inserts(added))
    } else {
        Ok(SnapshotPlan::Rewrite { removed, added })
    }
}

/// Every live row of `snapshot` as inserts: the initial export of a table.
pub async fn plan_export(table: &Table, snapshot: &SnapshotRef) -> Result<SnapshotPlan, PlanError> {
    let id = snapshot.snapshot_id();
    let err = |source| PlanError::Iceberg {
        snapshot: id,
        source,
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(err)?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        let entries = manifest.load_manifest(table.file_io()).await.map_err(err)?;
        for entry in entries.entries().iter().filter(|e| e.is_alive()) {
            if manifest.content == ManifestContentType::Deletes
                || entry.content_type() != DataContentType::Data
            {
                return Ok(SnapshotPlan::Unsupported(
                    "the table has delete files (merge-on-read); exporting it is not supported yet"
                        .into(),
                ));
            }
            if let Some(reason) = unreadable(entry.file_format()) {
                return Ok(SnapshotPlan::Unsupported(reason));
            }
            files.push(AddedFile {
                path: entry.file_path().to_string(),
                record_count: entry.record_count(),
                size: entry.file_size_in_bytes(),
                group: String::new(),
            });
        }
    }
    Ok(SnapshotPlan::Inserts(files))
}

fn unreadable(format: DataFileFormat) -> Option<String> {
    (format != DataFileFormat::Parquet)
        .then(|| format!("it has {format:?} data files; only Parquet data files can be read"))
}

/// Indexes of the identifier columns among the schema's top-level fields.
pub fn key_indexes(schema: &iceberg::spec::Schema, identifier_columns: &[String]) -> Vec<usize> {
    let fields = schema.as_struct().fields();
    identifier_columns
        .iter()
        .filter_map(|name| fields.iter().position(|f| &f.name == name))
        .collect()
}
