//! What a change is: its kind (`Op`), one change as indexes into the rows that survived
//! carryover, and those rows. The vocabulary that planning, the shuffle, segments,
//! delivery and push share.
//! Must not reach: the rest of the crate.

use std::collections::HashMap;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

/// What a change row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// A new row (`after`).
    Insert = 0,
    /// A removed row (`before`).
    Delete = 1,
    /// A row whose non-key values changed (`before` and `after`).
    Update = 2,
}

impl Op {
    /// The event name.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Delete => "delete",
            Op::Update => "update",
        }
    }

    /// The code stored in segments.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// The op of a stored code.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Op::Insert),
            1 => Some(Op::Delete),
            2 => Some(Op::Update),
            _ => None,
        }
    }
}

/// Something a change set holds that no valid commit produces, flagged on its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Anomaly {
    /// A row a data file regained: a delete that removed it was dropped without a
    /// replacement (MERGE_ON_READ M9), so it is published as an insert.
    Resurrected = 0,
}

impl Anomaly {
    /// The name events carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Anomaly::Resurrected => "resurrected",
        }
    }

    /// The code stored in segments.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// The anomaly of a stored code.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Anomaly::Resurrected),
            _ => None,
        }
    }
}

/// One change: indexes into the surviving deleted and inserted rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeRow {
    /// What happened.
    pub op: Op,
    /// Row of the deleted side (`before`).
    pub before: Option<u32>,
    /// Row of the inserted side (`after`).
    pub after: Option<u32>,
}

/// Rows that survived carryover removal, all in the snapshot's schema.
#[derive(Clone, Debug)]
pub struct Survivors {
    /// Rows removed for real.
    pub deleted: RecordBatch,
    /// Rows added for real.
    pub inserted: RecordBatch,
    /// Indexes (ascending) of the `inserted` rows that a data file regained rather than
    /// gained ([`Anomaly::Resurrected`]); empty for every valid commit.
    pub regained: Vec<u32>,
}

impl Survivors {
    /// Bytes the rows take in memory.
    pub fn memory_size(&self) -> u64 {
        (self.deleted.get_array_memory_size() + self.inserted.get_array_memory_size()) as u64
    }

    /// The anomaly of the change whose `after` row is `after`, if any.
    pub fn anomaly(&self, after: Option<u32>) -> Option<Anomaly> {
        let after = after?;
        self.regained
            .binary_search(&after)
            .is_ok()
            .then_some(Anomaly::Resurrected)
    }
}

/// The lineage a data file gives rows that do not carry their own (Iceberg v3): row
/// `pos` has id `first_row_id + pos` and was last updated by the commit that added the
/// file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileLineage {
    /// `None` for a file written before the table became v3: its rows have no lineage.
    pub first_row_id: Option<u64>,
    /// The sequence number of the commit that added the file (its file sequence number).
    pub sequence_number: i64,
}

/// A row's id (Iceberg v3 row lineage): batches of a v3 table's rows carry it, and
/// [`LAST_UPDATED`], after the table's columns ([`lineage_fields`]).
pub const ROW_ID: &str = "_row_id";
/// The sequence number of the snapshot that last added or updated the row.
pub const LAST_UPDATED: &str = "_last_updated_sequence_number";
/// Iceberg's reserved field ids of the two, in the order of [`lineage_fields`], under
/// which writers materialize them.
pub const LINEAGE_FIELD_IDS: [i32; 2] = [2147483540, 2147483539];
/// Field metadata marking a lineage column: a table column of the same name is not one.
const LINEAGE_MARK: &str = "icefeed:row-lineage";

/// The lineage columns that follow a v3 table's columns in a batch of its rows.
pub fn lineage_fields() -> [Field; 2] {
    let mark = HashMap::from([(LINEAGE_MARK.to_string(), "true".to_string())]);
    [ROW_ID, LAST_UPDATED]
        .map(|name| Field::new(name, DataType::Int64, true).with_metadata(mark.clone()))
}

/// How many leading columns of `schema` are the table's: all but the lineage columns.
pub fn table_width(schema: &Schema) -> usize {
    schema
        .fields()
        .iter()
        .take_while(|f| !f.metadata().contains_key(LINEAGE_MARK))
        .count()
}

/// Whether batches of `schema` carry row lineage.
pub fn has_lineage(schema: &Schema) -> bool {
    table_width(schema) < schema.fields().len()
}

/// The table's columns of a batch of rows (without lineage).
pub fn table_columns(batch: &RecordBatch) -> &[ArrayRef] {
    &batch.columns()[..table_width(batch.schema_ref())]
}
