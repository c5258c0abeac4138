//! The change store: an object store (a local directory by default) holding change-set
//! segments. Keys are deterministic (table, snapshot, segment number), so a node that
//! redoes the work of a node that died overwrites the same objects with the same bytes.
//! Must not reach: `store`, `catalog` (PostgreSQL and table files are theirs).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::FileIO;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{ColumnChunkMetaData, FooterTail, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use url::Url;

use super::server_copy::S3Home;
use crate::telemetry::metric::INSERT_BYTES_COPIED;

/// Source files up to this size are copied in one request; larger ones in parts.
const SINGLE_PUT_LIMIT: u64 = 16 << 20;
const PART_SIZE: u64 = 8 << 20;

/// Bytes of encoded rows a segment written from a stream of batches holds in memory before
/// it ends the row group and writes it out.
const ROW_GROUP_BYTES: usize = 32 << 20;

/// Failures of the change store.
#[derive(Debug, thiserror::Error)]
pub enum ChangeStoreError {
    /// The configured location cannot be used.
    #[error("invalid change store location {0:?}: {1}")]
    Location(String, String),
    /// Reading or writing an object failed. What the store said (its endpoint, the key,
    /// its answer) is logged under `error_id` and kept out of the message, which reaches
    /// clients in tables' `last_error`.
    #[error(
        "change_store_unavailable: the change store {kind} (error id {error_id} in the \
         node's log)"
    )]
    ObjectStore {
        kind: &'static str,
        error_id: uuid::Uuid,
    },
    /// Reading a source data file failed.
    #[error("reading source file: {0}")]
    Source(#[from] iceberg::Error),
    /// A Parquet file is not what its metadata promised.
    #[error("{0}")]
    Corrupt(String),
    /// A segment of a published change set is gone from the store: removed behind
    /// icefeed's back, since icefeed deletes segments only with their index entries.
    #[error("segment {0} of a published change set is missing from the change store")]
    Missing(String),
    /// Conforming Arrow data failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Decoding Parquet failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Rows read into memory decoded to more than the reader's budget of this many bytes
    /// (see `changelog::read::DecodedBudget`); the reader computes them another way.
    #[error("decoded rows would pass the memory budget of {0} bytes")]
    OverBudget(u64),
}

impl From<object_store::Error> for ChangeStoreError {
    fn from(e: object_store::Error) -> Self {
        let error_id = uuid::Uuid::new_v4();
        tracing::warn!(%error_id, error = %e, "change store operation failed");
        let kind = match e {
            object_store::Error::NotFound { .. } => "has no such object",
            object_store::Error::PermissionDenied { .. } => "refused access",
            object_store::Error::Unauthenticated { .. } => "refused the credentials",
            _ => "failed or did not answer",
        };
        Self::ObjectStore { kind, error_id }
    }
}

/// The key readiness probes look for; it need not exist.
pub const PROBE_KEY: &str = "icefeed-readiness-probe";

/// Handle to the change store; cheap to clone.
#[derive(Clone, Debug)]
pub struct ChangeStore {
    objects: Arc<dyn ObjectStore>,
    root: Path,
    location: String,
    /// The bucket when the store is on S3: data files there are copied by the server.
    s3: Option<Arc<S3Home>>,
}

/// A segment written to the change store.
#[derive(Clone, Debug)]
pub struct StoredSegment {
    /// Key relative to the store.
    pub path: String,
    /// Rows in the segment (from the Parquet footer).
    pub rows: i64,
    /// Object size in bytes.
    pub size: i64,
    /// What its rows take decoded: of the batches written, or as a copied file's footer
    /// gives it (see [`Footer`]).
    pub decoded: i64,
}

