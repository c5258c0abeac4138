//! Local table files: read on tokio's blocking pool, and only where they are regular
//! files — a named pipe would block the opening thread until a writer appears, and a
//! device such as `/dev/zero` never ends — within `catalog.local_paths`, and metadata
//! files within a size limit.
//! Must not reach: `network`, `catalog::storage`
//! (local files only; routing paths is `storage`'s).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage};
use iceberg::{Error, ErrorKind};

use serde::{Deserialize, Serialize};

/// The most a metadata file (`*.metadata.json`) may hold: long-lived tables that never
/// expire snapshots reach tens of MiB; anything past this is no metadata file, and
/// reading it whole would only exhaust memory.
pub const MAX_METADATA_FILE_BYTES: u64 = 256 << 20;

/// Why a local path was not read.
#[derive(Debug, thiserror::Error)]
pub enum LocalRefusal {
    /// A named pipe, device, directory or socket where a file should be.
    #[error("{path} is not a regular file but {what}")]
    NotAFile {
        /// The path as it was asked for.
        path: String,
        /// What is there instead.
        what: &'static str,
    },
    /// A path outside the directories `catalog.local_paths` allows.
    #[error("{path} is outside the local directories this node may read (catalog.local_paths)")]
    NotAllowed {
        /// The path as it was asked for.
        path: String,
    },
    /// A whole-file read of more than it should hold.
    #[error("{path} holds more than {limit} bytes, the most a file of its kind may hold")]
    TooLarge {
        /// The path as it was asked for.
        path: String,
        /// The limit it passed.
        limit: u64,
    },
}

impl LocalRefusal {
    pub(super) fn into_error(self) -> Error {
        Error::new(ErrorKind::DataInvalid, self.to_string()).with_source(self)
    }
}

/// Local files (plain paths and `file:` URLs) without blocking the async runtime: every
/// file system call runs on tokio's blocking pool, and reads open regular files only
/// (symlinks followed), so a named pipe, a device or a directory is refused with
/// [`LocalRefusal::NotAFile`] instead of hanging or streaming forever. A metadata file
/// is read whole only up to [`MAX_METADATA_FILE_BYTES`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LocalFileStorage {
    local: LocalPaths,
}

impl LocalFileStorage {
    /// Local files below `local`'s directories.
    pub fn new(local: LocalPaths) -> Self {
        Self { local }
    }

    /// Runs `work` on the file system path of `path` on the blocking pool, if the policy
    /// allows the path (resolving it touches the file system too).
    async fn on_path<T: Send + 'static>(
        &self,
        path: &str,
        work: impl FnOnce(PathBuf) -> iceberg::Result<T> + Send + 'static,
    ) -> iceberg::Result<T> {
        let path = local_path(path);
        let local = self.local.clone();
        blocking(move || {
            local.check(&path)?;
            work(path)
        })
        .await
    }
}

/// The file system path of a plain path or a `file:` URL (as the iceberg crate's
/// `LocalFsStorage` reads them).
pub fn local_path(path: &str) -> PathBuf {
    let stripped = path
        .strip_prefix("file://")
        .or_else(|| path.strip_prefix("file:"));
    match stripped {
        Some(rest) if rest.starts_with('/') => PathBuf::from(rest),
        Some(rest) => PathBuf::from(format!("/{rest}")),
        None => PathBuf::from(path),
    }
}

/// Runs blocking file system work on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> iceberg::Result<T> + Send + 'static,
) -> iceberg::Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("local file system task failed: {e}"),
        )
    })?
}

fn io_error(doing: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::DataInvalid,
        format!("{doing} {}: {e}", path.display()),
    )
    .with_source(e)
}

/// What kind of file system object `meta` describes, unless it is a regular file.
fn irregular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a named pipe");
        }
        if kind.is_char_device() {
            return Some("a character device");
        }
        if kind.is_block_device() {
            return Some("a block device");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a file")
}

fn refuse_irregular(path: &Path, meta: &std::fs::Metadata) -> iceberg::Result<()> {
    match irregular(meta) {
        None => Ok(()),
        Some(what) => Err(LocalRefusal::NotAFile {
            path: path.display().to_string(),
            what,
        }
        .into_error()),
    }
}

