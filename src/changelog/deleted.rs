//! The positions of a data file that a set of delete files removes: deletion vectors
//! (range-read from their Puffin file), position delete files (their rows for this data
//! file) and equality deletes (the data file's rows whose equality columns, read by
//! field id, equal a delete row; null equals null, as the spec says and Arrow's row
//! format encodes). Decoded delete files are cached per map task: a partition-scoped
//! position file or an equality delete file serves many data files.
//! Must not reach: `store`, `workers`.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, SortField};
use foldhash::fast::FixedState;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use iceberg::io::FileIO;
use roaring::RoaringTreemap;

use super::deletes::DeleteRef;
use super::field_reader::{FieldReader, FieldResult};
use super::vector;
use crate::changes::{ChangeStoreError, ReadSchema};

/// Field ids of a position delete file's columns (Iceberg spec, reserved ids).
const FILE_PATH_ID: i32 = 2_147_483_546;
const POS_ID: i32 = 2_147_483_545;

/// How much decoded delete data one [`DeleteCache`] keeps (an estimate in bytes), and the
/// most the keys of one set of equality delete files may take while they are applied.
const CACHE_BYTES: usize = 256 << 20;

/// Rows of a position delete file past which it is read for each data file it serves
/// rather than decoded whole and kept (a few MB of positions).
const WHOLE_POSITION_ROWS: i64 = 1 << 20;

/// Estimated bytes a key of a [`KeySet`] takes beside its own: its box, its allocation and
/// its slot in the set.
const KEY_OVERHEAD: usize = 40;

/// Decoded delete files, shared by the reads of one task or export: what the next data
/// files likely need, up to [`CACHE_BYTES`] — not everything it ever decoded.
#[derive(Clone)]
pub struct DeleteCache {
    positions: Arc<Mutex<Bounded<String, PositionsByFile>>>,
    equality: Arc<Mutex<Bounded<Vec<String>, KeySet>>>,
    /// The most bytes one [`KeySet`] may take.
    key_budget: usize,
    /// Rows of a position delete file past which it is not decoded whole.
    whole_position_rows: i64,
}

impl Default for DeleteCache {
    fn default() -> Self {
        Self {
            positions: Default::default(),
            equality: Default::default(),
            key_budget: CACHE_BYTES,
            whole_position_rows: WHOLE_POSITION_ROWS,
        }
    }
}

/// Entries up to a byte budget, emptied when a new one would pass it (delete files are
/// mostly read in the order of the data files they apply to, so recency is all there
/// is to keep); one larger than the whole budget is not kept at all.
struct Bounded<K, V> {
    entries: HashMap<K, Arc<V>>,
    bytes: usize,
    budget: usize,
}

impl<K: std::hash::Hash + Eq, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Self::new(CACHE_BYTES)
    }
}

impl<K: std::hash::Hash + Eq, V> Bounded<K, V> {
    fn new(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            bytes: 0,
            budget,
        }
    }

    fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.entries.get(key).cloned()
    }

    fn insert(&mut self, key: K, value: Arc<V>, bytes: usize) {
        if bytes > self.budget {
            return;
        }
        if self.bytes + bytes > self.budget {
            self.entries.clear();
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.entries.insert(key, value);
    }
}

/// A position delete file's positions, by the data file they are in.
type PositionsByFile = HashMap<String, RoaringTreemap>;

/// Which of the keys of a set of equality delete files a [`KeySet`] holds: those whose
/// [`share_hash`] is `residue` modulo `modulus`. When all of them would pass the memory
/// budget, they are applied in shares, one pass over the delete files each (a hash join
/// whose build side is partitioned by re-reading it rather than by spilling it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Share {
    residue: u64,
    modulus: u64,
}

impl Share {
    const ALL: Share = Share {
        residue: 0,
        modulus: 1,
    };

    fn holds(&self, key: &[u8]) -> bool {
        self.modulus == 1 || share_hash(key) % self.modulus == self.residue
    }

