//! Planning a snapshot of a table with delete files as the difference of two table
//! states (MERGE_ON_READ §1.3–§1.4): the rows live in the parent and not in the snapshot
//! are deleted, the rows live in the snapshot and not in the parent are inserted, by
//! physical row. Per data file that is
//! - an added file: its rows live under the snapshot's deletes;
//! - a removed file: its rows live under the parent's deletes;
//! - a surviving file whose applicable deletes changed: the rows the parent's deletes
//!   leave and the snapshot's remove (and, for a commit that drops a delete without
//!   replacing it, the reverse).
//!
//! Must not reach: `changes`, `store`.
//!
//! Both states come from the snapshot's manifests alone: the parent's files are the
//! snapshot's minus what it added plus what it removed (the removed entries carry full
//! metadata), so a parent whose manifest list was expired can still be diffed.

use std::collections::{BTreeMap, HashSet};

use iceberg::spec::{DataContentType, DataFileFormat, ManifestList, ManifestStatus, SnapshotRef};
use iceberg::table::Table;

use super::copy_order::{Bounded, bounds_of, copy_order, reordered};
use super::deletes::{DataEntry, DeleteEntry, DeleteError, DeleteIndex, DeleteRef, Scope};
use super::row_ids::{FirstRowIds, tracks_lineage};
use super::summary::{FileCounts, disagreement};
use super::{FileRows, PlanError, SnapshotPlan, load_manifest, unreadable};

/// The content files of a snapshot: what is live in it and what it changed.
#[derive(Debug, Default)]
struct Entries {
    data: BTreeMap<String, DataEntry>,
    deletes: Vec<DeleteEntry>,
    added_data: Vec<String>,
    removed_data: Vec<DataEntry>,
    added_deletes: HashSet<String>,
    /// Delete file entries added (deletion vectors share a Puffin file's path).
    added_delete_entries: usize,
    removed_deletes: Vec<DeleteEntry>,
}

/// Plans `snapshot`, whose manifest `list` has delete manifests.
pub(super) async fn plan_with_deletes(
    table: &Table,
    snapshot: &SnapshotRef,
    list: &ManifestList,
) -> Result<SnapshotPlan, PlanError> {
    let entries = match load(table, snapshot, list).await? {
        Ok(entries) => entries,
        Err(reason) => return Ok(SnapshotPlan::Unsupported(reason)),
    };
    let counts = FileCounts {
        added_data: entries.added_data.len(),
        removed_data: entries.removed_data.len(),
        added_deletes: Some(entries.added_delete_entries),
        removed_deletes: Some(entries.removed_deletes.len()),
    };
    if let Some(reason) = disagreement(snapshot, &counts) {
        return Ok(SnapshotPlan::Unsupported(reason));
    }
    Ok(diff(&entries).unwrap_or_else(|e| SnapshotPlan::Unsupported(e.to_string())))
}

/// The live rows of `snapshot`, whose manifest `list` has delete manifests.
pub(super) async fn plan_export_with_deletes(
    table: &Table,
    snapshot: &SnapshotRef,
    list: &ManifestList,
) -> Result<SnapshotPlan, PlanError> {
    let entries = match load(table, snapshot, list).await? {
        Ok(entries) => entries,
        Err(reason) => return Ok(SnapshotPlan::Unsupported(reason)),
    };
    let index = DeleteIndex::new(&entries.deletes);
    let files: Result<Vec<FileRows>, DeleteError> = entries
        .data
        .values()
        .map(|f| Ok(rows(f, index.applicable(f)?, None)))
        .collect();
    Ok(match files {
        Ok(files) => SnapshotPlan::Inserts(files),
        Err(e) => SnapshotPlan::Unsupported(e.to_string()),
    })
}

