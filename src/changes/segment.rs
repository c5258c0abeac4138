//! Reading a row range of a segment, projected by Iceberg field id onto the schema its
//! change set was published with (columns missing from an older file read as null).
//! Must not reach: `changelog`, `store`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array, new_null_array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use arrow::error::ArrowError;
use futures::TryStreamExt;
use iceberg::spec::{Literal, PrimitiveLiteral};
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
use parquet::arrow::{PARQUET_FIELD_ID_META_KEY, ProjectionMask};
use parquet::file::metadata::PageIndexPolicy;
use roaring::RoaringTreemap;

use super::deleted_rows;
use super::store::{ChangeStore, ChangeStoreError};
use crate::change::{LINEAGE_FIELD_IDS, lineage_fields};

/// Footers (and deleted rows) kept in memory; a page read then costs only the data it
/// needs.
const CACHE_ENTRIES: usize = 1024;

/// What a reader keeps of the segments it read, by key: at most [`CACHE_ENTRIES`],
/// emptied when full (published segments never change, so an entry is never stale).
#[derive(Debug)]
struct SegmentCache<V>(Mutex<HashMap<String, V>>);

impl<V> Default for SegmentCache<V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<V: Clone> SegmentCache<V> {
    fn get(&self, key: &str) -> Option<V> {
        self.0.lock().expect("segment cache").get(key).cloned()
    }

    fn insert(&self, key: &str, value: V) {
        let mut entries = self.0.lock().expect("segment cache");
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(key.to_string(), value);
    }
}

/// The Iceberg fields a segment is read as: ids, names and Arrow types, in order.
#[derive(Clone, Debug)]
pub struct ReadSchema {
    /// Field id of each column.
    pub field_ids: Vec<i32>,
    /// The Arrow schema the iceberg crate derives for the Iceberg schema.
    pub arrow: SchemaRef,
    /// Each column's `initial-default` (v3) as one value of its Arrow type: what a file
    /// written before the column was added reads as (null without one).
    pub defaults: Vec<Option<ArrayRef>>,
    /// Whether the row lineage columns follow the table's, as the file materialized them
    /// (null where it did not: see `changelog::row_ids::inherit`).
    pub lineage: bool,
}

impl ReadSchema {
    /// The read schema of an Iceberg schema's top-level fields.
    pub fn new(schema: &iceberg::spec::Schema) -> Result<Self, iceberg::Error> {
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?);
        let fields = schema.as_struct().fields();
        let field_ids = fields.iter().map(|f| f.id).collect();
        let defaults = fields
            .iter()
            .zip(arrow.fields())
            .map(|(f, a)| match &f.initial_default {
                Some(literal) => default_value(literal, a.data_type()).map(Some),
                None => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            field_ids,
            arrow,
            defaults,
            lineage: false,
        })
    }

    /// This schema, followed by the row lineage columns if `lineage`.
    pub fn with_lineage(self, lineage: bool) -> Self {
        Self { lineage, ..self }
    }

    /// `rows` copies of the initial default of field `id`, if it has one.
    pub fn default_column(&self, id: i32, rows: usize) -> Option<Result<ArrayRef, ArrowError>> {
        let i = self.field_ids.iter().position(|f| *f == id)?;
        let value = self.defaults[i].as_ref()?;
        Some(arrow::compute::take(
            value,
            &UInt32Array::from(vec![0u32; rows]),
            None,
        ))
    }

    /// The schema of batches [`conform`] produces: the same columns, all nullable and
    /// without field metadata, then the lineage columns if read.
    pub fn batch_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .arrow
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect();
        if self.lineage {
            fields.extend(lineage_fields());
        }
        Arc::new(ArrowSchema::new(fields))
    }

    /// The schema of a Parquet file holding rows of this schema as a data file would:
    /// its columns with their Iceberg field ids, lineage under Iceberg's reserved ids.
    pub fn file_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .arrow
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        if self.lineage {
            for (field, id) in lineage_fields().into_iter().zip(LINEAGE_FIELD_IDS) {
                let id = HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]);
                fields.push(field.with_metadata(id));
            }
        }
        Arc::new(ArrowSchema::new(fields))
    }

    /// The field ids read from files, lineage included.
    fn read_field_ids(&self) -> impl Iterator<Item = i32> + '_ {
        let lineage: &[i32] = if self.lineage {
            &LINEAGE_FIELD_IDS
        } else {
            &[]
        };
        self.field_ids.iter().chain(lineage).copied()
    }
}

/// Reads segments from the change store, caching their footers and deleted rows.
#[derive(Clone, Debug)]
pub struct SegmentReader {
    store: ChangeStore,
    footers: Arc<SegmentCache<ArrowReaderMetadata>>,
    deleted: Arc<SegmentCache<Arc<RoaringTreemap>>>,
}

