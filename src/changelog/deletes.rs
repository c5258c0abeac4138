//! Which delete files apply to which data file in one table state (the Iceberg spec's
//! scan planning rules, MERGE_ON_READ §1.2): deletion vectors and position delete files
//! by path or partition with `ds(data) <= ds(delete)`, equality deletes by partition (or
//! globally, from an unpartitioned spec) with `ds(data) < ds(delete)`; a data file's
//! deletion vector supersedes every position delete file for it.
//! Must not reach: the rest of the crate (metadata in, assignments out).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::FileLineage;

/// A delete file as a reader of a data file needs it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeleteRef {
    /// A position delete file: its rows whose `file_path` is the data file's.
    Positions { path: String },
    /// A deletion vector: the blob at `offset` in a Puffin file, of `length` bytes,
    /// holding `cardinality` positions.
    Vector {
        path: String,
        offset: u64,
        length: u64,
        cardinality: u64,
    },
    /// An equality delete file: every row of the data file whose `field_ids` columns
    /// equal one of its rows (null equals null).
    Equality { path: String, field_ids: Vec<i32> },
}

impl DeleteRef {
    /// Location of the delete file.
    pub fn path(&self) -> &str {
        match self {
            DeleteRef::Positions { path }
            | DeleteRef::Vector { path, .. }
            | DeleteRef::Equality { path, .. } => path,
        }
    }
}

/// Where a content file sits: its partition spec and partition tuple.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    pub spec_id: i32,
    /// The partition tuple, rendered (tuples of one spec render alike iff equal).
    pub partition: String,
}

/// A live data file of a table state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataEntry {
    pub path: String,
    pub record_count: u64,
    pub size: u64,
    pub scope: Scope,
    /// Data sequence number.
    pub sequence: i64,
    /// Where its rows get their lineage (v3).
    pub lineage: Option<FileLineage>,
    /// A fingerprint of each column's bounds in its manifest entry (`copy_order`).
    pub bounds: Vec<u64>,
}

/// A live delete file of a table state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteEntry {
    pub delete: DeleteRef,
    pub scope: Scope,
    /// Data sequence number.
    pub sequence: i64,
    /// The one data file a position delete file or deletion vector is for, if known.
    pub referenced: Option<String>,
    /// Whether its spec is unpartitioned (only void fields or none): an equality delete
    /// from such a spec applies to every partition of every spec.
    pub global: bool,
}

/// A table state whose deletes cannot be applied.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    #[error("data file {data} has {count} live deletion vectors; a table may have one")]
    TwoVectors { data: String, count: usize },
    #[error(
        "delete file {delete} is for data file {data} but its partition ({delete_scope:?}) is \
         not the data file's ({data_scope:?})"
    )]
    PartitionMismatch {
        delete: String,
        data: String,
        delete_scope: Scope,
        data_scope: Scope,
    },
}

/// The live delete files of one table state, indexed for lookups by data file.
#[derive(Debug, Default)]
pub struct DeleteIndex<'a> {
    vectors: HashMap<&'a str, Vec<&'a DeleteEntry>>,
    positions_by_file: HashMap<&'a str, Vec<&'a DeleteEntry>>,
    positions_by_scope: HashMap<&'a Scope, Vec<&'a DeleteEntry>>,
    equality_by_scope: HashMap<&'a Scope, Vec<&'a DeleteEntry>>,
    equality_global: Vec<&'a DeleteEntry>,
}

impl<'a> DeleteIndex<'a> {
    /// Indexes `deletes`, the live delete files of one state.
    pub fn new(deletes: impl IntoIterator<Item = &'a DeleteEntry>) -> Self {
        let mut index = DeleteIndex::default();
        for d in deletes {
            match (&d.delete, &d.referenced) {
                (DeleteRef::Vector { .. }, Some(file)) => {
                    index.vectors.entry(file).or_default().push(d)
                }
                // A vector names its data file; one that does not applies to nothing.
                (DeleteRef::Vector { .. }, None) => {}
                (DeleteRef::Positions { .. }, Some(file)) => {
                    index.positions_by_file.entry(file).or_default().push(d)
                }
                (DeleteRef::Positions { .. }, None) => index
                    .positions_by_scope
                    .entry(&d.scope)
                    .or_default()
                    .push(d),
                (DeleteRef::Equality { .. }, _) if d.global => index.equality_global.push(d),
                (DeleteRef::Equality { .. }, _) => {
                    index.equality_by_scope.entry(&d.scope).or_default().push(d)
                }
            }
        }
        index
    }

