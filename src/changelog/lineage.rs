//! Which snapshots are new: the ancestor chain of the branch head back to the
//! checkpoint. A checkpoint that is no longer on that chain is an error, never a skip.

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
    /// The checkpoint snapshot was expired from the table's metadata.
    #[error(
        "checkpoint snapshot {0} is no longer in the table metadata (expired); the changes after \
         it cannot be computed. Re-register the table to export its current state"
    )]
    CheckpointExpired(i64),
    /// The checkpoint exists but the branch no longer descends from it.
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
        snapshots.push(snapshot);
    }
    if !reached {
        let checkpoint = checkpoint.expect("a checkpoint was not reached");
        return Err(match metadata.snapshot_by_id(checkpoint) {
            Some(_) => LineageError::NotAncestor {
                checkpoint,
                head: head.snapshot_id(),
                branch: branch.to_string(),
            },
            None => LineageError::CheckpointExpired(checkpoint),
        });
    }
    snapshots.reverse();
    Ok(Pending {
        head: Some(head),
        snapshots,
    })
}
