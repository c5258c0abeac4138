//! Copy-on-write benchmark: how long icefeed takes to publish one copy-on-write snapshot
//! (updates and deletes of a few rows rewriting whole data files) compared with the
//! physical floor of decoding the files that snapshot touched with bare Arrow.
//!
//! Then, as issue 17 asks, the net changes of the table's whole history next to reading
//! every per-snapshot event of it.
//!
//! `cargo bench --bench cow -- [--rows N] [--changed 50000] [--only scattered|net]`
//!
//! 1. copies the taxi table of `benches/load.rs` (generated there when missing) into a
//!    scratch directory next to it, since the benchmark commits to it (`--only net`
//!    reuses the copy an earlier run left, its scenarios' snapshots included);
//! 2. registers the copy with an in-process node (`start: "latest"`, poll 100 ms, key
//!    `trip_id`) on a fresh PostgreSQL database;
//! 3. per scenario commits ONE snapshot and times from the commit returning to the
//!    checkpoint reaching it (`GET /v1/tables/{id}` every 20 ms), scans the removed and
//!    added files with bare Arrow on 2 threads (the floor, median of 3 runs), and pages
//!    through the new events to check their count and ops (`load/scenario.rs`);
//! 4. prints a table with Data Prepper's published figures for reference;
//! 5. the whole history: the scenarios' registration (`latest`) holds only their change
//!    sets, so the copy is registered again with `start: "earliest"` on a fresh node (the
//!    scenarios' node and change store gone), whose feed replays every snapshot: the 9
//!    appends of the load, then the scenarios'. It times that replay, pages through every
//!    per-snapshot event as NDJSON (`load/net.rs`, limit 10000), then asks for the net
//!    changes of the same range (`?net=true&until=<the read's last cursor>&wait=60`, again
//!    after each empty page that holds the range while it is computed) and pages through
//!    them, timing the computation (until the first page with events) and the read apart, with the node's tasks, page latencies and peak RSS of each
//!    step. Since the range starts at an empty table, its net changes must be the live
//!    rows at the head as inserts (every key the history left alive; a key inserted and
//!    deleted nets to nothing), and its inserts less its deletes the same.
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
#[path = "load/net.rs"]
mod net;
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
use crate::harness::{per_second, short};
use crate::net::{Net, PAGE_LIMIT, Read};
use crate::scenario::{Feed, task_seconds, tasks_between};
use clap::Parser;
use icefeed_testkit::rewrite::live_data_files;
use icefeed_testkit::taxi::TaxiGenerator;
use icefeed_testkit::writer::{self, AppendOptions};
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
    /// Run only the parts whose name contains this: scenarios (for example `scattered`)
    /// and the net changes of the whole history (`net`). Without scenarios, the net
    /// changes are measured on the copy an earlier run left.
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

/// Name of step 5, for `--only`.
const HISTORY: &str = "net changes of the whole history";

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
    let run_scenarios = scenario_list(args.changed)
        .iter()
        .any(|s| selected(args, &s.0));
    let run_history = selected(args, HISTORY);
    anyhow::ensure!(
        run_scenarios || run_history,
        "--only {:?} selects nothing",
        args.only
    );

    // 1. The scratch copy of the load benchmark's table.
    let source = generate::default_dir(args.rows)?;
    generate::ensure_table(&source, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    let scratch = scratch_dir(&source, "cow-")?;
    if run_scenarios || !scratch.join("catalog.db").exists() {
        copy(&source, &scratch, args.rows).await?;
    } else {
        // Not `ensure_table`: it would regenerate a copy the scenarios changed.
        println!("reusing {} as an earlier run left it", scratch.display());
    }
    let mut registration = generate::registration(&scratch);
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);

    // 2 and 3. The node and the scenarios.
    if run_scenarios {
        let mut latest = registration.clone();
        latest["start"] = json!("latest");
        let outcomes = with_node(admin_url, async |node| {
            scenarios(args, &scratch, &node.base, &latest).await
        })
        .await?;
        // 4. Results, before the history can fail.
        print_outcomes(&outcomes);
    }

    // 5. The whole history.
    if run_history {
        registration["start"] = json!("earliest");
        let history = with_node(admin_url, async |node| {
            whole_history(&scratch, &node.base, &registration).await
        })
        .await?;
        print_history(&history);
    }
    Ok(())
}

