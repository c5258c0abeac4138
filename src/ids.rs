//! The ids and kinds every layer names: a registered table's id, a task's kind. Stored
//! by the registry, written into object-store keys and cursors, so they live below all
//! of them.
//! Must not reach: the rest of the crate.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Id of a registered source table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct TableId(pub Uuid);

impl std::fmt::Display for TableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl TableId {
    /// A fresh, time-ordered id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// The name of this table's scheduler lease.
    pub fn lease_name(&self) -> String {
        format!("table:{}", self.0)
    }
}

impl Default for TableId {
    fn default() -> Self {
        Self::new()
    }
}

/// What a task does: the two steps of a change set's shuffle, and of the shuffle that
/// nets a range of a feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Map,
    Reduce,
    NetMap,
    NetReduce,
}

impl TaskKind {
    /// As stored and labelled.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Map => "map",
            TaskKind::Reduce => "reduce",
            TaskKind::NetMap => "net_map",
            TaskKind::NetReduce => "net_reduce",
        }
    }

    /// The kind stored as `kind`.
    pub fn parse(kind: &str) -> Option<Self> {
        [
            TaskKind::Map,
            TaskKind::Reduce,
            TaskKind::NetMap,
            TaskKind::NetReduce,
        ]
        .into_iter()
        .find(|k| k.as_str() == kind)
    }
}
