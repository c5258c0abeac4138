//! Soak run: two real `icefeed serve` processes on one database and change store follow a
//! keyed table that keeps changing for an hour while one node is SIGKILLed every few
//! minutes, with a pull subscription, an event stream and a push subscription into
//! OpenSearch consuming all along; it samples what should stay flat and checks at the end
//! that every consumer holds exactly the table.
//!
//! `cargo bench --bench soak -- [--minutes 60] [--kill-every 180] [--down 5]
//! [--sample-every 60] [--warm-up 5] [--retention-minutes 5] [--rows 2000]
//! [--target-rows 3000] [--logs <dir>] [--seed 1]`
//!
//! 1. writes `soak.items` (`id` identifier, `part` identity-partitioned into 4, `payload`,
//!    `n`) in a local SQL (sqlite) catalog, `--rows` rows in its first snapshot, and
//!    starts two `icefeed serve` processes (the package's release binary, or `--icefeed`)
//!    on a fresh PostgreSQL database and one local change-store directory; each node's
//!    output goes to `<logs>/node-a.log` / `node-b.log` (appended across restarts);
//! 2. registers the table (polled every 500 ms, change sets kept `--retention-minutes`
//!    unless a subscription still needs them) and, once its export is published, starts
//!    three consumers through the HTTP API, alternating between the nodes and retrying
//!    while one is down: a pull subscription (long polls with `wait`, ack after each
//!    page), an event stream of the table (reconnecting to the other node with
//!    `Last-Event-ID`), and a push subscription into OpenSearch (skipped with a note when
//!    OpenSearch does not answer);
//! 3. the workload commits every 1–2 s either an append of new rows into one partition or
//!    a copy-on-write rewrite of one partition that updates and deletes some of its rows,
//!    keeping the table near `--target-rows`;
//! 4. every `--kill-every` seconds SIGKILLs one node (alternating) and restarts it `--down`
//!    seconds later on the same port;
//! 5. every `--sample-every` seconds prints the RSS and open files of each node, the
//!    PostgreSQL connections to the run's database, the change store's objects, the
//!    table's lag and what each consumer consumed;
//! 6. at the end stops the workload, waits for the checkpoint to reach the head and the
//!    consumers to catch up, and checks: (a) the pulled events applied in order equal the
//!    table (a scan of its final snapshot) by key, (b) so do the streamed ones, (c) the
//!    OpenSearch index holds exactly the table's rows, (d) no change (snapshot, key) was
//!    delivered twice under two positions, in what the consumers received and in the
//!    table's retained feed (a stream must not repeat a position either). It prints
//!    PASS/FAIL per check, first/last/max of the samples after `--warm-up` minutes, and
//!    what the nodes logged at WARN and ERROR; exits 1 when a check failed.
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL`; OpenSearch: `ICEFEED_BENCH_OPENSEARCH_URL`
//! (default `http://127.0.0.1:9200`).

#[path = "load/database.rs"]
#[allow(dead_code)]
mod database;
#[path = "load/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Int32Type, Int64Type};
use clap::Parser;
use futures::StreamExt;
use iceberg::spec::{
    Literal, NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use icefeed_testkit::rewrite;
use icefeed_testkit::writer::{self, AppendOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::database::Database;

const DEFAULT_ADMIN_URL: &str = "postgres://icefeed:icefeed@127.0.0.1:5432/icefeed";
const DEFAULT_OPENSEARCH_URL: &str = "http://127.0.0.1:9200";
const PARTITIONS: i32 = 4;
const PULL: &str = "soak-pull";
const PUSH: &str = "soak-push";
/// How long the end waits for each consumer to equal the table.
const CATCH_UP: Duration = Duration::from_secs(300);

#[derive(Parser, Debug)]
#[command(name = "soak", about = "icefeed soak run")]
struct Args {
    /// How long the workload runs.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Seconds between SIGKILLs (alternating nodes); 0 for none.
    #[arg(long, default_value_t = 180)]
    kill_every: u64,
    /// Seconds a killed node stays down.
    #[arg(long, default_value_t = 5)]
    down: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 60)]
    sample_every: u64,
    /// Minutes of samples left out of the first/last/max summary.
    #[arg(long, default_value_t = 5.0)]
    warm_up: f64,
    /// The table's `retention.max_age_ms`, in minutes; 0 keeps every change set.
    #[arg(long, default_value_t = 5)]
    retention_minutes: u64,
    /// Rows of the first snapshot.
    #[arg(long, default_value_t = 2000)]
    rows: usize,
    /// Rows the workload keeps the table near.
    #[arg(long, default_value_t = 3000)]
    target_rows: usize,
    /// The `icefeed` binary; default: the one built with this benchmark.
    #[arg(long)]
    icefeed: Option<PathBuf>,
    /// Where the nodes' output goes; default: `soak-logs` in the temporary directory.
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(
        args.minutes > 0.0 && args.sample_every > 0 && args.rows > 0,
        "--minutes, --sample-every and --rows must be positive"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let admin_url = std::env::var("ICEFEED_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_string());
    let opensearch = std::env::var("ICEFEED_BENCH_OPENSEARCH_URL")
        .unwrap_or_else(|_| DEFAULT_OPENSEARCH_URL.to_string());
    let passed = runtime.block_on(run(&args, &admin_url, &opensearch))?;
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The table and its writer
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    id: i64,
    part: i32,
    payload: String,
    n: i64,
}

impl Row {
    fn json(&self) -> Value {
        json!({"id": self.id, "part": self.part, "payload": self.payload, "n": self.n})
    }
}

fn schema() -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids([1])
        .with_fields([
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "part", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(3, "payload", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "n", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .expect("schema")
}

fn batch(rows: &[&Row]) -> anyhow::Result<RecordBatch> {
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema())?);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.id))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.part))),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.payload.as_str()),
        )),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.n))),
    ];
    Ok(RecordBatch::try_new(arrow, columns)?)
}