impl ChangeStore {
    /// Opens `location`: a local directory (created if missing) or an object store URL
    /// (`s3://`, `gs://`, `az://`, `memory://`, `file://`) with `options`.
    pub fn open(
        location: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<Self, ChangeStoreError> {
        let bad = |e: String| ChangeStoreError::Location(location.to_string(), e);
        let (objects, root, s3): (Arc<dyn ObjectStore>, Path, _) = if location.contains("://") {
            let url = Url::parse(location).map_err(|e| bad(e.to_string()))?;
            let (store, root) =
                object_store::parse_url_opts(&url, options).map_err(|e| bad(e.to_string()))?;
            let s3 = S3Home::of(&url, options).map(Arc::new);
            (Arc::from(store), root, s3)
        } else {
            std::fs::create_dir_all(location).map_err(|e| bad(e.to_string()))?;
            let store =
                LocalFileSystem::new_with_prefix(location).map_err(|e| bad(e.to_string()))?;
            (Arc::new(store), Path::default(), None)
        };
        Ok(Self {
            objects,
            root,
            location: location.to_string(),
            s3,
        })
    }

    /// Where this store lives, as configured.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The object store and the full key of a stored segment, for reading it.
    pub fn object(&self, key: &str) -> (Arc<dyn ObjectStore>, Path) {
        (self.objects.clone(), self.full(key))
    }

    fn full(&self, key: &str) -> Path {
        self.root.parts().chain(Path::from(key).parts()).collect()
    }

    /// Copies an Iceberg data file byte for byte into the store under `key`, after
    /// checking that its footer holds `expected_rows` rows: insert-only change sets need
    /// no re-encoding, so they cost a file copy rather than a decode and re-write.
    /// A file in the store's own S3 bucket is copied by the server (see [`S3Home`]).
    /// Otherwise it passes through the node: `size` is the file's size as its manifest
    /// entry gives it, and a file small enough for one PUT is read in one GET (on an
    /// object store each request is a round trip, and most data files are small); a
    /// larger one is streamed in parts.
    pub async fn copy_data_file(
        &self,
        file_io: &FileIO,
        source: &str,
        expected_rows: u64,
        size: u64,
        key: &str,
    ) -> Result<StoredSegment, ChangeStoreError> {
        if let Some(home) = &self.s3
            && let Some(from) = home.source_key(source, size, file_io.config().props())
            && let Some(stored) = self
                .copy_on_server(home, file_io, source, &from, expected_rows, key)
                .await?
        {
            return Ok(stored);
        }
        let input = file_io.new_input(source)?;
        let target = self.full(key);
        let (footer, size) = if size <= SINGLE_PUT_LIMIT {
            let bytes = input.read().await?;
            let footer = Footer::in_file(&bytes, source)?;
            footer.check_rows(source, expected_rows)?;
            let size = bytes.len() as u64;
            self.objects.put(&target, PutPayload::from(bytes)).await?;
            (footer, size)
        } else {
            let size = input.metadata().await?.size;
            let reader = input.reader().await?;
            let footer = Footer::read(reader.as_ref(), size, source).await?;
            footer.check_rows(source, expected_rows)?;
            let mut upload = WriteMultipart::new(self.objects.put_multipart(&target).await?);
            let mut offset = 0;
            while offset < size {
                let end = (offset + PART_SIZE).min(size);
                upload.wait_for_capacity(2).await?;
                upload.put(reader.read(offset..end).await?);
                offset = end;
            }
            upload.finish().await?;
            (footer, size)
        };
        metrics::counter!(INSERT_BYTES_COPIED.name, "by" => "node").increment(size);
        Ok(footer.segment(key, size))
    }

    /// Has the S3 server copy `source` (key `from` of the store's bucket) to `key`, after
    /// checking its footer through `file_io`. `None` when the server would not: the
    /// caller copies through the node, and when the refusal will last (no permission to
    /// read the table's files, no CopyObject), so do later copies.
    async fn copy_on_server(
        &self,
        home: &S3Home,
        file_io: &FileIO,
        source: &str,
        from: &Path,
        expected_rows: u64,
        key: &str,
    ) -> Result<Option<StoredSegment>, ChangeStoreError> {
        let input = file_io.new_input(source)?;
        let size = input.metadata().await?.size;
        let footer = Footer::read(input.reader().await?.as_ref(), size, source).await?;
        footer.check_rows(source, expected_rows)?;
        match self.objects.copy(from, &self.full(key)).await {
            Ok(()) => {
                metrics::counter!(INSERT_BYTES_COPIED.name, "by" => "server").increment(size);
                Ok(Some(footer.segment(key, size)))
            }
            Err(e) => {
                use object_store::Error as E;
                let lasting = matches!(
                    e,
                    E::PermissionDenied { .. }
                        | E::Unauthenticated { .. }
                        | E::NotSupported { .. }
                        | E::NotImplemented { .. }
                );
                if lasting {
                    home.refuse();
                }
                tracing::warn!(
                    error = %e, source, lasting,
                    "the S3 server did not copy a data file; copying it through the node"
                );
                Ok(None)
            }
        }
    }

    /// Writes `batches` into the store under `key` as a Parquet file of `schema` (whose
    /// fields carry their Iceberg field ids, so that it is read like a copied data
    /// file), uploading it in parts as it grows.
    pub async fn write_batches(
        &self,
        key: &str,
        schema: SchemaRef,
        mut batches: BoxStream<'_, Result<RecordBatch, ChangeStoreError>>,
    ) -> Result<StoredSegment, ChangeStoreError> {
        use futures::TryStreamExt;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
            .build();
        let mut upload = WriteMultipart::new(self.objects.put_multipart(&self.full(key)).await?);
        let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))?;
        let (mut count, mut size, mut decoded) = (0u64, 0u64, 0usize);
        while let Some(batch) = batches.try_next().await? {
            count += batch.num_rows() as u64;
            decoded += batch.get_array_memory_size();
            writer.write(&RecordBatch::try_new(
                schema.clone(),
                batch.columns().to_vec(),
            )?)?;
            // The row group in progress is held in memory until it is written: end it at
            // a bound, not at the writer's million rows, which wide rows make gigabytes.
            if writer.in_progress_size() >= ROW_GROUP_BYTES {
                writer.flush()?;
            }
            if writer.inner().len() as u64 >= PART_SIZE {
                let part = std::mem::take(writer.inner_mut());
                size += part.len() as u64;
                upload.wait_for_capacity(2).await?;
                upload.put(Bytes::from(part));
            }
        }
        let tail = writer.into_inner()?;
        size += tail.len() as u64;
        upload.put(Bytes::from(tail));
        upload.finish().await?;
        Ok(StoredSegment {
            path: key.to_string(),
            rows: count as i64,
            size: size as i64,
            decoded: decoded as i64,
        })
    }

    /// Writes a finished segment file.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), ChangeStoreError> {
        self.objects
            .put(&self.full(key), PutPayload::from(bytes))
            .await?;
        Ok(())
    }

    /// Reads a whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes, ChangeStoreError> {
        Ok(self.objects.get(&self.full(key)).await?.bytes().await?)
    }

    /// Reads the bytes at `range` of an object.
    pub async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ChangeStoreError> {
        Ok(self.objects.get_range(&self.full(key), range).await?)
    }

    /// Deletes one object.
    pub async fn delete(&self, key: &str) -> Result<(), ChangeStoreError> {
        Ok(self.objects.delete(&self.full(key)).await?)
    }

    /// Whether the store answers, for readiness: a HEAD of a key that need not exist.
    pub async fn probe(&self) -> Result<(), ChangeStoreError> {
        match self.objects.head(&self.full(PROBE_KEY)).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes every object below `prefix`; returns how many.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, ChangeStoreError> {
        use futures::{StreamExt, TryStreamExt};
        let prefix = self.full(prefix);
        let paths = self
            .objects
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .boxed();
        let deleted: Vec<Path> = self.objects.delete_stream(paths).try_collect().await?;
        Ok(deleted.len())
    }
}

