//! What a consumer asked to see of a feed: which operations and which columns.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::collections::BTreeSet;

use crate::change::Op;

/// A set of operations (`insert`, `update`, `delete`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpSet(u8);

/// Why a selection was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// An operation name that is not `insert`, `update` or `delete`.
    #[error("unknown operation {0:?}; operations are insert, update and delete")]
    UnknownOp(String),
    /// An empty operation list would never deliver anything.
    #[error("ops names no operation; leave it out to receive every operation")]
    NoOps,
    /// A projected column that none of the table's schemas has.
    #[error("column {column:?} is not a top-level column of the table; its columns are: {}", available.join(", "))]
    UnknownColumn {
        column: String,
        available: Vec<String>,
    },
    /// A projection naming no column.
    #[error("columns names no column; leave it out to receive whole rows")]
    NoColumns,
    /// The same column twice.
    #[error("column {0:?} is named twice")]
    DuplicateColumn(String),
}

impl OpSet {
    /// Every operation.
    pub const ALL: OpSet = OpSet(0b111);

    fn bit(op: Op) -> u8 {
        1 << op.code()
    }

    /// Whether `op` is in the set.
    pub fn contains(self, op: Op) -> bool {
        self.0 & Self::bit(op) != 0
    }

    /// The set of the named operations.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, SelectionError> {
        let mut bits = 0;
        for name in names {
            let op = match name.as_ref().trim() {
                "insert" => Op::Insert,
                "update" => Op::Update,
                "delete" => Op::Delete,
                other => return Err(SelectionError::UnknownOp(other.to_string())),
            };
            bits |= Self::bit(op);
        }
        if bits == 0 {
            return Err(SelectionError::NoOps);
        }
        Ok(Self(bits))
    }

    /// The names of the operations in the set, in a stable order.
    pub fn names(self) -> Vec<String> {
        [Op::Insert, Op::Update, Op::Delete]
            .into_iter()
            .filter(|op| self.contains(*op))
            .map(|op| op.as_str().to_string())
            .collect()
    }
}

/// Which events and which columns of their rows a consumer receives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selection {
    /// Operations delivered; events of other operations are skipped (their positions
    /// still pass, so a consumer never sees them again).
    pub ops: OpSet,
    /// Top-level columns of `before`/`after` (and of Arrow rows); `None` = all. The
    /// event's `key` always carries every identifier column.
    pub columns: Option<Vec<String>>,
}

impl Default for Selection {
    fn default() -> Self {
        Self {
            ops: OpSet::ALL,
            columns: None,
        }
    }
}

impl Selection {
    /// A selection from optional operation and column lists, checking the columns
    /// against `available` (every top-level column name any schema of the table had).
    pub fn new(
        ops: Option<&[String]>,
        columns: Option<&[String]>,
        available: &BTreeSet<String>,
    ) -> Result<Self, SelectionError> {
        let ops = match ops {
            Some(names) => OpSet::from_names(names)?,
            None => OpSet::ALL,
        };
        let columns = match columns {
            None => None,
            Some([]) => return Err(SelectionError::NoColumns),
            Some(names) => {
                let mut seen = BTreeSet::new();
                for name in names {
                    if !available.contains(name) {
                        return Err(SelectionError::UnknownColumn {
                            column: name.clone(),
                            available: available.iter().cloned().collect(),
                        });
                    }
                    if !seen.insert(name) {
                        return Err(SelectionError::DuplicateColumn(name.clone()));
                    }
                }
                Some(names.to_vec())
            }
        };
        Ok(Self { ops, columns })
    }

    /// Whether every event and column passes (the fast path).
    pub fn is_everything(&self) -> bool {
        self.ops == OpSet::ALL && self.columns.is_none()
    }

    /// Indexes into `fields` of the projected columns, in projection order; columns a
    /// schema lacks are left out.
    pub fn column_indexes(&self, fields: &[iceberg::spec::NestedFieldRef]) -> Vec<usize> {
        match &self.columns {
            None => (0..fields.len()).collect(),
            Some(names) => names
                .iter()
                .filter_map(|n| fields.iter().position(|f| &f.name == n))
                .collect(),
        }
    }
}

/// Splits a comma-separated query parameter into trimmed, non-empty items.
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn op_sets_parse_and_refuse_unknown_names() {
        let set = OpSet::from_names(&names(&["delete", "insert"])).unwrap();
        assert!(set.contains(Op::Insert) && set.contains(Op::Delete) && !set.contains(Op::Update));
        assert_eq!(set.names(), names(&["insert", "delete"]));
        assert_eq!(
            OpSet::from_names(&names(&["upsert"])),
            Err(SelectionError::UnknownOp("upsert".into()))
        );
        assert_eq!(OpSet::from_names::<String>(&[]), Err(SelectionError::NoOps));
    }

    #[test]
    fn projections_are_checked_against_the_table_columns() {
        let available: BTreeSet<String> = names(&["id", "name", "fare"]).into_iter().collect();
        let ok = Selection::new(None, Some(&names(&["fare", "id"])), &available).unwrap();
        assert_eq!(ok.columns, Some(names(&["fare", "id"])));
        assert!(matches!(
            Selection::new(None, Some(&names(&["tip"])), &available),
            Err(SelectionError::UnknownColumn { column, .. }) if column == "tip"
        ));
        assert_eq!(
            Selection::new(None, Some(&names(&["id", "id"])), &available),
            Err(SelectionError::DuplicateColumn("id".into()))
        );
        assert_eq!(
            Selection::new(None, Some(&[]), &available),
            Err(SelectionError::NoColumns)
        );
        assert!(
            Selection::new(None, None, &available)
                .unwrap()
                .is_everything()
        );
    }

    #[test]
    fn lists_split_on_commas() {
        assert_eq!(split_list(" a, b,,c "), names(&["a", "b", "c"]));
        assert!(split_list("").is_empty());
    }
}