    /// The delete files that apply to `file` in this state, sorted.
    pub fn applicable(&self, file: &DataEntry) -> Result<Vec<DeleteRef>, DeleteError> {
        let path = file.path.as_str();
        let by_path = |map: &HashMap<&str, Vec<&'a DeleteEntry>>| {
            map.get(path)
                .into_iter()
                .flatten()
                .copied()
                .filter(|d| file.sequence <= d.sequence)
                .collect::<Vec<_>>()
        };
        let vectors = by_path(&self.vectors);
        let referenced = by_path(&self.positions_by_file);
        for d in vectors.iter().chain(&referenced) {
            if d.scope != file.scope {
                return Err(DeleteError::PartitionMismatch {
                    delete: d.delete.path().to_string(),
                    data: file.path.clone(),
                    delete_scope: d.scope.clone(),
                    data_scope: file.scope.clone(),
                });
            }
        }
        let mut applicable: Vec<DeleteRef> = match vectors.as_slice() {
            [] => referenced
                .into_iter()
                .chain(
                    self.positions_by_scope
                        .get(&file.scope)
                        .into_iter()
                        .flatten()
                        .copied()
                        .filter(|d| file.sequence <= d.sequence),
                )
                .map(|d| d.delete.clone())
                .collect(),
            [vector] => vec![vector.delete.clone()],
            more => {
                return Err(DeleteError::TwoVectors {
                    data: file.path.clone(),
                    count: more.len(),
                });
            }
        };
        applicable.extend(
            self.equality_by_scope
                .get(&file.scope)
                .into_iter()
                .flatten()
                .chain(&self.equality_global)
                .filter(|d| file.sequence < d.sequence)
                .map(|d| d.delete.clone()),
        );
        applicable.sort();
        applicable.dedup();
        Ok(applicable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(partition: &str) -> Scope {
        Scope {
            spec_id: 0,
            partition: partition.into(),
        }
    }

    fn data(path: &str, partition: &str, sequence: i64) -> DataEntry {
        DataEntry {
            path: path.into(),
            record_count: 10,
            size: 100,
            scope: scope(partition),
            sequence,
            lineage: None,
            bounds: Vec::new(),
        }
    }

    fn positions(
        path: &str,
        partition: &str,
        sequence: i64,
        for_file: Option<&str>,
    ) -> DeleteEntry {
        DeleteEntry {
            delete: DeleteRef::Positions { path: path.into() },
            scope: scope(partition),
            sequence,
            referenced: for_file.map(str::to_string),
            global: false,
        }
    }

    fn vector(path: &str, partition: &str, sequence: i64, for_file: &str) -> DeleteEntry {
        DeleteEntry {
            delete: DeleteRef::Vector {
                path: path.into(),
                offset: 4,
                length: 40,
                cardinality: 1,
            },
            referenced: Some(for_file.into()),
            ..positions(path, partition, sequence, None)
        }
    }

    fn equality(path: &str, scope: Scope, sequence: i64, global: bool) -> DeleteEntry {
        DeleteEntry {
            delete: DeleteRef::Equality {
                path: path.into(),
                field_ids: vec![1],
            },
            scope,
            sequence,
            referenced: None,
            global,
        }
    }

    fn paths(deletes: &[DeleteRef]) -> Vec<&str> {
        deletes.iter().map(DeleteRef::path).collect()
    }

    #[test]
    fn position_deletes_apply_to_older_or_same_sequence_data_of_their_partition() {
        let deletes = [
            positions("pd-same", "p", 2, None),
            positions("pd-older", "p", 1, None),
            positions("pd-other-partition", "q", 3, None),
            positions("pd-for-f", "p", 2, Some("f")),
            positions("pd-for-g", "p", 2, Some("g")),
        ];
        let index = DeleteIndex::new(&deletes);
        let applied = index.applicable(&data("f", "p", 2)).unwrap();
        assert_eq!(paths(&applied), ["pd-for-f", "pd-same"]);
    }

    #[test]
    fn equality_deletes_apply_only_to_strictly_older_data() {
        let deletes = [
            equality("ed-same", scope("p"), 2, false),
            equality("ed-newer", scope("p"), 3, false),
            equality("ed-other", scope("q"), 3, false),
            equality(
                "ed-other-spec",
                Scope {
                    spec_id: 1,
                    partition: "p".into(),
                },
                3,
                false,
            ),
            equality(
                "ed-global",
                Scope {
                    spec_id: 1,
                    partition: "()".into(),
                },
                3,
                true,
            ),
        ];
        let index = DeleteIndex::new(&deletes);
        let applied = index.applicable(&data("f", "p", 2)).unwrap();
        assert_eq!(paths(&applied), ["ed-global", "ed-newer"]);
    }

    #[test]
    fn a_deletion_vector_supersedes_position_delete_files_for_its_file_only() {
        let deletes = [
            positions("pd-partition", "p", 1, None),
            vector("dv-f", "p", 2, "f"),
            equality("ed", scope("p"), 2, false),
        ];
        let index = DeleteIndex::new(&deletes);
        assert_eq!(
            paths(&index.applicable(&data("f", "p", 1)).unwrap()),
            ["dv-f", "ed"]
        );
        assert_eq!(
            paths(&index.applicable(&data("g", "p", 1)).unwrap()),
            ["pd-partition", "ed"]
        );
        // A vector older than the data file does not apply, so position files do.
        assert_eq!(
            paths(&index.applicable(&data("f", "p", 3)).unwrap()),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn two_live_vectors_for_one_file_are_refused() {
        let deletes = [vector("dv1", "p", 2, "f"), vector("dv2", "p", 3, "f")];
        let index = DeleteIndex::new(&deletes);
        assert_eq!(
            index.applicable(&data("f", "p", 1)),
            Err(DeleteError::TwoVectors {
                data: "f".into(),
                count: 2
            })
        );
    }

    #[test]
    fn a_delete_for_a_file_of_another_partition_is_refused() {
        let deletes = [positions("pd", "q", 2, Some("f"))];
        let index = DeleteIndex::new(&deletes);
        assert!(matches!(
            index.applicable(&data("f", "p", 1)),
            Err(DeleteError::PartitionMismatch { .. })
        ));
    }
}
