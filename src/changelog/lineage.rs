//! Which snapshots are new: the ancestor chain of the branch head back to the
//! checkpoint. A checkpoint that is no longer on that chain is an error, never a skip.

use std::collections::HashSet;

use iceberg::spec::{SnapshotRef, TableMetadataRef};
use iceberg::util::snapshot::ancestors_of;

/// The snapshots to publish, oldest first, and the head they lead to.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// The branch head, if the branch has any snapshot.
    pub head: Option<SnapshotRef>,
    /// Snapshots after the checkpoint up to and including the head, oldest first.
    pub snapshots: Vec<SnapshotRef>,
}

/// Why the history after a checkpoint cannot be followed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineageError {
    /// The branch does not exist.
    #[error("branch {0:?} does not exist in the table")]
    BranchMissing(String),
    /// Snapshots after the checkpoint were expired from the table's metadata before
    /// their changes were published.
    #[error(
        "gap: snapshot {missing} (the parent of {oldest}, on the way back to checkpoint \
         {checkpoint}) was expired before its changes were published; the changes after the \
         checkpoint cannot be computed. Re-register the table to export its current state"
    )]
    Gap {
        /// The checkpoint.
        checkpoint: i64,
        /// The oldest snapshot still on the branch's chain.
        oldest: i64,
        /// Its parent, gone from the metadata.
        missing: i64,
    },
    /// The branch's chain ends at a snapshot that names no parent, without passing the
    /// checkpoint: snapshots in between were expired by a writer that unlinks the oldest
    /// one left (pyiceberg does), or the branch was replaced by another lineage.
    #[error(
        "gap: the history of branch {branch:?} ends at snapshot {oldest}, which names no \
         parent, without reaching checkpoint {checkpoint}: the snapshots in between were \
         expired before their changes were published, or the branch was replaced; the changes \
         after the checkpoint cannot be computed. Re-register the table to export its current \
         state"
    )]
    Unlinked {
        /// The checkpoint.
        checkpoint: i64,
        /// The oldest snapshot on the branch's chain.
        oldest: i64,
        /// The branch followed.
        branch: String,
    },
    /// The branch went back to, or forked from, an ancestor of the checkpoint.
    #[error(
        "checkpoint snapshot {checkpoint} is not an ancestor of the head {head} of branch \
         {branch:?} (the branch was rolled back or replaced); refusing to skip or replay history"
    )]
    NotAncestor {
        /// The checkpoint.
        checkpoint: i64,
        /// The current head of the branch.
        head: i64,
        /// The branch followed.
        branch: String,
    },
}

/// The snapshots of `branch` after `checkpoint` (`None`: the whole retained history).
/// The checkpoint itself may have been expired: its child's manifests alone tell what
/// the child changed (MERGE_ON_READ §1.5), so the chain only has to reach it by id.
pub fn pending_snapshots(
    metadata: &TableMetadataRef,
    branch: &str,
    checkpoint: Option<i64>,
) -> Result<Pending, LineageError> {
    let Some(head) = metadata.snapshot_for_ref(branch).cloned() else {
        if metadata.snapshots().len() == 0 && branch == "main" {
            return Ok(Pending::default());
        }
        return Err(LineageError::BranchMissing(branch.to_string()));
    };
    let mut snapshots = Vec::new();
    let mut reached = checkpoint.is_none();
    for snapshot in ancestors_of(metadata, head.snapshot_id()) {
        if Some(snapshot.snapshot_id()) == checkpoint {
            reached = true;
            break;
        }
        let parent = snapshot.parent_snapshot_id();
        snapshots.push(snapshot);
        if checkpoint.is_some() && parent == checkpoint {
            reached = true;
            break;
        }
    }
    if !reached {
        let checkpoint = checkpoint.expect("a checkpoint was not reached");
        return Err(unreached(metadata, branch, checkpoint, &head, &snapshots));
    }
    snapshots.reverse();
    Ok(Pending {
        head: Some(head),
        snapshots,
    })
}

