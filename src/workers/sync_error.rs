//! Why a sync stopped early, by kind: to retry later, to stop the table with a failure
//! naming the snapshot, or to drop silently. Shared by the sync, its rewrites and their
//! shuffle; reaches only the error types it classifies.
//! Must not reach: `api`, `delivery`.

use crate::catalog::{CatalogError, StorageFault, storage_cause};
use crate::changelog::{LineageError, PlanError};
use crate::changes::ChangeStoreError;
use crate::failure::{Failure, FailureCode};
use crate::store::StoreError;

/// Why a sync stopped early, by kind.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Worth retrying later: the catalog, storage or database had a hiccup.
    #[error("{0}")]
    Transient(Failure),
    /// Needs an operator: the table goes to the error state with this failure.
    #[error("{failure}")]
    Table {
        /// What is wrong, naming the snapshot.
        failure: Failure,
        /// The snapshot that could not be published.
        snapshot: Option<i64>,
    },
    /// The lease was lost or the node is shutting down: drop the work silently.
    #[error("abandoned")]
    Abandoned,
}

impl From<StoreError> for SyncError {
    fn from(e: StoreError) -> Self {
        match e {
            // Another writer got there first (a publish planned before the feed moved):
            // the next poll plans afresh from what won.
            StoreError::LeaseLost(_) | StoreError::Conflict(_) => SyncError::Abandoned,
            other => SyncError::transient(FailureCode::DatabaseUnavailable, other),
        }
    }
}

impl From<CatalogError> for SyncError {
    fn from(e: CatalogError) -> Self {
        let failure = e.failure();
        match failure.code {
            // Waiting will not change the operator's mind, nor bring back a table that
            // was dropped or renamed (a retry once it is there again will).
            FailureCode::HostNotAllowed
            | FailureCode::CatalogTypeNotAllowed
            | FailureCode::LocalPathNotAllowed
            | FailureCode::IcebergTableNotFound => SyncError::Table {
                failure,
                snapshot: None,
            },
            _ => SyncError::Transient(failure),
        }
    }
}

impl From<PlanError> for SyncError {
    fn from(e: PlanError) -> Self {
        let PlanError::Iceberg { snapshot, source } = &e;
        storage_error(source, *snapshot)
            .unwrap_or_else(|| SyncError::transient(FailureCode::CatalogUnavailable, e))
    }
}

/// How a sync treats a failure to read the table's files. A file the metadata names
/// that is gone (or is a named pipe, a device, a directory) will not come back: the
/// table stops. Access denied is retried once with the credentials a fresh load of the
/// table brings (vended credentials expire); denied again, the table stops (see
/// [`SyncError::after`]). Anything else is retried.
fn storage_error(e: &iceberg::Error, snapshot: i64) -> Option<SyncError> {
    let fault = StorageFault::of(e)?;
    let code = fault.failure_code();
    let message = format!("{code}: snapshot {snapshot}: {}: {e}", storage_cause(e));
    // Storage settings that cannot work will not mend themselves either.
    Some(if fault.is_lasting() || fault == StorageFault::Invalid {
        SyncError::unpublishable(snapshot, code, message)
    } else {
        SyncError::Transient(Failure::new(code, message))
    })
}

impl SyncError {
    /// A passing failure of kind `code`.
    pub(super) fn transient(code: FailureCode, e: impl std::fmt::Display) -> Self {
        SyncError::Transient(Failure::new(code, e.to_string()))
    }

    /// Snapshot `snapshot` cannot be published, for good.
    pub(super) fn unpublishable(
        snapshot: i64,
        code: FailureCode,
        reason: impl std::fmt::Display,
    ) -> Self {
        SyncError::Table {
            failure: Failure::new(
                code,
                format!("cannot publish snapshot {snapshot}: {reason}"),
            ),
            snapshot: Some(snapshot),
        }
    }

    /// This failure as one to retry later, whatever its kind: a paused table's poll
    /// only looks, and a snapshot whose tasks ran out on passing failures is planned
    /// again.
    pub fn retried(self) -> Self {
        match self {
            SyncError::Table { failure, .. } => SyncError::Transient(failure),
            other => other,
        }
    }

    /// This failure, given the kind of the table's error from the poll before
    /// (`last_error_code`): denied twice in a row, the second time with freshly loaded
    /// credentials, the credentials or the policy are wrong, and waiting will not fix
    /// them: the table stops.
    pub fn after(self, last: Option<FailureCode>) -> Self {
        const DENIED: FailureCode = FailureCode::StorageAccessDenied;
        match self {
            SyncError::Transient(failure) if failure.code == DENIED && last == Some(DENIED) => {
                SyncError::Table {
                    failure,
                    snapshot: None,
                }
            }
            other => other,
        }
    }