/// A segment as the change-set index records it.
#[derive(Clone, Copy, Debug)]
pub struct SegmentFile<'a> {
    /// Key of the Parquet file in the change store.
    pub key: &'a str,
    /// Its size in bytes.
    pub size: u64,
    /// Key of the file rows that are not events, if some are not.
    pub deleted_rows: Option<&'a str>,
}

impl SegmentReader {
    /// A reader over `store`.
    pub fn new(store: ChangeStore) -> Self {
        Self {
            store,
            footers: Default::default(),
            deleted: Default::default(),
        }
    }

    /// Events `offset .. offset + count` of `segment` as batches under `schema`, or as
    /// written when `schema` is `None` (segments icefeed wrote itself).
    pub async fn read(
        &self,
        segment: SegmentFile<'_>,
        schema: Option<&ReadSchema>,
        offset: usize,
        count: usize,
    ) -> Result<Vec<RecordBatch>, ChangeStoreError> {
        match self.read_rows(segment, schema, offset, count).await {
            // Parquet wraps the store's errors in its own: ask the store what happened.
            Err(e) => {
                let (objects, path) = self.store.object(segment.key);
                Err(match objects.head(&path).await {
                    Err(object_store::Error::NotFound { .. }) => {
                        ChangeStoreError::Missing(segment.key.into())
                    }
                    // The store itself fails (unreachable, refusing): not this segment.
                    Err(store) => store.into(),
                    Ok(_) => e,
                })
            }
            read => read,
        }
    }

    async fn read_rows(
        &self,
        segment: SegmentFile<'_>,
        schema: Option<&ReadSchema>,
        offset: usize,
        count: usize,
    ) -> Result<Vec<RecordBatch>, ChangeStoreError> {
        let key = segment.key;
        let (objects, path) = self.store.object(key);
        let mut reader = ParquetObjectReader::new(objects, path).with_file_size(segment.size);
        let metadata = match self.footers.get(key) {
            Some(m) => m,
            None => {
                // The offset index locates every data page: a read then fetches and
                // decompresses only the pages that hold its rows, instead of every page
                // from the start of the row group.
                let options =
                    ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Optional);
                let m = ArrowReaderMetadata::load_async(&mut reader, options).await?;
                self.footers.insert(key, m.clone());
                m
            }
        };
        let mask = match schema {
            Some(schema) => projection(&metadata, schema),
            None => ProjectionMask::all(),
        };
        let (first, selectors) = self.file_rows(segment, offset, count).await?;
        let span: usize = selectors.iter().map(|s| s.row_count).sum();

        // Only the row groups that overlap the file rows are read at all.
        let mut groups = Vec::new();
        let mut skip_in_groups = 0usize;
        let mut start = 0usize;
        for (i, rg) in metadata.metadata().row_groups().iter().enumerate() {
            let rows = rg.num_rows() as usize;
            let end = start + rows;
            if end > first && start < first + span {
                if groups.is_empty() {
                    skip_in_groups = first - start;
                }
                groups.push(i);
            }
            start = end;
        }
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let selection = RowSelection::from(
            std::iter::once(RowSelector::skip(skip_in_groups))
                .chain(selectors)
                .collect::<Vec<_>>(),
        );
        let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata)
            .with_projection(mask)
            .with_row_groups(groups)
            .with_row_selection(selection)
            .with_batch_size(count.clamp(1, 8192))
            .build()?;
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        match schema {
            Some(schema) => batches.iter().map(|b| conform(b, schema)).collect(),
            None => Ok(batches),
        }
    }

    /// The positions in its file of events `offset .. offset + count` of an `inserts`
    /// segment (a copied data file, some of whose rows may not be events).
    pub async fn positions(
        &self,
        segment: SegmentFile<'_>,
        offset: usize,
        count: usize,
    ) -> Result<Vec<u64>, ChangeStoreError> {
        let (mut row, selectors) = self.file_rows(segment, offset, count).await?;
        let mut positions = Vec::with_capacity(count);
        for selector in selectors {
            let rows = selector.row_count;
            if !selector.skip {
                positions.extend((row..row + rows).map(|r| r as u64));
            }
            row += rows;
        }
        Ok(positions)
    }

    /// The file rows of events `offset .. offset + count` of `segment`: the first, and
    /// a selection from it that skips the rows that are not events.
    async fn file_rows(
        &self,
        segment: SegmentFile<'_>,
        offset: usize,
        count: usize,
    ) -> Result<(usize, Vec<RowSelector>), ChangeStoreError> {
        Ok(match segment.deleted_rows {
            Some(deleted) => {
                let deleted = self.deleted_rows(deleted).await?;
                let (first, selectors) =
                    deleted_rows::file_rows(&deleted, offset as u64, count as u64);
                (first as usize, selectors)
            }
            None => (offset, vec![RowSelector::select(count)]),
        })
    }

    /// The deleted rows stored at `key`, read once per node.
    async fn deleted_rows(&self, key: &str) -> Result<Arc<RoaringTreemap>, ChangeStoreError> {
        if let Some(deleted) = self.deleted.get(key) {
            return Ok(deleted);
        }
        let bytes = self.store.get(key).await?;
        let deleted = Arc::new(
            deleted_rows::decode(&bytes)
                .map_err(|e| ChangeStoreError::Corrupt(format!("deleted rows {key}: {e}")))?,
        );
        self.deleted.insert(key, deleted.clone());
        Ok(deleted)
    }
}

