//! The benchmark table: taxi rows over 365 days, day-partitioned, written in time order by
//! 9 appends (each covering 1/9 of the year, so 8 days straddle two appends), as a lake fed
//! by periodic batch loads would look. At 41M rows that is ~373 files of ~112k rows.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::array::{Array, AsArray, PrimitiveArray, RecordBatch};
use arrow::datatypes::TimestampMicrosecondType;
use iceberg::spec::{ManifestContentType, ManifestList};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use icefeed_testkit::taxi::{self, TaxiGenerator};
use icefeed_testkit::writer::{self, AppendOptions};
use serde_json::json;

/// Catalog name, namespace and table of the benchmark table.
pub const CATALOG_NAME: &str = "bench";
pub const NAMESPACE: &str = "bench";
pub const TABLE: &str = "taxi";
/// Appends that write the table.
pub const APPENDS: u64 = 9;
/// Days the pickups span.
const DAYS: i64 = 365;
const DAY_MICROS: i64 = 86_400_000_000;
/// One day partition of a 41M-row table holds ~112k rows; a third more leaves room for
/// the random spread, so each (day, append) pair stays one file.
pub const DEFAULT_MAX_ROWS_PER_FILE: usize = 150_000;
/// Rows generated per batch.
const BATCH_ROWS: u64 = 1 << 20;

/// A data file of the current snapshot.
pub struct DataFileInfo {
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
}

/// The benchmark table as the harness uses it.
pub struct BenchTable {
    pub dir: PathBuf,
    pub rows: u64,
    pub snapshots: usize,
    pub files: Vec<DataFileInfo>,
    /// How long generating took; `None` when an existing table was reused.
    pub generated_in: Option<Duration>,
}

impl BenchTable {
    /// Total Parquet bytes of the current snapshot.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// The body to POST to `/v1/tables`.
    pub fn registration(&self) -> serde_json::Value {
        registration(&self.dir)
    }

    /// One line about the table's layout.
    pub fn describe(&self) -> String {
        let n = self.files.len().max(1) as u64;
        let min = self.files.iter().map(|f| f.rows).min().unwrap_or(0);
        let max = self.files.iter().map(|f| f.rows).max().unwrap_or(0);
        format!(
            "table {} ({}): {} rows, {} snapshots, {} data files (rows/file avg {}, min {min}, max {max}), {:.1} MB of Parquet",
            self.dir.display(),
            match self.generated_in {
                Some(t) => format!("generated in {:.1}s", t.as_secs_f64()),
                None => "reused".to_string(),
            },
            self.rows,
            self.snapshots,
            self.files.len(),
            self.rows / n,
            self.bytes() as f64 / 1e6,
        )
    }
}

/// The body to POST to `/v1/tables` for the benchmark table (or a copy of it) in the SQL
/// catalog under `dir`.
pub fn registration(dir: &Path) -> serde_json::Value {
    let (db, warehouse) = writer::catalog_paths(dir).expect("absolute paths");
    json!({
        "catalog": {
            "type": "sql",
            "uri": format!("sqlite:{}", db.display()),
            "warehouse": warehouse.display().to_string(),
            "name": CATALOG_NAME,
        },
        "table": format!("{NAMESPACE}.{TABLE}"),
        "start": "snapshot",
    })
}

/// The default directory of the table of `rows` rows: `$HOME/.cache/icefeed/bench/taxi-<rows>`.
pub fn default_dir(rows: u64) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set; pass --dir")?;
    Ok(PathBuf::from(home)
        .join(".cache/icefeed/bench")
        .join(format!("taxi-{rows}")))
}

/// Opens the table under `dir` when it holds exactly `rows` rows; otherwise (re)generates it.
pub async fn ensure_table(
    dir: &Path,
    rows: u64,
    max_rows_per_file: usize,
) -> anyhow::Result<BenchTable> {
    let dir = std::path::absolute(dir)?;
    let ident = TableIdent::from_strs([NAMESPACE, TABLE])?;
    if dir.join("catalog.db").exists() {
        let catalog = writer::open_sql_catalog(&dir, CATALOG_NAME).await?;
        if catalog.table_exists(&ident).await? {
            let table = catalog.load_table(&ident).await?;
            let have = total_records(&table);
            if have == Some(rows) {
                let existing = describe(&dir, &table, None).await?;
                match existing.files.iter().find(|f| !f.path.is_file()) {
                    None => return Ok(existing),
                    Some(gone) => println!(
                        "data file {} of the existing table is missing: regenerating",
                        gone.path.display()
                    ),
                }
            } else {
                println!(
                    "{} holds a table of {have:?} rows, not {rows}: regenerating",
                    dir.display()
                );
            }
        }
        drop(catalog);
        wipe(&dir)?;
    }

    println!(
        "generating {rows} rows into {} ({APPENDS} appends, at most {max_rows_per_file} rows per file)",
        dir.display()
    );
    let started = Instant::now();
    let catalog = writer::open_sql_catalog(&dir, CATALOG_NAME).await?;
    let table = generate_into(&catalog, rows, max_rows_per_file).await?;
    let elapsed = started.elapsed();
    describe(&dir, &table, Some(elapsed)).await
}

