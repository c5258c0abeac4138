//! Where the work of one change set lives: its segments and shuffle files in the change
//! store and its tasks in PostgreSQL, all under one key. Owns every key layout of the
//! change store; depends on nothing but the table id and the task kinds.
//! Must not reach: `store` (tasks are named here and claimed there).

use crate::ids::{TableId, TaskKind};

/// One change set being computed: the ordinal it will be published at and the snapshot
/// whose changes (or, for a reset, whose state) it holds.
///
/// Keyed by ordinal because a snapshot can be published more than once (rolled back,
/// then forward again); by snapshot too because a plan for one ordinal can be abandoned
/// for another (the branch moved while it ran), and a straggling task of the abandoned
/// plan must not write over the files of the one that is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeSetKey {
    pub table: TableId,
    pub ordinal: i64,
    pub snapshot_id: i64,
}

impl ChangeSetKey {
    fn name(&self) -> String {
        format!("{}-{}", self.ordinal, self.snapshot_id)
    }
}

impl ShuffleKey for ChangeSetKey {
    fn prefix(&self) -> String {
        format!("tables/{}/change-sets/{}", self.table, self.name())
    }

    fn shuffle_prefix(&self) -> String {
        format!("shuffle/{}/{}", self.table, self.name())
    }

    fn task_prefix(&self) -> String {
        format!("{}/{}", self.table, self.name())
    }
}

/// The net changes of one range of a table's feed, by the range's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetRangeKey {
    pub table: TableId,
    pub range: i64,
}

impl ShuffleKey for NetRangeKey {
    fn prefix(&self) -> String {
        format!("tables/{}/net/{}", self.table, self.range)
    }

    fn shuffle_prefix(&self) -> String {
        format!("shuffle/{}/net-{}", self.table, self.range)
    }

    fn task_prefix(&self) -> String {
        format!("{}/net-{}", self.table, self.range)
    }
}

/// What a shuffle computes (a change set, or the net changes of a range): the prefixes
/// of its segments, shuffle files and task ids, which no two computations share.
pub trait ShuffleKey {
    /// The prefix of its segments.
    fn prefix(&self) -> String;

    /// The prefix of its shuffle files, which are garbage once it is done.
    fn shuffle_prefix(&self) -> String;

    /// The prefix of its task ids.
    fn task_prefix(&self) -> String;

    /// The key of segment `n`.
    fn segment(&self, n: usize) -> String {
        format!("{}/{n:06}.parquet", self.prefix())
    }

    /// The key of shuffle file `name` of task `task`.
    fn shuffle_file(&self, task: &str, name: &str) -> String {
        let n = task.rsplit('/').next().unwrap_or(task);
        format!("{}/m{n}-{name}.arrow", self.shuffle_prefix())
    }

    /// The id of its task `n` of `kind`; ids sort in task order.
    fn task_id(&self, kind: TaskKind, n: usize) -> String {
        format!("{}/{}/{n:06}", self.task_prefix(), kind.as_str())
    }
}

/// The key of the deleted rows of the segment at `segment_key` (a copied data file's rows
/// that are not events, see `deleted_rows`), beside it.
pub fn deleted_rows_of(segment_key: &str) -> String {
    format!("{}.deleted", segment_key.trim_end_matches(".parquet"))
}

/// The prefix of the segments of a change set published before change sets were keyed by
/// ordinal.
pub fn legacy_prefix(table: TableId, snapshot_id: i64) -> String {
    format!("tables/{table}/snapshots/{snapshot_id}")
}

/// Every prefix that holds objects of `table`: its change sets and its shuffles.
pub fn table_prefixes(table: TableId) -> Vec<String> {
    vec![format!("tables/{table}"), format!("shuffle/{table}")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_snapshot_published_twice_or_two_plans_for_one_ordinal_never_share_a_key() {
        let table = TableId(uuid::Uuid::nil());
        let key = |ordinal, snapshot_id| ChangeSetKey {
            table,
            ordinal,
            snapshot_id,
        };
        let keys = [key(3, 7), key(9, 7), key(3, 8)];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert!(!a.prefix().starts_with(&b.prefix()), "{a:?} {b:?}");
                assert!(!b.prefix().starts_with(&a.prefix()), "{a:?} {b:?}");
                assert_ne!(a.shuffle_prefix(), b.shuffle_prefix());
                assert_ne!(a.task_id(TaskKind::Map, 0), b.task_id(TaskKind::Map, 0));
            }
        }
        // Nor does a change set share its prefix with one of the older layout.
        assert!(!key(3, 7).prefix().starts_with(&legacy_prefix(table, 7)));
        assert_eq!(
            deleted_rows_of(&key(3, 7).segment(3)),
            format!("tables/{table}/change-sets/3-7/000003.deleted")
        );
        assert_eq!(
            key(3, 7).shuffle_file("t/3-7/map/000002", "0001"),
            format!("shuffle/{table}/3-7/m000002-0001.arrow")
        );
    }

    #[test]
    fn net_ranges_share_no_key_with_change_sets_or_each_other() {
        let table = TableId(uuid::Uuid::nil());
        let net = |range| NetRangeKey { table, range };
        let change_set = ChangeSetKey {
            table,
            ordinal: 3,
            snapshot_id: 7,
        };
        let (a, b) = (net(3), net(30));
        assert!(!a.prefix().starts_with(&format!("{}/", b.prefix())));
        assert!(!b.prefix().starts_with(&format!("{}/", a.prefix())));
        assert_ne!(
            a.task_id(TaskKind::NetMap, 0),
            b.task_id(TaskKind::NetMap, 0)
        );
        assert!(!net(3).prefix().starts_with(&change_set.prefix()));
        assert_ne!(net(3).shuffle_prefix(), change_set.shuffle_prefix());
        assert_eq!(
            net(3).segment(1),
            format!("tables/{table}/net/3/000001.parquet")
        );
        assert_eq!(
            net(3).task_id(TaskKind::NetReduce, 2),
            format!("{table}/net-3/net_reduce/000002")
        );
        assert!(
            table_prefixes(table)
                .iter()
                .any(|p| net(3).prefix().starts_with(p))
        );
        assert!(
            table_prefixes(table)
                .iter()
                .any(|p| net(3).shuffle_prefix().starts_with(p))
        );
    }
}