    /// Halves the share: it keeps one half and returns the other.
    fn split(&mut self) -> Share {
        self.modulus *= 2;
        Share {
            residue: self.residue + self.modulus / 2,
            modulus: self.modulus,
        }
    }
}

/// The hash that shares keys out; seeded apart from the sets' own hash, so that the keys
/// of one share do not crowd into a fraction of a set's buckets.
fn share_hash(key: &[u8]) -> u64 {
    FixedState::with_seed(0x1ce_feed).hash_one(key)
}

/// Delete rows of equality delete files sharing one set of field ids, in Arrow's row
/// format (equal rows have equal bytes, null equal to null): all of them, or one share.
struct KeySet {
    types: Vec<DataType>,
    keys: HashSet<Box<[u8]>, FixedState>,
    share: Share,
    bytes: usize,
}

/// The data file a set of deletes is applied to.
pub struct DataFileRef<'a> {
    pub path: &'a str,
    pub record_count: u64,
}

impl DeleteCache {
    /// A cache whose key sets are held to `bytes` (equality deletes with more keys than
    /// that are applied in several passes) and that decodes position delete files of up
    /// to `position_rows` rows whole.
    #[cfg(test)]
    fn with_limits(bytes: usize, position_rows: i64) -> Self {
        Self {
            key_budget: bytes,
            whole_position_rows: position_rows,
            ..Self::default()
        }
    }

    /// The positions of `data` that `deletes` remove.
    /// `schema` gives the initial defaults of columns the data file predates.
    pub async fn dead(
        &self,
        file_io: &FileIO,
        data: &DataFileRef<'_>,
        deletes: &[DeleteRef],
        schema: &ReadSchema,
    ) -> Result<RoaringTreemap, ChangeStoreError> {
        let mut dead = RoaringTreemap::new();
        let mut equality: HashMap<&[i32], Vec<&str>> = HashMap::new();
        for delete in deletes {
            match delete {
                DeleteRef::Vector {
                    path,
                    offset,
                    length,
                    cardinality,
                } => {
                    let reader = file_io.new_input(path)?.reader().await?;
                    let blob =
                        iceberg::io::FileRead::read(&reader, *offset..offset + length).await?;
                    let positions = vector::decode(&blob, *cardinality).map_err(|e| {
                        ChangeStoreError::Corrupt(format!(
                            "deletion vector in {path} for {}: {e}",
                            data.path
                        ))
                    })?;
                    if let Some(max) = positions.max().filter(|&m| m >= data.record_count) {
                        return Err(ChangeStoreError::Corrupt(format!(
                            "deletion vector in {path} deletes position {max} of {}, which has {} rows",
                            data.path, data.record_count
                        )));
                    }
                    dead |= positions;
                }
                DeleteRef::Positions { path } => {
                    if let Some(mut positions) = self.positions_in(file_io, path, data.path).await?
                    {
                        let past = positions.remove_range(data.record_count..);
                        if past > 0 {
                            // The spec: such rows delete nothing. A writer bug, worth seeing.
                            metrics::counter!(crate::telemetry::metric::DELETE_ANOMALIES.name)
                                .increment(past);
                            tracing::warn!(delete = %path, data = %data.path, past, "position deletes past the end of the data file");
                        }
                        dead |= positions;
                    }
                }
                DeleteRef::Equality { path, field_ids } => {
                    equality.entry(field_ids).or_default().push(path)
                }
            }
        }
        for (field_ids, paths) in equality {
            dead |= self
                .equality_dead(file_io, data.path, field_ids, paths, schema)
                .await?;
        }
        Ok(dead)
    }

