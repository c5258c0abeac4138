//! Where table files are read from: local paths through [`LocalFileStorage`], object-store
//! URLs (`s3://`, `s3a://`, `gs://`, `abfss://`, `wasbs://`, …) through the iceberg
//! crate's OpenDAL storage, with FileIO properties (`s3.*`, `gcs.*`, `adls.*`) or the
//! platform's default credential chain. And what a storage failure means: the object is
//! gone, access is denied, the store could not be reached, or a local path is no file.
//! Must not reach: `changes`, `store` (table files only; the change store is another).
//!
//! OpenDAL bounds every request itself (iceberg-storage-opendal layers a timeout of 60 s
//! per operation and 10 s per I/O step under its retries). Local files: see
//! [`super::local_file`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use serde::{Deserialize, Serialize};

use super::local_file::{LocalFileStorage, LocalPaths, LocalRefusal};
use crate::failure::FailureCode;

/// Builds [`TableStorage`] for every catalog and static table, reading local files only
/// where its [`LocalPaths`] allow.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TableStorageFactory {
    local: LocalPaths,
}

impl TableStorageFactory {
    /// Storage that reads local files only below `local`'s directories.
    pub fn new(local: LocalPaths) -> Self {
        Self { local }
    }
}

#[typetag::serde]
impl StorageFactory for TableStorageFactory {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(TableStorage {
            props: config.props().clone(),
            local: self.local.clone(),
            remote: OnceLock::new(),
        }))
    }
}

/// Sends each path to the storage its scheme calls for. Tables written by local writers
/// name plain paths (`/data/…`) that no URL-based storage accepts, while object-store
/// tables name URLs that the local file system would read as relative paths.
#[derive(Debug, Serialize, Deserialize)]
pub struct TableStorage {
    props: HashMap<String, String>,
    local: LocalPaths,
    /// Built on the first object-store path, from the same properties.
    #[serde(skip)]
    remote: OnceLock<Arc<dyn Storage>>,
}

/// A plain path or a `file:` URL.
pub fn is_local(path: &str) -> bool {
    path.starts_with("file:") || !path.contains("://")
}

impl TableStorage {
    fn route(&self, path: &str) -> iceberg::Result<Arc<dyn Storage>> {
        if is_local(path) {
            return Ok(Arc::new(LocalFileStorage::new(self.local.clone())));
        }
        if let Some(remote) = self.remote.get() {
            return Ok(remote.clone());
        }
        let built = OpenDalResolvingStorageFactory::new()
            .build(&StorageConfig::from_props(self.props.clone()))?;
        Ok(self.remote.get_or_init(|| built).clone())
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for TableStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.route(path)?.exists(path).await
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.route(path)?.metadata(path).await
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.route(path)?.read(path).await
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.route(path)?.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.route(path)?.write(path, bs).await
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.route(path)?.writer(path).await
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.route(path)?.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.route(path)?.delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        // icefeed never deletes table files; this only keeps the trait whole.
        let paths: Vec<String> = paths.collect().await;
        for path in paths {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        self.route(path)?.new_input(path)
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        self.route(path)?.new_output(path)
    }
}

/// What kind of storage failure an error is, when it is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    /// The store refused the credentials or the request (HTTP 401/403).
    AccessDenied,
    /// The bucket or object does not exist.
    NotFound,
    /// The storage settings cannot work (a malformed endpoint, region or URL).
    Invalid,
    /// The store did not answer, throttled, or failed for now (worth retrying).
    Unreachable,
    /// A local path names a named pipe, device, directory or socket, not a file.
    NotAFile,
    /// A metadata file larger than any metadata file should be.
    TooLarge,
    /// A local path outside `catalog.local_paths`.
    NotAllowed,
}

impl StorageFault {
    /// The fault of a local file the node refused to read.
    fn of_refusal(refused: &LocalRefusal) -> Self {
        match refused {
            LocalRefusal::NotAFile { .. } => StorageFault::NotAFile,
            LocalRefusal::NotAllowed { .. } => StorageFault::NotAllowed,
            LocalRefusal::TooLarge { .. } => StorageFault::TooLarge,
        }
    }

    /// The kind of failure this fault is.
    pub const fn failure_code(self) -> FailureCode {
        match self {
            StorageFault::AccessDenied => FailureCode::StorageAccessDenied,
            StorageFault::NotFound => FailureCode::StorageNotFound,
            StorageFault::Invalid => FailureCode::StorageSettingsInvalid,
            StorageFault::Unreachable => FailureCode::StorageUnreachable,
            StorageFault::NotAFile => FailureCode::StorageNotAFile,
            StorageFault::TooLarge => FailureCode::StorageFileTooLarge,
            StorageFault::NotAllowed => FailureCode::LocalPathNotAllowed,
        }
    }

