//! Test helpers: a fresh PostgreSQL database per test, nodes on random ports, real
//! Iceberg tables written with the iceberg crate, and HTTP helpers.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use iceberg::spec::{Schema, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use icefeed::app::RunningNode;
use icefeed::config::Settings;
use icefeed_testkit::rewrite;
use icefeed_testkit::writer::{self, AppendOptions};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use crate::{gcs, s3};

/// The server tests create their databases on (the README's test command sets it).
pub fn admin_url() -> String {
    std::env::var("ICEFEED_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://icefeed:icefeed@127.0.0.1:5432/icefeed".into())
}

/// The OpenSearch node tests push into (the README's test command starts one).
pub fn opensearch_url() -> String {
    std::env::var("ICEFEED_TEST_OPENSEARCH_URL").unwrap_or_else(|_| "http://127.0.0.1:9200".into())
}

/// Names of test databases: the prefix, then the second of the creation (so that later
/// runs can tell what an earlier run left) and a random part.
const TEST_DATABASE_PREFIX: &str = "icefeed_test_";

/// Test databases older than this were left by earlier runs (no run takes this long).
const STALE_AFTER: Duration = Duration::from_secs(3 * 3600);

/// Creates an empty database and returns its URL.
pub async fn fresh_database() -> String {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        std::thread::spawn(drop_stale_databases);
    });
    let admin = admin_url();
    let created = since_epoch().as_secs();
    let name = format!(
        "{TEST_DATABASE_PREFIX}{created}_{}",
        uuid::Uuid::new_v4().simple()
    );
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to the test PostgreSQL (run the README's test command)");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let (base, _) = admin.rsplit_once('/').expect("database URL has a path");
    format!("{base}/{name}")
}

/// Drops the test databases earlier runs left (tests never drop theirs: a failed test's
/// database is there to look at), in the background: thousands of them fill the disk
/// and slow PostgreSQL's start. Only databases created more than [`STALE_AFTER`] ago, or
/// named before names carried their creation, and only those nobody is connected to (a
/// plain `DROP DATABASE` refuses those), so a run going on beside this one keeps its own.
fn drop_stale_databases() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the sweep");
    runtime.block_on(async {
        let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url()).await else {
            return;
        };
        let names: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE $1")
                .bind(format!("{TEST_DATABASE_PREFIX}%"))
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
        let now = since_epoch();
        for name in names.into_iter().filter(|n| is_stale(n, now)) {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\""))
                .execute(&mut conn)
                .await;
        }
    });
}

/// Time since the Unix epoch: what test database names carry their creation as.
fn since_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
}

/// Whether the test database `name` was created more than [`STALE_AFTER`] before `now`
/// (since the Unix epoch); names without their creation are from before names had it.
fn is_stale(name: &str, now: Duration) -> bool {
    let Some(rest) = name.strip_prefix(TEST_DATABASE_PREFIX) else {
        return false;
    };
    match rest
        .split_once('_')
        .map(|(created, _)| created.parse::<u64>())
    {
        Some(Ok(created)) => now.saturating_sub(Duration::from_secs(created)) > STALE_AFTER,
        _ => true,
    }
}

/// Settings for a test node: random port, fast ticks, short leases.
pub fn test_settings(database_url: &str, change_store: &Path) -> Settings {
    let mut s = Settings {
        database_url: database_url.to_string(),
        listen: "127.0.0.1:0".parse().unwrap(),
        change_store: change_store.display().to_string(),
        ..Default::default()
    };
    s.scheduler.tick = Duration::from_millis(50);
    s.scheduler.lease_ttl = Duration::from_secs(5);
    s.scheduler.default_poll_interval = Duration::from_millis(200);
    // Every rewrite goes through the shuffle's tasks, however small (tests of rewrites
    // computed in place say so: `in_place`), and small shuffles still spread over
    // several buckets and reduce tasks.
    s.scheduler.shuffle_from_bytes = 0;
    s.scheduler.shuffle_buckets = 8;
    s.scheduler.reduce_target_bytes = 4096;
    s.api.shutdown_grace = Duration::from_secs(5);
    s.api.lag_report_interval = Duration::from_millis(200);
    // Garbage (shuffle files, deleted tables) goes within a test's patience.
    s.retention.interval = Duration::from_millis(200);
    s.retention.grace = Duration::from_millis(200);
    // Test tables live in temporary directories.
    s.catalog.local_paths = vec![std::env::temp_dir()];
    // The test servers (catalogs, object stores, OpenSearch) listen on loopback.
    s.network.allowed_hosts = LOOPBACK.iter().map(|h| h.to_string()).collect();
    s
}