/// The columns of a Parquet file that hold the read schema's fields, by field id.
pub fn projection(metadata: &ArrowReaderMetadata, schema: &ReadSchema) -> ProjectionMask {
    let roots: Vec<usize> = schema
        .read_field_ids()
        .filter_map(|id| column_of(metadata.schema(), id))
        .collect();
    ProjectionMask::roots(metadata.metadata().file_metadata().schema_descr(), roots)
}

/// Index of the top-level column with Iceberg field id `id`.
pub(crate) fn column_of(schema: &ArrowSchema, id: i32) -> Option<usize> {
    let id = id.to_string();
    schema
        .fields()
        .iter()
        .position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id))
}

/// One value of Arrow type `target` holding a primitive `initial-default`.
fn default_value(literal: &Literal, target: &DataType) -> Result<ArrayRef, iceberg::Error> {
    let unsupported = || {
        iceberg::Error::new(
            iceberg::ErrorKind::FeatureUnsupported,
            format!("initial-default {literal:?} for a column of type {target}"),
        )
    };
    let Literal::Primitive(value) = literal else {
        return Err(unsupported());
    };
    let natural: ArrayRef = match (value, target) {
        (PrimitiveLiteral::Int128(v), DataType::Decimal128(p, s)) => Arc::new(
            Decimal128Array::from(vec![*v])
                .with_precision_and_scale(*p, *s)
                .map_err(|_| unsupported())?,
        ),
        (PrimitiveLiteral::UInt128(v), DataType::FixedSizeBinary(16)) => Arc::new(
            FixedSizeBinaryArray::try_from_iter(std::iter::once(v.to_be_bytes()))
                .map_err(|_| unsupported())?,
        ),
        (PrimitiveLiteral::Boolean(v), _) => Arc::new(BooleanArray::from(vec![*v])),
        (PrimitiveLiteral::Int(v), _) => Arc::new(Int32Array::from(vec![*v])),
        (PrimitiveLiteral::Long(v), _) => Arc::new(Int64Array::from(vec![*v])),
        (PrimitiveLiteral::Float(v), _) => Arc::new(Float32Array::from(vec![v.0])),
        (PrimitiveLiteral::Double(v), _) => Arc::new(Float64Array::from(vec![v.0])),
        (PrimitiveLiteral::String(v), _) => Arc::new(StringArray::from(vec![v.as_str()])),
        (PrimitiveLiteral::Binary(v), DataType::FixedSizeBinary(_)) => Arc::new(
            FixedSizeBinaryArray::try_from_iter(std::iter::once(v)).map_err(|_| unsupported())?,
        ),
        (PrimitiveLiteral::Binary(v), _) => Arc::new(BinaryArray::from(vec![v.as_slice()])),
        _ => return Err(unsupported()),
    };
    if natural.data_type() == target {
        return Ok(natural);
    }
    // Dates are days, times and timestamps ticks of the Arrow type's unit: casts of the
    // integer keep the value.
    cast(&natural, target).map_err(|_| unsupported())
}

/// Arranges a batch read from a file into the read schema's column order: promoted
/// primitive types are cast (int → long, float → double), absent columns become their
/// initial default or nulls.
pub fn conform(batch: &RecordBatch, schema: &ReadSchema) -> Result<RecordBatch, ChangeStoreError> {
    let rows = batch.num_rows();
    let mut fields = Vec::with_capacity(schema.field_ids.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.field_ids.len());
    for (target, id) in schema.arrow.fields().iter().zip(&schema.field_ids) {
        let column = match column_of(batch.schema_ref(), *id) {
            Some(i) => {
                let column = batch.column(i);
                if column.data_type() == target.data_type() || is_nested(column.data_type()) {
                    column.clone()
                } else {
                    cast(column, target.data_type())?
                }
            }
            None => match schema.default_column(*id, rows) {
                Some(column) => column?,
                None => new_null_array(target.data_type(), rows),
            },
        };
        fields.push(Field::new(target.name(), column.data_type().clone(), true));
        columns.push(column);
    }
    if schema.lineage {
        for (field, id) in lineage_fields().into_iter().zip(LINEAGE_FIELD_IDS) {
            let column = match column_of(batch.schema_ref(), id) {
                Some(i) => cast(batch.column(i), &DataType::Int64)?,
                None => new_null_array(&DataType::Int64, rows),
            };
            fields.push(field);
            columns.push(column);
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(ArrowSchema::new(fields)),
        columns,
    )?)
}

