//! Which snapshots are new: the ancestor chain of the branch head back to the
//! checkpoint. A branch that went back past the checkpoint (rolled back, or reset to
//! another lineage) is reset to the newest ancestor both share, then followed; history
//! the chain cannot reach is an error, never a skip.
//! Must not reach: the rest of the crate (snapshots in, a chain out).

use std::collections::HashSet;

use iceberg::spec::{SnapshotRef, TableMetadataRef};
use iceberg::util::snapshot::ancestors_of;

/// The snapshots to publish, oldest first, and the head they lead to.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// The branch head, if the branch has any snapshot.
    pub head: Option<SnapshotRef>,
    /// The branch went back past the checkpoint: the checkpoint's state is to be replaced
    /// by that of the newest ancestor both share, first.
    pub reset: Option<Reset>,
    /// Snapshots after the checkpoint (or the reset's `to`) up to and including the head,
    /// oldest first.
    pub snapshots: Vec<SnapshotRef>,
}

/// A branch that went back past the checkpoint, from the checkpoint to the newest of its
/// ancestors the branch leads to again.
#[derive(Clone, Debug)]
pub struct Reset {
    pub from: SnapshotRef,
    pub to: SnapshotRef,
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
}

/// The snapshots of `branch` after `checkpoint` (`None`: the whole retained history).
/// The checkpoint itself may have been expired: its child's manifests alone tell what
/// the child changed (MERGE_ON_READ §1.5), so the chain only has to reach it by id. A
/// retained checkpoint the branch no longer leads to is reset from (MERGE_ON_READ §1.5,
/// M8): its state and the shared ancestor's are both readable.
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
    let mut reset = None;
    if !reached {
        let checkpoint = checkpoint.expect("a checkpoint was not reached");
        // Empty when the checkpoint itself was expired.
        let before_checkpoint: HashSet<i64> = ancestors_of(metadata, checkpoint)
            .map(|s| s.snapshot_id())
            .collect();
        let shared = snapshots
            .iter()
            .position(|s| before_checkpoint.contains(&s.snapshot_id()));
        let from = metadata.snapshot_by_id(checkpoint);
        let (Some(shared), Some(from)) = (shared, from) else {
            return Err(unreached(branch, checkpoint, &snapshots));
        };
        reset = Some(Reset {
            from: from.clone(),
            to: snapshots[shared].clone(),
        });
        snapshots.truncate(shared);
    }
    snapshots.reverse();
    Ok(Pending {
        head: Some(head),
        reset,
        snapshots,
    })
}

/// Why the chain of the head (`chain`, newest first), which shares no snapshot with the
/// checkpoint's history, does not reach `checkpoint`.
fn unreached(branch: &str, checkpoint: i64, chain: &[SnapshotRef]) -> LineageError {
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

    fn reset_to(pending: &Pending) -> Option<i64> {
        let reset = pending.reset.as_ref()?;
        assert_eq!(
            reset.from.snapshot_id(),
            3,
            "resets start at the checkpoint"
        );
        Some(reset.to.snapshot_id())
    }

    #[test]
    fn a_rollback_resets_to_the_shared_ancestor_and_follows_the_branch_from_there() {
        // Back to 2, the checkpoint's parent.
        let m = metadata(&[(1, None), (2, Some(1)), (3, Some(2))], 2);
        let back = pending_snapshots(&m, "main", Some(3)).unwrap();
        assert_eq!(reset_to(&back), Some(2));
        assert_eq!(ids(back), [] as [i64; 0]);
        // New commits on 1, forking from the checkpoint's history.
        let m = metadata(
            &[
                (1, None),
                (2, Some(1)),
                (3, Some(2)),
                (4, Some(1)),
                (5, Some(4)),
            ],
            5,
        );
        let fork = pending_snapshots(&m, "main", Some(3)).unwrap();
        assert_eq!(reset_to(&fork), Some(1));
        assert_eq!(ids(fork), [4, 5]);
        // Forward again to the snapshot rolled back from: an ordinary follow.
        let m = metadata(&[(1, None), (2, Some(1)), (3, Some(2))], 3);
        let forward = pending_snapshots(&m, "main", Some(1)).unwrap();
        assert_eq!(reset_to(&forward), None);
        assert_eq!(ids(forward), [2, 3]);
    }

    #[test]
    fn a_branch_that_shares_nothing_with_an_expired_checkpoint_is_still_a_gap() {
        // The checkpoint 3 was rolled back from and then expired with its parent 2.
        let m = metadata(&[(1, None), (4, Some(1))], 4);
        assert!(matches!(
            pending_snapshots(&m, "main", Some(3)).unwrap_err(),
            LineageError::Unlinked { .. } | LineageError::Gap { .. }
        ));
    }
}