/// Opens `path` for reading if it is a regular file, with its size. The type is checked
/// before opening (opening some devices has effects) and again on the open file, which
/// is opened non-blocking: a path swapped for a named pipe in between fails the second
/// check instead of blocking until a writer appears.
pub fn open_regular(path: &Path) -> iceberg::Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| io_error("cannot open", path, e))?;
    refuse_irregular(path, &meta)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // No effect on regular files; makes opening a FIFO return at once.
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options
        .open(path)
        .map_err(|e| io_error("cannot open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| io_error("cannot open", path, e))?;
    refuse_irregular(path, &meta)?;
    Ok((file, meta.len()))
}

/// Reads the regular file `path` whole, refusing one of more than `limit` bytes (also
/// one that grows past it while it is read).
pub fn read_regular(path: &Path, limit: Option<u64>) -> iceberg::Result<Vec<u8>> {
    let (file, size) = open_regular(path)?;
    let too_large = |limit| {
        LocalRefusal::TooLarge {
            path: path.display().to_string(),
            limit,
        }
        .into_error()
    };
    if let Some(limit) = limit
        && size > limit
    {
        return Err(too_large(limit));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    let read = match limit {
        Some(limit) => file.take(limit + 1).read_to_end(&mut bytes),
        None => (&file).read_to_end(&mut bytes),
    };
    read.map_err(|e| io_error("cannot read", path, e))?;
    if let Some(limit) = limit
        && bytes.len() as u64 > limit
    {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

/// The limit of a whole-file read of `path`: metadata files have one, data files are
/// read whole within the memory budget of the task that reads them.
fn read_limit(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_string_lossy();
    (name.ends_with(".metadata.json") || name.ends_with(".metadata.json.gz"))
        .then_some(MAX_METADATA_FILE_BYTES)
}

#[async_trait]
#[typetag::serde]
impl Storage for LocalFileStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.on_path(path, |path| Ok(path.try_exists().unwrap_or(false)))
            .await
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.on_path(path, |path| {
            let meta = std::fs::metadata(&path).map_err(|e| io_error("cannot stat", &path, e))?;
            refuse_irregular(&path, &meta)?;
            Ok(FileMetadata { size: meta.len() })
        })
        .await
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.on_path(path, |path| {
            read_regular(&path, read_limit(&path)).map(Bytes::from)
        })
        .await
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.on_path(path, |path| {
            let (file, size) = open_regular(&path)?;
            Ok(Box::new(LocalFileRead {
                file: Arc::new(file),
                size,
                path,
            }) as Box<dyn FileRead>)
        })
        .await
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.on_path(path, move |path| {
            create_parent(&path)?;
            std::fs::write(&path, &bs).map_err(|e| io_error("cannot write", &path, e))
        })
        .await
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.on_path(path, |path| {
            create_parent(&path)?;
            let file = File::create(&path).map_err(|e| io_error("cannot create", &path, e))?;
            Ok(Box::new(LocalFileWrite {
                file: Some(file),
                path,
            }) as Box<dyn FileWrite>)
        })
        .await
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.on_path(path, |path| match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_error("cannot delete", &path, e))
            }
            _ => Ok(()),
        })
        .await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.on_path(path, |path| {
            if path.is_dir() {
                std::fs::remove_dir_all(&path).map_err(|e| io_error("cannot delete", &path, e))?;
            }
            Ok(())
        })
        .await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        let paths: Vec<String> = paths.collect().await;
        for path in paths {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

fn create_parent(path: &Path) -> iceberg::Result<()> {
    match path.parent() {
        Some(parent) => std::fs::create_dir_all(parent)
            .map_err(|e| io_error("cannot create directory", parent, e)),
        None => Ok(()),
    }
}

/// Ranges of an open regular file, each read on the blocking pool (positioned reads, so
/// concurrent ranges need no lock).
#[derive(Debug)]
struct LocalFileRead {
    file: Arc<File>,
    /// The size when it was opened: table files do not change.
    size: u64,
    path: PathBuf,
}

#[async_trait]
impl FileRead for LocalFileRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.start > range.end || range.end > self.size {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "cannot read bytes {}..{} of {}: it holds {} bytes",
                    range.start,
                    range.end,
                    self.path.display(),
                    self.size
                ),
            ));
        }
        let (file, path) = (self.file.clone(), self.path.clone());
        blocking(move || {
            let mut buffer = vec![0u8; (range.end - range.start) as usize];
            read_exact_at(&file, &mut buffer, range.start)
                .map_err(|e| io_error("cannot read", &path, e))?;
            Ok(Bytes::from(buffer))
        })
        .await
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buffer, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buffer.len() {
        let n = std::os::windows::fs::FileExt::seek_read(
            file,
            &mut buffer[done..],
            offset + done as u64,
        )?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// A local file being written (the storage trait asks for writing; the service only
/// reads table files), each part written on the blocking pool.
struct LocalFileWrite {
    file: Option<File>,
    path: PathBuf,
}

impl LocalFileWrite {
    async fn with_file(
        &mut self,
        work: impl FnOnce(&mut File) -> std::io::Result<()> + Send + 'static,
        doing: &'static str,
    ) -> iceberg::Result<Option<File>> {
        let mut file = self
            .file
            .take()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "the file is closed"))?;
        let path = self.path.clone();
        let file = blocking(move || {
            work(&mut file).map_err(|e| io_error(doing, &path, e))?;
            Ok(file)
        })
        .await?;
        Ok(Some(file))
    }
}