/// About what a column chunk's values decode to, as its footer records them: the size of
/// its pages once decompressed, or of its strings and binaries unencoded where the
/// writer recorded that and it is more. Wide values are stored plain, so this holds for
/// them; values repeated through a dictionary decode to more, which no footer without
/// size statistics tells.
pub fn decoded_bytes(column: &ColumnChunkMetaData) -> i64 {
    let values = column.unencoded_byte_array_data_bytes().unwrap_or(0);
    column.uncompressed_size().max(values).max(0)
}

/// What a data file's footer says of it.
struct Footer {
    rows: u64,
    /// What its rows decode to, about ([`decoded_bytes`] of its column chunks).
    decoded: i64,
}

impl Footer {
    /// The footer of a file of `size` bytes, read with two small range reads.
    async fn read(
        reader: &dyn iceberg::io::FileRead,
        size: u64,
        source: &str,
    ) -> Result<Self, ChangeStoreError> {
        if size < 12 {
            return Err(corrupt(source, "too small to be a Parquet file"));
        }
        let tail = reader.read(size - 8..size).await?;
        let len = metadata_length(&tail, size, source)?;
        Self::decode(&reader.read(size - 8 - len..size - 8).await?)
    }

    /// The footer of a file held whole in memory.
    fn in_file(bytes: &[u8], source: &str) -> Result<Self, ChangeStoreError> {
        let size = bytes.len() as u64;
        if size < 12 {
            return Err(corrupt(source, "too small to be a Parquet file"));
        }
        let len = metadata_length(&bytes[bytes.len() - 8..], size, source)?;
        let end = bytes.len() - 8;
        Self::decode(&bytes[end - len as usize..end])
    }

