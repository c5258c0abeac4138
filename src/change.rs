//! What a change is: its kind (`Op`), one change as indexes into the rows that survived
//! carryover, and those rows. The vocabulary that planning, the shuffle, segments,
//! delivery and push share; depends on nothing in the crate.

use arrow::array::RecordBatch;

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
    /// The anomaly of the change whose `after` row is `after`, if any.
    pub fn anomaly(&self, after: Option<u32>) -> Option<Anomaly> {
        let after = after?;
        self.regained
            .binary_search(&after)
            .is_ok()
            .then_some(Anomaly::Resurrected)
    }
}
