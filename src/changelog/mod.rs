//! Planning change sets from Iceberg metadata: which snapshots are new since the
//! checkpoint, and which data files each one added or removed.
//! Must not reach: `store`, `workers` (it plans; checkpoints and publishing are theirs).

mod batch_rows;
pub mod carryover;
pub(crate) mod copied;
mod copy_order;
mod deleted;
pub mod deletes;
mod field_reader;
mod lineage;
pub mod read;
mod row_ids;
mod state;
mod summary;
mod vector;

use iceberg::spec::{
    DataFileFormat, Manifest, ManifestContentType, ManifestEntry, ManifestFile, ManifestList,
    ManifestStatus, SnapshotRef,
};
use iceberg::table::Table;
use serde::{Deserialize, Serialize};

pub use crate::change::FileLineage;
use copy_order::{Bounded, bounds_of, copy_order, reordered};
pub use deleted::{DataFileRef, DeleteCache};
pub use deletes::DeleteRef;
pub use lineage::{LineageError, Pending, Reset, pending_snapshots};
pub use row_ids::inherit_lineage;
use row_ids::{FirstRowIds, tracks_lineage};

/// Rows of one data file that a change set reads: the rows no delete of `deletes`
/// removes (all of them when there are none) and, with `only_deleted_by`, only those
/// of them that these other deletes remove (the rows a surviving file lost).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRows {
    /// Location of the data file.
    pub path: String,
    /// Rows in the file, from its manifest entry.
    #[serde(default)]
    pub record_count: u64,
    /// Size of the file in bytes, from its manifest entry.
    #[serde(default)]
    pub size: u64,
    /// Partition spec id and partition tuple: rows can only be carried over between
    /// files of the same group.
    #[serde(skip)]
    pub group: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<DeleteRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_deleted_by: Option<Vec<DeleteRef>>,
    /// Where rows get their lineage, for tables of format version 3 and later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<FileLineage>,
}

impl FileRows {
    /// All rows of the data file, as stored.
    pub fn whole(path: String, record_count: u64, size: u64, group: String) -> Self {
        Self {
            path,
            record_count,
            size,
            group,
            deletes: Vec::new(),
            only_deleted_by: None,
            lineage: None,
        }
    }

    /// Whether every row of the file is read: it can be copied byte for byte.
    pub fn is_whole(&self) -> bool {
        self.deletes.is_empty() && self.only_deleted_by.is_none()
    }

    /// Whether these are rows a surviving file regained, as an added file: deletes that
    /// removed them were dropped without a replacement (MERGE_ON_READ M9).
    pub fn regains_rows(&self) -> bool {
        self.only_deleted_by.is_some()
    }
}

/// What publishing one snapshot takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotPlan {
    /// Every row read is an insert (data files added with no deletes, or an export).
    Inserts(Vec<FileRows>),
    /// Rows were removed (data files removed by copy-on-write, or rows deleted by
    /// delete files): the removed and added rows are compared.
    Rewrite {
        /// Files the snapshot removed.
        removed: Vec<FileRows>,
        /// Files the snapshot added.
        added: Vec<FileRows>,
    },
    /// The snapshot cannot be published: what it does cannot be read, or its metadata
    /// is malformed.
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
    let parent = snapshot
        .parent_snapshot_id()
        .and_then(|id| table.metadata().snapshot_by_id(id));
    let plan = plan_changes(table, snapshot).await?;
    Ok(row_ids::as_of_parent(plan, parent.map(|p| p.as_ref())))
}

