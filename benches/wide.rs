//! Wide-row benchmark: the memory and time icefeed takes to publish a copy-on-write update
//! of a few rows of a table of wide rows (documents of `--row-bytes` letters), next to
//! the rows the rewritten files decode to and the map tasks' memory budget. With
//! `--repetitive`, each document is one letter repeated: stored in a few bytes, decoded
//! in `--row-bytes`.
//!
//! `cargo bench --bench wide -- [--rows 4000] [--row-bytes 100000] [--rows-per-file 1000]
//! [--changed 8] [--repetitive]`
//!
//! 1. a child process (this benchmark, `--write table`) writes the table (`id`, its
//!    identifier, and `doc`) into a temporary directory with the iceberg crate, laid out
//!    as Spark's Parquet writer lays out wide rows: a page-size check every 100 rows, a
//!    dictionary that falls back to plain values;
//! 2. an in-process node with the default scheduler settings, on a fresh database,
//!    registers it (`start: "latest"`);
//! 3. the process's peak RSS is reset, and a child process (`--write update`) commits one
//!    `overwrite` snapshot that rewrites every file holding one of `--changed` rows spread
//!    over the table, with new documents for those rows; the children keep the rows they
//!    write out of this process's memory;
//! 4. times from the commit to the checkpoint reaching it and reads the peak RSS above
//!    the RSS before the commit;
//! 5. pages through the change set (JSON pages of up to 1000 events): `--changed`
//!    updates, each with its old and new document; reads the peak RSS above the RSS
//!    before paging;
//! 6. decodes the removed and added files with bare Arrow on 2 threads (the floor,
//!    median of 3 runs).
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL` (a role that may create databases).

#[path = "load/cdc.rs"]
#[allow(dead_code)]
mod cdc;
#[path = "load/database.rs"]
mod database;
#[path = "load/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "load/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "load/scan.rs"]
#[allow(dead_code)]
mod scan;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::Int64Type;
use clap::{Parser, ValueEnum};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{Catalog, TableIdent};
use icefeed_testkit::letters::letters;
use icefeed_testkit::rewrite::{live_data_files, read_data_file, rewrite_with};
use icefeed_testkit::writer::{self, AppendOptions};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::{Value, json};

use crate::harness::status_kib;

/// Arguments after `--` of `cargo bench --bench wide`.
#[derive(Debug, Parser)]
#[command(name = "wide", about = "icefeed wide-row benchmark")]
struct Args {
    /// Rows of the table.
    #[arg(long, default_value_t = 4000)]
    rows: u64,
    /// Bytes of each row's document.
    #[arg(long, default_value_t = 100_000)]
    row_bytes: usize,
    /// Rows of each data file.
    #[arg(long, default_value_t = 1000)]
    rows_per_file: usize,
    /// Rows the update changes, spread over the table.
    #[arg(long, default_value_t = 8)]
    changed: u64,
    /// Documents of one letter repeated after the row's id, which codecs store in a few
    /// bytes, instead of letters no codec compresses much.
    #[arg(long)]
    repetitive: bool,
    /// Set on the benchmark's child processes: what they write, and where.
    #[arg(long, hide = true, requires = "dir")]
    write: Option<Step>,
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Step {
    Table,
    Update,
}

const TABLE: &str = "bench.docs";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(
        args.rows > 0 && args.row_bytes > 0 && args.rows_per_file > 0,
        "--rows, --row-bytes and --rows-per-file must be positive"
    );
    anyhow::ensure!(
        (1..=args.rows).contains(&args.changed),
        "--changed must be between 1 and --rows"
    );
    let runtime = harness::runtime()?;
    match (args.write, &args.dir) {
        (Some(Step::Table), Some(dir)) => runtime.block_on(write_table(&args, dir)),
        (Some(Step::Update), Some(dir)) => runtime.block_on(write_update(&args, dir)),
        _ => runtime.block_on(run(&args, &harness::admin_url())),
    }
}

async fn run(args: &Args, admin_url: &str) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("icefeed-bench-wide")
        .tempdir()?;
    let started = Instant::now();
    child(args, Step::Table, dir.path())?;
    println!(
        "wrote {} rows of {} bytes in files of {} in {:.1}s ({} MiB stored)",
        args.rows,
        args.row_bytes,
        args.rows_per_file,
        started.elapsed().as_secs_f64(),
        stored_bytes(dir.path())? >> 20
    );
    database::with_node(admin_url, async |node| {
        update(args, dir.path(), &node.base).await
    })
    .await
}

/// Registers the table, commits the update through a child process and reports.
async fn update(args: &Args, dir: &Path, base: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let catalog = writer::open_sql_catalog(dir, generate::CATALOG_NAME).await?;
    let table = catalog.load_table(&ident()?).await?;
    let (db, warehouse) = writer::catalog_paths(dir)?;
    let registration = json!({
        "catalog": {"type": "sql", "uri": format!("sqlite:{}", db.display()),
                    "warehouse": warehouse.display().to_string(),
                    "name": generate::CATALOG_NAME},
        "table": TABLE, "start": "latest", "poll_interval_ms": 100,
    });
    let (id, _) = cdc::register_at_head(&client, base, &registration, &table).await?;
    let before = live_paths(&table).await?;

    let idle_kib = status_kib("VmRSS:").context("VmRSS")?;
    anyhow::ensure!(harness::reset_peak_rss(), "cannot reset the peak RSS");
    let snapshot: i64 = child(args, Step::Update, dir)?
        .trim()
        .parse()
        .context("the update's snapshot id")?;
    let committed = Instant::now();
    let elapsed = cdc::wait_checkpoint_since(&client, base, &id, snapshot, committed).await?;
    let peak_kib = status_kib("VmHWM:").context("VmHWM")?;

    let computed = cdc::rewrite_counters(&client, base).await?;
    let rewritten = changed_ids(args)
        .map(|row| row / args.rows_per_file as u64)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    let decoded_mib = (2 * rewritten * args.rows_per_file as u64 * args.row_bytes as u64) >> 20;
    let budget_mib = icefeed::config::SchedulerSettings::default().map_memory_bytes >> 20;
    let grown_mib = peak_kib.saturating_sub(idle_kib) >> 10;
    println!(
        "update of {} rows rewrote {rewritten} files: published {:.2}s after the commit",
        args.changed,
        elapsed.as_secs_f64()
    );
    println!(
        "peak RSS {grown_mib} MiB above {} MiB before the commit: {:.2}x the map tasks' \
         budget ({budget_mib} MiB), {:.2}x the rewrite's documents ({decoded_mib} MiB, \
         removed and added); computed: {computed}",
        idle_kib >> 10,
        grown_mib as f64 / budget_mib as f64,
        grown_mib as f64 / decoded_mib.max(1) as f64,
    );
    let idle_kib = status_kib("VmRSS:").context("VmRSS")?;
    anyhow::ensure!(harness::reset_peak_rss(), "cannot reset the peak RSS");
    let paging = Instant::now();
    let checked = check(args, &client, base, &id).await?;
    let peak_kib = status_kib("VmHWM:").context("VmHWM")?;
    println!(
        "paged through the change set (JSON, limit 1000) in {:.2}s: peak RSS {} MiB above {} \
         MiB before; check: {checked}",
        paging.elapsed().as_secs_f64(),
        peak_kib.saturating_sub(idle_kib) >> 10,
        idle_kib >> 10,
    );

    let after = live_paths(&catalog.load_table(&ident()?).await?).await?;
    let jobs: Vec<scan::Decode> = (before.symmetric_difference(&after))
        .map(|path| scan::Decode::Parquet(cdc::local_path(path)))
        .collect();
    let floor = scan::bare_decode_median(&jobs, 2, scan::FLOOR_RUNS)?;
    println!(
        "floor (bare decode of the {} removed and added files, 2 threads): {:.2}s; \
         publish {:.2}x the floor",
        jobs.len(),
        floor.elapsed.as_secs_f64(),
        elapsed.as_secs_f64() / floor.elapsed.as_secs_f64()
    );
    Ok(())
}

/// The paths of the table's live data files.
async fn live_paths(table: &iceberg::table::Table) -> anyhow::Result<BTreeSet<String>> {
    let files = live_data_files(table).await?;
    Ok(files.iter().map(|f| f.file_path().to_string()).collect())
}

/// Runs this benchmark as a child process writing `step` into `dir`; its output.
fn child(args: &Args, step: Step, dir: &Path) -> anyhow::Result<String> {
    let step = step.to_possible_value().context("step")?;
    let output = Command::new(std::env::current_exe()?)
        .args(["--write", step.get_name(), "--dir"])
        .arg(dir)
        .args(["--rows", &args.rows.to_string()])
        .args(["--row-bytes", &args.row_bytes.to_string()])
        .args(["--rows-per-file", &args.rows_per_file.to_string()])
        .args(["--changed", &args.changed.to_string()])
        .args(args.repetitive.then_some("--repetitive"))
        .output()?;
    if !output.status.success() {
        bail!(
            "writing the {} failed: {}",
            step.get_name(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

fn ident() -> anyhow::Result<TableIdent> {
    Ok(TableIdent::from_strs(TABLE.split('.'))?)
}

/// Files as Spark writes wide rows: zstd, a page-size check every 100 rows.
fn layout(args: &Args) -> AppendOptions {
    AppendOptions {
        max_rows_per_file: Some(args.rows_per_file),
        writer_properties: Some(
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .set_write_batch_size(100)
                .build(),
        ),
        ..Default::default()
    }
}

/// `id` (the identifier) and `doc`.
fn schema() -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids(vec![1])
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "doc", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .expect("a valid schema")
}

/// Child process: creates the table with `--rows` rows.
async fn write_table(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let catalog = writer::open_sql_catalog(dir, generate::CATALOG_NAME).await?;
    let table = writer::create_table(&catalog, &ident()?, schema(), None).await?;
    let batches: Vec<RecordBatch> = (0..args.rows)
        .step_by(args.rows_per_file)
        .map(|first| {
            let ids = first..(first + args.rows_per_file as u64).min(args.rows);
            rows(ids.map(|id| (id, doc(args, id, 0))))
        })
        .collect();
    writer::append(&catalog, &table, &batches, &layout(args)).await?;
    Ok(())
}

/// Child process: rewrites the files holding the changed rows with their new documents
/// and prints the snapshot's id.
async fn write_update(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let catalog = writer::open_sql_catalog(dir, generate::CATALOG_NAME).await?;
    let table = catalog.load_table(&ident()?).await?;
    let changed: Vec<u64> = changed_ids(args).collect();
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for file in live_data_files(&table).await? {
        let batches = read_data_file(&table, &file).await?;
        let mut touched = false;
        let mut kept = Vec::new();
        for batch in &batches {
            let ids = batch.column(0).as_primitive::<Int64Type>();
            let docs = batch.column(1).as_string::<i32>();
            for i in 0..batch.num_rows() {
                let id = ids.value(i) as u64;
                if changed.contains(&id) {
                    touched = true;
                    kept.push((id, doc(args, id, 1)));
                } else {
                    kept.push((id, docs.value(i).to_string()));
                }
            }
        }
        if touched {
            removed.push(file);
            added.push(rows(kept.into_iter()));
        }
    }
    let table = rewrite_with(
        &catalog,
        &table,
        &removed,
        &added,
        "overwrite",
        &layout(args),
    )
    .await?;
    println!(
        "{}",
        table
            .metadata()
            .current_snapshot_id()
            .context("no snapshot")?
    );
    Ok(())
}

/// The ids the update changes: `--changed` of them, evenly spread.
fn changed_ids(args: &Args) -> impl Iterator<Item = u64> {
    let step = args.rows / args.changed;
    (0..args.changed).map(move |k| k * step + step / 2)
}

fn rows(rows: impl Iterator<Item = (u64, String)>) -> RecordBatch {
    let (ids, docs): (Vec<i64>, Vec<String>) = rows.map(|(id, doc)| (id as i64, doc)).unzip();
    let ids: ArrayRef = Arc::new(Int64Array::from(ids));
    let docs: ArrayRef = Arc::new(StringArray::from(docs));
    let schema = iceberg::arrow::schema_to_arrow_schema(&schema()).expect("converts");
    RecordBatch::try_new(Arc::new(schema), vec![ids, docs]).expect("the table's columns")
}

/// Version `version` of row `id`'s document.
fn doc(args: &Args, id: u64, version: u64) -> String {
    match args.repetitive {
        true => format!("{id}:{version}:{}", "x".repeat(args.row_bytes)),
        false => letters((id << 1) | version, args.row_bytes),
    }
}

/// "ok" when the feed holds exactly one update per changed row, from its old document to
/// its new one; else what differs.
async fn check(
    args: &Args,
    client: &reqwest::Client,
    base: &str,
    id: &str,
) -> anyhow::Result<String> {
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page: Value = client
            .get(format!("{base}/v1/tables/{id}/changes?limit=1000{after}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        for event in page["events"].as_array().context("events")? {
            let row = event["after"]["id"].as_u64().context("an event's id")?;
            let exact = event["op"] == "update"
                && event["before"]["doc"] == doc(args, row, 0)
                && event["after"]["doc"] == doc(args, row, 1);
            seen.push((row, exact));
        }
        if page["more"] != true {
            break;
        }
        after = format!("&after={}", page["next"].as_str().context("next")?);
    }
    let expected: Vec<(u64, bool)> = changed_ids(args).map(|row| (row, true)).collect();
    seen.sort_unstable();
    Ok(if seen == expected {
        "ok".into()
    } else {
        format!("expected updates of {expected:?} (row, exact), read {seen:?}")
    })
}

/// Bytes of the Parquet files below `dir`.
fn stored_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            total += stored_bytes(&path)?;
        } else if path.extension().is_some_and(|e| e == "parquet") {
            total += path.metadata()?.len();
        }
    }
    Ok(total)
}