    /// The positions of the data file at `data` that the position delete file at `path`
    /// lists. A file of up to [`WHOLE_POSITION_ROWS`] rows is decoded whole and kept for
    /// the other data files it serves; a larger one is read for each data file, only its
    /// row groups whose `file_path` bounds take that file in (writers sort by path), so
    /// memory follows the data file, not the delete file.
    async fn positions_in(
        &self,
        file_io: &FileIO,
        path: &str,
        data: &str,
    ) -> Result<Option<RoaringTreemap>, ChangeStoreError> {
        let hit = self.positions.lock().expect("cache").get(path);
        if let Some(by_file) = hit {
            return Ok(by_file.get(data).cloned());
        }
        let file = FieldReader::open(file_io, path).await?;
        if file.rows() > self.whole_position_rows {
            let groups = file.row_groups_bounding(FILE_PATH_ID, data.as_bytes());
            let batches = file.batches_of(&[FILE_PATH_ID, POS_ID], Some(groups))?;
            let mut by_file = read_positions(path, batches, Some(data)).await?;
            return Ok(by_file.remove(data));
        }
        let batches = file.batches(&[FILE_PATH_ID, POS_ID])?;
        let by_file = read_positions(path, batches, None).await?;
        let bytes = by_file
            .iter()
            .map(|(file, positions)| file.len() + positions.serialized_size())
            .sum();
        let positions = by_file.get(data).cloned();
        self.positions
            .lock()
            .expect("cache")
            .insert(path.to_string(), Arc::new(by_file), bytes);
        Ok(positions)
    }

    /// The positions of the data file at `data` that equality delete files with the same
    /// `field_ids` remove: their keys are loaded (or taken from the cache) and the data
    /// file's key columns probed, once per share when the keys pass the budget.
    async fn equality_dead(
        &self,
        file_io: &FileIO,
        data: &str,
        field_ids: &[i32],
        mut paths: Vec<&str>,
        schema: &ReadSchema,
    ) -> Result<RoaringTreemap, ChangeStoreError> {
        paths.sort_unstable();
        let cache_key: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let hit = self.equality.lock().expect("cache").get(&cache_key);
        if let Some(hit) = hit {
            return matching_positions(file_io, data, field_ids, &hit, schema).await;
        }
        let mut dead = RoaringTreemap::new();
        let mut shares = vec![Share::ALL];
        while let Some(share) = shares.pop() {
            let keys = self
                .key_set(file_io, field_ids, &paths, share, &mut shares)
                .await?;
            dead |= matching_positions(file_io, data, field_ids, &keys, schema).await?;
            if keys.share == Share::ALL {
                let bytes = keys.bytes;
                self.equality.lock().expect("cache").insert(
                    cache_key.clone(),
                    Arc::new(keys),
                    bytes,
                );
            }
        }
        Ok(dead)
    }

    /// The keys of equality delete files with the same `field_ids` that fall in `share`,
    /// or in a part of it, up to the budget: a share whose keys pass the budget is split,
    /// and the part it no longer holds goes to `rest`.
    async fn key_set(
        &self,
        file_io: &FileIO,
        field_ids: &[i32],
        paths: &[&str],
        mut share: Share,
        rest: &mut Vec<Share>,
    ) -> Result<KeySet, ChangeStoreError> {
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            files.push(FieldReader::open(file_io, path).await?);
        }
        // Types may differ between files written before and after a promotion.
        let mut types = vec![DataType::Null; field_ids.len()];
        for file in &files {
            for (i, t) in file.types(field_ids).into_iter().enumerate() {
                let Some(t) = t else {
                    return Err(ChangeStoreError::Corrupt(format!(
                        "equality delete file {} lacks the column of field id {}",
                        file.path, field_ids[i]
                    )));
                };
                types[i] = match &types[i] {
                    DataType::Null => t,
                    known => wider(known.clone(), t),
                };
            }
        }
        let converter = converter(&types)?;
        let mut keys: HashSet<Box<[u8]>, FixedState> = HashSet::default();
        let mut bytes = 0;
        for file in files {
            let mut batches = file.batches(field_ids)?;
            while let Some((_, columns)) = batches.try_next().await? {
                let columns: Vec<ArrayRef> = columns.into_iter().flatten().collect();
                let rows = converter.convert_columns(&casts(&columns, &types)?)?;
                for row in rows.iter() {
                    let row = row.as_ref();
                    if !share.holds(row) || keys.contains(row) {
                        continue;
                    }
                    bytes += row.len() + KEY_OVERHEAD;
                    keys.insert(row.into());
                    // Distinct keys part within a few splits; the bound only guards the modulus.
                    while bytes > self.key_budget && keys.len() > 1 && share.modulus < 1 << 32 {
                        rest.push(share.split());
                        keys.retain(|k| share.holds(k));
                        bytes = keys.iter().map(|k| k.len() + KEY_OVERHEAD).sum();
                        metrics::counter!(crate::telemetry::metric::EQUALITY_KEY_SPLITS.name)
                            .increment(1);
                    }
                }
            }
        }
        Ok(KeySet {
            types,
            keys,
            share,
            bytes,
        })
    }
}