/// [`plan_snapshot`], the removed rows' lineage as the snapshot's manifests give it.
async fn plan_changes(table: &Table, snapshot: &SnapshotRef) -> Result<SnapshotPlan, PlanError> {
    let id = snapshot.snapshot_id();
    let list = manifest_list(table, snapshot).await?;
    if has_deletes(&list) {
        return state::plan_with_deletes(table, snapshot, &list).await;
    }
    // Only manifests this snapshot wrote can hold entries it added or deleted.
    let wrote = |manifest: &ManifestFile| {
        manifest.added_snapshot_id == id
            && (manifest.deleted_files_count.unwrap_or(1) > 0
                || manifest.added_files_count.unwrap_or(1) > 0)
    };
    let changed = |manifest: &ManifestFile, entry: &ManifestEntry| {
        (entry.snapshot_id() == Some(id) && entry.status() != ManifestStatus::Existing)
            .then(|| group(manifest.partition_spec_id, entry.data_file().partition()))
    };
    let files = match data_files(table, id, &list, wrote, changed).await? {
        Ok(files) => files,
        Err(reason) => return Ok(SnapshotPlan::Unsupported(reason)),
    };
    let (removed, added): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|(status, _, _)| *status == ManifestStatus::Deleted);
    fn bounded((_, file, bounds): &(ManifestStatus, FileRows, Vec<u64>)) -> Bounded<'_, String> {
        (&file.group, bounds)
    }
    let order = copy_order(
        &removed.iter().map(bounded).collect::<Vec<_>>(),
        &added.iter().map(bounded).collect::<Vec<_>>(),
    );
    let removed: Vec<FileRows> = removed.into_iter().map(|(_, file, _)| file).collect();
    let added: Vec<FileRows> = reordered(added, &order)
        .into_iter()
        .map(|(_, file, _)| file)
        .collect();
    let counts = summary::FileCounts {
        added_data: added.len(),
        removed_data: removed.len(),
        ..Default::default()
    };
    if let Some(reason) = summary::disagreement(snapshot, &counts) {
        return Ok(SnapshotPlan::Unsupported(reason));
    }
    if removed.is_empty() {
        Ok(SnapshotPlan::Inserts(added))
    } else {
        Ok(SnapshotPlan::Rewrite { removed, added })
    }
}

/// The change from the state of snapshot `from` into the state of snapshot `to`, which
/// need not be its descendant: a branch rolled back, or reset to another lineage.
pub async fn plan_reset(
    table: &Table,
    from: &SnapshotRef,
    to: &SnapshotRef,
) -> Result<SnapshotPlan, PlanError> {
    let plan = state::plan_reset(table, from, to).await?;
    Ok(row_ids::as_of_parent(plan, Some(from.as_ref())))
}

/// Every live row of `snapshot` as inserts: the initial export of a table.
pub async fn plan_export(table: &Table, snapshot: &SnapshotRef) -> Result<SnapshotPlan, PlanError> {
    let list = manifest_list(table, snapshot).await?;
    if has_deletes(&list) {
        return state::plan_export_with_deletes(table, snapshot, &list).await;
    }
    // Inserts are never carried over, so their files need no partition group.
    let live = |_: &ManifestFile, entry: &ManifestEntry| entry.is_alive().then(String::new);
    match data_files(table, snapshot.snapshot_id(), &list, |_| true, live).await? {
        Ok(files) => Ok(SnapshotPlan::Inserts(
            files.into_iter().map(|(_, file, _)| file).collect(),
        )),
        Err(reason) => Ok(SnapshotPlan::Unsupported(reason)),
    }
}