/// `settings` for a node that computes every rewrite in place, in memory where it is
/// planned, without the shuffle's tasks.
pub fn in_place(mut settings: Settings) -> Settings {
    settings.scheduler.shuffle_from_bytes = u64::MAX;
    settings
}

/// The sum of a counter's series that start with `series` (a name, or a name and its
/// first labels) on `node`'s `/metrics`: process-wide, nodes of this test binary share
/// the recorder.
pub async fn counter(node: &Node, series: &str) -> u64 {
    let text = node.get_text("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The hosts of the test servers, which `network.allowed_hosts` lists for test nodes.
pub const LOOPBACK: &[&str] = &["127.0.0.0/8", "::1", "localhost"];

/// A node running in this process, with an HTTP client for it.
pub struct Node {
    pub base: String,
    pub http: reqwest::Client,
    running: Option<RunningNode>,
}

impl Node {
    pub async fn start(settings: Settings) -> Self {
        let running = icefeed::app::start(settings, CancellationToken::new())
            .await
            .expect("start node");
        Self {
            base: format!("http://{}", running.addr),
            http: reqwest::Client::new(),
            running: Some(running),
        }
    }

    /// A node on a fresh database with a fresh change store (kept alive by the guard).
    pub async fn start_fresh() -> (Self, tempfile::TempDir) {
        let store = tempfile::tempdir().unwrap();
        let node = Self::start(test_settings(&fresh_database().await, store.path())).await;
        (node, store)
    }

    /// A client of a node running in another process.
    pub fn remote(base: String) -> Self {
        Self {
            base,
            http: reqwest::Client::new(),
            running: None,
        }
    }

    /// A client of the same node that sends `token` with every request.
    pub fn with_token(&self, token: &str) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        Self {
            base: self.base.clone(),
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .unwrap(),
            running: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn shutdown(mut self) {
        self.running
            .take()
            .unwrap()
            .shutdown()
            .await
            .expect("clean shutdown");
    }

    async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
        let r = request.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// GET and parse JSON, with the status.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        Self::send(self.http.get(self.url(path))).await
    }

    /// GET the body as text.
    pub async fn get_text(&self, path: &str) -> String {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// POST JSON and parse the answer, with the status.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        Self::send(self.http.post(self.url(path)).json(body)).await
    }

    /// PATCH JSON and parse the answer, with the status.
    pub async fn patch(&self, path: &str, body: &Value) -> (u16, Value) {
        Self::send(self.http.patch(self.url(path)).json(body)).await
    }

    /// DELETE, with the status.
    pub async fn delete(&self, path: &str) -> u16 {
        self.http
            .delete(self.url(path))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// DELETE, returning the status and the (problem) body, `null` when empty.
    pub async fn delete_with_body(&self, path: &str) -> (u16, Value) {
        Self::send(self.http.delete(self.url(path))).await
    }

    /// Pauses or resumes a table.
    pub async fn set_paused(&self, id: &str, paused: bool) {
        let (status, t) = self
            .patch(&format!("/v1/tables/{id}"), &json!({ "paused": paused }))
            .await;
        assert_eq!(status, 200, "{t}");
    }

    /// Registers a table and returns its id.
    pub async fn register(&self, body: &Value) -> String {
        let (status, table) = self.post("/v1/tables", body).await;
        assert_eq!(status, 201, "registration failed: {table}");
        table["id"].as_str().unwrap().to_string()
    }

    /// Waits until the table's checkpoint is `snapshot_id` and returns the table.
    pub async fn wait_for_checkpoint(&self, id: &str, snapshot_id: i64) -> Value {
        let start = Instant::now();
        loop {
            let (_, t) = self.get(&format!("/v1/tables/{id}")).await;
            assert_ne!(t["state"], "error", "table went to error: {t}");
            if id64(&t["checkpoint"]["snapshot_id"]) == Some(snapshot_id) {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "checkpoint {snapshot_id} not reached: {t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The (ordinal, snapshot) of every published change set of table `id`, oldest first.
    pub async fn change_sets(&self, id: &str) -> Vec<(i64, i64)> {
        let (status, listing) = self
            .get(&format!("/v1/tables/{id}/change-sets?limit=1000"))
            .await;
        assert_eq!(status, 200, "{listing}");
        let mut published: Vec<(i64, i64)> = listing["change_sets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    id64(&c["ordinal"]).unwrap(),
                    id64(&c["snapshot_id"]).unwrap(),
                )
            })
            .collect();
        published.reverse();
        published
    }

    /// Waits until the table is in `state` and returns it.
    pub async fn wait_for_state(&self, id: &str, state: &str) -> Value {
        wait_until(Duration::from_secs(30), || async {
            let (_, t) = self.get(&format!("/v1/tables/{id}")).await;
            (t["state"] == state).then_some(t)
        })
        .await
    }

    /// Every event of the table's feed after `after`, paging with `limit`.
    pub async fn all_events(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Value>, String) {
        let mut events = Vec::new();
        let mut cursor = after.map(str::to_string);
        loop {
            let mut path = format!("/v1/tables/{id}/changes?limit={limit}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&after={c}"));
            }
            let (status, page) = self.get(&path).await;
            assert_eq!(status, 200, "{page}");
            let batch = page["events"].as_array().unwrap().clone();
            assert!(batch.len() <= limit);
            events.extend(batch);
            cursor = Some(page["next"].as_str().unwrap().to_string());
            if !page["more"].as_bool().unwrap() {
                return (events, cursor.unwrap());
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            drop(running);
        }
    }
}

/// The row image an event carries: `before` for a delete, else `after`.
pub fn image(event: &Value) -> &Value {
    if event["op"] == "delete" {
        &event["before"]
    } else {
        &event["after"]
    }
}

/// Polls `check` until it returns `Some`, failing after `timeout`.
pub async fn wait_until<T, F, Fut>(timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "condition not reached within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A local SQL catalog (sqlite) with a warehouse in a temporary directory, or on S3.
pub struct Warehouse {
    pub dir: tempfile::TempDir,
    pub catalog: Arc<dyn Catalog>,
    pub name: String,
    /// Where table files go: a local directory or an `s3://` or `gs://` URL.
    pub location: String,
    /// FileIO properties that reach `location`.
    pub file_io: BTreeMap<String, String>,
}

impl Warehouse {
    pub async fn new() -> Self {
        Self::named("test").await
    }

    pub async fn named(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let catalog = writer::open_sql_catalog(dir.path(), name).await.unwrap();
        let (_, location) = writer::catalog_paths(dir.path()).unwrap();
        Self {
            dir,
            catalog: Arc::new(catalog),
            name: name.to_string(),
            location: location.display().to_string(),
            file_io: BTreeMap::new(),
        }
    }

    /// A warehouse below a fresh prefix of the test S3 server's bucket.
    pub async fn on_s3() -> Self {
        let location = format!("s3://{}/{}", s3::BUCKET, s3::unique("warehouse"));
        Self::at(location, s3::file_io()).await
    }

    /// A warehouse below a fresh prefix of the test GCS server's bucket.
    pub async fn on_gcs() -> Self {
        let location = format!("gs://{}/{}", gcs::BUCKET, s3::unique("warehouse"));
        Self::at(location, gcs::file_io()).await
    }

    /// A warehouse at an object-store `location` reached with `file_io`.
    async fn at(location: String, file_io: BTreeMap<String, String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let props = file_io.clone().into_iter().collect();
        let catalog = writer::open_sql_catalog_at(dir.path(), "test", &location, &props)
            .await
            .unwrap();
        Self {
            dir,
            catalog: Arc::new(catalog),
            name: "test".into(),
            location,
            file_io,
        }
    }

    pub async fn create(
        &self,
        table: &str,
        schema: Schema,
        spec: Option<UnboundPartitionSpec>,
    ) -> Table {
        let ident = TableIdent::from_strs(table.split('.')).unwrap();
        writer::create_table(self.catalog.as_ref(), &ident, schema, spec)
            .await
            .unwrap()
    }

    /// Appends batches in one snapshot; returns the reloaded table.
    pub async fn append(&self, table: &Table, batches: &[RecordBatch]) -> Table {
        writer::append(
            self.catalog.as_ref(),
            table,
            batches,
            &AppendOptions::default(),
        )
        .await
        .unwrap()
    }

    /// Copy-on-write: replaces every live data file with `rows` in one `overwrite`
    /// snapshot, the way an UPDATE/DELETE/MERGE rewrite commits; returns the table.
    pub async fn overwrite_all(&self, table: &Table, rows: &[RecordBatch]) -> Table {
        let files = rewrite::live_data_files(table).await.unwrap();
        rewrite::rewrite(self.catalog.as_ref(), table, &files, rows, "overwrite")
            .await
            .unwrap()
    }

    /// The catalog part of a registration body.
    pub fn catalog_json(&self) -> Value {
        let (db, _) = writer::catalog_paths(self.dir.path()).unwrap();
        json!({"type": "sql", "uri": format!("sqlite:{}", db.display()),
               "warehouse": self.location, "name": self.name, "properties": self.file_io})
    }

    /// A registration body for `table` with extra fields merged in.
    pub fn registration(&self, table: &str, extra: Value) -> Value {
        let mut body =
            json!({"catalog": self.catalog_json(), "table": table, "poll_interval_ms": 100});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    }
}

/// The current snapshot id of a table.
pub fn head(table: &Table) -> i64 {
    table.metadata().current_snapshot().unwrap().snapshot_id()
}

/// A test server process, killed (and reaped) when dropped, so that a failing test
/// leaves none behind.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a writer script to its end, or kills it after `timeout`: its exit status (`None`
/// when it was killed) and its stderr, where writers log. Stdout is discarded: writers
/// leave their document in a file.
pub fn run_with_deadline(
    command: &mut std::process::Command,
    timeout: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    use std::io::Read;
    use std::process::Stdio;
    let started = Instant::now();
    let mut child = KillOnDrop(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python (set ICEFEED_TEST_PYTHON, see scripts/python-env.sh)"),
    );
    let mut stderr = child.stderr.take().unwrap();
    // Read while it runs: a full pipe would block the writer.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, reader.join().unwrap())
}

/// A 64-bit id of an answer, which the API writes as a string of digits; `None` for
/// anything else (a number included: browsers would round it).
pub fn id64(value: &Value) -> Option<i64> {
    value.as_str().and_then(|s| s.parse().ok())
}

/// A 64-bit id as the API writes it.
pub fn id_json(id: i64) -> Value {
    Value::String(id.to_string())
}

#[test]
fn only_test_databases_of_earlier_runs_are_stale() {
    let now = Duration::from_secs(1_800_000_000);
    let name = |secs: u64| format!("{TEST_DATABASE_PREFIX}{secs}_0123abcd");
    assert!(!is_stale(&name(now.as_secs() - 60), now));
    assert!(is_stale(&name(now.as_secs() - 4 * 3600), now));
    // Named before names carried their creation.
    assert!(is_stale(
        "icefeed_test_0123456789abcdef0123456789abcdef",
        now
    ));
    assert!(!is_stale("icefeed", now));
    assert!(!is_stale("icefeed_sqlx", now));
}
