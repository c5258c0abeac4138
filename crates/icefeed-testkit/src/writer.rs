//! Writes real Iceberg tables with the iceberg crate's own writers, so the demo, the
//! integration tests and the benchmark read files exactly as another engine would see them.
//! Must not reach: [`crate::rewrite`] and [`crate::demo`], which build on it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::spec::{DataFile, DataFileFormat, PartitionKey, Schema, Struct, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, NamespaceIdent, TableCreation, TableIdent,
};
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle,
    SqlCatalog, SqlCatalogBuilder,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Tunables for [`append`]; the default writes one file per partition.
#[derive(Debug, Clone, Default)]
pub struct AppendOptions {
    /// Upper bound on rows per data file, so tests can force several files per snapshot.
    pub max_rows_per_file: Option<usize>,
    /// Extra entries for the snapshot summary (e.g. to tag benchmark commits).
    pub snapshot_properties: HashMap<String, String>,
    /// How the Parquet files are laid out; `None`: zstd, the parquet crate's defaults
    /// otherwise.
    pub writer_properties: Option<WriterProperties>,
}

/// Opens (creating when missing) the sqlite-backed catalog at `<dir>/catalog.db` with its
/// warehouse at `<dir>/warehouse`.
pub async fn open_sql_catalog(dir: &Path, catalog_name: &str) -> iceberg::Result<SqlCatalog> {
    let (_, warehouse) = catalog_paths(dir)?;
    std::fs::create_dir_all(&warehouse).map_err(io_err)?;
    let warehouse = warehouse.display().to_string();
    open_sql_catalog_at(dir, catalog_name, &warehouse, &HashMap::new()).await
}

/// Opens (creating when missing) the sqlite-backed catalog at `<dir>/catalog.db` with its
/// warehouse at `warehouse`, a local directory or an object-store URL reached with the
/// FileIO properties `file_io` (`s3.endpoint`, `s3.access-key-id`, …).
pub async fn open_sql_catalog_at(
    dir: &Path,
    catalog_name: &str,
    warehouse: &str,
    file_io: &HashMap<String, String>,
) -> iceberg::Result<SqlCatalog> {
    let (db, _) = catalog_paths(dir)?;
    let remote = warehouse.contains("://") && !warehouse.starts_with("file:");
    if remote {
        let mut known = REMOTE_WAREHOUSES.lock().expect("remote warehouses");
        known.push((format!("{}/", warehouse.trim_end_matches('/')), db.clone()));
    }
    // A table's files lie below its catalog's warehouse, so one storage serves them all.
    let storage: Arc<dyn StorageFactory> = if remote {
        Arc::new(OpenDalResolvingStorageFactory::new())
    } else {
        Arc::new(LocalFsStorageFactory)
    };
    // An empty file is a valid sqlite database; creating it here keeps the URI free of
    // sqlx-only options (`?mode=rwc`) so the same string works for other clients.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&db)
        .map_err(io_err)?;
    let mut props = file_io.clone();
    props.extend([
        (
            SQL_CATALOG_PROP_URI.to_string(),
            format!("sqlite:{}", db.display()),
        ),
        (
            SQL_CATALOG_PROP_WAREHOUSE.to_string(),
            warehouse.to_string(),
        ),
        // The default `$1` style is Postgres-only.
        (
            SQL_CATALOG_PROP_BIND_STYLE.to_string(),
            SqlBindStyle::QMark.to_string(),
        ),
    ]);
    SqlCatalogBuilder::default()
        .with_storage_factory(storage)
        .load(catalog_name, props)
        .await
}

/// Object-store warehouses opened in this process, with the `catalog.db` of each: a
/// table's location on an object store does not lead to its catalog as a local one does.
static REMOTE_WAREHOUSES: std::sync::Mutex<Vec<(String, std::path::PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

/// The `catalog.db` of the object-store warehouse opened here that holds `location`.
pub fn remote_warehouse_catalog(location: &str) -> Option<std::path::PathBuf> {
    let known = REMOTE_WAREHOUSES.lock().expect("remote warehouses");
    known
        .iter()
        .find(|(warehouse, _)| location.starts_with(warehouse.as_str()))
        .map(|(_, db)| db.clone())
}

/// Absolute `(catalog.db, warehouse)` paths under `dir`, as clients must be given them.
pub fn catalog_paths(dir: &Path) -> iceberg::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = std::path::absolute(dir).map_err(io_err)?;
    Ok((dir.join("catalog.db"), dir.join("warehouse")))
}