    /// This failure, for a snapshot whose parent `expired_parent` was expired before the
    /// snapshot was published: a file its change needs that is gone went with the parent
    /// (MERGE_ON_READ §1.5). A gap in history, which only a new export can bridge.
    pub(super) fn in_gap(self, snapshot_id: i64, expired_parent: Option<i64>) -> Self {
        match (self, expired_parent) {
            (SyncError::Table { failure, snapshot }, Some(parent))
                if failure.code == FailureCode::StorageNotFound =>
            {
                SyncError::Table {
                    failure: Failure::new(
                        FailureCode::Gap,
                        format!(
                            "gap: snapshot {parent}, the parent of snapshot {snapshot_id}, was \
                             expired before its child was published, and a file the child's \
                             change needs is gone; re-register the table to export its current \
                             state ({failure})"
                        ),
                    ),
                    snapshot,
                }
            }
            (other, _) => other,
        }
    }
}

pub(super) fn lineage_error(e: LineageError, checkpoint: Option<i64>) -> SyncError {
    let code = match e {
        LineageError::BranchMissing(_) => FailureCode::BranchMissing,
        LineageError::Gap { .. } | LineageError::Unlinked { .. } => FailureCode::Gap,
    };
    SyncError::Table {
        failure: Failure::new(code, e.to_string()),
        snapshot: checkpoint,
    }
}

pub(super) fn copy_error(e: ChangeStoreError, snapshot: i64) -> SyncError {
    match e {
        ChangeStoreError::Corrupt(reason) => {
            SyncError::unpublishable(snapshot, FailureCode::DataInvalid, reason)
        }
        ChangeStoreError::Source(source) => storage_error(&source, snapshot).unwrap_or_else(|| {
            SyncError::transient(
                FailureCode::StorageUnreachable,
                format!("snapshot {snapshot}: reading source file: {source}"),
            )
        }),
        other => SyncError::transient(
            FailureCode::ChangeStoreUnavailable,
            format!("snapshot {snapshot}: {other}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::SyncError;
    use crate::failure::{Failure, FailureCode};

    fn transient(code: FailureCode) -> SyncError {
        SyncError::Transient(Failure::new(code, format!("{code}: snapshot 7: …")))
    }

    #[test]
    fn a_missing_file_of_a_snapshot_whose_parent_expired_is_a_gap() {
        let missing = || {
            SyncError::unpublishable(
                7,
                FailureCode::StorageNotFound,
                "storage_not_found: snapshot 7: gone",
            )
        };
        let SyncError::Table { failure, snapshot } = missing().in_gap(7, Some(6)) else {
            panic!("a gap stops the table");
        };
        assert_eq!(failure.code, FailureCode::Gap);
        let message = failure.message;
        assert!(
            message.starts_with("gap: snapshot 6, the parent of snapshot 7"),
            "{message}"
        );
        assert!(
            message.contains("storage_not_found: snapshot 7: gone"),
            "{message}"
        );
        assert_eq!(snapshot, Some(7));
        // With the parent retained, a missing file is just that.
        let SyncError::Table { failure, .. } = missing().in_gap(7, None) else {
            panic!("still stops the table");
        };
        assert_eq!(failure.code, FailureCode::StorageNotFound);
        assert!(
            failure
                .message
                .starts_with("cannot publish snapshot 7: storage_not_found")
        );
        // Other failures are what they were, even when their text names a missing file.
        let other = SyncError::unpublishable(
            7,
            FailureCode::DataInvalid,
            "a position past storage_not_found",
        )
        .in_gap(7, Some(6));
        assert!(
            matches!(&other, SyncError::Table { failure, .. } if failure.code == FailureCode::DataInvalid),
            "{other:?}"
        );
        let timeout = transient(FailureCode::CatalogTimeout).in_gap(7, Some(6));
        assert!(
            matches!(timeout, SyncError::Transient(f) if f.code == FailureCode::CatalogTimeout)
        );
    }

    #[test]
    fn access_denied_twice_in_a_row_stops_the_table() {
        let denied = || transient(FailureCode::StorageAccessDenied);
        let first = denied().after(None);
        assert!(matches!(first, SyncError::Transient(_)), "{first:?}");
        let after_other = denied().after(Some(FailureCode::StorageUnreachable));
        assert!(matches!(after_other, SyncError::Transient(_)));
        let second = denied().after(Some(FailureCode::StorageAccessDenied));
        assert!(
            matches!(&second, SyncError::Table { failure, .. } if failure.code == FailureCode::StorageAccessDenied),
            "{second:?}"
        );
        let unrelated = transient(FailureCode::CatalogUnavailable)
            .after(Some(FailureCode::StorageAccessDenied));
        assert!(matches!(unrelated, SyncError::Transient(_)));
    }
}
