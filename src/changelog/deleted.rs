//! The positions of a data file that a set of delete files removes: deletion vectors
//! (range-read from their Puffin file), position delete files (their rows for this data
//! file) and equality deletes (the data file's rows whose equality columns, read by
//! field id, equal a delete row; null equals null, as the spec says and Arrow's row
//! format encodes). Decoded delete files are cached per map task: a partition-scoped
//! position file or an equality delete file serves many data files.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{OwnedRow, RowConverter, SortField};
use futures::TryStreamExt;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileIO;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use roaring::RoaringTreemap;

use super::deletes::DeleteRef;
use super::vector;
use crate::changes::segment::column_of;
use crate::changes::{ChangeStoreError, ReadSchema};

/// Field ids of a position delete file's columns (Iceberg spec, reserved ids).
const FILE_PATH_ID: i32 = 2_147_483_546;
const POS_ID: i32 = 2_147_483_545;

/// How much decoded delete data one [`DeleteCache`] keeps (an estimate in bytes).
const CACHE_BYTES: usize = 256 << 20;

/// Decoded delete files, shared by the reads of one task or export: what the next data
/// files likely need, up to [`CACHE_BYTES`] — not everything it ever decoded.
#[derive(Clone, Default)]
pub struct DeleteCache {
    positions: Arc<Mutex<Bounded<String, PositionsByFile>>>,
    equality: Arc<Mutex<Bounded<Vec<String>, KeySet>>>,
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

/// The delete rows of equality delete files sharing one set of field ids.
struct KeySet {
    types: Vec<DataType>,
    keys: HashSet<OwnedRow>,
}

/// The data file a set of deletes is applied to.
pub struct DataFileRef<'a> {
    pub path: &'a str,
    pub record_count: u64,
}

impl DeleteCache {
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
                    let by_file = self.position_file(file_io, path).await?;
                    if let Some(positions) = by_file.get(data.path) {
                        let mut positions = positions.clone();
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
            let keys = self.key_set(file_io, field_ids, paths).await?;
            dead |= matching_positions(file_io, data.path, field_ids, &keys, schema).await?;
        }
        Ok(dead)
    }

    /// A position delete file's positions by data file path.
    async fn position_file(
        &self,
        file_io: &FileIO,
        path: &str,
    ) -> Result<Arc<PositionsByFile>, ChangeStoreError> {
        if let Some(hit) = self.positions.lock().expect("cache").get(path) {
            return Ok(hit.clone());
        }
        let mut by_file = PositionsByFile::new();
        for (_, batch) in read_fields(file_io, path, &[FILE_PATH_ID, POS_ID]).await? {
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
                by_file
                    .entry(files.value(i).to_string())
                    .or_default()
                    .insert(positions.value(i) as u64);
            }
        }
        let bytes = by_file
            .iter()
            .map(|(file, positions)| file.len() + positions.serialized_size())
            .sum();
        let by_file = Arc::new(by_file);
        self.positions
            .lock()
            .expect("cache")
            .insert(path.to_string(), by_file.clone(), bytes);
        Ok(by_file)
    }

    /// The delete rows of equality delete files with the same `field_ids`.
    async fn key_set(
        &self,
        file_io: &FileIO,
        field_ids: &[i32],
        mut paths: Vec<&str>,
    ) -> Result<Arc<KeySet>, ChangeStoreError> {
        paths.sort_unstable();
        let cache_key: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        if let Some(hit) = self.equality.lock().expect("cache").get(&cache_key) {
            return Ok(hit.clone());
        }
        let mut batches = Vec::new();
        for path in &paths {
            for (_, batch) in read_fields(file_io, path, field_ids).await? {
                if let Some(i) = batch.iter().position(Option::is_none) {
                    return Err(ChangeStoreError::Corrupt(format!(
                        "equality delete file {path} lacks the column of field id {}",
                        field_ids[i]
                    )));
                }
                batches.push(batch.into_iter().flatten().collect::<Vec<ArrayRef>>());
            }
        }
        // Types may differ between files written before and after a promotion.
        let types: Vec<DataType> = (0..field_ids.len())
            .map(|i| {
                batches
                    .iter()
                    .map(|b| b[i].data_type().clone())
                    .reduce(wider)
                    .unwrap_or(DataType::Null)
            })
            .collect();
        let converter = converter(&types)?;
        let mut keys = HashSet::new();
        for columns in &batches {
            let rows = converter.convert_columns(&casts(columns, &types)?)?;
            keys.extend(rows.iter().map(|r| r.owned()));
        }
        // A row's bytes and its set entry.
        let bytes = keys.iter().map(|k| k.as_ref().len() + 48).sum();
        let set = Arc::new(KeySet { types, keys });
        self.equality
            .lock()
            .expect("cache")
            .insert(cache_key, set.clone(), bytes);
        Ok(set)
    }
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
    for (rows, columns) in read_fields(file_io, path, field_ids).await? {
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
            if keys.keys.contains(&row.owned()) {
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

/// Columns of a Parquet file by Iceberg field id, a batch at a time: per batch, its rows
/// and one column per id, `None` where the file has no column with that id.
async fn read_fields(
    file_io: &FileIO,
    path: &str,
    field_ids: &[i32],
) -> Result<Vec<(usize, Vec<Option<ArrayRef>>)>, ChangeStoreError> {
    let input = file_io.new_input(path)?;
    let mut file = ArrowFileReader::new(input.metadata().await?, Box::new(input.reader().await?));
    let metadata = ArrowReaderMetadata::load_async(&mut file, ArrowReaderOptions::new()).await?;
    let roots: Vec<usize> = field_ids
        .iter()
        .filter_map(|id| column_of(metadata.schema(), *id))
        .collect();
    let mask = ProjectionMask::roots(metadata.metadata().file_metadata().schema_descr(), roots);
    let rows = metadata.metadata().file_metadata().num_rows();
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchStreamBuilder::new_with_metadata(file, metadata)
            .with_projection(mask)
            .with_batch_size(64 * 1024)
            .build()?
            .try_collect()
            .await?;
    if batches.is_empty() && rows > 0 {
        return Err(ChangeStoreError::Corrupt(format!("{path}: no rows read")));
    }
    Ok(batches
        .iter()
        .map(|b| {
            let columns = field_ids
                .iter()
                .map(|id| column_of(b.schema_ref(), *id).map(|i| b.column(i).clone()))
                .collect();
            (b.num_rows(), columns)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