/// The data files of the entries `entry_group` picks (giving each its partition group)
/// in the manifests of `list` that `manifest_wanted` picks, with each entry's status, row
/// lineage and bounds (`copy_order`); or why one of them cannot be read. Lineage is
/// counted over every entry of a manifest, picked or not: a file's first row id follows
/// those listed before it.
async fn data_files(
    table: &Table,
    snapshot: i64,
    list: &ManifestList,
    manifest_wanted: impl Fn(&ManifestFile) -> bool,
    entry_group: impl Fn(&ManifestFile, &ManifestEntry) -> Option<String>,
) -> Result<Result<Vec<(ManifestStatus, FileRows, Vec<u64>)>, String>, PlanError> {
    let tracked = tracks_lineage(table.metadata());
    let mut files = Vec::new();
    for manifest in list.entries().iter().filter(|m| manifest_wanted(m)) {
        let entries = load_manifest(table, manifest, snapshot).await?;
        let mut row_ids = FirstRowIds::of(manifest, tracked);
        for entry in entries.entries() {
            let lineage = row_ids.lineage(entry);
            let Some(group) = entry_group(manifest, entry) else {
                continue;
            };
            match data_file_rows(entry, group, lineage) {
                Ok(file) => files.push((entry.status(), file, bounds_of(entry.data_file()))),
                Err(reason) => return Ok(Err(reason)),
            }
        }
    }
    Ok(Ok(files))
}

/// The manifest list of `snapshot`.
async fn manifest_list(table: &Table, snapshot: &SnapshotRef) -> Result<ManifestList, PlanError> {
    table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(|source| PlanError::Iceberg {
            snapshot: snapshot.snapshot_id(),
            source,
        })
}

/// A manifest of the list of snapshot `snapshot`.
async fn load_manifest(
    table: &Table,
    manifest: &ManifestFile,
    snapshot: i64,
) -> Result<Manifest, PlanError> {
    manifest
        .load_manifest(table.file_io())
        .await
        .map_err(|source| PlanError::Iceberg { snapshot, source })
}

/// All rows of a manifest entry's data file, or why icefeed cannot read them.
fn data_file_rows(
    entry: &ManifestEntry,
    group: String,
    lineage: Option<FileLineage>,
) -> Result<FileRows, String> {
    if let Some(reason) = unreadable(entry.file_format()) {
        return Err(reason);
    }
    Ok(FileRows {
        lineage,
        ..FileRows::whole(
            entry.file_path().to_string(),
            entry.record_count(),
            entry.file_size_in_bytes(),
            group,
        )
    })
}

/// Whether a snapshot's manifest list has delete manifests: the only place the delete
/// files live in it, and those it removed, are listed.
fn has_deletes(list: &ManifestList) -> bool {
    list.entries()
        .iter()
        .any(|m| m.content == ManifestContentType::Deletes)
}

/// The carryover group of a file: its partition spec and tuple.
fn group(spec_id: i32, partition: &iceberg::spec::Struct) -> String {
    format!("{spec_id}:{partition:?}")
}

fn unreadable(format: DataFileFormat) -> Option<String> {
    (format != DataFileFormat::Parquet)
        .then(|| format!("it has {format:?} data files; only Parquet data files can be read"))
}

/// Indexes of a feed's identifier columns (`names`, with their `field_ids` as recorded
/// at registration) among `schema`'s top-level fields, in key order: by field id, so a
/// renamed column stays the key (by name for tables registered before field ids were
/// recorded). An identifier column the schema lacks is an error naming it: its change
/// sets could not be paired or keyed.
pub fn key_indexes(
    schema: &iceberg::spec::Schema,
    field_ids: Option<&[i32]>,
    names: &[String],
) -> Result<Vec<usize>, String> {
    let fields = schema.as_struct().fields();
    let missing = |what: String| {
        format!(
            "identifier column {what} is not in schema {} (dropped?); the feed's key cannot \
             be read",
            schema.schema_id()
        )
    };
    match field_ids {
        // Recorded together at registration: one name per id.
        Some(ids) => ids
            .iter()
            .zip(names)
            .map(|(id, name)| {
                fields
                    .iter()
                    .position(|f| f.id == *id)
                    .ok_or_else(|| missing(format!("{name:?} (field id {id})")))
            })
            .collect(),
        None => names
            .iter()
            .map(|name| {
                fields
                    .iter()
                    .position(|f| &f.name == name)
                    .ok_or_else(|| missing(format!("{name:?}")))
            })
            .collect(),
    }
}