/// Creates the benchmark table in `catalog` (wherever its warehouse is) and writes its
/// rows; the same rows for the same `rows`, since the generator is seeded per append.
pub async fn generate_into(
    catalog: &dyn Catalog,
    rows: u64,
    max_rows_per_file: usize,
) -> anyhow::Result<Table> {
    let started = Instant::now();
    let ident = TableIdent::from_strs([NAMESPACE, TABLE])?;
    let mut table = writer::create_table(
        catalog,
        &ident,
        taxi::schema(),
        Some(taxi::partition_spec()),
    )
    .await?;
    let options = AppendOptions {
        max_rows_per_file: Some(max_rows_per_file),
        snapshot_properties: HashMap::from([("icefeed.bench".into(), "load".into())]),
        ..Default::default()
    };
    // Rows are generated on a thread of their own while the previous append is written.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<RecordBatch>>(1);
    let producer = std::thread::spawn(move || {
        for i in 0..APPENDS {
            if tx.blocking_send(append_batches(rows, i)).is_err() {
                break;
            }
        }
    });
    let mut appended = 0;
    while let Some(batches) = rx.recv().await {
        table = writer::append(catalog, &table, &batches, &options)
            .await
            .context("appending to the benchmark table")?;
        appended += 1;
        println!(
            "  append {appended}/{APPENDS} done at {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
    producer.join().expect("generator thread");
    anyhow::ensure!(
        total_records(&table) == Some(rows),
        "generated table holds {:?} rows, expected {rows}",
        total_records(&table)
    );
    Ok(table)
}

/// Removes a previous table, but only a directory that looks like one of ours.
fn wipe(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if name != "catalog.db" && name != "warehouse" {
            bail!(
                "{} holds {name:?}, so it is not a benchmark table directory; pass another --dir",
                dir.display()
            );
        }
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

/// The batches of append `i` (0-based): its share of ids, with pickups spread evenly over
/// its ninth of the year.
fn append_batches(rows: u64, i: u64) -> Vec<RecordBatch> {
    let first = rows * i / APPENDS;
    let count = rows * (i + 1) / APPENDS - first;
    let year = DAYS * DAY_MICROS;
    let start = taxi::START_MICROS + year * i as i64 / APPENDS as i64;
    let end = taxi::START_MICROS + year * (i as i64 + 1) / APPENDS as i64;
    let span = end - start;
    let days = (span + DAY_MICROS - 1) / DAY_MICROS;
    let mut generator = TaxiGenerator::new(i + 1, first as i64 + 1, days as u32);
    let mut batches = Vec::new();
    let mut left = count;
    while left > 0 {
        let n = left.min(BATCH_ROWS);
        let batch = generator.next_batch(n as usize);
        batches.push(shift_pickups(batch, start, span, days * DAY_MICROS));
        left -= n;
    }
    batches
}

/// Maps pickups from the generator's `[START, START + generated)` onto `[start, start +
/// span)`, keeping each trip's duration.
fn shift_pickups(batch: RecordBatch, start: i64, span: i64, generated: i64) -> RecordBatch {
    let schema = batch.schema();
    let pickup_at = schema.index_of("tpep_pickup_datetime").expect("pickup");
    let dropoff_at = schema.index_of("tpep_dropoff_datetime").expect("dropoff");
    let pickup = batch
        .column(pickup_at)
        .as_primitive::<TimestampMicrosecondType>();
    let dropoff = batch
        .column(dropoff_at)
        .as_primitive::<TimestampMicrosecondType>();
    let moved: Vec<i64> = pickup
        .values()
        .iter()
        .map(|&t| {
            let offset = i128::from(t - taxi::START_MICROS) * i128::from(span);
            start + (offset / i128::from(generated)) as i64
        })
        .collect();
    let moved_dropoff: Vec<i64> = moved
        .iter()
        .zip(pickup.values().iter().zip(dropoff.values()))
        .map(|(&new, (&old, &off))| new + (off - old))
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[pickup_at] = std::sync::Arc::new(
        PrimitiveArray::<TimestampMicrosecondType>::new(moved.into(), pickup.nulls().cloned())
            .with_data_type(pickup.data_type().clone()),
    );
    columns[dropoff_at] = std::sync::Arc::new(
        PrimitiveArray::<TimestampMicrosecondType>::new(
            moved_dropoff.into(),
            dropoff.nulls().cloned(),
        )
        .with_data_type(dropoff.data_type().clone()),
    );
    RecordBatch::try_new(schema, columns).expect("same schema")
}

fn total_records(table: &Table) -> Option<u64> {
    table
        .metadata()
        .current_snapshot()?
        .summary()
        .additional_properties
        .get("total-records")?
        .parse()
        .ok()
}

/// Lists the live data files of the current snapshot from its manifests.
async fn describe(
    dir: &Path,
    table: &Table,
    generated_in: Option<Duration>,
) -> anyhow::Result<BenchTable> {
    let snapshot = table
        .metadata()
        .current_snapshot()
        .context("the table has no snapshot")?;
    let io = table.file_io();
    let bytes = io.new_input(snapshot.manifest_list())?.read().await?;
    let list = ManifestList::parse_with_version(&bytes, table.metadata().format_version())?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        anyhow::ensure!(
            manifest.content == ManifestContentType::Data,
            "unexpected delete manifest"
        );
        for entry in manifest.load_manifest(io).await?.entries() {
            if entry.is_alive() {
                files.push(DataFileInfo {
                    path: local_path(entry.file_path())?,
                    rows: entry.record_count(),
                    bytes: entry.file_size_in_bytes(),
                });
            }
        }
    }
    Ok(BenchTable {
        dir: dir.to_path_buf(),
        rows: files.iter().map(|f| f.rows).sum(),
        snapshots: table.metadata().snapshots().len(),
        files,
        generated_in,
    })
}

fn local_path(location: &str) -> anyhow::Result<PathBuf> {
    let path = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    anyhow::ensure!(
        path.starts_with('/'),
        "data file {location} is not a local path"
    );
    Ok(PathBuf::from(path))
}