/// The table's rows by key as icefeed writes them, from a scan of its current snapshot.
async fn scan(table: &Table) -> anyhow::Result<BTreeMap<i64, Value>> {
    let mut rows = BTreeMap::new();
    for b in rewrite::scan_rows(table, None).await? {
        let id = b
            .column_by_name("id")
            .context("id")?
            .as_primitive::<Int64Type>();
        let part = b
            .column_by_name("part")
            .context("part")?
            .as_primitive::<Int32Type>();
        let payload = b
            .column_by_name("payload")
            .context("payload")?
            .as_string::<i32>();
        let n = b
            .column_by_name("n")
            .context("n")?
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let row = json!({
                "id": id.value(i),
                "part": part.value(i),
                "payload": (!payload.is_null(i)).then(|| payload.value(i)),
                "n": (!n.is_null(i)).then(|| n.value(i)),
            });
            rows.insert(id.value(i), row);
        }
    }
    Ok(rows)
}

/// Commits to the table every 1–2 s and keeps a model of it.
struct Writer {
    catalog: Arc<dyn Catalog>,
    table: Table,
    model: BTreeMap<i64, Row>,
    next_id: i64,
    rng: StdRng,
    target_rows: usize,
}

impl Writer {
    fn new_rows(&mut self, count: usize, part: i32) -> Vec<Row> {
        (0..count)
            .map(|_| {
                let id = self.next_id;
                self.next_id += 1;
                Row {
                    id,
                    part,
                    payload: format!("p{id}-v0"),
                    n: 0,
                }
            })
            .collect()
    }

    async fn append(&mut self, rows: Vec<Row>) -> anyhow::Result<()> {
        let refs: Vec<&Row> = rows.iter().collect();
        self.table = writer::append(
            self.catalog.as_ref(),
            &self.table,
            &[batch(&refs)?],
            &AppendOptions::default(),
        )
        .await?;
        for row in rows {
            self.model.insert(row.id, row);
        }
        Ok(())
    }

    /// One commit: an append of new rows into one partition, or a copy-on-write rewrite of
    /// one partition updating ~10% of its rows and deleting some (more when the table is
    /// above its target size). Returns what it was.
    async fn step(&mut self) -> anyhow::Result<&'static str> {
        let part = self.rng.random_range(0..PARTITIONS);
        let below = self.model.len() < self.target_rows;
        if self.rng.random_bool(if below { 0.5 } else { 0.3 }) {
            let count = self.rng.random_range(10..=60);
            let rows = self.new_rows(count, part);
            self.append(rows).await?;
            return Ok("append");
        }
        let delete_share = if below { 0.02 } else { 0.12 };
        let mut after: BTreeMap<i64, Row> = BTreeMap::new();
        let mut deleted = Vec::new();
        for row in self.model.values().filter(|r| r.part == part) {
            let roll: f64 = self.rng.random();
            if roll < delete_share {
                deleted.push(row.id);
            } else if roll < delete_share + 0.1 {
                let n = row.n + 1;
                after.insert(
                    row.id,
                    Row {
                        n,
                        payload: format!("p{}-v{n}", row.id),
                        ..row.clone()
                    },
                );
            } else {
                after.insert(row.id, row.clone());
            }
        }
        let files: Vec<_> = rewrite::live_data_files(&self.table)
            .await?
            .into_iter()
            .filter(|f| f.partition().fields().first() == Some(&Some(Literal::int(part))))
            .collect();
        let refs: Vec<&Row> = after.values().collect();
        let add = if refs.is_empty() {
            Vec::new()
        } else {
            vec![batch(&refs)?]
        };
        self.table = rewrite::rewrite(
            self.catalog.as_ref(),
            &self.table,
            &files,
            &add,
            "overwrite",
        )
        .await?;
        for id in deleted {
            self.model.remove(&id);
        }
        self.model.extend(after);
        Ok("rewrite")
    }

    fn head(&self) -> Option<i64> {
        self.table.metadata().current_snapshot_id()
    }
}

// ---------------------------------------------------------------------------------------
// The nodes
// ---------------------------------------------------------------------------------------

struct Slot {
    name: &'static str,
    base: String,
    port: u16,
    child: Option<Child>,
    started: Instant,
}