    /// The problem code of this fault.
    pub const fn code(self) -> &'static str {
        self.failure_code().as_str()
    }

    /// Whether reading the same file again fails the same way: the file named by the
    /// table's metadata is gone, not a file, too large or off limits, and the metadata
    /// that names it will not change.
    pub const fn is_lasting(self) -> bool {
        matches!(
            self,
            StorageFault::NotFound
                | StorageFault::NotAFile
                | StorageFault::NotAllowed
                | StorageFault::TooLarge
        )
    }

    /// Classifies an iceberg error by the object-store error beneath it. Errors of the
    /// local file system carry no kind, so they are told by their I/O error or text.
    pub fn of(e: &iceberg::Error) -> Option<Self> {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = source {
            if let Some(opendal) = err.downcast_ref::<opendal::Error>() {
                return Some(Self::of_opendal(opendal));
            }
            if let Some(refused) = err.downcast_ref::<LocalRefusal>() {
                return Some(StorageFault::of_refusal(refused));
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                return Self::of_io(io.kind());
            }
            source = err.source();
        }
        let text = e.to_string();
        if text.contains("No such file or directory") {
            Some(StorageFault::NotFound)
        } else if text.contains("Permission denied") {
            Some(StorageFault::AccessDenied)
        } else {
            None
        }
    }

    fn of_opendal(e: &opendal::Error) -> Self {
        use opendal::ErrorKind;
        match e.kind() {
            ErrorKind::NotFound => StorageFault::NotFound,
            // OpenDAL files S3's 404 `NoSuchBucket` under invalid settings.
            ErrorKind::ConfigInvalid if e.message().contains("NoSuchBucket") => {
                StorageFault::NotFound
            }
            ErrorKind::ConfigInvalid => StorageFault::Invalid,
            ErrorKind::PermissionDenied => StorageFault::AccessDenied,
            _ => StorageFault::Unreachable,
        }
    }

    fn of_io(kind: std::io::ErrorKind) -> Option<Self> {
        use std::io::ErrorKind;
        match kind {
            ErrorKind::NotFound => Some(StorageFault::NotFound),
            ErrorKind::PermissionDenied => Some(StorageFault::AccessDenied),
            _ => None,
        }
    }
}

/// A short, actionable cause for a storage error, without the request's internals
/// (URLs, response headers) that OpenDAL's error context carries.
pub fn describe(e: &iceberg::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(opendal) = err.downcast_ref::<opendal::Error>() {
            return match StorageFault::of_opendal(opendal) {
                StorageFault::AccessDenied => "access denied: the credentials are missing, \
                                               wrong or expired, or lack read permission"
                    .to_string(),
                StorageFault::NotFound if opendal.message().contains("NoSuchBucket") => {
                    "no such bucket".to_string()
                }
                StorageFault::NotFound => "no such object".to_string(),
                StorageFault::Invalid => format!("invalid storage settings: {}", opendal.message()),
                // Only local paths are refused so.
                StorageFault::NotAFile | StorageFault::TooLarge | StorageFault::NotAllowed => {
                    opendal.message().to_string()
                }
                StorageFault::Unreachable => {
                    let status = if opendal.is_temporary() {
                        "temporary failure"
                    } else {
                        "failure"
                    };
                    // The transport's own error (connection refused, reset) says most.
                    let mut cause = opendal.message().to_string();
                    let mut inner = std::error::Error::source(opendal);
                    while let Some(e) = inner {
                        cause = e.to_string();
                        inner = e.source();
                    }
                    format!("{status} ({}): {cause}", opendal.kind())
                }
            };
        }
        if let Some(refused) = err.downcast_ref::<LocalRefusal>() {
            return refused.to_string();
        }
        source = err.source();
    }
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_and_object_store_urls_are_told_apart() {
        for local in [
            "/data/w/t/metadata/v1.metadata.json",
            "file:///data/x",
            "file:/x",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "s3://lake/ns/t/metadata/00001.metadata.json",
            "s3a://b/k",
            "gs://b/k",
            "abfss://fs@acct.dfs.core.windows.net/k",
            "wasbs://c@acct.blob.core.windows.net/k",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }

    #[test]
    fn faults_are_classified_through_the_error_chain() {
        let denied = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "io").with_source(
            opendal::Error::new(opendal::ErrorKind::PermissionDenied, "403"),
        );
        assert_eq!(StorageFault::of(&denied), Some(StorageFault::AccessDenied));
        let missing = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "io")
            .with_source(opendal::Error::new(opendal::ErrorKind::NotFound, "404"));
        assert_eq!(StorageFault::of(&missing), Some(StorageFault::NotFound));
        assert_eq!(describe(&missing), "no such object");
        let bucket = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "io").with_source(
            opendal::Error::new(
                opendal::ErrorKind::ConfigInvalid,
                "S3Error { code: \"NoSuchBucket\" }",
            ),
        );
        assert_eq!(StorageFault::of(&bucket), Some(StorageFault::NotFound));
        assert_eq!(describe(&bucket), "no such bucket");
        let slow = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "io").with_source(
            opendal::Error::new(opendal::ErrorKind::RateLimited, "503 SlowDown").set_temporary(),
        );
        assert_eq!(StorageFault::of(&slow), Some(StorageFault::Unreachable));
        assert!(describe(&slow).starts_with("temporary failure"));
        let local = iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "Failed to open file /x: No such file or directory (os error 2)",
        );
        assert_eq!(StorageFault::of(&local), Some(StorageFault::NotFound));
        let other = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "bad manifest");
        assert_eq!(StorageFault::of(&other), None);
    }
}
