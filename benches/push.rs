//! Push benchmark: documents per second a push subscription writes into OpenSearch, next
//! to a bare `_bulk` loader sending the same documents in batches of the same size (the
//! floor set by OpenSearch itself).
//!
//! `cargo bench --bench push -- [--rows 1000000] [--changed 50000] [--batch 1000]
//! [--warm-up 200000]`
//!
//! 1. copies the taxi table of `benches/load.rs` (generated there when missing) into a
//!    scratch directory next to it, since the CDC scenarios commit to it;
//! 2. registers the copy (`start: "snapshot"`, key `trip_id`) with an in-process node on a
//!    fresh PostgreSQL database and waits for its initial export;
//! 3. warm-up: the bare loader sends the first `--warm-up` events into a throwaway index
//!    (deleted after), so that neither measured side pays for a cold OpenSearch (JIT);
//!    initial load: creates a push subscription into a fresh index and times it from
//!    creation until its lag is zero; then the bare loader sends the same events, made
//!    into the same `_bulk` bodies by the same code (`items_for_event`, `split`, `encode`)
//!    into a second fresh index with the same settings, one request at a time, as the
//!    push worker does (one batch in flight per subscription); with
//!    `--clone-initial-load`, the bare index is a clone of icefeed's instead (untimed);
//! 4. CDC: per scenario (copy-on-write update, then delete, of `--changed` scattered
//!    rows) pauses the subscription, commits one snapshot, waits until it is published,
//!    then times the resumed subscription until its lag is zero, then the bare loader;
//! 5. checks both indices hold the table's rows, prints docs/s of both and the ratio, and
//!    deletes both indices (also when a step failed).
//!
//! icefeed always goes first, so any warm-up left favours the bare loader.
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL`; OpenSearch: `ICEFEED_BENCH_OPENSEARCH_URL`
//! (default `http://127.0.0.1:9200`).

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

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use icefeed::api::pages::{MORE_HEADER, NEXT_CURSOR_HEADER};
use icefeed::delivery::opensearch::{OpenSearchClient, PushTarget, encode, split};
use icefeed::delivery::push::items_for_event;
use icefeed::store::{SourceTable, Store, TableId};
use icefeed_testkit::rewrite::live_data_files;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::cdc::{
    Kind, Registered, commit_plan, copy_table, plan_scattered, register_and_wait, scratch_dir,
    wait_checkpoint,
};
use crate::database::with_node;

const DEFAULT_OPENSEARCH_URL: &str = "http://127.0.0.1:9200";
const PAGE_LIMIT: u64 = 10_000;
/// Events the bare loader makes into bodies at a time (untimed), bounding its memory.
const BARE_CHUNK: u64 = 100_000;
const LAG_POLL: Duration = Duration::from_millis(100);
/// The subscription fails the benchmark when it settles no document for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Arguments after `--` of `cargo bench --bench push`.
#[derive(Debug, Parser)]
#[command(name = "push", about = "icefeed push benchmark")]
struct Args {
    /// Rows of the taxi table (the one `--bench load` generates for that many rows).
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows each CDC scenario (update, delete) changes.
    #[arg(long, default_value_t = 50_000)]
    changed: u64,
    /// Documents per `_bulk` request, for both (the push target's `batch.max_documents`).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Documents sent into a throwaway index before anything is measured, so that
    /// neither side pays for warming OpenSearch up (JIT, caches); 0 for none.
    #[arg(long, default_value_t = 200_000)]
    warm_up: u64,
    /// Instead of loading the bare index, clone icefeed's once it has caught up (untimed;
    /// no initial-load ratio): the CDC scenarios of a large table in half the time, on
    /// two indices with the same segments.
    #[arg(long)]
    clone_initial_load: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One line of the results table.
struct Outcome {
    scenario: String,
    documents: u64,
    icefeed: Duration,
    bare: Duration,
    load: String,
}

/// What the scenarios share.
struct Bench {
    http: reqwest::Client,
    base: String,
    opensearch: String,
    table: SourceTable,
    subscription: String,
    /// The bare loader's target: the subscription's, with another index.
    bare: PushTarget,
    bare_index: String,
    icefeed_index: String,
    /// The table feed's cursor after the events sent so far.
    cursor: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(
        args.rows > 0 && args.changed > 0 && args.batch > 0,
        "--rows, --changed and --batch must be positive"
    );
    let runtime = harness::runtime()?;
    let admin_url = harness::admin_url();
    let opensearch = std::env::var("ICEFEED_BENCH_OPENSEARCH_URL")
        .unwrap_or_else(|_| DEFAULT_OPENSEARCH_URL.to_string());
    let outcomes = runtime.block_on(run(&args, &admin_url, &opensearch))?;