/// The positions a position delete file's batches list, by data file; only those of
/// `only` when given.
async fn read_positions(
    path: &str,
    mut batches: BoxStream<'static, FieldResult>,
    only: Option<&str>,
) -> Result<PositionsByFile, ChangeStoreError> {
    let mut by_file = PositionsByFile::new();
    while let Some((_, batch)) = batches.try_next().await? {
        let (Some(files), Some(positions)) = (&batch[0], &batch[1]) else {
            return Err(ChangeStoreError::Corrupt(format!(
                "position delete file {path} lacks its file_path or pos column"
            )));
        };
        let files = cast(files, &DataType::Utf8)?;
        let (files, positions) = (files.as_string::<i32>(), cast(positions, &DataType::Int64)?);
        let positions = positions.as_primitive::<Int64Type>();
        for i in 0..files.len() {
            if files.is_null(i) || positions.is_null(i) || positions.value(i) < 0 {
                continue;
            }
            let file = files.value(i);
            if only.is_some_and(|only| only != file) {
                continue;
            }
            by_file
                .entry(file.to_string())
                .or_default()
                .insert(positions.value(i) as u64);
        }
    }
    Ok(by_file)
}

/// Positions of the data file's rows whose `field_ids` columns are a key of `keys`.
async fn matching_positions(
    file_io: &FileIO,
    path: &str,
    field_ids: &[i32],
    keys: &KeySet,
    schema: &ReadSchema,
) -> Result<RoaringTreemap, ChangeStoreError> {
    let mut dead = RoaringTreemap::new();
    if keys.keys.is_empty() {
        return Ok(dead);
    }
    let converter = converter(&keys.types)?;
    let mut position = 0u64;
    let mut batches = FieldReader::open(file_io, path).await?.batches(field_ids)?;
    while let Some((rows, columns)) = batches.try_next().await? {
        // A column added after the file was written reads as its initial default or null.
        let columns = columns
            .into_iter()
            .zip(field_ids.iter().zip(&keys.types))
            .map(|(c, (id, t))| match c {
                Some(c) => Ok(c),
                None => match schema.default_column(*id, rows) {
                    Some(default) => default,
                    None => Ok(new_null_array(t, rows)),
                },
            })
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        let converted = converter.convert_columns(&casts(&columns, &keys.types)?)?;
        for (i, row) in converted.iter().enumerate() {
            if keys.keys.contains(row.as_ref()) {
                dead.insert(position + i as u64);
            }
        }
        position += rows as u64;
    }
    Ok(dead)
}

fn converter(types: &[DataType]) -> Result<RowConverter, ChangeStoreError> {
    Ok(RowConverter::new(
        types.iter().map(|t| SortField::new(t.clone())).collect(),
    )?)
}

fn casts(columns: &[ArrayRef], types: &[DataType]) -> Result<Vec<ArrayRef>, ChangeStoreError> {
    columns
        .iter()
        .zip(types)
        .map(|(c, t)| {
            if c.data_type() == t {
                Ok(c.clone())
            } else {
                Ok(cast(c, t)?)
            }
        })
        .collect()
}

