//! The demo table `demo.trips` of `icefeed demo` and the quickstart: created with three
//! appends of taxi rows, appended to on demand, and the body that registers it.
//! Must not reach: `crate::rewrite` (the demo only appends).

use std::path::{Path, PathBuf};

use anyhow::Context;
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use futures::TryStreamExt;
use iceberg::spec::{ManifestContentType, ManifestList, PrimitiveLiteral};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use serde_json::json;

use crate::taxi::{self, TaxiGenerator};
use crate::writer::{self, AppendOptions};

const CATALOG_NAME: &str = "demo";
const NAMESPACE: &str = "demo";
const TABLE: &str = "trips";
/// Pickups of demo rows fall within the first week of 2023, so there are a few day partitions.
const DAYS: u32 = 7;

/// Where the demo table lives, enough for a client to open it or register it with icefeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoTable {
    /// Absolute directory holding `catalog.db` and `warehouse/`.
    pub catalog_dir: PathBuf,
    /// SQL catalog name (the `catalog_name` column of `iceberg_tables`).
    pub catalog_name: String,
    /// Namespace of the table.
    pub namespace: String,
    /// Table name within the namespace.
    pub table: String,
}

impl DemoTable {
    fn at(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            catalog_dir: std::path::absolute(dir)?,
            catalog_name: CATALOG_NAME.into(),
            namespace: NAMESPACE.into(),
            table: TABLE.into(),
        })
    }

    /// The body to POST to `/v1/tables` to register this table with icefeed.
    pub fn registration_json(&self) -> serde_json::Value {
        let db = self.catalog_dir.join("catalog.db");
        let warehouse = self.catalog_dir.join("warehouse");
        json!({
            "catalog": {
                "type": "sql",
                "uri": format!("sqlite:{}", db.display()),
                "warehouse": warehouse.display().to_string(),
                "name": self.catalog_name,
            },
            "table": format!("{}.{}", self.namespace, self.table),
            "poll_interval_ms": 1000,
        })
    }

    fn ident(&self) -> anyhow::Result<TableIdent> {
        Ok(TableIdent::from_strs([&self.namespace, &self.table])?)
    }
}

/// Creates `demo.trips` under `dir` with three small appends of history; an existing table
/// is left untouched so the quickstart can be rerun.
pub async fn init(dir: &Path) -> anyhow::Result<DemoTable> {
    let demo = DemoTable::at(dir)?;
    let catalog = writer::open_sql_catalog(dir, &demo.catalog_name)
        .await
        .context("opening the demo catalog")?;
    let ident = demo.ident()?;
    if catalog.table_exists(&ident).await? {
        return Ok(demo);
    }
    let mut table = writer::create_table(
        &catalog,
        &ident,
        taxi::schema(),
        Some(taxi::partition_spec()),
    )
    .await
    .context("creating demo.trips")?;
    let mut generator = TaxiGenerator::new(1, 1, DAYS);
    for _ in 0..3 {
        let batch = generator.next_batch(400);
        table = writer::append(&catalog, &table, &[batch], &AppendOptions::default())
            .await
            .context("appending to demo.trips")?;
    }
    Ok(demo)
}

/// Appends `rows` new trips (ids continuing after the current maximum) to the demo table
/// under `dir` and returns the id of the snapshot that added them.
pub async fn append(dir: &Path, rows: usize) -> anyhow::Result<i64> {
    let demo = DemoTable::at(dir)?;
    let catalog = writer::open_sql_catalog(dir, &demo.catalog_name).await?;
    let table = catalog
        .load_table(&demo.ident()?)
        .await
        .context("loading demo.trips (run the demo init first)")?;
    let next_id = max_trip_id(&table).await?.map_or(1, |max| max + 1);
    // Seeding with the first id keeps reruns reproducible yet gives each append new values.
    let mut generator = TaxiGenerator::new(next_id as u64, next_id, DAYS);
    let batch = generator.next_batch(rows);
    let table = writer::append(&catalog, &table, &[batch], &AppendOptions::default()).await?;
    table
        .metadata()
        .current_snapshot()
        .map(|s| s.snapshot_id())
        .context("append left the table without a snapshot")
}

/// Largest `trip_id` in the current snapshot, from data file statistics (cheap, exact for
/// longs); falls back to a scan when some file lacks bounds.
async fn max_trip_id(table: &Table) -> anyhow::Result<Option<i64>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(None);
    };
    let io = table.file_io();
    let bytes = io.new_input(snapshot.manifest_list())?.read().await?;
    let list = ManifestList::parse_with_version(&bytes, table.metadata().format_version())?;
    let mut max = None;
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        for entry in manifest.load_manifest(io).await?.entries() {
            if !entry.is_alive() {
                continue;
            }
            match entry
                .data_file()
                .upper_bounds()
                .get(&taxi::TRIP_ID_FIELD_ID)
            {
                Some(datum) => match datum.literal() {
                    PrimitiveLiteral::Long(v) => max = max.max(Some(*v)),
                    _ => return scan_max_trip_id(table).await,
                },
                None => return scan_max_trip_id(table).await,
            }
        }
    }
    Ok(max)
}

async fn scan_max_trip_id(table: &Table) -> anyhow::Result<Option<i64>> {
    let mut stream = table.scan().select(["trip_id"]).build()?.to_arrow().await?;
    let mut max = None;
    while let Some(batch) = stream.try_next().await? {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        max = max.max(arrow::compute::max(ids));
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn init_is_idempotent_and_append_continues_ids() {
        let dir = tempfile::tempdir().unwrap();
        let demo = init(dir.path()).await.unwrap();
        let again = init(dir.path()).await.unwrap();
        assert_eq!(demo, again);

        let catalog = writer::open_sql_catalog(dir.path(), "demo").await.unwrap();
        let table = catalog.load_table(&demo.ident().unwrap()).await.unwrap();
        assert_eq!(table.metadata().snapshots().len(), 3);
        assert_eq!(max_trip_id(&table).await.unwrap(), Some(1200));
        assert_eq!(scan_max_trip_id(&table).await.unwrap(), Some(1200));

        let snapshot_id = append(dir.path(), 50).await.unwrap();
        let table = catalog.load_table(&demo.ident().unwrap()).await.unwrap();
        let current = table.metadata().current_snapshot().unwrap();
        assert_eq!(current.snapshot_id(), snapshot_id);
        assert_eq!(
            current.summary().additional_properties["total-records"],
            "1250"
        );
        assert_eq!(max_trip_id(&table).await.unwrap(), Some(1250));

        let body = demo.registration_json();
        let db = dir.path().join("catalog.db");
        assert_eq!(body["catalog"]["uri"], format!("sqlite:{}", db.display()));
        assert_eq!(body["catalog"]["name"], "demo");
        assert_eq!(body["catalog"]["type"], "sql");
        assert_eq!(body["table"], "demo.trips");
        assert!(Path::new(body["catalog"]["warehouse"].as_str().unwrap()).is_absolute());
    }
}
