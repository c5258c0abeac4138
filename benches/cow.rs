//! Copy-on-write benchmark: how long icefeed takes to publish one copy-on-write snapshot
//! (updates and deletes of a few rows rewriting whole data files) compared with the
//! physical floor of decoding the files that snapshot touched with bare Arrow.
//!
//! `cargo bench --bench cow -- [--rows N] [--changed 50000]`
//!
//! 1. copies the taxi table of `benches/load.rs` (generated there when missing) into a
//!    scratch directory next to it, since the benchmark commits to it;
//! 2. registers the copy with an in-process node (`start: "latest"`, poll 100 ms, key
//!    `trip_id`) on a fresh PostgreSQL database;
//! 3. per scenario commits ONE snapshot and times from the commit returning to the
//!    checkpoint reaching it (`GET /v1/tables/{id}` every 20 ms), scans the removed and
//!    added files with bare Arrow on 2 threads (the floor), and pages through the new
//!    events to check their count and ops;
//! 4. prints a table with Data Prepper's published figures for reference.
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL` (a role that may create databases).

#[path = "load/database.rs"]
mod database;
#[path = "load/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "load/scan.rs"]
mod scan;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::database::{Database, node_settings};
use anyhow::{Context, bail};
use arrow::array::{Array, AsArray, BooleanArray, Float64Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::Float64Type;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataFile, Literal, PrimitiveLiteral};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use icefeed::demo::rewrite::{live_data_files, read_data_file, rewrite_with};
use icefeed::demo::taxi::TaxiGenerator;
use icefeed::demo::writer::{self, AppendOptions};
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

const DEFAULT_ADMIN_URL: &str = "postgres://icefeed:icefeed@127.0.0.1:5432/icefeed";
const CHECKPOINT_POLL: Duration = Duration::from_millis(20);
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(3600);
const PAGE_LIMIT: u64 = 10_000;
/// Files read at the same time while preparing a rewrite (not timed).
const READ_CONCURRENCY: usize = 4;

/// Arguments after `--` of `cargo bench --bench cow`.
#[derive(Debug, Parser)]
#[command(name = "cow", about = "icefeed copy-on-write benchmark")]
struct Args {
    /// Rows of the taxi table (the one `--bench load` generates for that many rows).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Rows each update and delete scenario changes.
    #[arg(long, default_value_t = 50_000)]
    changed: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Update,
    Delete,
    Insert,
}

impl Kind {
    fn op(self) -> &'static str {
        match self {
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::Insert => "insert",
        }
    }
}

struct Scenario {
    name: String,
    rows: u64,
    reference: &'static str,
}

/// One line of the results table.
struct Outcome {
    name: String,
    rows: u64,
    removed: usize,
    added: usize,
    elapsed: Duration,
    floor: Duration,
    floor_rows: u64,
    reference: &'static str,
    check: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    anyhow::ensure!(
        args.rows > 0 && args.changed > 0,
        "--rows and --changed must be positive"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let admin_url = std::env::var("ICEFEED_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_string());
    runtime.block_on(run(&args, &admin_url))
}

async fn run(args: &Args, admin_url: &str) -> anyhow::Result<()> {
    // 1. The scratch copy of the load benchmark's table.
    let source = default_dir(args.rows)?;
    generate::ensure_table(&source, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    let scratch = scratch_dir(&source)?;
    let started = Instant::now();
    copy_table(&source, &scratch).await?;
    let table =
        generate::ensure_table(&scratch, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    anyhow::ensure!(
        table.generated_in.is_none() && table.files.iter().all(|f| f.path.starts_with(&scratch)),
        "the copy in {} does not reference its own files",
        scratch.display()
    );
    println!(
        "copied {} to {} in {:.1}s",
        source.display(),
        scratch.display(),
        started.elapsed().as_secs_f64()
    );
    println!("{}", table.describe());

    // 2. The node.
    let db = Database::create(admin_url).await?;
    let changes = tempfile::Builder::new()
        .prefix("icefeed-bench-changes")
        .tempdir()?;
    let settings = node_settings(&db.url, changes.path());
    let stop = CancellationToken::new();
    let node = icefeed::app::start(settings, stop.clone()).await?;
    let base = format!("http://{}", node.addr);
    let mut registration = table.registration();
    registration["start"] = json!("latest");
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);
    let result = scenarios(args, &scratch, &base, &registration).await;
    node.shutdown().await?;
    db.drop().await?;
    let outcomes = result?;

    // 4. Results.
    println!();
    println!(
        "{:<26} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8}  Data Prepper (8 nodes)",
        "scenario", "rows", "removed", "added", "seconds", "floor s", "ratio",
    );
    for o in &outcomes {
        println!(
            "{:<26} {:>9} {:>8} {:>7} {:>9.2} {:>8.2} {:>7.1}x  {}",
            o.name,
            o.rows,
            o.removed,
            o.added,
            o.elapsed.as_secs_f64(),
            o.floor.as_secs_f64(),
            o.elapsed.as_secs_f64() / o.floor.as_secs_f64(),
            o.reference
        );
    }
    println!("(seconds: commit returned → checkpoint at that snapshot, polled every 20 ms;");
    println!(" floor: bare Arrow decode of all columns of the removed + added files, 2 threads)");
    for o in &outcomes {
        println!(
            "{}: floor scanned {} rows; events check: {}",
            o.name, o.floor_rows, o.check
        );
    }
    Ok(())
}

async fn scenarios(
    args: &Args,
    dir: &Path,
    base: &str,
    registration: &Value,
) -> anyhow::Result<Vec<Outcome>> {
    let client = reqwest::Client::new();
    let catalog = writer::open_sql_catalog(dir, generate::CATALOG_NAME).await?;
    let name = registration["table"].as_str().context("table name")?;
    let ident = TableIdent::from_strs(name.split('.'))?;
    let mut table = catalog.load_table(&ident).await?;
    let id = register(&client, base, registration).await?;
    let head = table
        .metadata()
        .current_snapshot_id()
        .context("no snapshot")?;
    let waited = wait_checkpoint(&client, base, &id, head).await?;
    println!(
        "registered {id}; checkpoint at the head after {:.2}s",
        waited.as_secs_f64()
    );
    let mut cursor: Option<String> = None;
    // Drain whatever the start left (nothing with "latest").
    let (_, next) = page_events(&client, base, &id, cursor.take()).await?;
    cursor = Some(next);

    let n = args.changed;
    let list = [
        (
            format!("update {} clustered", short(n)),
            Kind::Update,
            true,
            n,
            "35 s (update 50K)",
        ),
        (
            format!("update {} scattered", short(n)),
            Kind::Update,
            false,
            n,
            "35 s (update 50K)",
        ),
        (
            format!("delete {} clustered", short(n)),
            Kind::Delete,
            true,
            n,
            "37 s (delete 50K)",
        ),
        (
            format!("delete {} scattered", short(n)),
            Kind::Delete,
            false,
            n,
            "37 s (delete 50K)",
        ),
        (
            "insert 100K".to_string(),
            Kind::Insert,
            false,
            100_000,
            "8 s",
        ),
        (
            "insert 1M".to_string(),
            Kind::Insert,
            false,
            1_000_000,
            "10 s",
        ),
    ];
    let mut outcomes = Vec::new();
    let mut next_trip_id = args.rows as i64 * 2 + 1;
    for (i, (name, kind, clustered, rows, reference)) in list.into_iter().enumerate() {
        let scenario = Scenario {
            name,
            rows,
            reference,
        };
        println!("{} ...", scenario.name);
        let before = live_data_files(&table).await?;
        let prepare = Instant::now();
        let (after, removed) = match kind {
            Kind::Insert => {
                let mut generator = TaxiGenerator::new(1000 + i as u64, next_trip_id, 365);
                next_trip_id += rows as i64;
                let mut batches = Vec::new();
                let mut left = rows;
                while left > 0 {
                    let b = left.min(1 << 20);
                    batches.push(generator.next_batch(b as usize));
                    left -= b;
                }
                let options = AppendOptions {
                    max_rows_per_file: Some(generate::DEFAULT_MAX_ROWS_PER_FILE),
                    snapshot_properties: HashMap::from([("icefeed.bench".into(), "cow".into())]),
                };
                let after = writer::append(&catalog, &table, &batches, &options).await?;
                (after, Vec::new())
            }
            Kind::Update | Kind::Delete => {
                let plan = if clustered {
                    // Update and delete take partitions a third and two thirds into the year.
                    let at = if kind == Kind::Update { 1 } else { 2 };
                    plan_clustered(&before, rows, at)?
                } else {
                    plan_scattered(&before, rows)?
                };
                let (remove, batches) = apply(&table, &plan, kind).await?;
                let options = AppendOptions {
                    max_rows_per_file: Some(generate::DEFAULT_MAX_ROWS_PER_FILE),
                    snapshot_properties: HashMap::new(),
                };
                let op = if kind == Kind::Update {
                    "overwrite"
                } else {
                    "delete"
                };
                let after = rewrite_with(&catalog, &table, &remove, &batches, op, &options).await?;
                (after, remove)
            }
        };
        let committed = Instant::now();
        let snapshot = after
            .metadata()
            .current_snapshot_id()
            .context("no snapshot")?;
        println!(
            "  committed snapshot {snapshot} ({:.1}s to prepare and commit)",
            (committed - prepare).as_secs_f64()
        );
        let elapsed = wait_checkpoint(&client, base, &id, snapshot).await?;
        println!("  published in {:.2}s", elapsed.as_secs_f64());

        // Files the snapshot touched.
        let before_paths: std::collections::HashSet<&str> =
            before.iter().map(|f| f.file_path()).collect();
        let live = live_data_files(&after).await?;
        let added: Vec<&DataFile> = live
            .iter()
            .filter(|f| !before_paths.contains(f.file_path()))
            .collect();
        let mut paths: Vec<PathBuf> = removed.iter().map(|f| local_path(f.file_path())).collect();
        paths.extend(added.iter().map(|f| local_path(f.file_path())));
        let (floor_rows, floor) = scan::bare_scan(&paths, 2)?;

        // The events.
        let (ops, next) = page_events(&client, base, &id, cursor.take()).await?;
        cursor = Some(next);
        let check = check_events(&ops, kind.op(), rows);
        println!(
            "  floor {:.2}s ({} rows of {} files); events: {check}",
            floor.as_secs_f64(),
            floor_rows,
            paths.len()
        );
        outcomes.push(Outcome {
            name: scenario.name,
            rows: scenario.rows,
            removed: removed.len(),
            added: added.len(),
            elapsed,
            floor,
            floor_rows,
            reference: scenario.reference,
            check,
        });
        table = after;
    }
    Ok(outcomes)
}

/// A file to rewrite and the positions of its rows to change.
struct Planned {
    file: DataFile,
    rows: Vec<usize>,
}

fn day_of(file: &DataFile) -> i32 {
    match file.partition().fields().first() {
        Some(Some(Literal::Primitive(PrimitiveLiteral::Int(d)))) => *d,
        _ => i32::MIN,
    }
}

/// `changed` rows of consecutive day partitions starting `at` thirds into the year: all
/// files of those partitions are rewritten, and their first rows (in file order) change.
fn plan_clustered(files: &[DataFile], changed: u64, at: usize) -> anyhow::Result<Vec<Planned>> {
    let mut by_day: BTreeMap<i32, Vec<&DataFile>> = BTreeMap::new();
    for f in files {
        by_day.entry(day_of(f)).or_default().push(f);
    }
    let days: Vec<i32> = by_day.keys().copied().collect();
    let mut plan = Vec::new();
    let mut left = changed as usize;
    for day in &days[days.len() * at / 3..] {
        if left == 0 {
            break;
        }
        for f in &by_day[day] {
            let take = left.min(f.record_count() as usize);
            left -= take;
            plan.push(Planned {
                file: (*f).clone(),
                rows: (0..take).collect(),
            });
        }
    }
    anyhow::ensure!(left == 0, "not enough rows after the chosen partitions");
    Ok(plan)
}

/// `changed` rows evenly spaced over all live files (every `total / changed`-th row).
fn plan_scattered(files: &[DataFile], changed: u64) -> anyhow::Result<Vec<Planned>> {
    let total: u64 = files.iter().map(|f| f.record_count()).sum();
    anyhow::ensure!(total >= changed, "the table holds only {total} rows");
    let stride = total / changed;
    let mut plan = Vec::new();
    let mut global = 0u64;
    let mut taken = 0u64;
    for f in files {
        let count = f.record_count();
        let mut rows = Vec::new();
        // First multiple of stride at or after `global`.
        let mut next = global.div_ceil(stride) * stride;
        while next < global + count && taken < changed {
            rows.push((next - global) as usize);
            taken += 1;
            next += stride;
        }
        global += count;
        if !rows.is_empty() {
            plan.push(Planned {
                file: f.clone(),
                rows,
            });
        }
    }
    anyhow::ensure!(taken == changed, "planned {taken} of {changed} rows");
    Ok(plan)
}

/// Reads the planned files and returns them (to remove) with their new rows: chosen rows
/// get `fare_amount + 1` (updates) or are left out (deletes); all others are copied.
async fn apply(
    table: &Table,
    plan: &[Planned],
    kind: Kind,
) -> anyhow::Result<(Vec<DataFile>, Vec<RecordBatch>)> {
    let batches: Vec<RecordBatch> = futures::stream::iter(plan)
        .map(|p| async move {
            let batches = read_data_file(table, &p.file).await?;
            let schema = batches
                .first()
                .map(|b| b.schema())
                .context("a data file without batches")?;
            let batch = concat_batches(&schema, &batches)?;
            let mut chosen = vec![false; batch.num_rows()];
            for &r in &p.rows {
                chosen[r] = true;
            }
            anyhow::Ok(match kind {
                Kind::Update => {
                    let at = schema.index_of("fare_amount")?;
                    let fare = batch.column(at).as_primitive::<Float64Type>();
                    let new: Float64Array = (0..batch.num_rows())
                        .map(|i| {
                            let old = fare.is_valid(i).then(|| fare.value(i));
                            if chosen[i] {
                                Some(old.unwrap_or(0.0) + 1.0)
                            } else {
                                old
                            }
                        })
                        .collect();
                    let mut columns = batch.columns().to_vec();
                    columns[at] = Arc::new(new);
                    RecordBatch::try_new(schema, columns)?
                }
                _ => {
                    let keep: BooleanArray = chosen.iter().map(|c| Some(!c)).collect();
                    filter_record_batch(&batch, &keep)?
                }
            })
        })
        .buffered(READ_CONCURRENCY)
        .try_collect()
        .await?;
    Ok((plan.iter().map(|p| p.file.clone()).collect(), batches))
}

async fn register(client: &reqwest::Client, base: &str, body: &Value) -> anyhow::Result<String> {
    let response = client
        .post(format!("{base}/v1/tables"))
        .json(body)
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if status != StatusCode::CREATED {
        bail!("registration answered {status}: {body}");
    }
    Ok(body["id"]
        .as_str()
        .context("registration without id")?
        .to_string())
}

/// Polls the table until its checkpoint is `snapshot`; returns the time that took.
async fn wait_checkpoint(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    snapshot: i64,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let view: Value = client
            .get(format!("{base}/v1/tables/{id}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let at = &view["checkpoint"]["snapshot_id"];
        let at = at
            .as_i64()
            .or_else(|| at.as_str().and_then(|s| s.parse().ok()));
        if at == Some(snapshot) {
            return Ok(started.elapsed());
        }
        if view["state"] == "error" {
            bail!("the table went to the error state: {}", view["last_error"]);
        }
        if started.elapsed() > CHECKPOINT_TIMEOUT {
            bail!("checkpoint not at {snapshot} after {CHECKPOINT_TIMEOUT:?}: {view}");
        }
        tokio::time::sleep(CHECKPOINT_POLL).await;
    }
}

#[derive(Deserialize)]
struct Event {
    op: String,
}

#[derive(Deserialize)]
struct Page {
    events: Vec<Event>,
    next: String,
    more: bool,
}

/// Pages through the feed after `after` to its end; returns the count of each op and the
/// last cursor.
async fn page_events(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    mut after: Option<String>,
) -> anyhow::Result<(BTreeMap<String, u64>, String)> {
    let mut ops = BTreeMap::new();
    loop {
        let mut request = client
            .get(format!("{base}/v1/tables/{id}/changes"))
            .query(&[("limit", PAGE_LIMIT)]);
        if let Some(cursor) = &after {
            request = request.query(&[("after", cursor)]);
        }
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            bail!("page request answered {status}: {}", response.text().await?);
        }
        let page: Page = serde_json::from_slice(&response.bytes().await?)?;
        let count = page.events.len() as u64;
        for e in page.events {
            *ops.entry(e.op).or_insert(0) += 1;
        }
        after = Some(page.next);
        if !page.more || count == 0 {
            return Ok((ops, after.expect("set above")));
        }
    }
}

fn check_events(ops: &BTreeMap<String, u64>, op: &str, rows: u64) -> String {
    let got: Vec<String> = ops.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let got = if got.is_empty() {
        "no events".to_string()
    } else {
        got.join(", ")
    };
    let only = ops.len() == 1 && ops.get(op) == Some(&rows);
    if only {
        format!("ok ({got})")
    } else {
        format!("MISMATCH: expected {rows} {op}, got {got}")
    }
}

fn default_dir(rows: u64) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home)
        .join(".cache/icefeed/bench")
        .join(format!("taxi-{rows}")))
}

/// A sibling of `source` whose path has the same length (`taxi-N` → `cow--N`): the copy's
/// metadata is the source's with the directory swapped in place, which keeps the
/// length-prefixed strings of the (uncompressed) Avro manifests valid.
fn scratch_dir(source: &Path) -> anyhow::Result<PathBuf> {
    let name = source
        .file_name()
        .and_then(|n| n.to_str())
        .context("source directory name")?;
    anyhow::ensure!(name.len() > 4, "unexpected source directory {name}");
    let scratch = source.with_file_name(format!("cow-{}", &name[4..]));
    anyhow::ensure!(scratch.as_os_str().len() == source.as_os_str().len());
    Ok(scratch)
}

/// Copies the table under `source` to `dest` (replacing an earlier copy): data files are
/// hard-linked (never modified: rewrites add new files), metadata files are copied with
/// `source`'s path replaced by `dest`'s, and the catalog row is pointed at the copy.
async fn copy_table(source: &Path, dest: &Path) -> anyhow::Result<()> {
    if dest.exists() {
        for entry in std::fs::read_dir(dest)? {
            let name = entry?.file_name();
            if name != "catalog.db" && name != "warehouse" {
                bail!("{} holds {name:?}: not a scratch copy", dest.display());
            }
        }
        std::fs::remove_dir_all(dest)?;
    }
    let from = source.as_os_str().as_encoded_bytes().to_vec();
    let to = dest.as_os_str().as_encoded_bytes().to_vec();
    copy_tree(source, dest, &from, &to)?;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dest.join("catalog.db"));
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
    let (from, to) = (source.display().to_string(), dest.display().to_string());
    sqlx::query(
        "UPDATE iceberg_tables
            SET metadata_location = replace(metadata_location, ?1, ?2),
                previous_metadata_location = replace(previous_metadata_location, ?1, ?2)",
    )
    .bind(&from)
    .bind(&to)
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    Ok(())
}

fn copy_tree(source: &Path, dest: &Path, from: &[u8], to: &[u8]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dest)?;
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let path = entry.path();
        let target = dest.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&path, &target, from, to)?;
        } else if path.extension().is_some_and(|e| e == "parquet") {
            if std::fs::hard_link(&path, &target).is_err() {
                std::fs::copy(&path, &target)?;
            }
        } else if path.extension().is_some_and(|e| e == "json" || e == "avro") {
            let bytes = std::fs::read(&path)?;
            std::fs::write(&target, replace_bytes(&bytes, from, to))?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

fn replace_bytes(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn local_path(location: &str) -> PathBuf {
    PathBuf::from(
        location
            .strip_prefix("file://")
            .or_else(|| location.strip_prefix("file:"))
            .unwrap_or(location),
    )
}

/// `50000` → `50K`.
fn short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}