    println!();
    println!(
        "{:<28} {:>10} {:>12} {:>12} {:>7}  load (1/5/15 min)",
        "scenario", "documents", "icefeed/s", "bare/s", "ratio"
    );
    for o in &outcomes {
        let rate = |d: Duration| o.documents as f64 / d.as_secs_f64();
        println!(
            "{:<28} {:>10} {:>12.0} {:>12.0} {:>6.2}x  {}",
            o.scenario,
            o.documents,
            rate(o.icefeed),
            rate(o.bare),
            o.icefeed.as_secs_f64() / o.bare.as_secs_f64(),
            o.load
        );
    }
    println!(
        "(icefeed: subscription created or resumed → lag 0, polled every {} ms; bare: the \
         same _bulk bodies, {} documents each, one request at a time; ratio: icefeed time / \
         bare time)",
        LAG_POLL.as_millis(),
        args.batch
    );
    Ok(())
}

async fn run(args: &Args, admin_url: &str, opensearch: &str) -> anyhow::Result<Vec<Outcome>> {
    // 1. The scratch copy of the load benchmark's table.
    let source = generate::default_dir(args.rows)?;
    generate::ensure_table(&source, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    let scratch = scratch_dir(&source, "push")?;
    copy_table(&source, &scratch).await?;
    let table =
        generate::ensure_table(&scratch, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    anyhow::ensure!(
        table.generated_in.is_none() && table.files.iter().all(|f| f.path.starts_with(&scratch)),
        "the copy in {} does not reference its own files",
        scratch.display()
    );
    println!("{}", table.describe());

    // 2. The node.
    let mut registration = table.registration();
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);
    with_node(admin_url, async |node| {
        let store = Store::connect(&node.database_url).await?;
        scenarios(
            args,
            &scratch,
            &node.base,
            opensearch,
            &registration,
            &store,
        )
        .await
    })
    .await
}

async fn scenarios(
    args: &Args,
    dir: &std::path::Path,
    base: &str,
    opensearch: &str,
    registration: &Value,
    store: &Store,
) -> anyhow::Result<Vec<Outcome>> {
    let http = reqwest::Client::new();
    let Registered {
        catalog,
        table: mut iceberg_table,
        id,
        waited: exported,
    } = register_and_wait(&http, dir, base, registration).await?;
    println!(
        "initial export of {} rows: {:.1}s",
        args.rows,
        exported.as_secs_f64()
    );
    let table = store.get_table(TableId(id.parse()?)).await?;

    let tag = uuid::Uuid::new_v4().simple().to_string();
    let icefeed_index = format!("bench-push-icefeed-{}", &tag[..8]);
    let bare_index = format!("bench-push-bare-{}", &tag[..8]);
    let target = |index: &str| {
        json!({
            "endpoints": [opensearch],
            "index": index,
            "batch": {"max_documents": args.batch},
            "index_settings": {"number_of_shards": 1, "number_of_replicas": 0},
        })
    };
    let mut bench = Bench {
        http,
        base: base.to_string(),
        opensearch: opensearch.to_string(),
        table,
        subscription: String::new(),
        bare: PushTarget::from_json(&target(&bare_index))?,
        bare_index,
        icefeed_index: icefeed_index.clone(),
        cursor: None,
    };
    let measured = async {
        if args.warm_up > 0 {
            bench.warm_up(&target, args.warm_up).await?;
        }
        let response = bench
            .http
            .post(format!("{base}/v1/subscriptions"))
            .json(
                &json!({"name": "bench-push", "tables": [id], "kind": "opensearch",
                          "target": target(&icefeed_index)}),
            )
            .send()
            .await?;
        let started = Instant::now();
        let status = response.status();
        let body: Value = response.json().await?;
        anyhow::ensure!(
            status.is_success(),
            "subscription answered {status}: {body}"
        );
        bench.subscription = body["id"].as_str().context("subscription id")?.to_string();

        // 3. Initial load.
        let mut outcomes = Vec::new();
        let icefeed = bench.wait_caught_up(started).await?;
        if args.clone_initial_load {
            bench.clone_initial_load().await?;
        } else {
            let (documents, bare) = bench.bare_load(None).await?;
            outcomes.push(Outcome {
                scenario: "initial load (insert)".into(),
                documents,
                icefeed,
                bare,
                load: load_average(),
            });
        }
        bench.check_counts(args.rows).await?;

        // 4. CDC.
        let mut rows = args.rows;
        for kind in [Kind::Update, Kind::Delete] {
            let scenario = format!("{} {} scattered", kind.op(), args.changed);
            println!("{scenario} ...");
            bench.set_paused(true).await?;
            let plan = plan_scattered(&live_data_files(&iceberg_table).await?, args.changed)?;
            iceberg_table = commit_plan(&catalog, &iceberg_table, &plan, kind).await?.0;
            let snapshot = iceberg_table
                .metadata()
                .current_snapshot_id()
                .context("no snapshot")?;
            wait_checkpoint(&bench.http, base, &id, snapshot).await?;
            let started = Instant::now();
            bench.set_paused(false).await?;
            let icefeed = bench.wait_caught_up(started).await?;
            let (documents, bare) = bench.bare_load(None).await?;
            anyhow::ensure!(
                documents == args.changed,
                "{scenario}: {documents} events, expected {}",
                args.changed
            );
            if kind == Kind::Delete {
                rows -= args.changed;
            }
            bench.check_counts(rows).await?;
            outcomes.push(Outcome {
                scenario,
                documents,
                icefeed,
                bare,
                load: load_average(),
            });
        }
        Ok(outcomes)
    }
    .await;
    // 41M documents take ~11 GB: the indices go whether or not the run succeeded.
    bench.delete_indices().await;
    measured
}

impl Bench {
    async fn subscription_view(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!(
                "{}/v1/subscriptions/{}",
                self.base, self.subscription
            ))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Waits until the subscription has pushed everything; the time since `started`.
    async fn wait_caught_up(&self, started: Instant) -> anyhow::Result<Duration> {
        let (mut settled, mut progressed) = (None, Instant::now());
        loop {
            let view = self.subscription_view().await?;
            if view["push"]["state"] == "failed" {
                bail!("the subscription failed: {}", view["push"]["last_error"]);
            }
            if view["push"]["state"] == "running"
                && view["lag"]["events"] == 0
                && view["lag"]["snapshots"] == 0
            {
                let elapsed = started.elapsed();
                println!(
                    "  icefeed: caught up in {:.2}s ({} indexed, {} deleted, {} skipped, {} rejected)",
                    elapsed.as_secs_f64(),
                    view["push"]["documents_indexed"],
                    view["push"]["documents_deleted"],
                    view["push"]["documents_skipped"],
                    view["push"]["documents_rejected"],
                );
                return Ok(elapsed);
            }
            let now_settled = [
                "documents_indexed",
                "documents_deleted",
                "documents_skipped",
                "documents_rejected",
            ]
            .map(|field| view["push"][field].as_i64());
            if settled != Some(now_settled) {
                (settled, progressed) = (Some(now_settled), Instant::now());
            } else if progressed.elapsed() > STALL_TIMEOUT {
                bail!("no document settled for {STALL_TIMEOUT:?}: {view}");
            }
            tokio::time::sleep(LAG_POLL).await;
        }
    }

    /// Pauses or resumes the subscription; a pause waits until the worker has stopped.
    async fn set_paused(&self, paused: bool) -> anyhow::Result<()> {
        self.http
            .patch(format!(
                "{}/v1/subscriptions/{}",
                self.base, self.subscription
            ))
            .json(&json!({ "paused": paused }))
            .send()
            .await?
            .error_for_status()?;
        while paused && self.subscription_view().await?["push"]["node"] != Value::Null {
            tokio::time::sleep(LAG_POLL).await;
        }
        Ok(())
    }

    /// The table's events after the cursor, as the same `_bulk` bodies the push worker
    /// sends (but into the bare index), whole pages until at least `at_least` events;
    /// advances the cursor. Also whether events are left. Not timed.
    async fn bare_bodies(&mut self, at_least: u64) -> anyhow::Result<(u64, Vec<Bytes>, bool)> {
        let url = format!("{}/v1/tables/{}/changes", self.base, self.table.id.0);
        let mut items = Vec::new();
        loop {
            let mut request = self
                .http
                .get(&url)
                .query(&[("limit", PAGE_LIMIT)])
                .header(ACCEPT, "application/x-ndjson");
            if let Some(cursor) = &self.cursor {
                request = request.query(&[("after", cursor)]);
            }
            let response = request.send().await?.error_for_status()?;
            let header = |name: &str| harness::page_header(&response, name, "NDJSON");
            let next = header(NEXT_CURSOR_HEADER)?;
            let more = header(MORE_HEADER)? == "true";
            let body = response.bytes().await?;
            let before = items.len();
            for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                // Any growing version does for a bare loader.
                let version = items.len() as i64 + 1;
                items.extend(items_for_event(
                    line,
                    version,
                    &self.bare,
                    std::slice::from_ref(&self.table),
                )?);
            }
            self.cursor = Some(next);
            let more = more && items.len() > before;
            if !more || items.len() as u64 >= at_least {
                let bodies = split(&items, &self.bare.config.batch)
                    .into_iter()
                    .map(|run| encode(&items[run]))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok((items.len() as u64, bodies, more));
            }
        }
    }

    /// Sends the events after the cursor (at least `limit` of them, else all) into the bare
    /// index, one `_bulk` at a time; returns how many and the time the requests took. The
    /// bodies are made a chunk at a time, outside the timing, so that memory stays bounded.
    async fn bare_load(&mut self, limit: Option<u64>) -> anyhow::Result<(u64, Duration)> {
        let client =
            OpenSearchClient::new(&self.bare, &icefeed::network::HostPolicy::unrestricted())?;
        let config = &self.bare.config;
        client
            .ensure_index(
                &self.bare_index,
                config.index_settings.as_ref(),
                config.mappings.as_ref(),
            )
            .await?;
        let url = format!("{}/_bulk", self.opensearch);
        let (mut documents, mut elapsed) = (0, Duration::ZERO);
        loop {
            let want = limit.map_or(BARE_CHUNK, |l| l.saturating_sub(documents).min(BARE_CHUNK));
            if want == 0 {
                break;
            }
            let (read, bodies, more) = self.bare_bodies(want).await?;
            documents += read;
            let started = Instant::now();
            for body in bodies {
                self.bare_bulk(&url, body).await?;
            }
            elapsed += started.elapsed();
            if !more {
                break;
            }
        }
        println!(
            "  bare loader: {documents} documents in {:.2}s",
            elapsed.as_secs_f64()
        );
        Ok((documents, elapsed))
    }

    /// One `_bulk` request of the bare loader; every item must go through.
    async fn bare_bulk(&self, url: &str, body: Bytes) -> anyhow::Result<()> {
        let answer = self
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/x-ndjson")
            .body(body)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        // `{"took":N,"errors":false,…`: any failed item fails the benchmark.
        const NO_ERRORS: &[u8] = b"\"errors\":false";
        let head = &answer[..answer.len().min(40)];
        anyhow::ensure!(
            head.windows(NO_ERRORS.len()).any(|w| w == NO_ERRORS),
            "a bare _bulk had errors: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(2000)])
        );
        Ok(())
    }

    /// Sends the first `documents` events into a throwaway index, then deletes it and
    /// rewinds the bare loader to the start of the feed.
    async fn warm_up(
        &mut self,
        target: &impl Fn(&str) -> Value,
        documents: u64,
    ) -> anyhow::Result<()> {
        let index = format!("{}-warm-up", self.bare_index);
        let measured = std::mem::replace(&mut self.bare, PushTarget::from_json(&target(&index))?);
        let measured_index = std::mem::replace(&mut self.bare_index, index.clone());
        print!("warm-up: ");
        self.bare_load(Some(documents)).await?;
        (self.bare, self.bare_index, self.cursor) = (measured, measured_index, None);
        self.http
            .delete(format!("{}/{index}", self.opensearch))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Makes the bare index a clone of icefeed's and moves the bare loader's cursor past
    /// the initial load (pages of updates and deletes only skip insert segments unread).
    async fn clone_initial_load(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let (source, target) = (&self.icefeed_index, &self.bare_index);
        let blocks = |index: &str, write: Value| {
            self.http
                .put(format!("{}/{index}/_settings", self.opensearch))
                .json(&json!({"index.blocks.write": write}))
                .send()
        };
        blocks(source, json!(true)).await?.error_for_status()?;
        self.http
            .post(format!("{}/{source}/_clone/{target}", self.opensearch))
            .query(&[("wait_for_active_shards", "all")])
            .json(&json!({"settings": {"index.number_of_replicas": 0}}))
            .send()
            .await?
            .error_for_status()?;
        for index in [source, target] {
            blocks(index, Value::Null).await?.error_for_status()?;
        }
        let url = format!("{}/v1/tables/{}/changes", self.base, self.table.id.0);
        loop {
            let mut request = self
                .http
                .get(&url)
                .query(&[("limit", "1"), ("ops", "update,delete")]);
            if let Some(cursor) = &self.cursor {
                request = request.query(&[("after", cursor)]);
            }
            let response = request.send().await?.error_for_status()?;
            let page: Value = response.json().await?;
            anyhow::ensure!(
                page["events"].as_array().is_some_and(|e| e.is_empty()),
                "an update or delete before the CDC scenarios: {page}"
            );
            self.cursor = page["next"].as_str().map(str::to_string);
            if page["more"] != true {
                break;
            }
        }
        println!(
            "  bare index cloned from icefeed's in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Deletes both measured indices; a failure is only reported.
    async fn delete_indices(&self) {
        let url = format!(
            "{}/{},{}?ignore_unavailable=true",
            self.opensearch, self.icefeed_index, self.bare_index
        );
        let deleted = self.http.delete(url).send().await;
        if let Err(e) = deleted.and_then(|r| r.error_for_status()) {
            eprintln!("could not delete the benchmark's indices: {e}");
        }
    }

    /// Both indices hold `rows` documents.
    async fn check_counts(&self, rows: u64) -> anyhow::Result<()> {
        for index in [&self.icefeed_index, &self.bare_index] {
            self.http
                .post(format!("{}/{index}/_refresh", self.opensearch))
                .send()
                .await?
                .error_for_status()?;
            let count: Value = self
                .http
                .get(format!("{}/{index}/_count", self.opensearch))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            anyhow::ensure!(
                count["count"].as_u64() == Some(rows),
                "{index} holds {} documents, the table {rows}",
                count["count"]
            );
        }
        Ok(())
    }
}

/// `/proc/loadavg`'s first three figures.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