#[async_trait]
impl FileWrite for LocalFileWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        use std::io::Write;
        self.file = self
            .with_file(move |f| f.write_all(&bs), "cannot write")
            .await?;
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        // Closed for good, even when the sync fails.
        self.with_file(|f| f.sync_all(), "cannot sync").await?;
        Ok(())
    }
}

/// The local directories whose files tables may be read from (`catalog.local_paths`):
/// everything when unrestricted (unit tests), else only files
/// below the listed directories, after `..` and symbolic links are resolved. Any local
/// path a catalog names, table metadata included, is checked, so a catalog cannot point
/// the node at other files on its disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LocalPaths {
    /// `None`: any path.
    allowed: Option<Vec<PathBuf>>,
}

impl Default for LocalPaths {
    /// No local path at all.
    fn default() -> Self {
        Self::only(&[])
    }
}

impl LocalPaths {
    /// Every local path (unit tests; a serving node takes its configuration's list).
    #[cfg(test)]
    pub fn unrestricted() -> Self {
        Self { allowed: None }
    }

    /// Only paths below `dirs` (made absolute, and resolved where they exist).
    pub fn only(dirs: &[PathBuf]) -> Self {
        let allowed = dirs
            .iter()
            .map(|dir| std::fs::canonicalize(dir).unwrap_or_else(|_| lexical_absolute(dir)))
            .collect();
        Self {
            allowed: Some(allowed),
        }
    }

    /// Refuses `path` unless it is below an allowed directory: by its text first, then
    /// by where it really is, so that neither a missing file outside nor a link out of
    /// an allowed directory tells the caller anything.
    pub fn check(&self, path: &Path) -> iceberg::Result<()> {
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        let below = |p: &Path| allowed.iter().any(|dir| p.starts_with(dir));
        let lexical = lexical_absolute(path);
        let real = std::fs::canonicalize(&lexical).ok();
        if below(&lexical) && real.as_deref().is_none_or(below) {
            return Ok(());
        }
        Err(LocalRefusal::NotAllowed {
            path: path.display().to_string(),
        }
        .into_error())
    }
}

/// `path` made absolute against the working directory, `.` and `..` removed by text.
fn lexical_absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::storage::{StorageFault, describe};

    #[cfg(unix)]
    #[tokio::test]
    async fn local_reads_take_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let storage = LocalFileStorage::new(LocalPaths::unrestricted());
        let file = dir.path().join("v1.metadata.json");
        std::fs::write(&file, b"{\"format-version\": 2}").unwrap();
        let url = format!("file://{}", file.display());
        assert_eq!(storage.read(&url).await.unwrap().len(), 21);
        assert_eq!(storage.metadata(&url).await.unwrap().size, 21);
        let reader = storage.reader(&url).await.unwrap();
        assert_eq!(&reader.read(1..7).await.unwrap()[..], b"\"forma");
        assert!(reader.read(10..22).await.is_err(), "past the end");

        let pipe = dir.path().join("v2.metadata.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&pipe)
            .status()
            .unwrap();
        assert!(made.success());
        let pipe = pipe.display().to_string();
        for refused in [
            pipe.as_str(),
            "/dev/zero",
            &dir.path().display().to_string(),
        ] {
            let read = storage.read(refused).await.unwrap_err();
            assert_eq!(
                StorageFault::of(&read),
                Some(StorageFault::NotAFile),
                "{read}"
            );
            assert!(describe(&read).contains("is not a regular file"), "{read}");
            let opened = storage.reader(refused).await.err().unwrap();
            assert_eq!(StorageFault::of(&opened), Some(StorageFault::NotAFile));
            let stat = storage.metadata(refused).await.err().unwrap();
            assert_eq!(StorageFault::of(&stat), Some(StorageFault::NotAFile));
            assert!(storage.exists(refused).await.unwrap());
        }
        let missing = storage.read("/nowhere/v1.metadata.json").await.unwrap_err();
        assert_eq!(StorageFault::of(&missing), Some(StorageFault::NotFound));

        // Metadata files have a limit; data files are read whole as they are.
        let huge = dir.path().join("v3.metadata.json");
        let data = dir.path().join("data.parquet");
        for path in [&huge, &data] {
            std::fs::File::create(path)
                .unwrap()
                .set_len(MAX_METADATA_FILE_BYTES + 1)
                .unwrap();
        }
        let read = storage.read(&huge.display().to_string()).await.unwrap_err();
        assert_eq!(StorageFault::of(&read), Some(StorageFault::TooLarge));
        let read = storage.read(&data.display().to_string()).await.unwrap();
        assert_eq!(read.len() as u64, MAX_METADATA_FILE_BYTES + 1);
    }
}