/// Creates `ident` (and its namespace when missing) with a v2 table layout.
pub async fn create_table(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    schema: Schema,
    partition: Option<UnboundPartitionSpec>,
) -> iceberg::Result<Table> {
    ensure_namespace(catalog, ident.namespace()).await?;
    let creation = TableCreation::builder()
        .name(ident.name().to_string())
        .schema(schema)
        .partition_spec_opt(partition)
        .build();
    catalog.create_table(ident.namespace(), creation).await
}

async fn ensure_namespace(catalog: &dyn Catalog, ns: &NamespaceIdent) -> iceberg::Result<()> {
    if catalog.namespace_exists(ns).await? {
        return Ok(());
    }
    match catalog.create_namespace(ns, HashMap::new()).await {
        // Another writer may have created it between the check and the create.
        Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Writes `batches` as Parquet files (one partition per file) and commits them as a single
/// `fast_append` snapshot; returns the table as reloaded from the catalog.
pub async fn append(
    catalog: &dyn Catalog,
    table: &Table,
    batches: &[RecordBatch],
    options: &AppendOptions,
) -> iceberg::Result<Table> {
    let data_files = write_data_files(table, batches, options).await?;
    let tx = Transaction::new(table);
    let action = tx
        .fast_append()
        // File names carry a fresh UUID, so the duplicate check (which reads every
        // manifest of the table) would only slow appends down as history grows.
        .with_check_duplicate(false)
        .set_snapshot_properties(options.snapshot_properties.clone())
        .add_data_files(data_files);
    let tx = action.apply(tx)?;
    tx.commit(catalog).await?;
    catalog.load_table(table.identifier()).await
}

/// Writes the data files of one append without committing them.
pub async fn write_data_files(
    table: &Table,
    batches: &[RecordBatch],
    options: &AppendOptions,
) -> iceberg::Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().clone();

    // Group rows by partition value so that every data file holds a single partition.
    let mut groups: Vec<(Option<PartitionKey>, Vec<RecordBatch>)> = Vec::new();
    if spec.is_unpartitioned() {
        groups.push((None, batches.to_vec()));
    } else {
        let splitter =
            RecordBatchPartitionSplitter::try_new_with_computed_values(schema.clone(), spec)?;
        let mut index: HashMap<Struct, usize> = HashMap::new();
        for batch in batches.iter().filter(|b| b.num_rows() > 0) {
            for (key, part) in splitter.split(batch)? {
                let slot = *index.entry(key.data().clone()).or_insert_with(|| {
                    groups.push((Some(key.clone()), Vec::new()));
                    groups.len() - 1
                });
                groups[slot].1.push(part);
            }
        }
    }

    let props = options.writer_properties.clone().unwrap_or_else(|| {
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build()
    });
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        ParquetWriterBuilder::new(props, schema),
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        // A per-append UUID keeps names unique across appends and concurrent writers.
        DefaultFileNameGenerator::new(
            format!("00000-{}", uuid::Uuid::now_v7()),
            None,
            DataFileFormat::Parquet,
        ),
    );

    // One job per output file; a fresh writer per job closes its file, so jobs never share one.
    let mut jobs = Vec::new();
    for (key, parts) in groups {
        let rows: usize = parts.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            continue;
        }
        let chunk = options.max_rows_per_file.unwrap_or(rows).max(1);
        let all = concat_batches(&parts[0].schema(), &parts).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "batches differ in schema").with_source(e)
        })?;
        for offset in (0..rows).step_by(chunk) {
            jobs.push((key.clone(), all.slice(offset, chunk.min(rows - offset))));
        }
    }

    // Parquet encoding is CPU-bound: spawned tasks let a multi-threaded runtime use every core.
    let parallelism = std::thread::available_parallelism().map_or(2, |n| n.get());
    let written: Vec<Vec<DataFile>> =
        futures::stream::iter(jobs.into_iter().map(|(key, batch)| {
            let rolling = rolling.clone();
            tokio::spawn(async move {
                let mut writer = DataFileWriterBuilder::new(rolling).build(key).await?;
                writer.write(batch).await?;
                writer.close().await
            })
        }))
        .buffer_unordered(parallelism)
        .map(|joined| {
            joined.map_err(|e| {
                Error::new(ErrorKind::Unexpected, "writer task failed").with_source(e)
            })?
        })
        .try_collect()
        .await?;
    Ok(written.into_iter().flatten().collect())
}

