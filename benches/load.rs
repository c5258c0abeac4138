//! Load benchmark: how fast icefeed exports a taxi-sized Iceberg table and serves its feed,
//! compared with the physical floor of decoding the same Parquet files with bare Arrow.
//!
//! `cargo bench --bench load -- [--rows N] [--dir PATH] [--files-rows R]
//! [--wires json,ndjson,arrow] [--pull-events M] [--sse-events E] [--sse-limit L] [--consumers C] [--consumer-events K] [--stall S]`
//!
//! 1. generates (or reuses) a day-partitioned taxi table of N rows written in 9 appends;
//! 2. scans all its data files with bare Arrow on 2 threads (the floor), then decodes
//!    them and encodes them with `arrow-json` on 2 threads (the JSON floor);
//! 3. registers the table with an in-process node on a fresh PostgreSQL database and times
//!    the initial export until the checkpoint appears;
//! 4. pages through the feed as JSON, NDJSON and Arrow (after 500K events untimed, as
//!    the floors are timed warm), checking every page against its headers (JSON and
//!    NDJSON: the events counted, the first page parsed; Arrow: read with Arrow IPC);
//! 5. reads the feed as server-sent events with one consumer, then with C consumers at
//!    once, each parsing every event;
//! 6. keeps one stream connected without reading it, the whole table behind it, and
//!    samples the RSS;
//! 7. prints a table of results, with each rate next to the bare scan and to the JSON
//!    floor of the same run, and the peak RSS.
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL` (a role that may create databases).

#[path = "load/body.rs"]
mod body;
#[path = "load/database.rs"]
mod database;
#[path = "load/delivery.rs"]
mod delivery;
#[path = "load/generate.rs"]
mod generate;
#[path = "load/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "load/scan.rs"]
#[allow(dead_code)]
mod scan;
#[path = "load/service.rs"]
mod service;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::harness::per_second;

/// Rows per second of decoding the 41M-row taxi table and encoding it with `arrow-json` on
/// 2 threads on the reference machines (PERFORMANCE.md), printed next to this run's.
const REFERENCE_JSON_FLOOR: f64 = 2.0e6;

/// Arguments after `--` of `cargo bench --bench load`.
#[derive(Debug, Parser)]
#[command(name = "load", about = "icefeed load benchmark")]
struct Args {
    /// Rows of the generated table.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Directory of the table (catalog.db and warehouse/); reused when it holds exactly
    /// `--rows` rows. Default: `$HOME/.cache/icefeed/bench/taxi-<rows>`.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Upper bound on rows per data file. The default keeps one file per day partition and
    /// append up to ~50M rows, i.e. ~112k rows per file (~373 files) at 41M rows.
    #[arg(long, default_value_t = generate::DEFAULT_MAX_ROWS_PER_FILE)]
    files_rows: usize,
    /// Representations the pull phases page through, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "json,ndjson,arrow"
    )]
    wires: Vec<service::Wire>,
    /// Events to pull through the changes endpoint (default: min(rows, 2,000,000)).
    #[arg(long)]
    pull_events: Option<u64>,
    /// Events the single SSE consumer reads (default: the pull events).
    #[arg(long)]
    sse_events: Option<u64>,
    /// `limit` of the SSE streams (default: the node's, 1000).
    #[arg(long)]
    sse_limit: Option<u64>,
    /// Concurrent SSE consumers of one table.
    #[arg(long, default_value_t = 100)]
    consumers: usize,
    /// Events each concurrent consumer reads (default: the pull events / consumers).
    #[arg(long)]
    consumer_events: Option<u64>,
    /// Seconds the stalled consumer stays connected.
    #[arg(long, default_value_t = 5)]
    stall: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One line of the results table.
struct Row {
    scenario: String,
    rows: u64,
    elapsed: Duration,
    bytes: u64,
    /// Whether the rows are rendered as JSON (compared with the JSON encoding floor).
    json: bool,
}

impl Row {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(args.rows > 0, "--rows must be positive");
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => generate::default_dir(args.rows)?,
    };
    let pull_events = args.pull_events.unwrap_or(args.rows.min(2_000_000));
    anyhow::ensure!(args.consumers > 0, "--consumers must be positive");
    let plan = delivery::DeliveryPlan {
        sse_events: args.sse_events.unwrap_or(pull_events),
        sse_limit: args.sse_limit,
        consumers: args.consumers,
        consumer_events: args
            .consumer_events
            .unwrap_or((pull_events / args.consumers as u64).max(1)),
        stall: Duration::from_secs(args.stall),
    };
    let runtime = harness::runtime()?;

    // 1. The table.
    let table = runtime.block_on(generate::ensure_table(&dir, args.rows, args.files_rows))?;
    println!("{}", table.describe());

    // 2. The floors, on 2 threads, best of two runs (the second with a warm cache): bare
    // Arrow, then decoding and encoding with arrow-json.
    let paths: Vec<PathBuf> = table.files.iter().map(|f| f.path.clone()).collect();
    let scan_row = Row {
        scenario: "bare Arrow scan (2 threads)".into(),
        rows: table.rows,
        elapsed: best_of_two("bare scan", table.rows, || scan::bare_scan(&paths, 2))?,
        bytes: table.bytes(),
        json: false,
    };
    let json_row = Row {
        scenario: "decode + arrow-json (2 threads)".into(),
        rows: table.rows,
        elapsed: best_of_two("JSON floor", table.rows, || scan::json_scan(&paths, 2))?,
        bytes: table.bytes(),
        json: true,
    };
    let peak_before_service = peak_rss_kib();
    // Peak RSS of the service phases alone.
    let reset = harness::reset_peak_rss();

    // 3 and 4. The service.
    let admin_url = harness::admin_url();
    let outcome = runtime.block_on(service::run(
        &admin_url,
        &table,
        &args.wires,
        pull_events,
        &plan,
    ))?;

    // 5. Results.
    let floor = scan_row.rate();
    let json_floor = json_row.rate();
    let mut rows = vec![
        Row {
            scenario: format!("generate ({} appends)", generate::APPENDS),
            rows: table.rows,
            elapsed: table.generated_in.unwrap_or_default(),
            bytes: table.bytes(),
            json: false,
        },
        scan_row,
        json_row,
        Row {
            scenario: "initial load (POST → checkpoint)".into(),
            rows: table.rows,
            elapsed: outcome.initial_load,
            bytes: outcome.initial_load_bytes,
            json: false,
        },
    ];
    for pull in &outcome.pulls {
        rows.push(Row {
            scenario: format!("pull {} (limit {})", pull.format, pull.limit),
            rows: pull.events,
            elapsed: pull.elapsed,
            bytes: pull.bytes,
            json: pull.format != "Arrow",
        });
    }
    let streams = &outcome.delivery;
    for run in [&streams.single, &streams.fan_out] {
        rows.push(Row {
            scenario: format!(
                "SSE, {} consumer{} (limit {})",
                run.consumers,
                if run.consumers == 1 { "" } else { "s" },
                args.sse_limit
                    .map_or_else(|| "default".to_string(), |l| l.to_string())
            ),
            rows: run.events(),
            elapsed: run.elapsed,
            bytes: run.bytes(),
            json: true,
        });
    }
    if table.generated_in.is_none() {
        rows.remove(0);
    }
    println!();
    println!(
        "{:<36} {:>12} {:>9} {:>13} {:>9} {:>9} {:>10}",
        "scenario", "rows/events", "seconds", "per second", "MB/s", "vs scan", "vs JSON fl"
    );
    for row in &rows {
        println!(
            "{:<36} {:>12} {:>9.2} {:>13} {:>9.1} {:>8.3}x {:>10}",
            row.scenario,
            row.rows,
            row.elapsed.as_secs_f64(),
            per_second(row.rate()),
            row.bytes as f64 / 1e6 / row.elapsed.as_secs_f64(),
            row.rate() / floor,
            if row.json {
                format!("{:.3}x", row.rate() / json_floor)
            } else {
                "-".to_string()
            },
        );
    }
    println!(
        "(MB/s: Parquet bytes for generate, scan and load; response bodies for pulls and \
         streams. JSON floor: decode + arrow-json encoding in this run; {} on the reference \
         machines, PERFORMANCE.md)",
        per_second(REFERENCE_JSON_FLOOR)
    );
    for pull in &outcome.pulls {
        println!(
            "pull {}: {} pages, {:.0} bytes/event, {:.2}s checking bodies in the benchmark \
             ({} without it), last page more={}, check: {}",
            pull.format,
            pull.pages,
            pull.bytes as f64 / pull.events.max(1) as f64,
            pull.client.as_secs_f64(),
            per_second(pull.events as f64 / (pull.elapsed - pull.client).as_secs_f64()),
            pull.last_more,
            pull.check
        );
    }
    for (run, wanted) in [
        (&streams.single, plan.sse_events.min(table.rows)),
        (&streams.fan_out, plan.consumer_events.min(table.rows)),
    ] {
        let rates = run.per_consumer();
        println!(
            "SSE, {} consumer(s) x {wanted} events: per consumer min {} median {} max {}; \
             {:.0} bytes/event, {:.2}s parsing events in the benchmark, check: {}",
            run.consumers,
            per_second(rates[0]),
            per_second(rates[rates.len() / 2]),
            per_second(rates[rates.len() - 1]),
            run.bytes() as f64 / run.events().max(1) as f64,
            run.client().as_secs_f64(),
            run.check(wanted)
        );
    }
    let stalled = &streams.stalled;
    println!(
        "stalled SSE consumer (limit {}, {} events behind, {}s): RSS {:.0} MiB idle, \
         {:.0} MiB stalled (+{:.1} MiB)",
        stalled.limit,
        table.rows,
        stalled.held.as_secs(),
        stalled.idle_kib as f64 / 1024.0,
        stalled.stalled_kib as f64 / 1024.0,
        (stalled.stalled_kib as f64 - stalled.idle_kib as f64) / 1024.0
    );
    let peak = peak_rss_kib();
    match (reset, peak_before_service, peak) {
        (true, Some(before), Some(service)) => println!(
            "peak RSS: {:.0} MiB up to the bare scan; {:.0} MiB during the service phases",
            before as f64 / 1024.0,
            service as f64 / 1024.0
        ),
        (_, _, Some(peak)) => println!("peak RSS: {:.0} MiB", peak as f64 / 1024.0),
        _ => println!("peak RSS: unavailable"),
    }
    Ok(())
}

/// The shorter of two runs of `floor`, which must read all `rows` rows of the table.
fn best_of_two(
    name: &str,
    rows: u64,
    mut floor: impl FnMut() -> anyhow::Result<(u64, Duration)>,
) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for run in 1..=2 {
        let (read, elapsed) = floor()?;
        anyhow::ensure!(
            read == rows,
            "{name} read {read} rows, the snapshot says {rows}"
        );
        println!(
            "{name} run {run}: {read} rows in {:.2}s ({})",
            elapsed.as_secs_f64(),
            per_second(read as f64 / elapsed.as_secs_f64())
        );
        best = best.min(elapsed);
    }
    Ok(best)
}

/// `VmHWM` of this process in KiB.
fn peak_rss_kib() -> Option<u64> {
    harness::status_kib("VmHWM:")
}
