//! Overload benchmark: latency of ordinary API requests on a node that also holds many
//! idle long polls and event streams (the goal: p99 under 100 ms with 1,000 long polls
//! and 200 streams), next to the same requests on the idle node, in one run.
//!
//! `cargo bench --bench overload -- [--long-polls 1000] [--streams 200] [--requests 2000]
//! [--concurrency 4]`
//!
//! 1. writes the demo table (`icefeed demo`'s, 1,200 rows in three snapshots) and
//!    registers it with an in-process node (default settings, `limits.*` included) on a
//!    fresh PostgreSQL database;
//! 2. baseline (after a warm-up of as many): `--requests` ordinary requests, `--concurrency` at a time, cycling through
//!    getting the table, listing tables, and reading a page of 100 events;
//! 3. opens `--streams` event streams (`after=now`) and `--long-polls` long polls
//!    (`after=now&wait=60`, renewed when they return), as clients of 50 waiters each (one
//!    bearer token per client: the node has auth off, so the token only names the
//!    client), and waits until the node counts them all open
//!    (`icefeed_http_waiting_requests`);
//! 4. the same requests again, then checks that every waiter is still open;
//! 5. prints p50, p99 and max of both runs and the ratio of the p99s.
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL` (a role that may create databases).

#[path = "load/database.rs"]
mod database;
#[path = "load/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{FutureExt, StreamExt};
use serde_json::Value;

use crate::database::with_node;

/// Waiters per client, under `limits.max_waiting_per_client`.
const WAITERS_PER_CLIENT: usize = 50;

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    long_polls: usize,
    #[arg(long, default_value_t = 200)]
    streams: usize,
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Accepted for `cargo bench`, which passes it to every harness-less benchmark.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(
        args.requests > 0 && args.concurrency > 0,
        "--requests and --concurrency must be positive"
    );
    let runtime = harness::runtime()?;
    let admin_url = harness::admin_url();
    runtime.block_on(run(&args, &admin_url))
}

async fn run(args: &Args, admin_url: &str) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("icefeed-bench-overload")
        .tempdir()?;
    let demo = icefeed_testkit::demo::init(dir.path()).await?;
    with_node(admin_url, async |node| {
        let http = reqwest::Client::new();
        let table = register(&http, &node.base, &demo.registration_json()).await?;
        let paths = [
            format!("/v1/tables/{table}"),
            "/v1/tables".to_string(),
            format!("/v1/tables/{table}/changes?limit=100"),
        ];
        // Warm-up (connections, caches), not counted.
        latencies(&http, &node.base, &paths, args).await?;
        let idle = latencies(&http, &node.base, &paths, args).await?;

        let open = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for n in 0..args.streams + args.long_polls {
            let client = format!("bench-client-{}", n / WAITERS_PER_CLIENT);
            let (http, base, open) = (http.clone(), node.base.clone(), open.clone());
            let path = format!("/v1/tables/{table}/changes");
            waiters.push(tokio::spawn(if n < args.streams {
                stream(http, format!("{base}{path}/stream?after=now"), client, open).boxed()
            } else {
                long_poll(
                    http,
                    format!("{base}{path}?after=now&wait=60"),
                    client,
                    open,
                )
                .boxed()
            }));
        }
        let expected = args.streams + args.long_polls;
        wait_for_waiters(&http, &node.base, expected).await?;
        let loaded = latencies(&http, &node.base, &paths, args).await?;
        let still_open = waiting(&http, &node.base).await?;
        for waiter in &waiters {
            if waiter.is_finished() {
                bail!("a waiter ended early");
            }
        }
        waiters.iter().for_each(|w| w.abort());
        anyhow::ensure!(
            still_open >= expected,
            "only {still_open} of {expected} waiters were open at the end"
        );

        println!(
            "ordinary requests ({} at a time, {} each run): p50 / p99 / max",
            args.concurrency, args.requests
        );
        println!("  idle node:                  {}", idle.describe());
        println!(
            "  with {} long polls, {} streams: {}",
            args.long_polls,
            args.streams,
            loaded.describe()
        );
        println!(
            "  p99 ratio (loaded / idle): {:.2}x; goal: loaded p99 < 100 ms",
            loaded.p99.as_secs_f64() / idle.p99.as_secs_f64()
        );
        Ok(())
    })
    .await
}

async fn register(http: &reqwest::Client, base: &str, body: &Value) -> anyhow::Result<String> {
    let answer: Value = http
        .post(format!("{base}/v1/tables"))
        .json(body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = answer["id"].as_str().context("registration without id")?;
    // The demo's three snapshots are published before anything is measured.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let table: Value = http
            .get(format!("{base}/v1/tables/{id}"))
            .send()
            .await?
            .json()
            .await?;
        if table["checkpoint"].is_object() && table["lag"]["snapshots"] == 0 {
            return Ok(id.to_string());
        }
        if Instant::now() > deadline {
            bail!("the demo table was not published within 60 s: {table}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An event stream held open (and read) until aborted.
async fn stream(http: reqwest::Client, url: String, client: String, open: Arc<AtomicUsize>) {
    let response = http.get(url).bearer_auth(client).send().await;
    let Ok(response) = response.and_then(|r| r.error_for_status()) else {
        eprintln!("a stream was refused");
        return;
    };
    open.fetch_add(1, Ordering::SeqCst);
    let mut body = response.bytes_stream();
    while let Some(Ok(_)) = body.next().await {}
}

/// A long poll renewed whenever it returns, until aborted.
async fn long_poll(http: reqwest::Client, url: String, client: String, open: Arc<AtomicUsize>) {
    open.fetch_add(1, Ordering::SeqCst);
    loop {
        let answer = http.get(&url).bearer_auth(&client).send().await;
        match answer.and_then(|r| r.error_for_status()) {
            Ok(r) => drop(r.bytes().await),
            Err(e) => {
                eprintln!("a long poll failed: {e}");
                return;
            }
        }
    }
}

/// `icefeed_http_waiting_requests` of the node.
async fn waiting(http: &reqwest::Client, base: &str) -> anyhow::Result<usize> {
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix("icefeed_http_waiting_requests "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as usize)
}

async fn wait_for_waiters(
    http: &reqwest::Client,
    base: &str,
    expected: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let open = waiting(http, base).await?;
        if open >= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {open} of {expected} streams and long polls opened within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Latencies {
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Latencies {
    fn describe(&self) -> String {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        format!("{} / {} / {}", ms(self.p50), ms(self.p99), ms(self.max))
    }
}

/// Times `args.requests` GETs cycling through `paths`, `args.concurrency` at a time; any
/// answer but 200 fails the run.
async fn latencies(
    http: &reqwest::Client,
    base: &str,
    paths: &[String],
    args: &Args,
) -> anyhow::Result<Latencies> {
    let mut times: Vec<Duration> = futures::stream::iter(0..args.requests)
        .map(|n| {
            let url = format!("{base}{}", paths[n % paths.len()]);
            async move {
                let started = Instant::now();
                let response = http.get(&url).send().await?;
                let status = response.status();
                response.bytes().await?;
                anyhow::ensure!(status == 200, "{url} answered {status}");
                Ok(started.elapsed())
            }
        })
        .buffer_unordered(args.concurrency)
        .collect::<Vec<anyhow::Result<Duration>>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok(Latencies {
        p50: at(0.5),
        p99: at(0.99),
        max: *times.last().expect("requests > 0"),
    })
}