/// The type both of two versions of a column's type read as (Iceberg's promotions).
fn wider(a: DataType, b: DataType) -> DataType {
    use DataType::*;
    match (&a, &b) {
        (Int32, Int64) | (Int64, Int32) => Int64,
        (Float32, Float64) | (Float64, Float32) => Float64,
        (Decimal128(p1, s), Decimal128(p2, _)) => Decimal128(*p1.max(p2), *s),
        (Utf8View | LargeUtf8, _) | (_, Utf8View | LargeUtf8) => Utf8,
        _ => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};
    use iceberg::io::FileIOBuilder;
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};

    use crate::catalog::{LocalPaths, TableStorageFactory};

    /// A Parquet file of `(id: long, tag: string)` rows with Iceberg field ids 1 and 2
    /// (`tag` only when `tags` is given), in batches of 1000 rows.
    fn write(path: &std::path::Path, ids: Vec<Option<i64>>, tags: Option<Vec<&str>>) {
        let field = |name: &str, t: DataType, id: i32| {
            Field::new(name, t, true)
                .with_metadata([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())].into())
        };
        let mut fields = vec![field("id", DataType::Int64, 1)];
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids))];
        if let Some(tags) = tags {
            fields.push(field("tag", DataType::Utf8, 2));
            columns.push(Arc::new(StringArray::from(tags)));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let file = std::fs::File::create(path).unwrap();
        let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        for start in (0..batch.num_rows()).step_by(1000) {
            let len = 1000.min(batch.num_rows() - start);
            writer.write(&batch.slice(start, len)).unwrap();
        }
        writer.close().unwrap();
    }

    #[tokio::test]
    async fn a_large_position_delete_file_is_read_for_each_data_file_by_its_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let delete = dir.path().join("positions.parquet");
        // Sorted by path, as writers write them: 3 data files, 4000 positions each, in row
        // groups of 1000 rows.
        let data = [
            "s3://w/t/data/a.parquet",
            "s3://w/t/data/b.parquet",
            "s3://w/t/data/c.parquet",
        ];
        let (mut paths, mut positions) = (Vec::new(), Vec::new());
        for (i, path) in data.iter().enumerate() {
            for p in 0..4000i64 {
                paths.push(*path);
                positions.push(p * 3 + i as i64);
            }
        }
        let field = |name: &str, t: DataType, id: i32| {
            Field::new(name, t, false)
                .with_metadata([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())].into())
        };
        let schema = Arc::new(Schema::new(vec![
            field("file_path", DataType::Utf8, FILE_PATH_ID),
            field("pos", DataType::Int64, POS_ID),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(paths)),
                Arc::new(Int64Array::from(positions)),
            ],
        )
        .unwrap();
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(1000))
            .build();
        let file = std::fs::File::create(&delete).unwrap();
        let mut writer = ArrowWriter::try_new(file, schema, Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let delete = delete.to_str().unwrap().to_string();
        let file_io = FileIOBuilder::new(Arc::new(TableStorageFactory::new(
            LocalPaths::unrestricted(),
        )))
        .build();

        // Read for one data file, only the row groups of that file are read.
        let reader = FieldReader::open(&file_io, &delete).await.unwrap();
        assert_eq!(
            reader.row_groups_bounding(FILE_PATH_ID, data[1].as_bytes()),
            [4, 5, 6, 7]
        );
        assert!(
            reader
                .row_groups_bounding(FILE_PATH_ID, b"s3://w/t/data/0.parquet")
                .is_empty()
        );

        let schema = iceberg::spec::Schema::builder().build().unwrap();
        let schema = ReadSchema::new(&schema).unwrap();
        let deletes = [DeleteRef::Positions { path: delete }];
        for (whole, rows) in [(true, WHOLE_POSITION_ROWS), (false, 100)] {
            let cache = DeleteCache::with_limits(CACHE_BYTES, rows);
            for (i, path) in data.iter().enumerate() {
                let data = DataFileRef {
                    path,
                    record_count: 12_000,
                };
                let dead = cache
                    .dead(&file_io, &data, &deletes, &schema)
                    .await
                    .unwrap();
                let expected: RoaringTreemap = (0..4000u64).map(|p| p * 3 + i as u64).collect();
                assert_eq!(dead, expected, "{path}, decoded whole: {whole}");
            }
            let kept = cache.positions.lock().unwrap().entries.len();
            assert_eq!(kept, usize::from(whole), "decoded whole: {whole}");
        }
    }

    #[tokio::test]
    async fn equality_keys_past_the_budget_are_applied_in_shares_with_the_same_result() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
        // Data: ids 0..20000, and a NULL id at the end.
        let mut ids: Vec<Option<i64>> = (0..20_000).map(Some).collect();
        ids.push(None);
        let tags: Vec<&str> = (0..ids.len()).map(|i| ["a", "b", "c"][i % 3]).collect();
        write(dir.path().join("data.parquet").as_path(), ids, Some(tags));
        // Two equality delete files: every 7th id, a NULL (matches only the NULL row), ids
        // the data file does not hold, and an id both files list.
        let first: Vec<Option<i64>> = (0..10_000).step_by(7).map(Some).chain([None]).collect();
        let second: Vec<Option<i64>> = (10_003..20_000)
            .step_by(7)
            .chain([7, 30_000, -1])
            .map(Some)
            .collect();
        write(&dir.path().join("eq-1.parquet"), first, None);
        write(&dir.path().join("eq-2.parquet"), second, None);

        let mut expected: RoaringTreemap = (0..20_000u64).step_by(7).collect();
        expected.insert(20_000);
        let schema = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "tag", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let schema = ReadSchema::new(&schema).unwrap();
        let file_io = FileIOBuilder::new(Arc::new(TableStorageFactory::new(
            LocalPaths::unrestricted(),
        )))
        .build();
        let data_path = path("data.parquet");
        let data = DataFileRef {
            path: &data_path,
            record_count: 20_001,
        };
        let deletes: Vec<DeleteRef> = ["eq-1.parquet", "eq-2.parquet"]
            .into_iter()
            .map(|name| DeleteRef::Equality {
                path: path(name),
                field_ids: vec![1],
            })
            .collect();
        for budget in [CACHE_BYTES, 4 << 10] {
            let cache = DeleteCache::with_limits(budget, WHOLE_POSITION_ROWS);
            let dead = cache
                .dead(&file_io, &data, &deletes, &schema)
                .await
                .unwrap();
            assert_eq!(dead, expected, "budget {budget}");
            // Again, from the cache where the keys fit in one share.
            let again = cache
                .dead(&file_io, &data, &deletes, &schema)
                .await
                .unwrap();
            assert_eq!(again, expected, "budget {budget}, second read");
        }

        // With the small budget the keys were split into shares that each fit.
        let cache = DeleteCache::with_limits(4 << 10, WHOLE_POSITION_ROWS);
        let (paths, mut rest) = (vec![path("eq-1.parquet")], Vec::new());
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let keys = cache
            .key_set(&file_io, &[1], &paths, Share::ALL, &mut rest)
            .await
            .unwrap();
        assert!(keys.share.modulus >= 16, "{:?}", keys.share);
        assert!(keys.bytes <= 4 << 10);
        assert_eq!(rest.len() as u32, keys.share.modulus.trailing_zeros());
        // The shares partition the keys: each of the 1430 keys lies in exactly one.
        let moduli: u64 = rest.iter().map(|s| keys.share.modulus / s.modulus).sum();
        assert_eq!(moduli + 1, keys.share.modulus);
    }

    #[test]
    fn the_cache_keeps_recent_entries_within_its_budget() {
        let mut cache: Bounded<String, u32> = Bounded::new(100);
        cache.insert("a".into(), Arc::new(1), 40);
        cache.insert("b".into(), Arc::new(2), 40);
        assert_eq!(cache.get("a").as_deref(), Some(&1));
        // Passing the budget empties it before the new entry goes in.
        cache.insert("c".into(), Arc::new(3), 40);
        assert_eq!((cache.get("a"), cache.get("b")), (None, None));
        assert_eq!(cache.get("c").as_deref(), Some(&3));
        assert_eq!(cache.bytes, 40);
        // One entry larger than the budget is used once and not kept.
        cache.insert("huge".into(), Arc::new(4), 101);
        assert_eq!(cache.get("huge"), None);
        assert_eq!(cache.get("c").as_deref(), Some(&3));
    }
}