fn io_err(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Unexpected, "local file system error").with_source(e)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;
    use iceberg::spec::{NestedField, PrimitiveType, Type};

    use super::*;
    use crate::taxi::{self, TaxiGenerator};

    async fn read_ids(table: &Table) -> Vec<i64> {
        let stream = table.scan().select(["trip_id"]).build().unwrap();
        let batches: Vec<RecordBatch> = stream
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        ids.sort_unstable();
        ids
    }

    fn file_count(table: &Table) -> usize {
        let summary = table.metadata().current_snapshot().unwrap().summary();
        summary.additional_properties["total-data-files"]
            .parse()
            .unwrap()
    }

    #[tokio::test]
    async fn partitioned_appends_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = open_sql_catalog(dir.path(), "test").await.unwrap();
        let ident = TableIdent::from_strs(["ns", "trips"]).unwrap();
        let table = create_table(
            &catalog,
            &ident,
            taxi::schema(),
            Some(taxi::partition_spec()),
        )
        .await
        .unwrap();

        let mut generator = TaxiGenerator::new(7, 1, 3);
        let options = AppendOptions {
            max_rows_per_file: Some(100),
            snapshot_properties: HashMap::from([("origin".into(), "test".into())]),
            ..Default::default()
        };
        let table = append(&catalog, &table, &[generator.next_batch(500)], &options)
            .await
            .unwrap();
        let first_files = file_count(&table);
        // Three days of rows, at most 100 rows per file: at least 5 files, each one partition.
        assert!(first_files >= 5, "{first_files} files");
        let table = append(
            &catalog,
            &table,
            &[generator.next_batch(250), generator.next_batch(50)],
            &AppendOptions::default(),
        )
        .await
        .unwrap();

        assert_eq!(table.metadata().snapshots().len(), 2);
        let snapshot = table.metadata().current_snapshot().unwrap();
        assert_eq!(
            snapshot.summary().additional_properties["total-records"],
            "800"
        );
        // Without a row limit the second append writes exactly one file per day.
        assert_eq!(file_count(&table), first_files + 3);
        assert_eq!(read_ids(&table).await, (1..=800).collect::<Vec<_>>());

        let tasks: Vec<_> = table
            .scan()
            .build()
            .unwrap()
            .plan_files()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(tasks.len(), file_count(&table));
        for task in &tasks {
            assert!(task.record_count.unwrap() <= 300);
            assert!(
                task.data_file_path.contains("tpep_pickup_datetime_day="),
                "{}",
                task.data_file_path
            );
        }
    }

    #[tokio::test]
    async fn unpartitioned_appends_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = open_sql_catalog(dir.path(), "test").await.unwrap();
        let schema = Schema::builder()
            .with_schema_id(0)
            .with_identifier_field_ids([1])
            .with_fields([
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let batch = |ids: std::ops::Range<i64>| {
            let names: Vec<Option<String>> = ids
                .clone()
                .map(|i| (i % 3 != 0).then(|| format!("n{i}")))
                .collect();
            RecordBatch::try_new(
                arrow_schema.clone(),
                vec![
                    Arc::new(arrow::array::Int64Array::from_iter_values(ids)),
                    Arc::new(arrow::array::StringArray::from(names)),
                ],
            )
            .unwrap()
        };
        let ident = TableIdent::from_strs(["plain", "t"]).unwrap();
        let table = create_table(&catalog, &ident, schema.clone(), None)
            .await
            .unwrap();
        let limit = AppendOptions {
            max_rows_per_file: Some(4),
            ..Default::default()
        };
        let table = append(&catalog, &table, &[batch(0..10)], &limit)
            .await
            .unwrap();
        assert_eq!(file_count(&table), 3);
        let table = append(
            &catalog,
            &table,
            &[batch(10..15)],
            &AppendOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(file_count(&table), 4);
        assert_eq!(table.metadata().snapshots().len(), 2);

        // Values survive the round trip, nulls included.
        let batches: Vec<RecordBatch> = table
            .scan()
            .build()
            .unwrap()
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut rows: Vec<(i64, Option<String>)> = Vec::new();
        for b in &batches {
            let ids = b.column(0).as_primitive::<Int64Type>();
            let names = b.column(1).as_string::<i32>();
            for i in 0..b.num_rows() {
                rows.push((
                    ids.value(i),
                    names.is_valid(i).then(|| names.value(i).to_string()),
                ));
            }
        }
        rows.sort();
        assert_eq!(rows.len(), 15);
        assert_eq!(rows[3], (3, None));
        assert_eq!(rows[14], (14, Some("n14".to_string())));

        // A second catalog handle on the same file sees the same table and schema.
        let again = open_sql_catalog(dir.path(), "test").await.unwrap();
        let loaded = again.load_table(&ident).await.unwrap();
        assert_eq!(
            loaded
                .metadata()
                .current_schema()
                .identifier_field_ids()
                .collect::<Vec<_>>(),
            vec![1]
        );
    }
}