/// Copies the table of `rows` rows under `source` to `scratch` and checks the copy.
async fn copy(source: &Path, scratch: &Path, rows: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    copy_table(source, scratch).await?;
    let table = generate::ensure_table(scratch, rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    anyhow::ensure!(
        table.generated_in.is_none() && table.files.iter().all(|f| f.path.starts_with(scratch)),
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
    Ok(())
}

/// Whether `--only` selects the part named `name`.
fn selected(args: &Args, name: &str) -> bool {
    args.only
        .as_ref()
        .is_none_or(|only| name.contains(only.as_str()))
}

fn print_outcomes(outcomes: &[Outcome]) {
    println!();
    println!(
        "{:<26} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8}  Data Prepper (8 nodes)",
        "scenario", "rows", "removed", "added", "seconds", "floor s", "ratio",
    );
    for o in outcomes {
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
    for o in outcomes {
        println!(
            "{}: floor scanned {} rows; events check: {}",
            o.name, o.floor_rows, o.check
        );
    }
}

/// The scenarios, in the order they run: name, kind, clustered, rows, Data Prepper's figure.
fn scenario_list(n: u64) -> [(String, Kind, bool, u64, &'static str); 6] {
    [
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
    ]
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

    let mut outcomes = Vec::new();
    let mut next_trip_id = args.rows as i64 * 2 + 1;
    for (i, (name, kind, clustered, rows, reference)) in
        scenario_list(args.changed).into_iter().enumerate()
    {
        if !selected(args, &name) {
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
                    ..Default::default()
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

/// What step 5 measured.
struct History {
    snapshots: usize,
    /// Rows live at the head.
    live: u64,
    /// Registration → checkpoint at the head.
    replay: Duration,
    replay_tasks: String,
    /// Peak RSS during the replay.
    replay_peak_kib: Option<u64>,
    feed: Read,
    net: Net,
    net_tasks: String,
    /// "ok (…)" or "MISMATCH: …".
    check: String,
}

/// Step 5: registers the copy under `dir` (`registration` starts at the earliest
/// snapshot), waits for the replay to reach the head, then reads the whole feed per
/// snapshot and as net changes.
async fn whole_history(dir: &Path, base: &str, registration: &Value) -> anyhow::Result<History> {
    let client = reqwest::Client::new();
    let tasks = task_seconds(&client, base).await?;
    harness::reset_peak_rss();
    let Registered {
        table, id, waited, ..
    } = register_and_wait(&client, dir, base, registration).await?;
    let replay_peak_kib = harness::status_kib("VmHWM:");
    let replay_tasks = tasks_between(&tasks, &task_seconds(&client, base).await?);
    let snapshots = table.metadata().snapshots().len();
    let live = live_data_files(&table)
        .await?
        .iter()
        .map(|f| f.record_count())
        .sum();
    println!(
        "{HISTORY}: registered {id} from the first of {snapshots} snapshots; checkpoint at \
         the head after {:.2}s ({replay_tasks})",
        waited.as_secs_f64()
    );
    let feed = net::read_feed(&client, base, &id).await?;
    println!(
        "  per-snapshot events: {} in {:.2}s ({})",
        feed.events,
        feed.elapsed.as_secs_f64(),
        feed.describe_ops()
    );
    let tasks = task_seconds(&client, base).await?;
    let net = net::read_net(&client, base, &id, &feed.next).await?;
    let net_tasks = tasks_between(&tasks, &task_seconds(&client, base).await?);
    println!(
        "  net changes: computed in {:.2}s ({net_tasks}), read in {:.2}s ({})",
        net.computed.as_secs_f64(),
        net.read.elapsed.as_secs_f64(),
        net.read.describe_ops()
    );
    let check = check_history(&feed, &net.read, live);
    Ok(History {
        snapshots,
        live,
        replay: waited,
        replay_tasks,
        replay_peak_kib,
        feed,
        net,
        net_tasks,
        check,
    })
}

/// "ok (…)" when the feed, which starts at an empty table, adds up to the `live` rows of
/// its end, and its net changes are exactly those rows as inserts; else what did not.
fn check_history(feed: &Read, net: &Read, live: u64) -> String {
    let mut problems = Vec::new();
    let left = i128::from(feed.op("insert")) - i128::from(feed.op("delete"));
    if left != i128::from(live) {
        problems.push(format!(
            "per-snapshot inserts less deletes leave {left} rows, the head holds {live}"
        ));
    }
    if net.events != live || net.op("insert") != live {
        problems.push(format!(
            "net changes: {}, expected {live} insert",
            net.describe_ops()
        ));
    }
    if net.events > feed.events {
        problems.push(format!(
            "{} net events, more than the {} per-snapshot ones",
            net.events, feed.events
        ));
    }
    if problems.is_empty() {
        format!(
            "ok (net: {} = the live rows; per-snapshot: {})",
            net.describe_ops(),
            feed.describe_ops()
        )
    } else {
        format!("MISMATCH: {}", problems.join("; "))
    }
}

fn print_history(h: &History) {
    let (feed, net) = (&h.feed, &h.net.read);
    let read = feed.elapsed.as_secs_f64();
    println!();
    println!(
        "{HISTORY}: {} snapshots, {} rows live at the head",
        h.snapshots, h.live
    );
    println!(
        "{:<36} {:>10} {:>6} {:>9} {:>11} {:>8}",
        "step", "events", "pages", "seconds", "per second", "ratio"
    );
    let lines = [
        (
            "replay (POST → checkpoint at head)",
            feed.events,
            None,
            h.replay,
        ),
        (
            "per-snapshot events (NDJSON)",
            feed.events,
            Some(feed.pages),
            feed.elapsed,
        ),
        (
            "net: compute (first request → 200)",
            net.events,
            None,
            h.net.computed,
        ),
        (
            "net: read (NDJSON)",
            net.events,
            Some(net.pages),
            net.elapsed,
        ),
        (
            "net: compute + read",
            net.events,
            Some(net.pages),
            h.net.computed + net.elapsed,
        ),
    ];
    for (step, events, pages, elapsed) in lines {
        println!(
            "{step:<36} {events:>10} {:>6} {:>9.2} {:>11} {:>7.2}x",
            pages.map_or_else(|| "-".to_string(), |p: u64| p.to_string()),
            elapsed.as_secs_f64(),
            per_second(events as f64 / elapsed.as_secs_f64()),
            elapsed.as_secs_f64() / read,
        );
    }
    println!(
        "(ratio: seconds / the per-snapshot read's; pages of {PAGE_LIMIT} events; the net \
         compute starts with the range's first request; {} empty pages held it meanwhile)",
        h.net.pending
    );
    println!("replay tasks: {}", h.replay_tasks);
    println!("net tasks: {}", h.net_tasks);
    println!(
        "bytes/event: {:.0} per-snapshot, {:.0} net; counting ops in the benchmark: {:.2}s \
         of the per-snapshot read, {:.2}s of the net read",
        feed.bytes as f64 / feed.events.max(1) as f64,
        net.bytes as f64 / net.events.max(1) as f64,
        feed.client.as_secs_f64(),
        net.client.as_secs_f64()
    );
    println!(
        "page latency: per-snapshot {}; net {}",
        feed.describe_latency(),
        net.describe_latency()
    );
    let mib = |kib: Option<u64>| kib.map_or_else(|| "?".into(), |k| format!("{} MiB", k / 1024));
    println!(
        "peak RSS (node and benchmark): replay {}, per-snapshot read {}, net compute {}, \
         net read {}",
        mib(h.replay_peak_kib),
        mib(feed.peak_kib),
        mib(h.net.compute_peak_kib),
        mib(net.peak_kib)
    );
    println!("check: {}", h.check);
}
