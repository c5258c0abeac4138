//! Why background work on a table failed, by kind: the stable code a table's
//! `last_error_code` and a failed task carry, so that the scheduler, the task runner and
//! clients decide by kind and never by reading messages.
//! Must not reach: the rest of the crate.

use std::fmt;

/// What kind of failure stopped or postponed a table's feed. Written to the database and
/// shown to clients as its snake_case name, which never changes once released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// The branch's history no longer reaches the checkpoint: snapshots were expired
    /// before their changes were published, or the table was replaced by another.
    Gap,
    /// The followed branch does not exist.
    BranchMissing,
    /// The catalog no longer has the table (dropped or renamed).
    IcebergTableNotFound,
    /// The catalog did not answer in time.
    CatalogTimeout,
    /// The catalog failed or could not be reached.
    CatalogUnavailable,
    /// The catalog's host or port is outside `network.allowed_hosts`.
    HostNotAllowed,
    /// The catalog's type is outside `catalog.allowed_types`.
    CatalogTypeNotAllowed,
    /// Storage refused the credentials or the policy denies the access.
    StorageAccessDenied,
    /// A file the table's metadata names is gone.
    StorageNotFound,
    /// The table's storage settings are invalid.
    StorageSettingsInvalid,
    /// Storage failed or could not be reached.
    StorageUnreachable,
    /// A path the table's metadata names is not a regular file.
    StorageNotAFile,
    /// A metadata file is larger than icefeed reads.
    StorageFileTooLarge,
    /// A local path is outside the directories `catalog.local_paths` allows.
    LocalPathNotAllowed,
    /// The change store refused, failed or did not answer.
    ChangeStoreUnavailable,
    /// PostgreSQL could not be used.
    DatabaseUnavailable,
    /// The table's data contradicts its metadata or the Iceberg spec (a corrupt file, a
    /// malformed deletion vector, a compaction whose rows differ from what it replaced).
    DataInvalid,
    /// The identifier columns cannot key this snapshot's rows.
    IdentifierColumnsInvalid,
    /// The snapshot uses something icefeed cannot compute changes for.
    Unsupported,
    /// A worker kept dying on the same work.
    WorkerLost,
    /// Anything else; the message and the log say more.
    Internal,
}

impl FailureCode {
    /// Every code, for documentation and parsing.
    pub const ALL: [FailureCode; 21] = [
        Self::Gap,
        Self::BranchMissing,
        Self::IcebergTableNotFound,
        Self::CatalogTimeout,
        Self::CatalogUnavailable,
        Self::HostNotAllowed,
        Self::CatalogTypeNotAllowed,
        Self::StorageAccessDenied,
        Self::StorageNotFound,
        Self::StorageSettingsInvalid,
        Self::StorageUnreachable,
        Self::StorageNotAFile,
        Self::StorageFileTooLarge,
        Self::LocalPathNotAllowed,
        Self::ChangeStoreUnavailable,
        Self::DatabaseUnavailable,
        Self::DataInvalid,
        Self::IdentifierColumnsInvalid,
        Self::Unsupported,
        Self::WorkerLost,
        Self::Internal,
    ];

    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gap => "gap",
            Self::BranchMissing => "branch_missing",
            Self::IcebergTableNotFound => "iceberg_table_not_found",
            Self::CatalogTimeout => "catalog_timeout",
            Self::CatalogUnavailable => "catalog_unavailable",
            Self::HostNotAllowed => "host_not_allowed",
            Self::CatalogTypeNotAllowed => "catalog_type_not_allowed",
            Self::StorageAccessDenied => "storage_access_denied",
            Self::StorageNotFound => "storage_not_found",
            Self::StorageSettingsInvalid => "storage_settings_invalid",
            Self::StorageUnreachable => "storage_unreachable",
            Self::StorageNotAFile => "storage_not_a_file",
            Self::StorageFileTooLarge => "storage_file_too_large",
            Self::LocalPathNotAllowed => "local_path_not_allowed",
            Self::ChangeStoreUnavailable => "change_store_unavailable",
            Self::DatabaseUnavailable => "database_unavailable",
            Self::DataInvalid => "data_invalid",
            Self::IdentifierColumnsInvalid => "identifier_columns_invalid",
            Self::Unsupported => "unsupported",
            Self::WorkerLost => "worker_lost",
            Self::Internal => "internal_error",
        }
    }

    /// The code of a stored name; `None` for a name this version does not know (written
    /// by a newer node during a rolling upgrade).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure of work on a table: its kind and what a person should read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: FailureCode,
    /// What went wrong, naming the snapshot or file; free of secrets and local paths.
    pub message: String,
}

impl Failure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for code in FailureCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(FailureCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(FailureCode::parse("from_a_newer_node"), None);
    }
}