/// The change from the state of `from` into the state of `to`, two snapshots of one
/// table neither of which need be the other's parent (a branch rolled back, or reset to
/// another lineage): §1.3 over the live files of both.
pub(super) async fn plan_reset(
    table: &Table,
    from: &SnapshotRef,
    to: &SnapshotRef,
) -> Result<SnapshotPlan, PlanError> {
    let then = super::manifest_list(table, from).await?;
    let now = super::manifest_list(table, to).await?;
    let states = (
        load(table, from, &then).await?,
        load(table, to, &now).await?,
    );
    Ok(match states {
        (Ok(then), Ok(now)) => {
            diff_states(then, now).unwrap_or_else(|e| SnapshotPlan::Unsupported(e.to_string()))
        }
        (Err(reason), _) | (_, Err(reason)) => SnapshotPlan::Unsupported(reason),
    })
}

/// The change of state `then` into state `now`, by their live files.
fn diff_states(then: Entries, now: Entries) -> Result<SnapshotPlan, DeleteError> {
    let change = Entries {
        added_data: now
            .data
            .keys()
            .filter(|path| !then.data.contains_key(*path))
            .cloned()
            .collect(),
        removed_data: then
            .data
            .into_values()
            .filter(|f| !now.data.contains_key(&f.path))
            .collect(),
        data: now.data,
        deletes: now.deletes,
        ..Entries::default()
    };
    let (live_then, live_now): (HashSet<&DeleteRef>, HashSet<&DeleteRef>) = (
        then.deletes.iter().map(|d| &d.delete).collect(),
        change.deletes.iter().map(|d| &d.delete).collect(),
    );
    let changed = change
        .deletes
        .iter()
        .filter(|d| !live_then.contains(&d.delete))
        .chain(
            then.deletes
                .iter()
                .filter(|d| !live_now.contains(&d.delete)),
        )
        .collect();
    compare(&change, then.deletes.iter().collect(), changed)
}

/// The change of the parent's state into the snapshot's.
fn diff(entries: &Entries) -> Result<SnapshotPlan, DeleteError> {
    let added = |d: &&DeleteEntry| entries.added_deletes.contains(d.delete.path());
    let parent = entries
        .deletes
        .iter()
        .filter(|d| !added(d))
        .chain(&entries.removed_deletes)
        .collect();
    let changed = entries
        .deletes
        .iter()
        .filter(added)
        .chain(&entries.removed_deletes)
        .collect();
    compare(entries, parent, changed)
}

/// The rows of `entries`' state (its live files, and the data files it added and removed)
/// that differ from those of the state before, whose live deletes were `parent_deletes`;
/// `changed` are the deletes live in only one of the two.
fn compare(
    entries: &Entries,
    parent_deletes: Vec<&DeleteEntry>,
    changed: Vec<&DeleteEntry>,
) -> Result<SnapshotPlan, DeleteError> {
    let added: HashSet<&str> = entries.added_data.iter().map(String::as_str).collect();
    let (now, before) = (
        DeleteIndex::new(&entries.deletes),
        DeleteIndex::new(parent_deletes),
    );

    let mut inserted = Vec::new();
    let added_files: Vec<&DataEntry> = (entries.added_data.iter())
        .map(|path| &entries.data[path])
        .collect();
    fn bounded(f: &DataEntry) -> Bounded<'_, Scope> {
        (&f.scope, &f.bounds)
    }
    let order = copy_order(
        &entries.removed_data.iter().map(bounded).collect::<Vec<_>>(),
        &added_files.iter().map(|f| bounded(f)).collect::<Vec<_>>(),
    );
    for file in reordered(added_files, &order) {
        inserted.push(rows(file, now.applicable(file)?, None));
    }
    let mut deleted = Vec::new();
    for file in &entries.removed_data {
        deleted.push(rows(file, before.applicable(file)?, None));
    }
    // Only files a changed delete can reach may have lost or regained rows.
    let global = changed.iter().any(|d| is_equality(d) && d.global);
    let scopes: HashSet<&Scope> = changed.iter().map(|d| &d.scope).collect();
    let referenced: HashSet<&str> = changed
        .iter()
        .filter_map(|d| d.referenced.as_deref())
        .collect();
    let surviving = entries.data.values().filter(|f| {
        !added.contains(f.path.as_str())
            && (global || scopes.contains(&f.scope) || referenced.contains(f.path.as_str()))
    });
    for file in surviving {
        let (then, now) = (before.applicable(file)?, now.applicable(file)?);
        if then == now {
            continue;
        }
        if !is_subset(&now, &then) {
            deleted.push(rows(file, then.clone(), Some(now.clone())));
        }
        if !is_subset(&then, &now) {
            // A delete dropped without a replacement brings rows back.
            inserted.push(rows(file, now, Some(then)));
        }
    }

    let whole = deleted.is_empty() && inserted.iter().all(FileRows::is_whole);
    Ok(if whole {
        SnapshotPlan::Inserts(inserted)
    } else {
        SnapshotPlan::Rewrite {
            removed: deleted,
            added: inserted,
        }
    })
}