/// Nested columns keep the file's child names (`element`, `item`, `key_value`, …).
fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _)
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A segment of one Int64 column holding 0..rows, in data pages of 100 rows and row
    /// groups of `group_rows`.
    async fn segment(store: &ChangeStore, key: &str, rows: i64, group_rows: usize) -> u64 {
        let schema = Arc::new(ArrowSchema::new(vec![Field::new(
            "n",
            DataType::Int64,
            false,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(100)
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let size = out.len() as u64;
        store.put(key, Bytes::from(out)).await.unwrap();
        size
    }

    #[tokio::test]
    async fn ranges_inside_a_row_group_read_exactly_their_rows_by_page() {
        let store = ChangeStore::open("memory://", &BTreeMap::new()).unwrap();
        let size = segment(&store, "s.parquet", 1000, 1000).await;
        let reader = SegmentReader::new(store);
        for (offset, count) in [
            (0, 1),
            (0, 1000),
            (250, 300),
            (399, 2),
            (900, 100),
            (999, 1),
        ] {
            let file = SegmentFile {
                key: "s.parquet",
                size,
                deleted_rows: None,
            };
            let batches = reader.read(file, None, offset, count).await.unwrap();
            let values: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            let expected: Vec<i64> = (offset as i64..(offset + count) as i64).collect();
            assert_eq!(values, expected, "offset {offset}, count {count}");
        }
        let footer = reader.footers.get("s.parquet").expect("cached footer");
        let pages = footer
            .metadata()
            .offset_index()
            .expect("the offset index is loaded with the footer")[0][0]
            .page_locations()
            .len();
        assert_eq!(pages, 10, "the test segment has pages of 100 rows");
    }

    #[tokio::test]
    async fn deleted_rows_are_skipped_across_pages_and_row_groups() {
        let store = ChangeStore::open("memory://", &BTreeMap::new()).unwrap();
        let size = segment(&store, "s.parquet", 1000, 400).await;
        // Every third row, and rows 380..450 (the end of a row group, a whole page and
        // the start of the next group).
        let mut deleted: RoaringTreemap = (0..1000u64).step_by(3).collect();
        deleted.insert_range(380..450);
        let key = crate::changes::key::deleted_rows_of("s.parquet");
        store
            .put(&key, deleted_rows::encode(&deleted))
            .await
            .unwrap();
        let live: Vec<i64> = (0..1000).filter(|r| !deleted.contains(*r as u64)).collect();
        let reader = SegmentReader::new(store);
        let file = SegmentFile {
            key: "s.parquet",
            size,
            deleted_rows: Some(&key),
        };
        for (offset, count) in [
            (0, 1),
            (0, live.len()),
            (240, 30),
            (250, 300),
            (live.len() - 1, 1),
        ] {
            let batches = reader.read(file, None, offset, count).await.unwrap();
            let values: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            assert_eq!(
                values,
                live[offset..offset + count],
                "offset {offset}, count {count}"
            );
        }
    }

    #[test]
    fn columns_a_file_predates_read_as_their_initial_default() {
        use iceberg::spec::{Literal, NestedField, PrimitiveType, Schema, Type};
        let field = |id, name: &str, t| NestedField::optional(id, name, Type::Primitive(t));
        let schema = Schema::builder()
            .with_fields([
                field(1, "id", PrimitiveType::Long).into(),
                field(2, "tier", PrimitiveType::String)
                    .with_initial_default(Literal::string("basic"))
                    .into(),
                field(3, "day", PrimitiveType::Date)
                    .with_initial_default(Literal::date(19_000))
                    .into(),
                field(4, "note", PrimitiveType::String).into(),
            ])
            .build()
            .unwrap();
        let read = ReadSchema::new(&schema).unwrap();
        let mut metadata = std::collections::HashMap::new();
        metadata.insert(PARQUET_FIELD_ID_META_KEY.to_string(), "1".to_string());
        let file_schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false).with_metadata(metadata),
        ]));
        let batch = RecordBatch::try_new(file_schema, vec![Arc::new(Int64Array::from(vec![1, 2]))])
            .unwrap();
        let out = conform(&batch, &read).unwrap();
        assert_eq!(
            out.column(1).as_string::<i32>().iter().collect::<Vec<_>>(),
            [Some("basic"); 2]
        );
        assert_eq!(
            out.column(2)
                .as_primitive::<arrow::datatypes::Date32Type>()
                .values()
                .to_vec(),
            [19_000, 19_000]
        );
        assert_eq!(out.column(3).null_count(), 2);
    }
}