/// Why the chain of `head` (`chain`, newest first) does not reach `checkpoint`.
fn unreached(
    metadata: &TableMetadataRef,
    branch: &str,
    checkpoint: i64,
    head: &SnapshotRef,
    chain: &[SnapshotRef],
) -> LineageError {
    // Empty when the checkpoint itself was expired.
    let before_checkpoint: HashSet<i64> = ancestors_of(metadata, checkpoint)
        .map(|s| s.snapshot_id())
        .collect();
    if chain
        .iter()
        .any(|s| before_checkpoint.contains(&s.snapshot_id()))
    {
        return LineageError::NotAncestor {
            checkpoint,
            head: head.snapshot_id(),
            branch: branch.to_string(),
        };
    }
    let oldest = chain.last().expect("the chain starts at the head");
    match oldest.parent_snapshot_id() {
        Some(missing) => LineageError::Gap {
            checkpoint,
            oldest: oldest.snapshot_id(),
            missing,
        },
        None => LineageError::Unlinked {
            checkpoint,
            oldest: oldest.snapshot_id(),
            branch: branch.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::TableMetadata;
    use serde_json::json;

    use super::*;

    /// Metadata whose `main` is `head`, with snapshots (id, parent): the sequence number
    /// of each is its place in the list.
    fn metadata(snapshots: &[(i64, Option<i64>)], head: i64) -> TableMetadataRef {
        let snapshots: Vec<_> = snapshots
            .iter()
            .enumerate()
            .map(|(n, (id, parent))| {
                let mut s = json!({
                    "snapshot-id": id, "sequence-number": n + 1, "timestamp-ms": 1_700_000_000_000i64 + n as i64,
                    "manifest-list": format!("/t/metadata/snap-{id}.avro"),
                    "summary": {"operation": "append"}, "schema-id": 0,
                });
                if let Some(parent) = parent {
                    s["parent-snapshot-id"] = json!(parent);
                }
                s
            })
            .collect();
        let document = json!({
            "format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "location": "/t", "last-sequence-number": snapshots.len(),
            "last-updated-ms": 1_700_000_000_000i64, "last-column-id": 1,
            "schemas": [{"type": "struct", "schema-id": 0,
                         "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}],
            "current-schema-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}], "default-spec-id": 0,
            "last-partition-id": 999, "sort-orders": [{"order-id": 0, "fields": []}],
            "default-sort-order-id": 0, "properties": {},
            "current-snapshot-id": head, "snapshots": snapshots,
            "refs": {"main": {"snapshot-id": head, "type": "branch"}},
            "snapshot-log": [], "metadata-log": [],
        });
        Arc::new(serde_json::from_value::<TableMetadata>(document).unwrap())
    }

    fn ids(pending: Pending) -> Vec<i64> {
        pending.snapshots.iter().map(|s| s.snapshot_id()).collect()
    }

    #[test]
    fn the_snapshots_after_the_checkpoint_oldest_first() {
        let m = metadata(&[(1, None), (2, Some(1)), (3, Some(2))], 3);
        assert_eq!(ids(pending_snapshots(&m, "main", Some(1)).unwrap()), [2, 3]);
        assert_eq!(ids(pending_snapshots(&m, "main", None).unwrap()), [1, 2, 3]);
        assert_eq!(
            ids(pending_snapshots(&m, "main", Some(3)).unwrap()),
            [] as [i64; 0]
        );
    }

    #[test]
    fn an_expired_checkpoint_is_reached_through_its_childs_parent_id() {
        let m = metadata(&[(2, Some(1)), (3, Some(2))], 3);
        assert_eq!(ids(pending_snapshots(&m, "main", Some(1)).unwrap()), [2, 3]);
    }

    #[test]
    fn expired_snapshots_after_the_checkpoint_are_a_gap() {
        // 2 expired, 3 still names it.
        let m = metadata(&[(1, None), (3, Some(2)), (4, Some(3))], 4);
        let gap = LineageError::Gap {
            checkpoint: 1,
            oldest: 3,
            missing: 2,
        };
        assert_eq!(pending_snapshots(&m, "main", Some(1)).unwrap_err(), gap);
        // The checkpoint and its child expired.
        let m = metadata(&[(3, Some(2)), (4, Some(3))], 4);
        assert!(matches!(
            pending_snapshots(&m, "main", Some(1)).unwrap_err(),
            LineageError::Gap { missing: 2, .. }
        ));
        // A writer that unlinks the oldest snapshot left.
        let m = metadata(&[(1, None), (3, None), (4, Some(3))], 4);
        let unlinked = pending_snapshots(&m, "main", Some(1)).unwrap_err();
        assert!(
            matches!(
                unlinked,
                LineageError::Unlinked {
                    checkpoint: 1,
                    oldest: 3,
                    ..
                }
            ),
            "{unlinked:?}"
        );
        assert!(unlinked.to_string().starts_with("gap: "));
    }

    #[test]
    fn a_rollback_is_not_a_gap() {
        // Back to 2, the checkpoint's parent.
        let m = metadata(&[(1, None), (2, Some(1)), (3, Some(2))], 2);
        assert!(matches!(
            pending_snapshots(&m, "main", Some(3)).unwrap_err(),
            LineageError::NotAncestor { head: 2, .. }
        ));
        // A new commit on 1, forking from the checkpoint's history.
        let m = metadata(&[(1, None), (2, Some(1)), (3, Some(2)), (4, Some(1))], 4);
        assert!(matches!(
            pending_snapshots(&m, "main", Some(3)).unwrap_err(),
            LineageError::NotAncestor { head: 4, .. }
        ));
    }
}
