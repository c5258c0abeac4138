//! Copy-on-write benchmark: how long icefeed takes to publish one copy-on-write snapshot
//! (updates and deletes of a few rows rewriting whole data files) compared with the
//! physical floor of decoding the files that snapshot touched with bare Arrow.
//!
//! `cargo bench --bench cow -- [--rows N] [--changed 50000] [--only scattered]`
//!
//! 1. copies the taxi table of `benches/load.rs` (generated there when missing) into a
//!    scratch directory next to it, since the benchmark commits to it;
//! 2. registers the copy with an in-process node (`start: "latest"`, poll 100 ms, key
//!    `trip_id`) on a fresh PostgreSQL database;
//! 3. per scenario commits ONE snapshot and times from the commit returning to the
//!    checkpoint reaching it (`GET /v1/tables/{id}` every 20 ms), scans the removed and
//!    added files with bare Arrow on 2 threads (the floor, median of 3 runs), and pages
//!    through the new events to check their count and ops (`load/scenario.rs`);
//! 4. prints a table with Data Prepper's published figures for reference.
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
#[path = "load/scenario.rs"]
#[allow(dead_code)]
mod scenario;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cdc::{
    Kind, Registered, copy_table, plan_clustered, plan_scattered, register_and_wait, scratch_dir,
};
use crate::database::with_node;
use crate::harness::short;
use crate::scenario::Feed;
use clap::Parser;
use icefeed::demo::rewrite::live_data_files;
use icefeed::demo::taxi::TaxiGenerator;
use icefeed::demo::writer::{self, AppendOptions};
use serde_json::{Value, json};

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
    /// Run only the scenarios whose name contains this (for example `scattered`).
    #[arg(long)]
    only: Option<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
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
    harness::init_logging();
    anyhow::ensure!(
        args.rows > 0 && args.changed > 0,
        "--rows and --changed must be positive"
    );
    let runtime = harness::runtime()?;
    let admin_url = harness::admin_url();
    runtime.block_on(run(&args, &admin_url))
}

async fn run(args: &Args, admin_url: &str) -> anyhow::Result<()> {
    // 1. The scratch copy of the load benchmark's table.
    let source = generate::default_dir(args.rows)?;
    generate::ensure_table(&source, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    let scratch = scratch_dir(&source, "cow-")?;
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
    let mut registration = table.registration();
    registration["start"] = json!("latest");
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);
    let outcomes = with_node(admin_url, async |node| {
        scenarios(args, &scratch, &node.base, &registration).await
    })
    .await?;

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
    let Registered {
        catalog,
        mut table,
        id,
        waited,
    } = register_and_wait(&client, dir, base, registration).await?;
    println!(
        "registered {id}; checkpoint at the head after {:.2}s",
        waited.as_secs_f64()
    );
    let mut feed = Feed {
        client,
        base: base.to_string(),
        id,
        cursor: None,
    };
    // Drain whatever the start left (nothing with "latest").
    feed.read_new().await?;

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
        if args
            .only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            continue;
        }
        let scenario = Scenario {
            name,
            rows,
            reference,
        };
        println!("{} ...", scenario.name);
        let (after, measured) = match kind {
            Kind::Insert => {
                let before = live_data_files(&table).await?;
                let prepare = Instant::now();
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
                let committed = Instant::now();
                let measured = scenario::copied_on_write(
                    &mut feed,
                    prepare,
                    committed,
                    &before,
                    &after,
                    &[],
                    kind,
                    rows,
                )
                .await?;
                (after, measured)
            }
            Kind::Update | Kind::Delete => {
                let before = live_data_files(&table).await?;
                let plan = if clustered {
                    // Update and delete take partitions a third and two thirds into the year.
                    let at = if kind == Kind::Update { 1 } else { 2 };
                    plan_clustered(&before, rows, at)?
                } else {
                    plan_scattered(&before, rows)?
                };
                scenario::copy_on_write(&mut feed, &catalog, &table, &plan, kind).await?
            }
        };
        outcomes.push(Outcome {
            name: scenario.name,
            rows: scenario.rows,
            removed: measured.removed,
            added: measured.added,
            elapsed: measured.elapsed,
            floor: measured.floor,
            floor_rows: measured.floor_rows,
            reference: scenario.reference,
            check: measured.check,
        });
        table = after;
    }
    Ok(outcomes)
}