fn is_equality(d: &DeleteEntry) -> bool {
    matches!(d.delete, DeleteRef::Equality { .. })
}

/// Whether every delete of sorted `a` is in sorted `b`.
fn is_subset(a: &[DeleteRef], b: &[DeleteRef]) -> bool {
    a.iter().all(|d| b.binary_search(d).is_ok())
}

fn rows(
    file: &DataEntry,
    deletes: Vec<DeleteRef>,
    only_deleted_by: Option<Vec<DeleteRef>>,
) -> FileRows {
    FileRows {
        deletes,
        only_deleted_by,
        lineage: file.lineage,
        ..FileRows::whole(
            file.path.clone(),
            file.record_count,
            file.size,
            format!("{}:{}", file.scope.spec_id, file.scope.partition),
        )
    }
}

/// Reads every manifest of `snapshot`: its live files and the ones it added or removed.
/// The inner error says why the snapshot cannot be read.
async fn load(
    table: &Table,
    snapshot: &SnapshotRef,
    list: &ManifestList,
) -> Result<Result<Entries, String>, PlanError> {
    let id = snapshot.snapshot_id();
    let metadata = table.metadata();
    let tracked = tracks_lineage(metadata);
    let mut entries = Entries::default();
    for manifest in list.entries() {
        let loaded = load_manifest(table, manifest, id).await?;
        let spec_id = manifest.partition_spec_id;
        let global = metadata
            .partition_spec_by_id(spec_id)
            .is_some_and(|spec| spec.is_unpartitioned());
        let written_here = manifest.added_snapshot_id == id;
        let mut row_ids = FirstRowIds::of(manifest, tracked);
        for entry in loaded.entries() {
            // Every data entry counts towards the first row ids of those after it.
            let lineage = (entry.content_type() == DataContentType::Data)
                .then(|| row_ids.lineage(entry))
                .flatten();
            let by_this = written_here && entry.snapshot_id() == Some(id);
            let (added, removed) = match entry.status() {
                ManifestStatus::Added => (by_this, false),
                ManifestStatus::Deleted if by_this => (false, true),
                ManifestStatus::Deleted => continue,
                ManifestStatus::Existing => (false, false),
            };
            let file = entry.data_file();
            let scope = Scope {
                spec_id,
                partition: format!("{:?}", file.partition()),
            };
            let sequence = entry.sequence_number().unwrap_or(0);
            let path = entry.file_path().to_string();
            if entry.content_type() == DataContentType::Data {
                if let Some(reason) = unreadable(entry.file_format()) {
                    return Ok(Err(reason));
                }
                let data = DataEntry {
                    path: path.clone(),
                    record_count: entry.record_count(),
                    size: entry.file_size_in_bytes(),
                    scope,
                    sequence,
                    lineage,
                    bounds: bounds_of(file),
                };
                if removed {
                    entries.removed_data.push(data);
                } else {
                    if added {
                        entries.added_data.push(path.clone());
                    }
                    entries.data.insert(path, data);
                }
                continue;
            }
            let delete = match delete_ref(entry.content_type(), file) {
                Ok(delete) => delete,
                Err(reason) => return Ok(Err(reason)),
            };
            let delete = DeleteEntry {
                delete,
                scope,
                sequence,
                referenced: file.referenced_data_file(),
                global,
            };
            if removed {
                entries.removed_deletes.push(delete);
            } else {
                if added {
                    entries.added_deletes.insert(path);
                    entries.added_delete_entries += 1;
                }
                entries.deletes.push(delete);
            }
        }
    }
    Ok(Ok(entries))
}