/// The two node processes, each on a fixed port across restarts.
struct Cluster {
    bin: PathBuf,
    logs: PathBuf,
    env: Vec<(String, String)>,
    slots: Mutex<Vec<Slot>>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Cluster {
    fn bases(&self) -> Vec<String> {
        let slots = self.slots.lock().expect("slots");
        slots.iter().map(|s| s.base.clone()).collect()
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }

    fn spawn(&self, index: usize) -> anyhow::Result<()> {
        let mut slots = self.slots.lock().expect("slots");
        let slot = &mut slots[index];
        let log_path = self.log_path(slot.name);
        let mut log = File::options().create(true).append(true).open(&log_path)?;
        use std::io::Write;
        writeln!(
            log,
            "===== soak: starting {} at {}",
            slot.name,
            chrono::Utc::now().to_rfc3339()
        )?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("ICEFEED_LISTEN", format!("127.0.0.1:{}", slot.port))
            .env("ICEFEED_NODE_ID", slot.name)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        slot.child = Some(child);
        slot.started = Instant::now();
        Ok(())
    }

    /// SIGKILLs the node and reaps it.
    fn kill(&self, index: usize) -> anyhow::Result<()> {
        let mut slots = self.slots.lock().expect("slots");
        if let Some(mut child) = slots[index].child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERMs every node and waits for it; the exit statuses.
    fn terminate_all(&self) -> Vec<String> {
        let mut slots = self.slots.lock().expect("slots");
        let mut outcomes = Vec::new();
        for slot in slots.iter_mut() {
            let Some(mut child) = slot.child.take() else {
                continue;
            };
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let start = Instant::now();
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break status.to_string(),
                    Ok(None) if start.elapsed() < Duration::from_secs(30) => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break "did not stop within 30 s of SIGTERM: killed".to_string();
                    }
                }
            };
            outcomes.push(format!("{}: {status}", slot.name));
        }
        outcomes
    }

    fn pid(&self, index: usize) -> Option<u32> {
        let slots = self.slots.lock().expect("slots");
        slots[index].child.as_ref().map(|c| c.id())
    }

    fn uptime(&self, index: usize) -> Duration {
        self.slots.lock().expect("slots")[index].started.elapsed()
    }

    async fn wait_ready(&self, http: &reqwest::Client, index: usize) -> anyhow::Result<()> {
        let base = self.bases()[index].clone();
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{base}/readyz")).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("node {index} not ready within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Ok(mut slots) = self.slots.lock() {
            for slot in slots.iter_mut() {
                if let Some(mut child) = slot.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------

/// What one consumer received, applied in order.
#[derive(Default)]
struct Consumed {
    state: BTreeMap<i64, Value>,
    /// (snapshot id, key) of every change received → its position.
    changes: HashMap<(String, i64), String>,
    /// Positions received, for repeats.
    positions: std::collections::HashSet<String>,
    events: u64,
    /// The same position received again (allowed for a pull subscription only).
    repeated: u64,
    /// Changes received under two different positions.
    duplicates: Vec<String>,
    errors: BTreeMap<String, u64>,
    last_snapshot: Option<String>,
}

impl Consumed {
    fn apply(&mut self, e: &Value) {
        let position = e["position"].as_str().unwrap_or_default().to_string();
        if !self.positions.insert(position.clone()) {
            self.repeated += 1;
            return;
        }
        self.events += 1;
        let snapshot = e["snapshot_id"].to_string();
        let Some(key) = e["key"]["id"].as_i64() else {
            self.error(format!("event without key.id: {e}"));
            return;
        };
        if let Some(first) = self
            .changes
            .insert((snapshot.clone(), key), position.clone())
        {
            self.duplicates.push(format!(
                "snapshot {snapshot} key {key}: positions {first} and {position}"
            ));
        }
        match e["op"].as_str() {
            Some("insert") | Some("update") => {
                self.state.insert(key, e["after"].clone());
            }
            Some("delete") => {
                self.state.remove(&key);
            }
            other => self.error(format!("unknown op {other:?}")),
        }
        self.last_snapshot = Some(snapshot);
    }

    fn error(&mut self, what: String) {
        let what: String = what.chars().take(200).collect();
        *self.errors.entry(what).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Consumed>>;

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, Consumed> {
    c.lock().expect("consumer")
}

/// A short description of a failed request for the error tally.
fn kind_of(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "connection refused".into()
    } else if e.is_timeout() {
        "timeout".into()
    } else if e.is_body() || e.is_decode() {
        "connection dropped mid-answer".into()
    } else {
        format!("request failed: {e}")
    }
}

/// Long polls the pull subscription and acks each page, alternating nodes.
async fn pull_loop(http: reqwest::Client, bases: Vec<String>, out: Shared, stop: Arc<AtomicBool>) {
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let base = &bases[turn % bases.len()];
        turn += 1;
        let answer = http
            .get(format!("{base}/v1/subscriptions/{PULL}/events"))
            .query(&[("limit", "1000"), ("wait", "10")])
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let page: Value = match answer {
            Ok(r) if r.status().is_success() => match r.json().await {
                Ok(page) => page,
                Err(e) => {
                    lock(&out).error(kind_of(&e));
                    continue;
                }
            },
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                lock(&out).error(format!("events answered {status}: {body}"));
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => {
                lock(&out).error(kind_of(&e));
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            continue;
        }
        {
            let mut out = lock(&out);
            for e in &events {
                out.apply(e);
            }
        }
        // Ack before the next page, retrying on either node.
        let next = page["next"].clone();
        loop {
            let base = &bases[turn % bases.len()];
            let answer = http
                .post(format!("{base}/v1/subscriptions/{PULL}/ack"))
                .json(&json!({ "position": next }))
                .timeout(Duration::from_secs(15))
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => break,
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    lock(&out).error(format!("ack answered {status}: {body}"));
                    if status.is_client_error() {
                        break;
                    }
                }
                Err(e) => lock(&out).error(format!("ack: {}", kind_of(&e))),
            }
            turn += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Streams the table's feed, reconnecting to the other node with `Last-Event-ID`.
async fn sse_loop(
    http: reqwest::Client,
    bases: Vec<String>,
    table: String,
    out: Shared,
    reconnects: Arc<AtomicU64>,
) {
    let mut last: Option<String> = None;
    let mut turn = 0usize;
    loop {
        let base = &bases[turn % bases.len()];
        turn += 1;
        let mut request = http
            .get(format!("{base}/v1/tables/{table}/changes/stream"))
            .header("accept", "text/event-stream");
        if let Some(id) = &last {
            request = request.header("last-event-id", id.as_str());
        }
        let response = match tokio::time::timeout(Duration::from_secs(15), request.send()).await {
            Ok(Ok(r)) if r.status().is_success() => r,
            Ok(Ok(r)) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                lock(&out).error(format!("stream answered {status}: {body}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Ok(Err(e)) => {
                lock(&out).error(kind_of(&e));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => {
                lock(&out).error("stream: no answer within 15 s".into());
                continue;
            }
        };
        let mut body = response.bytes_stream();
        let mut buffer: Vec<u8> = Vec::new();
        let (mut kind, mut data) = (String::new(), String::new());
        'stream: loop {
            // Heartbeats come every 15 s: 45 s of silence is a dead connection.
            let chunk = match tokio::time::timeout(Duration::from_secs(45), body.next()).await {
                Ok(Some(Ok(chunk))) => chunk,
                Ok(Some(Err(e))) => {
                    lock(&out).error(format!("stream: {}", kind_of(&e)));
                    break;
                }
                Ok(None) => {
                    lock(&out).error("stream ended".into());
                    break;
                }
                Err(_) => {
                    lock(&out).error("stream silent for 45 s".into());
                    break;
                }
            };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..line.len() - 1]).to_string();
                if line.is_empty() {
                    if !data.is_empty() {
                        if kind == "error" {
                            lock(&out).error(format!("stream error event: {data}"));
                            break 'stream;
                        }
                        match serde_json::from_str::<Value>(&data) {
                            Ok(e) => {
                                last = e["position"].as_str().map(str::to_string).or(last);
                                lock(&out).apply(&e);
                            }
                            Err(e) => lock(&out).error(format!("bad event data: {e}")),
                        }
                    }
                    kind.clear();
                    data.clear();
                } else if let Some(v) = line.strip_prefix("event: ") {
                    kind = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
        }
        reconnects.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// GET `path` from whichever node answers first (in turn).
async fn get_any(http: &reqwest::Client, bases: &[String], path: &str) -> anyhow::Result<Value> {
    let mut last = None;
    for _ in 0..3 {
        for base in bases {
            match http
                .get(format!("{base}{path}"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => return Ok(r.json().await?),
                Ok(r) => last = Some(anyhow::anyhow!("{path} answered {}", r.status())),
                Err(e) => last = Some(e.into()),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no node")))
}

async fn post_any(
    http: &reqwest::Client,
    bases: &[String],
    path: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    let base = &bases[0];
    let r = http.post(format!("{base}{path}")).json(body).send().await?;
    let status = r.status();
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status.is_success(), "{path} answered {status}: {answer}");
    Ok(answer)
}

// ---------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------

fn proc_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn proc_fds(pid: u32) -> Option<f64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as f64)
}

fn count_files(dir: &Path) -> u64 {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(entry.path()),
                Ok(_) => count += 1,
                Err(_) => {}
            }
        }
    }
    count
}

/// One row of the sample table; `None` where a node was down.
struct Sample {
    minute: f64,
    rss: [Option<f64>; 2],
    fds: [Option<f64>; 2],
    connections: Option<f64>,
    objects: f64,
}

struct Counters {
    commits: AtomicU64,
    commit_errors: AtomicU64,
    kills: AtomicU64,
    sse_reconnects: Arc<AtomicU64>,
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

async fn run(args: &Args, admin_url: &str, opensearch: &str) -> anyhow::Result<bool> {
    let dir = tempfile::Builder::new().prefix("icefeed-soak").tempdir()?;
    let changes = dir.path().join("changes");
    std::fs::create_dir_all(&changes)?;
    let logs = args
        .logs
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("soak-logs"));
    std::fs::create_dir_all(&logs)?;
    let bin = args
        .icefeed
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_icefeed")));
    anyhow::ensure!(bin.is_file(), "no icefeed binary at {}", bin.display());

    let db = Database::create(admin_url).await?;
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(admin_url)
        .await?;
    let db_name = db.url.rsplit('/').next().unwrap_or_default().to_string();
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .build()?;
    let os_http = reqwest::Client::new();
    let opensearch_up = os_http
        .get(opensearch)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    if !opensearch_up {
        println!("note: OpenSearch at {opensearch} does not answer: no push subscription");
    }
    let index = format!("soak-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);

    let env: Vec<(String, String)> = [
        ("ICEFEED_DATABASE_URL", db.url.clone()),
        ("ICEFEED_CHANGE_STORE", changes.display().to_string()),
        (
            "ICEFEED_CATALOG__LOCAL_PATHS",
            dir.path().display().to_string(),
        ),
        (
            "ICEFEED_NETWORK__ALLOWED_HOSTS",
            "127.0.0.0/8,::1,localhost".to_string(),
        ),
        ("ICEFEED_SCHEDULER__TICK", "100ms".to_string()),
        ("ICEFEED_SCHEDULER__LEASE_TTL", "5s".to_string()),
        ("ICEFEED_RETENTION__INTERVAL", "10s".to_string()),
        ("ICEFEED_RETENTION__GRACE", "30s".to_string()),
        (
            "RUST_LOG",
            std::env::var("SOAK_NODE_LOG").unwrap_or_else(|_| "info".to_string()),
        ),
        ("NO_COLOR", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut slots = Vec::new();
    for name in ["node-a", "node-b"] {
        let port = free_port()?;
        slots.push(Slot {
            name,
            base: format!("http://127.0.0.1:{port}"),
            port,
            child: None,
            started: Instant::now(),
        });
    }
    let cluster = Arc::new(Cluster {
        bin,
        logs: logs.clone(),
        env,
        slots: Mutex::new(slots),
    });
    println!(
        "soak: {} min, a SIGKILL every {} s (down {} s), nodes {} logging to {}",
        args.minutes,
        args.kill_every,
        args.down,
        cluster.bin.display(),
        logs.display()
    );

    let outcome = soak(
        args,
        dir.path(),
        &changes,
        &cluster,
        &http,
        &admin,
        &db_name,
        opensearch_up.then_some((opensearch, index.as_str())),
    )
    .await;
    let exits = cluster.terminate_all();
    println!("nodes stopped: {}", exits.join(", "));
    if opensearch_up {
        let _ = os_http.delete(format!("{opensearch}/{index}")).send().await;
    }
    admin.close().await;
    db.drop().await?;
    report_logs(&cluster);
    outcome
}

/// Counts WARN and ERROR lines and panics in the nodes' logs and shows the most frequent.
fn report_logs(cluster: &Cluster) {
    for name in ["node-a", "node-b"] {
        let path = cluster.log_path(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        let mut messages: HashMap<String, u64> = HashMap::new();
        for line in text.lines() {
            let level = if line.contains("panicked") {
                "panic"
            } else if line.contains(" ERROR ") {
                "ERROR"
            } else if line.contains(" WARN ") {
                "WARN"
            } else {
                continue;
            };
            *counts.entry(level).or_default() += 1;
            // The message without timestamp and numbers, for grouping.
            let text = line.split_once(level).map(|(_, m)| m).unwrap_or(line);
            let normalized: String = text
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .take(160)
                .collect();
            *messages.entry(format!("{level}{normalized}")).or_default() += 1;
        }
        println!("{} ({}): {:?}", name, path.display(), counts);
        let mut top: Vec<_> = messages.into_iter().collect();
        top.sort_by_key(|m| std::cmp::Reverse(m.1));
        for (message, count) in top.into_iter().take(8) {
            println!("  {count:>6}x {message}");
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn soak(
    args: &Args,
    dir: &Path,
    changes: &Path,
    cluster: &Arc<Cluster>,
    http: &reqwest::Client,
    admin: &sqlx::PgPool,
    db_name: &str,
    opensearch: Option<(&str, &str)>,
) -> anyhow::Result<bool> {
    // 1. The table and the nodes.
    let catalog: Arc<dyn Catalog> = Arc::new(writer::open_sql_catalog(dir, "soak").await?);
    let ident = TableIdent::from_strs(["soak", "items"])?;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "part", Transform::Identity)?
        .build();
    let table = writer::create_table(catalog.as_ref(), &ident, schema(), Some(spec)).await?;
    let mut w = Writer {
        catalog: catalog.clone(),
        table,
        model: BTreeMap::new(),
        next_id: 1,
        rng: StdRng::seed_from_u64(args.seed),
        target_rows: args.target_rows,
    };
    let mut first = Vec::new();
    for i in 0..args.rows {
        first.extend(w.new_rows(1, i as i32 % PARTITIONS));
    }
    w.append(first).await?;
    for index in 0..2 {
        cluster.spawn(index)?;
    }
    for index in 0..2 {
        cluster.wait_ready(http, index).await?;
    }
    let bases = cluster.bases();

    // 2. Registration and consumers.
    let (db_path, warehouse) = writer::catalog_paths(dir)?;
    let mut registration = json!({
        "catalog": {"type": "sql", "uri": format!("sqlite:{}", db_path.display()),
                    "warehouse": warehouse.display().to_string(), "name": "soak"},
        "table": "soak.items",
        "poll_interval_ms": 500,
    });
    if args.retention_minutes > 0 {
        registration["retention"] = json!({"max_age_ms": args.retention_minutes * 60_000});
    }
    let registered = post_any(http, &bases, "/v1/tables", &registration).await?;
    let table_id = registered["id"].as_str().context("table id")?.to_string();
    let start = Instant::now();
    loop {
        let t = get_any(http, &bases, &format!("/v1/tables/{table_id}")).await?;
        if !t["checkpoint"].is_null() {
            break;
        }
        anyhow::ensure!(t["state"] != "error", "table in error: {t}");
        anyhow::ensure!(start.elapsed() < Duration::from_secs(120), "no export: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "table {table_id} exported ({} rows) in {:.1}s",
        args.rows,
        start.elapsed().as_secs_f64()
    );
    post_any(
        http,
        &bases,
        "/v1/subscriptions",
        &json!({"name": PULL, "tables": [table_id], "start": "earliest"}),
    )
    .await?;
    if let Some((url, index)) = opensearch {
        post_any(
            http,
            &bases,
            "/v1/subscriptions",
            &json!({"name": PUSH, "tables": [table_id], "kind": "opensearch", "start": "earliest",
                    "target": {"endpoints": [url], "index": index,
                               "index_settings": {"number_of_shards": 1, "number_of_replicas": 0}}}),
        )
        .await?;
    }
    let pulled: Shared = Arc::default();
    let streamed: Shared = Arc::default();
    let stop_pull = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters {
        commits: AtomicU64::new(1),
        commit_errors: AtomicU64::new(0),
        kills: AtomicU64::new(0),
        sse_reconnects: Arc::new(AtomicU64::new(0)),
    });
    let pull_task = tokio::spawn(pull_loop(
        http.clone(),
        bases.clone(),
        pulled.clone(),
        stop_pull.clone(),
    ));
    let sse_task = tokio::spawn(sse_loop(
        http.clone(),
        bases.clone(),
        table_id.clone(),
        streamed.clone(),
        counters.sse_reconnects.clone(),
    ));

    // 3.–5. Workload, kills and samples until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let (cluster, http, stop, counters) = (
            cluster.clone(),
            http.clone(),
            stop.clone(),
            counters.clone(),
        );
        let (every, down) = (args.kill_every, args.down);
        tokio::spawn(async move {
            if every == 0 {
                return Ok::<_, anyhow::Error>(());
            }
            let mut victim = 0;
            loop {
                let deadline = Instant::now() + Duration::from_secs(every);
                while Instant::now() < deadline {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                cluster.kill(victim)?;
                counters.kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(down)).await;
                cluster.spawn(victim)?;
                if let Err(e) = cluster.wait_ready(&http, victim).await {
                    println!("warning: restarted node {victim} not ready: {e:#}");
                }
                victim = 1 - victim;
            }
        })
    };

    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut next_commit = Instant::now();
    println!(
        "{:>6} {:>8} {:>8} {:>5} {:>5} {:>5} {:>7} {:>9} {:>7} {:>8} {:>8} {:>8} {:>6}  push state",
        "min",
        "rssA MB",
        "rssB MB",
        "fdA",
        "fdB",
        "conns",
        "objects",
        "lag s/sn",
        "commits",
        "pulled",
        "streamed",
        "pushed",
        "kills"
    );
    let take_sample = || {
        sample(
            cluster,
            http,
            &bases,
            admin,
            db_name,
            changes,
            &table_id,
            &pulled,
            &streamed,
            &counters,
            opensearch.is_some(),
            started,
        )
    };
    while started.elapsed() < run_for {
        if started.elapsed() >= next_sample {
            next_sample += Duration::from_secs(args.sample_every);
            let s = take_sample().await;
            samples.push(s);
        }
        if Instant::now() >= next_commit {
            match w.step().await {
                Ok(_) => {
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    counters.commit_errors.fetch_add(1, Ordering::Relaxed);
                    println!("commit failed: {e:#}");
                    w.table = catalog.load_table(&ident).await?;
                }
            }
            next_commit = Instant::now() + Duration::from_millis(w.rng.random_range(1000..2000));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    killer.await??;
    let elapsed = started.elapsed();
    samples.push(take_sample().await);
    println!(
        "workload stopped after {:.1} min: {} commits ({} failed), {} rows, {} kills",
        elapsed.as_secs_f64() / 60.0,
        counters.commits.load(Ordering::Relaxed),
        counters.commit_errors.load(Ordering::Relaxed),
        w.model.len(),
        counters.kills.load(Ordering::Relaxed)
    );

    // 6. Catch up and check.
    for index in 0..2 {
        if cluster.pid(index).is_none() {
            cluster.spawn(index)?;
        }
        cluster.wait_ready(http, index).await?;
    }
    let head = w.head().context("no head")?;
    let caught = Instant::now();
    loop {
        let t = get_any(http, &bases, &format!("/v1/tables/{table_id}")).await?;
        if t["checkpoint"]["snapshot_id"].as_str() == Some(head.to_string().as_str()) {
            break;
        }
        if t["state"] == "error" || caught.elapsed() > CATCH_UP {
            println!("FAIL: the checkpoint did not reach the head {head}: {t}");
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "checkpoint at the head {head} {:.1}s after the workload stopped",
        caught.elapsed().as_secs_f64()
    );
    let truth = scan(&w.table).await?;
    let model: BTreeMap<i64, Value> = w.model.values().map(|r| (r.id, r.json())).collect();
    if model != truth {
        println!(
            "note: the writer's model differs from a scan of the table (the scan is the truth)"
        );
    }

    let mut passed = true;
    let mut check = |name: &str, ok: bool, detail: String| {
        println!("{} {name}: {detail}", if ok { "PASS" } else { "FAIL" });
        passed &= ok;
    };
    let pull_ok = wait_equal(&pulled, &truth).await;
    check(
        "(a) pull subscription",
        pull_ok,
        describe(&lock(&pulled), &truth),
    );
    let sse_ok = wait_equal(&streamed, &truth).await;
    check(
        "(b) event stream",
        sse_ok,
        describe(&lock(&streamed), &truth),
    );
    stop_pull.store(true, Ordering::Relaxed);
    sse_task.abort();
    let _ = pull_task.await;
    if let Some((url, index)) = opensearch {
        let (ok, detail) = check_index(http, &bases, url, index, &truth).await;
        check("(c) OpenSearch index", ok, detail);
    } else {
        println!("SKIP (c) OpenSearch index: OpenSearch did not answer");
    }
    let feed = read_feed(http, &bases, &table_id).await;
    let (dup_ok, dup_detail) = {
        let (p, s) = (lock(&pulled), lock(&streamed));
        let mut problems = Vec::new();
        problems.extend(p.duplicates.iter().take(3).map(|d| format!("pulled {d}")));
        problems.extend(s.duplicates.iter().take(3).map(|d| format!("streamed {d}")));
        if s.repeated > 0 {
            problems.push(format!("the stream repeated {} positions", s.repeated));
        }
        match &feed {
            Ok((events, dups)) => {
                problems.extend(dups.iter().take(3).map(|d| format!("feed {d}")));
                (
                    problems.is_empty(),
                    format!(
                        "{} pulled ({} again after a lost answer), {} streamed, {} in the retained feed; \
                         duplicates: {} pulled, {} streamed, {} in the feed{}",
                        p.events,
                        p.repeated,
                        s.events,
                        events,
                        p.duplicates.len(),
                        s.duplicates.len(),
                        dups.len(),
                        if problems.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", problems.join("; "))
                        }
                    ),
                )
            }
            Err(e) => (false, format!("reading the feed failed: {e:#}")),
        }
    };
    check("(d) each change once", dup_ok, dup_detail);

    for (name, c) in [("pull", &pulled), ("stream", &streamed)] {
        let c = lock(c);
        if !c.errors.is_empty() {
            println!("{name} consumer errors (retried):");
            for (what, count) in &c.errors {
                println!("  {count:>5}x {what}");
            }
        }
    }
    println!(
        "stream reconnects: {}",
        counters.sse_reconnects.load(Ordering::Relaxed)
    );
    summarize(&samples, args.warm_up);
    println!("{}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

#[allow(clippy::too_many_arguments)]
async fn sample(
    cluster: &Cluster,
    http: &reqwest::Client,
    bases: &[String],
    admin: &sqlx::PgPool,
    db_name: &str,
    changes: &Path,
    table_id: &str,
    pulled: &Shared,
    streamed: &Shared,
    counters: &Counters,
    push: bool,
    started: Instant,
) -> Sample {
    let pids = [cluster.pid(0), cluster.pid(1)];
    let rss = pids.map(|p| p.and_then(proc_rss_mb));
    let fds = pids.map(|p| p.and_then(proc_fds));
    // Runtime-checked: a system view, not icefeed's schema (and `cargo sqlx prepare` does
    // not build the benches).
    let connections: Option<i64> =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
            .bind(db_name)
            .fetch_one(admin)
            .await
            .ok();
    let objects = count_files(changes);
    let lag = match get_any(http, bases, &format!("/v1/tables/{table_id}")).await {
        Ok(t) => format!(
            "{:.1}/{}",
            t["lag"]["seconds"].as_f64().unwrap_or(-1.0),
            t["lag"]["snapshots"]
        ),
        Err(_) => "?".into(),
    };
    let (pushed, push_state) = if push {
        match get_any(http, bases, &format!("/v1/subscriptions/{PUSH}")).await {
            Ok(s) => {
                let n: i64 = [
                    "documents_indexed",
                    "documents_deleted",
                    "documents_skipped",
                    "documents_rejected",
                ]
                .iter()
                .filter_map(|f| s["push"][f].as_i64())
                .sum();
                (n.to_string(), s["push"]["state"].to_string())
            }
            Err(_) => ("?".into(), "?".into()),
        }
    } else {
        ("-".into(), "-".into())
    };
    let minute = started.elapsed().as_secs_f64() / 60.0;
    let show = |v: Option<f64>| v.map_or("down".to_string(), |v| format!("{v:.0}"));
    println!(
        "{:>6.1} {:>8} {:>8} {:>5} {:>5} {:>5} {:>7} {:>9} {:>7} {:>8} {:>8} {:>8} {:>6}  {} (up {:.0}s/{:.0}s)",
        minute,
        show(rss[0]),
        show(rss[1]),
        show(fds[0]),
        show(fds[1]),
        connections.map_or("?".to_string(), |c| c.to_string()),
        objects,
        lag,
        counters.commits.load(Ordering::Relaxed),
        lock(pulled).events,
        lock(streamed).events,
        pushed,
        counters.kills.load(Ordering::Relaxed),
        push_state,
        cluster.uptime(0).as_secs_f64(),
        cluster.uptime(1).as_secs_f64(),
    );
    Sample {
        minute,
        rss,
        fds,
        connections: connections.map(|c| c as f64),
        objects: objects as f64,
    }
}

/// One figure of a sample.
type Figure = fn(&Sample) -> Option<f64>;

/// First, last and max (and min) of each sampled figure after the warm-up.
fn summarize(samples: &[Sample], warm_up: f64) {
    let mut after: Vec<&Sample> = samples.iter().filter(|s| s.minute >= warm_up).collect();
    let note = if after.len() < 2 {
        after = samples.iter().collect();
        " (the run is shorter than the warm-up: all samples)".to_string()
    } else {
        format!(" (after {warm_up} min of warm-up, {} samples)", after.len())
    };
    println!("flatness{note}: first / last / min / max");
    let figures: [(&str, Figure); 6] = [
        ("RSS node-a (MB)", |s| s.rss[0]),
        ("RSS node-b (MB)", |s| s.rss[1]),
        ("open files node-a", |s| s.fds[0]),
        ("open files node-b", |s| s.fds[1]),
        ("PostgreSQL connections", |s| s.connections),
        ("change-store objects", |s| Some(s.objects)),
    ];
    for (name, get) in figures {
        let values: Vec<f64> = after.iter().filter_map(|s| get(s)).collect();
        if values.is_empty() {
            continue;
        }
        let max = values.iter().copied().fold(f64::MIN, f64::max);
        let min = values.iter().copied().fold(f64::MAX, f64::min);
        println!(
            "  {name:<24} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            values[0],
            values[values.len() - 1],
            min,
            max
        );
    }
}

/// Waits until the consumer's state equals the table's, up to [`CATCH_UP`].
async fn wait_equal(consumer: &Shared, truth: &BTreeMap<i64, Value>) -> bool {
    let start = Instant::now();
    while start.elapsed() < CATCH_UP {
        if &lock(consumer).state == truth {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// "N events, M rows" and, when they differ, how.
fn describe(c: &Consumed, truth: &BTreeMap<i64, Value>) -> String {
    let missing = truth.keys().filter(|k| !c.state.contains_key(k)).count();
    let extra = c.state.keys().filter(|k| !truth.contains_key(k)).count();
    let differ: Vec<i64> = truth
        .iter()
        .filter(|(k, v)| c.state.get(k).is_some_and(|got| got != *v))
        .map(|(k, _)| *k)
        .collect();
    let mut text = format!(
        "{} events applied, {} rows (table: {}); last snapshot {}",
        c.events,
        c.state.len(),
        truth.len(),
        c.last_snapshot.as_deref().unwrap_or("none")
    );
    if missing + extra + differ.len() > 0 {
        text.push_str(&format!(
            "; {missing} missing, {extra} extra, {} different (e.g. {:?}: {} vs {})",
            differ.len(),
            differ.first(),
            differ
                .first()
                .and_then(|k| c.state.get(k))
                .map_or("-".into(), |v| v.to_string()),
            differ
                .first()
                .and_then(|k| truth.get(k))
                .map_or("-".into(), |v| v.to_string()),
        ));
    }
    text
}

/// Waits for the push subscription to catch up, then compares the index with the table.
async fn check_index(
    http: &reqwest::Client,
    bases: &[String],
    url: &str,
    index: &str,
    truth: &BTreeMap<i64, Value>,
) -> (bool, String) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < CATCH_UP {
        match index_docs(http, bases, url, index).await {
            Ok((state, docs)) => {
                let missing = truth.keys().filter(|k| !docs.contains_key(k)).count();
                let extra = docs.keys().filter(|k| !truth.contains_key(k)).count();
                let differ = truth
                    .iter()
                    .filter(|(k, v)| docs.get(k).is_some_and(|d| d != *v))
                    .count();
                last = format!(
                    "{} documents (table: {} rows), {missing} missing, {extra} extra, {differ} \
                     different; subscription {state}",
                    docs.len(),
                    truth.len()
                );
                if missing + extra + differ == 0 {
                    return (true, last);
                }
            }
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    (false, last)
}

async fn index_docs(
    http: &reqwest::Client,
    bases: &[String],
    url: &str,
    index: &str,
) -> anyhow::Result<(String, BTreeMap<i64, Value>)> {
    let view = get_any(http, bases, &format!("/v1/subscriptions/{PUSH}")).await?;
    let state = format!(
        "{} with lag {}",
        view["push"]["state"], view["lag"]["events"]
    );
    http.post(format!("{url}/{index}/_refresh"))
        .send()
        .await?
        .error_for_status()?;
    let mut docs = BTreeMap::new();
    let mut after: Option<Value> = None;
    loop {
        let mut query = json!({"size": 5000, "sort": [{"id": "asc"}], "query": {"match_all": {}}});
        if let Some(a) = &after {
            query["search_after"] = a.clone();
        }
        let page: Value = http
            .post(format!("{url}/{index}/_search"))
            .json(&query)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
        if hits.is_empty() {
            break;
        }
        for hit in &hits {
            let id: i64 = hit["_id"].as_str().context("_id")?.parse()?;
            docs.insert(id, hit["_source"].clone());
        }
        after = hits.last().map(|h| h["sort"].clone());
    }
    Ok((state, docs))
}

/// The table's retained feed from its start: its event count and the changes (snapshot,
/// key) found under two positions.
async fn read_feed(
    http: &reqwest::Client,
    bases: &[String],
    table: &str,
) -> anyhow::Result<(u64, Vec<String>)> {
    let mut consumed = Consumed::default();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("/v1/tables/{table}/changes?limit=10000");
        if let Some(a) = &after {
            let a: String = url::form_urlencoded::byte_serialize(a.as_bytes()).collect();
            path.push_str(&format!("&after={a}"));
        }
        let page = get_any(http, bases, &path).await?;
        let events = page["events"].as_array().context("events")?;
        for e in events {
            consumed.apply(e);
        }
        after = page["next"].as_str().map(str::to_string);
        if page["more"] != true || events.is_empty() {
            break;
        }
    }
    Ok((consumed.events, consumed.duplicates))
}