    fn decode(metadata: &[u8]) -> Result<Self, ChangeStoreError> {
        let metadata = ParquetMetaDataReader::decode_metadata(metadata)?;
        let decoded = metadata
            .row_groups()
            .iter()
            .flat_map(|group| group.columns())
            .map(decoded_bytes)
            .sum();
        Ok(Self {
            rows: metadata.file_metadata().num_rows() as u64,
            decoded,
        })
    }

    fn check_rows(&self, source: &str, expected: u64) -> Result<(), ChangeStoreError> {
        if self.rows != expected {
            return Err(ChangeStoreError::Corrupt(format!(
                "data file {source} holds {} rows but its manifest entry says {expected}",
                self.rows
            )));
        }
        Ok(())
    }

    /// The segment of this file copied to `key`.
    fn segment(&self, key: &str, size: u64) -> StoredSegment {
        StoredSegment {
            path: key.to_string(),
            rows: self.rows as i64,
            size: size as i64,
            decoded: self.decoded,
        }
    }
}

/// The footer length the last 8 bytes of a Parquet file of `size` bytes give.
fn metadata_length(tail: &[u8], size: u64, source: &str) -> Result<u64, ChangeStoreError> {
    let tail: [u8; 8] = tail.try_into().map_err(|_| corrupt(source, "short read"))?;
    let footer = FooterTail::try_from(tail)
        .map_err(|e| corrupt(source, &format!("not a Parquet file ({e})")))?;
    let len = footer.metadata_length() as u64;
    if len + 8 > size {
        return Err(corrupt(source, "footer length exceeds the file"));
    }
    Ok(len)
}

fn corrupt(source: &str, what: &str) -> ChangeStoreError {
    ChangeStoreError::Corrupt(format!("data file {source}: {what}"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use futures::StreamExt;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// 256 KB of hex digits of splitmix64 outputs: about half of it stays after
    /// compression.
    fn doc(id: u64) -> String {
        let mix = |z: u64| {
            let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        (0..(256u64 << 10) / 16)
            .map(|j| format!("{:016x}", mix((id << 32) | j)))
            .collect()
    }

    #[tokio::test]
    async fn segments_written_from_batches_end_row_groups_within_their_bound() {
        // 400 rows of 256 KB (100 MB): far fewer rows than the writer's own row-group
        // limit of a million.
        let batches: Vec<Result<RecordBatch, ChangeStoreError>> = (0..8u64)
            .map(|b| {
                let rows = b * 50..(b + 1) * 50;
                let ids: ArrayRef =
                    Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| i as i64)));
                let docs: ArrayRef = Arc::new(StringArray::from_iter_values(rows.map(doc)));
                Ok(RecordBatch::try_from_iter([("id", ids), ("doc", docs)]).unwrap())
            })
            .collect();
        let schema = batches[0].as_ref().unwrap().schema();
        let store = ChangeStore::open("memory://", &BTreeMap::new()).unwrap();
        let stored = store
            .write_batches("s.parquet", schema, futures::stream::iter(batches).boxed())
            .await
            .unwrap();
        assert_eq!(stored.rows, 400);
        assert!(
            stored.decoded >= 400 << 18,
            "{} bytes decoded",
            stored.decoded
        );
        let file = SerializedFileReader::new(store.get("s.parquet").await.unwrap()).unwrap();
        let groups = file.metadata().row_groups();
        assert!(groups.len() >= 2, "{} row group(s)", groups.len());
        for group in groups {
            // A group ends once its encoded rows reach the bound: one batch past it at most.
            assert!(
                group.compressed_size() < (ROW_GROUP_BYTES + (13 << 20)) as i64,
                "a row group of {} bytes",
                group.compressed_size()
            );
        }
    }

    #[test]
    fn a_footer_tells_what_plain_values_decode_to_however_well_they_compress() {
        // 300 documents of 100 KB, each one letter repeated after its id: a few hundred
        // bytes each once compressed.
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..300));
        let docs = (0..300).map(|id| format!("{id}:{}", "x".repeat(100_000)));
        let docs: ArrayRef = Arc::new(StringArray::from_iter_values(docs));
        let batch = RecordBatch::try_from_iter([("id", ids), ("doc", docs)]).unwrap();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
            .build();
        let mut file = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut file, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let footer = Footer::in_file(&file, "docs.parquet").unwrap();
        assert_eq!(footer.rows, 300);
        assert!(file.len() * 100 < 30_000_000, "{} bytes stored", file.len());
        assert!(
            footer.decoded >= 30_000_000,
            "{} bytes decoded",
            footer.decoded
        );
        assert!(footer.check_rows("docs.parquet", 299).is_err());
    }
}