/// How a delete file is read, or why it cannot be.
fn delete_ref(
    content: DataContentType,
    file: &iceberg::spec::DataFile,
) -> Result<DeleteRef, String> {
    let path = file.file_path().to_string();
    match (content, file.file_format()) {
        (DataContentType::PositionDeletes, DataFileFormat::Puffin) => {
            match (file.content_offset(), file.content_size_in_bytes()) {
                (Some(offset), Some(length)) if offset >= 0 && length > 0 => {
                    Ok(DeleteRef::Vector {
                        path,
                        offset: offset as u64,
                        length: length as u64,
                        cardinality: file.record_count(),
                    })
                }
                _ => Err(format!(
                    "deletion vector {path} has no valid content offset and size in its manifest entry"
                )),
            }
        }
        (DataContentType::PositionDeletes, DataFileFormat::Parquet) => {
            Ok(DeleteRef::Positions { path })
        }
        (DataContentType::EqualityDeletes, DataFileFormat::Parquet) => match file.equality_ids() {
            Some(field_ids) if !field_ids.is_empty() => Ok(DeleteRef::Equality { path, field_ids }),
            _ => Err(format!(
                "equality delete file {path} names no equality field ids"
            )),
        },
        (_, format) => Err(format!(
            "it has {format:?} delete files ({path}); only Parquet delete files and deletion vectors can be read"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope {
            spec_id: 0,
            partition: "p".into(),
        }
    }

    fn data(path: &str, sequence: i64) -> DataEntry {
        DataEntry {
            path: path.into(),
            record_count: 3,
            size: 30,
            scope: scope(),
            sequence,
            lineage: None,
            bounds: Vec::new(),
        }
    }

    fn vector(path: &str, sequence: i64, file: &str) -> DeleteEntry {
        DeleteEntry {
            delete: DeleteRef::Vector {
                path: path.into(),
                offset: 4,
                length: 30,
                cardinality: 1,
            },
            scope: scope(),
            sequence,
            referenced: Some(file.into()),
            global: false,
        }
    }

    /// A snapshot at sequence 2 over a parent whose data file `f1` is live.
    fn entries(
        live_deletes: Vec<DeleteEntry>,
        added: &[&str],
        removed: Vec<DeleteEntry>,
    ) -> Entries {
        Entries {
            data: [("f1".to_string(), data("f1", 1))].into_iter().collect(),
            added_deletes: added.iter().map(|p| p.to_string()).collect(),
            deletes: live_deletes,
            removed_deletes: removed,
            ..Entries::default()
        }
    }

    fn refs(deletes: &[&DeleteEntry]) -> Vec<DeleteRef> {
        deletes.iter().map(|d| d.delete.clone()).collect()
    }

    #[test]
    fn a_replaced_vector_deletes_what_the_new_one_adds_and_nothing_comes_back() {
        // P4: DV1 replaced by DV2 in one commit.
        let (dv1, dv2) = (vector("dv1", 1, "f1"), vector("dv2", 2, "f1"));
        let plan = diff(&entries(vec![dv2.clone()], &["dv2"], vec![dv1.clone()])).unwrap();
        let SnapshotPlan::Rewrite { removed, added } = plan else {
            panic!("{plan:?}")
        };
        assert_eq!(
            (removed.len(), added.len()),
            (1, 1),
            "{removed:?} {added:?}"
        );
        assert_eq!(removed[0].deletes, refs(&[&dv1]));
        assert_eq!(removed[0].only_deleted_by, Some(refs(&[&dv2])));
        // The reverse view: rows DV1 removed that DV2 no longer does (resurrection).
        assert_eq!(added[0].deletes, refs(&[&dv2]));
        assert_eq!(added[0].only_deleted_by, Some(refs(&[&dv1])));
    }

    #[test]
    fn an_added_delete_reads_only_the_newly_deleted_rows() {
        // P1: a first vector on a surviving file.
        let dv = vector("dv", 2, "f1");
        let plan = diff(&entries(vec![dv.clone()], &["dv"], vec![])).unwrap();
        let SnapshotPlan::Rewrite { removed, added } = plan else {
            panic!("{plan:?}")
        };
        assert!(added.is_empty());
        assert_eq!(removed.len(), 1);
        assert!(removed[0].deletes.is_empty());
        assert_eq!(removed[0].only_deleted_by, Some(refs(&[&dv])));
    }

    #[test]
    fn a_removed_file_is_read_with_the_parents_deletes() {
        // S7 / D4: the data file and its vector removed together.
        let dv = vector("dv", 1, "f1");
        let mut entries = entries(vec![], &[], vec![dv.clone()]);
        let f1 = entries.data.remove("f1").unwrap();
        entries.removed_data.push(f1);
        let SnapshotPlan::Rewrite { removed, added } = diff(&entries).unwrap() else {
            panic!()
        };
        assert!(added.is_empty());
        assert_eq!(removed[0].deletes, refs(&[&dv]));
        assert_eq!(removed[0].only_deleted_by, None);
    }

    #[test]
    fn an_append_on_a_table_with_deletes_is_copied_and_a_file_added_with_its_deletes_is_read() {
        // R3: the old file's live vector changes nothing.
        let mut appended = entries(vec![vector("dv", 1, "f1")], &[], vec![]);
        appended.data.insert("f2".into(), data("f2", 2));
        appended.added_data.push("f2".into());
        let SnapshotPlan::Inserts(files) = diff(&appended).unwrap() else {
            panic!()
        };
        assert_eq!(files.len(), 1);
        assert!(files[0].is_whole());
        // P8: a file added with a vector on it in the same commit.
        let dv = vector("dv2", 2, "f2");
        appended.deletes.push(dv.clone());
        appended.added_deletes.insert("dv2".into());
        let SnapshotPlan::Rewrite { removed, added } = diff(&appended).unwrap() else {
            panic!()
        };
        assert!(removed.is_empty());
        assert_eq!(added[0].deletes, refs(&[&dv]));
    }

    #[test]
    fn a_reset_compares_the_live_files_of_two_states_whatever_lies_between() {
        // M8: from a state with f1 (vector a) and f2 back to one with f1 (vector b) and f3.
        let (dv_a, dv_b) = (vector("a", 2, "f1"), vector("b", 3, "f1"));
        let then = Entries {
            data: [("f1", 1), ("f2", 1)]
                .map(|(p, s)| (p.to_string(), data(p, s)))
                .into_iter()
                .collect(),
            deletes: vec![dv_a.clone()],
            ..Entries::default()
        };
        let now = Entries {
            data: [("f1", 1), ("f3", 3)]
                .map(|(p, s)| (p.to_string(), data(p, s)))
                .into_iter()
                .collect(),
            deletes: vec![dv_b.clone()],
            ..Entries::default()
        };
        let SnapshotPlan::Rewrite { removed, added } = diff_states(then, now).unwrap() else {
            panic!()
        };
        let summary = |files: &[FileRows]| {
            files
                .iter()
                .map(|f| (f.path.clone(), f.deletes.clone(), f.only_deleted_by.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            summary(&removed),
            [
                ("f2".to_string(), vec![], None),
                ("f1".to_string(), refs(&[&dv_a]), Some(refs(&[&dv_b]))),
            ]
        );
        assert_eq!(
            summary(&added),
            [
                ("f3".to_string(), vec![], None),
                ("f1".to_string(), refs(&[&dv_b]), Some(refs(&[&dv_a]))),
            ]
        );
        // Two equal states differ in nothing.
        let same = || Entries {
            data: [("f1".to_string(), data("f1", 1))].into_iter().collect(),
            deletes: vec![dv_a.clone()],
            ..Entries::default()
        };
        let SnapshotPlan::Inserts(files) = diff_states(same(), same()).unwrap() else {
            panic!()
        };
        assert!(files.is_empty());
    }

    #[test]
    fn an_unchanged_delete_set_reads_nothing() {
        // A commit that only rewrites manifests.
        let dv = vector("dv", 1, "f1");
        let SnapshotPlan::Inserts(files) = diff(&entries(vec![dv], &[], vec![])).unwrap() else {
            panic!()
        };
        assert!(files.is_empty());
    }
}
