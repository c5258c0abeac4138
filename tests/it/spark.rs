//! A differential test against Apache Spark, the reference Iceberg writer. Seeded random
//! histories are written by Spark 3.5 with Iceberg 1.10 (tests/python/spark_writer.py):
//! INSERT, UPDATE of scattered rows, UPDATE moving rows to another partition, no-op
//! UPDATE (`SET c = c`), DELETE of rows and of whole partitions, MERGE INTO with
//! matched-update, matched-delete and not-matched-insert, `rewrite_data_files` and
//! `rewrite_position_delete_files`, on tables of format version 2 (position delete files,
//! `write.delete.granularity` file or partition) and 3 (deletion vectors), partitioned
//! and not, with identifier field `id`. Merge-on-read histories switch a write mode to
//! copy-on-write and back now and then; copy-on-write histories never use merge-on-read.
//! Between commits, both change the schema: columns added (also in a given position),
//! dropped, renamed (the identifier `id` and the partition source too), moved, and
//! promoted (int to long, float to double, decimal(6,2) to decimal(9,2)). Each snapshot's
//! expected change set is its parent's rows read under its schema by field id, diffed
//! with its rows by its identifier column; every event must name its snapshot's schema.
//!
//! The oracle knows nothing of icefeed: after every commit the writer reads the table
//! state through Spark (`VERSION AS OF`, checked against a plain model of the rows), and
//! this test diffs consecutive states by key (`diffing::diff`). icefeed, registered with
//! the `filesystem` catalog on Spark's Hadoop warehouse and `"start": "earliest"`, must
//! publish exactly those changes, snapshot by snapshot; a `replace` snapshot none.
//!
//! On v3 tables the writer also reads every row's lineage (`_row_id`,
//! `_last_updated_sequence_number`) at every snapshot: an event's `lineage.before` must be
//! its before image's row's at the parent snapshot, `lineage.after` its after image's at
//! the event's snapshot (matched by identifier value); events of v2 tables have none.
//! `spark_keyless_v3_histories_pair_updates_by_row_id` registers the v3 merge-on-read
//! histories without identifier columns: each change set is then the consecutive states
//! paired by row id (values changed: an update without `key`, the same: no event; only in
//! one state: a delete or an insert), and an update's two sides have one row id.
//! `spark_exports_carry_the_lineage_of_their_rows` registers them at their last snapshot
//! (`"start": "snapshot"`): one insert per live row, each with the lineage Spark reads.
//!
//! `ICEFEED_SPARK_SEEDS` (merge-on-read, default 1..=4 and 13) and
//! `ICEFEED_SPARK_COW_SEEDS` (copy-on-write only, default 1..=2) pick the seeds, with the
//! syntax of `ICEFEED_ORACLE_SEEDS`; an empty value runs none. A seed's low bits choose the
//! table (bit 0 partitioned, bit 1 format v3, bit 2 granularity `partition` on v2, bit 3 a
//! v2 table upgraded to v3 halfway: rows written before have no lineage until the
//! upgrade's commit gives them ids), so 1..=15 covers every shape. The tests on the local warehouse share one writer run (one Spark
//! session: its start is slow). Needs `ICEFEED_TEST_PYTHON` with pyspark and
//! `ICEFEED_TEST_SPARK_JAR`, the Iceberg Spark runtime jar that scripts/spark.sh prints;
//! scripts/test.sh sets both.
//!
//! The same writer also writes through the REST catalog of the SeaweedFS server (s3.rs)
//! onto S3 with Iceberg's S3FileIO (`iceberg-aws-bundle`, `ICEFEED_TEST_SPARK_AWS_BUNDLE`
//! or what `scripts/spark.sh --aws-bundle` prints), in a namespace of its own:
//! `ICEFEED_SPARK_S3_SEEDS` (copy-on-write, default 1,2) and `ICEFEED_SPARK_S3_MOR_SEEDS`
//! (merge-on-read, default 3) pick those seeds, written by one more Spark session of their
//! own. icefeed follows them through the REST catalog into a change store on S3.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::diffing::{
    Column, OracleSnapshot, Paired, check_schemas, compare_feed, diff_paired, expected_changes,
    expected_changes_by, labels, pair_rows, project, seeds_in,
};
use crate::net_changes::{NetRange, check_range, state_cursors};
use crate::support::{Node, id64, run_with_deadline};

/// Merge-on-read seeds run when `ICEFEED_SPARK_SEEDS` is unset: v2 and v3, partitioned
/// and not, and a partitioned v2 table upgraded to v3 halfway (13).
const DEFAULT_SEEDS: &[u64] = &[1, 2, 3, 4, 13];
/// Copy-on-write seeds run when `ICEFEED_SPARK_COW_SEEDS` is unset.
const DEFAULT_COW_SEEDS: &[u64] = &[1, 2];
/// Seeds of the tables on S3 when `ICEFEED_SPARK_S3_SEEDS` (copy-on-write) and
/// `ICEFEED_SPARK_S3_MOR_SEEDS` (merge-on-read) are unset: unpartitioned v2, partitioned
/// v2 and partitioned v3.
const DEFAULT_S3_COW_SEEDS: &[u64] = &[1, 2];
const DEFAULT_S3_MOR_SEEDS: &[u64] = &[3];
/// The writer is stopped after this long.
const WRITER_TIMEOUT: Duration = Duration::from_secs(30 * 60);

// ---------------------------------------------------------------------------------------
// The writer's document (see tests/python/spark_writer.py)
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Document {
    spark: String,
    iceberg: String,
    seconds: f64,
    histories: Vec<History>,
}

#[derive(Deserialize)]
struct History {
    seed: u64,
    mode: String,
    table: String,
    location: String,
    /// At the end of the history.
    format_version: u8,
    /// Whether it was upgraded from v2 to v3 halfway.
    #[serde(default)]
    upgraded: bool,
    partitioned: bool,
    granularity: String,
    seconds: f64,
    /// The identifier columns' names in the newest schema.
    identifier: Vec<String>,
    snapshots: Vec<Snapshot>,
}

#[derive(Deserialize)]
struct Snapshot {
    snapshot_id: i64,
    sequence_number: i64,
    operation: String,
    statement: String,
    sql: String,
    summary: BTreeMap<String, String>,
    /// The snapshot's schema: its id, top-level columns and identifier columns' names.
    schema_id: i32,
    columns: Vec<Column>,
    identifier: Vec<String>,
    /// Its rows, keyed by its schema's names.
    rows: Vec<Value>,
    /// Its rows' lineage as Spark reads it, sorted by identifier value (v3 tables).
    lineage: Option<Vec<Lineage>>,
}

/// A row's lineage at a snapshot: its identifier value, `_row_id` and
/// `_last_updated_sequence_number` (null when unknown).
#[derive(Deserialize)]
struct Lineage(i64, Option<i64>, Option<i64>);

impl Lineage {
    /// As an event's `lineage.before` or `lineage.after`: 64-bit values as strings.
    fn json(&self) -> Value {
        let text = |v: Option<i64>| v.map_or(Value::Null, |v| Value::String(v.to_string()));
        json!({"row_id": text(self.1), "last_updated_sequence_number": text(self.2)})
    }
}

/// How icefeed pairs a snapshot's deleted and added rows into updates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pairing {
    /// By the table's identifier columns (`id`, whatever its name), the registration's
    /// default.
    Key,
    /// By row id: a v3 table registered with `"identifier_columns": []`.
    RowId,
}

impl History {
    fn describe(&self) -> String {
        format!(
            "{} (seed {}, {}, v{}{}, {}, granularity {})",
            self.table,
            self.seed,
            self.mode,
            self.format_version,
            if self.upgraded {
                " upgraded from v2"
            } else {
                ""
            },
            if self.partitioned {
                "partitioned"
            } else {
                "unpartitioned"
            },
            self.granularity
        )
    }

    /// What turning each snapshot's parent state into its state must publish when rows
    /// pair by `pairing`; a `replace` snapshot must publish nothing.
    fn expected(&self, pairing: Pairing) -> Vec<(i64, Vec<String>)> {
        let out = match pairing {
            Pairing::Key => expected_changes(&self.snapshots),
            Pairing::RowId => expected_changes_by(&self.snapshots, |parent, before, s| {
                let key = &s.identifier[0];
                let before = parent.map(|p| p.by_row_id(before, key)).unwrap_or_default();
                diff_paired(&before, &s.by_row_id(&s.rows, key), |_| Value::Null)
            }),
        };
        for (s, (_, changes)) in self.snapshots.iter().zip(&out) {
            assert!(
                s.operation != "replace" || changes.is_empty(),
                "{}: Spark's replace snapshot {} changed the rows",
                self.describe(),
                s.snapshot_id
            );
        }
        out
    }
}

impl Snapshot {
    /// The lineage of the row whose identifier value is `id`.
    fn lineage_of(&self, id: i64) -> Option<&Lineage> {
        let lineage = self.lineage.as_ref()?;
        let at = lineage.binary_search_by_key(&id, |l| l.0).ok()?;
        Some(&lineage[at])
    }

    /// `rows`, this snapshot's (maybe read under a later schema, whose identifier column
    /// is `key`), by their row ids here. Spark's v3 tables are v3 from the start: every
    /// row has one.
    fn by_row_id(&self, rows: &[Value], key: &str) -> Paired {
        pair_rows(rows, |row| {
            row[key]
                .as_i64()
                .and_then(|id| self.lineage_of(id)?.1)
                .unwrap_or_else(|| panic!("no row id at snapshot {}: {row}", self.snapshot_id))
                .to_string()
        })
    }
}

impl OracleSnapshot for Snapshot {
    fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }
    fn sequence_number(&self) -> i64 {
        self.sequence_number
    }
    fn schema_id(&self) -> i32 {
        self.schema_id
    }
    fn columns(&self) -> Vec<Column> {
        self.columns.clone()
    }
    fn identifier(&self) -> &[String] {
        &self.identifier
    }
    fn rows(&self) -> &[Value] {
        &self.rows
    }

    /// `statement [operation; files added and removed]: SQL`, for messages.
    fn label(&self) -> String {
        let mut files = Vec::new();
        for (key, name) in [
            ("added-data-files", "+data"),
            ("deleted-data-files", "-data"),
            ("added-position-delete-files", "+pos"),
            ("removed-position-delete-files", "-pos"),
            ("added-dvs", "+dv"),
            ("removed-dvs", "-dv"),
        ] {
            if let Some(n) = self.summary.get(key) {
                files.push(format!("{name} {n}"));
            }
        }
        format!(
            "{} [{}; {}]: {}",
            self.statement,
            self.operation,
            files.join(", "),
            self.sql
        )
    }
}

// ---------------------------------------------------------------------------------------
// Running the writer once for both tests
// ---------------------------------------------------------------------------------------

/// Where the writer puts its tables.
enum Catalog {
    /// Spark's Hadoop catalog in the run's directory (`Written::warehouse`).
    Hadoop,
    /// The REST catalog of the SeaweedFS server (s3.rs), in `namespace`; the files on S3.
    Rest { namespace: String },
}

/// The histories of one writer run and the directory holding their tables (a Hadoop
/// warehouse; removed with the last test that uses them) or Spark's scratch files.
struct Written {
    dir: tempfile::TempDir,
    document: Document,
}

impl Written {
    fn warehouse(&self) -> PathBuf {
        self.dir.path().join("warehouse")
    }
}

/// The run the tests share while one of them holds it, or why it failed.
static WRITTEN: Mutex<(Weak<Written>, Option<String>)> = Mutex::new((Weak::new(), None));

fn mor_seeds() -> Vec<u64> {
    spark_seeds("ICEFEED_SPARK_SEEDS", DEFAULT_SEEDS)
}

fn cow_seeds() -> Vec<u64> {
    spark_seeds("ICEFEED_SPARK_COW_SEEDS", DEFAULT_COW_SEEDS)
}

fn spark_seeds(var: &str, default: &[u64]) -> Vec<u64> {
    if std::env::var(var).is_ok_and(|v| v.trim().is_empty()) {
        return Vec::new();
    }
    seeds_in(var).unwrap_or_else(|| default.to_vec())
}

fn seed_list(seeds: &[u64]) -> String {
    seeds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// [`written`], waited for off the async workers (a writer's panic is the test's).
async fn written_off_the_runtime() -> Arc<Written> {
    match tokio::task::spawn_blocking(written).await {
        Ok(written) => written,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The histories of every seed of both tests, written by one run of the writer shared by
/// the tests running at the same time. A failed run fails every test that wanted it.
fn written() -> Arc<Written> {
    let mut shared = WRITTEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(failure) = &shared.1 {
        panic!("{failure}");
    }
    if let Some(written) = shared.0.upgrade() {
        return written;
    }
    match run_writer(&mor_seeds(), &cow_seeds(), &Catalog::Hadoop) {
        Ok(written) => {
            let written = Arc::new(written);
            shared.0 = Arc::downgrade(&written);
            written
        }
        Err(failure) => {
            shared.1 = Some(failure.clone());
            panic!("{failure}");
        }
    }
}

/// The iceberg-aws-bundle jar: `ICEFEED_TEST_SPARK_AWS_BUNDLE`, else what
/// `scripts/spark.sh --aws-bundle` prints (it fetches the jar when needed).
fn aws_bundle() -> String {
    if let Ok(jar) = std::env::var("ICEFEED_TEST_SPARK_AWS_BUNDLE") {
        return jar;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/spark.sh");
    let out = Command::new(script)
        .arg("--aws-bundle")
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/spark.sh --aws-bundle (or set ICEFEED_TEST_SPARK_AWS_BUNDLE)");
    assert!(out.status.success(), "scripts/spark.sh --aws-bundle failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs the writer on the seeds `mor` (merge-on-read) and `cow` (copy-on-write) into
/// `catalog`.
fn run_writer(mor: &[u64], cow: &[u64], catalog: &Catalog) -> Result<Written, String> {
    let jar = std::env::var("ICEFEED_TEST_SPARK_JAR").expect(
        "ICEFEED_TEST_SPARK_JAR: the Iceberg Spark runtime jar scripts/spark.sh prints \
         (scripts/test.sh sets it)",
    );
    let dir = tempfile::Builder::new()
        .prefix("icefeed-spark-")
        .tempdir()
        .unwrap();
    let out = dir.path().join("histories.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/spark_writer.py");
    let mut command = Command::new(crate::pyiceberg::python());
    command
        .arg(script)
        .arg("--jar")
        .arg(&jar)
        .arg("--warehouse")
        .arg(dir.path().join("warehouse"))
        .arg("--out")
        .arg(&out)
        .arg("--seeds")
        .arg(seed_list(mor))
        .arg("--cow-seeds")
        .arg(seed_list(cow));
    let into = match catalog {
        Catalog::Hadoop => "a Hadoop warehouse".to_string(),
        Catalog::Rest { namespace } => {
            use crate::s3;
            command
                .arg("--aws-bundle")
                .arg(aws_bundle())
                .arg("--namespace")
                .arg(namespace)
                .arg("--catalog-uri")
                .arg(s3::rest_uri())
                .arg("--s3-endpoint")
                .arg(s3::endpoint())
                .arg("--warehouse-name")
                .arg(s3::TABLE_BUCKET)
                // S3FileIO's and boto3's credentials; the catalog's OAuth2 client.
                .env("AWS_ACCESS_KEY_ID", s3::ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", s3::SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .env(
                    "ICEFEED_SPARK_CATALOG_CREDENTIAL",
                    format!("{}:{}", s3::ACCESS_KEY, s3::SECRET_KEY),
                );
            format!(
                "the REST catalog {} (namespace {namespace})",
                s3::rest_uri()
            )
        }
    };
    let (status, log) = run_with_deadline(command.current_dir(dir.path()), WRITER_TIMEOUT);
    match status {
        Some(status) if status.success() => {}
        Some(status) => {
            return Err(format!(
                "the Spark writer failed ({status}) on seeds {mor:?} (merge-on-read) and \
                 {cow:?} (copy-on-write) into {into}:\n{}",
                writer_lines(&log, 80)
            ));
        }
        None => {
            return Err(format!(
                "the Spark writer did not finish within {WRITER_TIMEOUT:?}:\n{}",
                writer_lines(&log, 80)
            ));
        }
    }
    for line in log.lines().filter(|l| l.starts_with("spark_writer:")) {
        eprintln!("{line}");
    }
    let document: Document = std::fs::read(&out)
        .map_err(|e| format!("the writer's document {}: {e}", out.display()))
        .and_then(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| format!("the writer's document: {e}"))
        })?;
    eprintln!(
        "spark: Spark {} with Iceberg {} wrote {} histories into {into} in {:.1} s",
        document.spark,
        document.iceberg,
        document.histories.len(),
        document.seconds
    );
    Ok(Written { dir, document })
}

/// The last `lines` lines of the writer's stderr without Spark's own log lines
/// (`26/12/01 22:48:21 WARN ...`), which would hide the writer's message.
fn writer_lines(log: &str, lines: usize) -> String {
    let spark_log = |l: &str| {
        let b = l.as_bytes();
        (b.len() > 18 && b[2] == b'/' && b[5] == b'/' && b[8] == b' ' && b[11] == b':')
            || l.starts_with("Setting default log level")
            || l.starts_with("To adjust logging level")
    };
    let kept: Vec<&str> = log.lines().filter(|l| !spark_log(l)).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------
// icefeed's side
// ---------------------------------------------------------------------------------------

/// Registers `history`'s table from the Hadoop warehouse, starting at `start`
/// (`earliest`, or `snapshot` for an export of the last), to pair rows by `pairing`.
async fn register(
    node: &Node,
    warehouse: &Path,
    history: &History,
    pairing: Pairing,
    start: &str,
) -> String {
    assert!(
        history
            .location
            .trim_start_matches("file:")
            .trim_start_matches("//")
            .starts_with(&warehouse.display().to_string()),
        "{} is not below the warehouse {}",
        history.location,
        warehouse.display()
    );
    let catalog =
        json!({"type": "filesystem", "warehouse": format!("file://{}", warehouse.display())});
    register_in(node, catalog, history, pairing, start).await
}

/// Registers `history`'s table in `catalog`, starting at `start`, to pair rows by
/// `pairing`: by key, the identifier columns come from the table's schema (Spark's `SET
/// IDENTIFIER FIELDS`); by row id, the registration has none.
async fn register_in(
    node: &Node,
    catalog: Value,
    history: &History,
    pairing: Pairing,
    start: &str,
) -> String {
    let mut body = json!({
        "catalog": catalog, "table": history.table, "poll_interval_ms": 100, "start": start,
    });
    let identifier = match pairing {
        Pairing::Key => json!(history.identifier),
        Pairing::RowId => {
            body["identifier_columns"] = json!([]);
            json!([])
        }
    };
    let id = node.register(&body).await;
    let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(t["identifier_columns"], identifier, "{t}");
    id
}

/// Every event of table `id` carries its rows' lineage as Spark reads it on v3 tables
/// (`lineage_error`), none on v2. The error names each snapshot whose events differ.
async fn check_lineage(
    node: &Node,
    id: &str,
    history: &History,
    pairing: Pairing,
) -> Result<(), String> {
    let at: HashMap<i64, usize> = history
        .snapshots
        .iter()
        .enumerate()
        .map(|(i, s)| (s.snapshot_id, i))
        .collect();
    let (events, _) = node.all_events(id, None, 500).await;
    // By snapshot index: its events, and what is wrong with some.
    let mut seen: BTreeMap<usize, (usize, Vec<String>)> = BTreeMap::new();
    let v3 = history.format_version >= 3;
    for e in &events {
        // compare_feed found every event's snapshot in the history.
        let i = at[&id64(&e["snapshot_id"]).expect("snapshot_id")];
        let parent = i.checked_sub(1).map(|p| &history.snapshots[p]);
        let entry = seen.entry(i).or_default();
        entry.0 += 1;
        if let Err(wrong) = lineage_error(e, parent, &history.snapshots[i], v3, pairing) {
            entry.1.push(wrong);
        }
    }
    let failures: Vec<String> = seen
        .iter()
        .filter(|(_, (_, wrong))| !wrong.is_empty())
        .map(|(&i, (events, wrong))| {
            let s = &history.snapshots[i];
            format!(
                "snapshot #{} {} ({}): {} of {events} events, e.g.\n    {}",
                i + 1,
                s.snapshot_id,
                s.label(),
                wrong.len(),
                wrong[..wrong.len().min(2)].join("\n    ")
            )
        })
        .collect();
    if failures.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: the events' lineage differs from Spark's:\n{}",
        history.describe(),
        failures.join("\n")
    ))
}

/// Checks the `lineage` of event `e` of snapshot `s` (`parent` the snapshot before it):
/// on a v3 table, `before` is the lineage of the before image's row (by identifier value)
/// at `parent`, `after` the after image's at `s`, each present exactly with its image; a
/// v2 table's events have none. Paired by row id, an update's sides have one row id.
fn lineage_error(
    e: &Value,
    parent: Option<&Snapshot>,
    s: &Snapshot,
    v3: bool,
    pairing: Pairing,
) -> Result<(), String> {
    let have = e.get("lineage");
    if !v3 {
        return match have {
            Some(lineage) => Err(format!("a v2 table's event has lineage {lineage}: {e}")),
            None => Ok(()),
        };
    }
    let have = have.ok_or_else(|| format!("no lineage: {e}"))?;
    if pairing == Pairing::RowId
        && e["op"] == "update"
        && have["before"]["row_id"] != have["after"]["row_id"]
    {
        return Err(format!("an update of two row ids: {e}"));
    }
    let key = &s.identifier[0];
    let mut want = serde_json::Map::new();
    for (side, at) in [("before", parent), ("after", Some(s))] {
        let Some(image) = e.get(side).filter(|image| !image.is_null()) else {
            continue;
        };
        let lineage = at
            .zip(image[key].as_i64())
            .and_then(|(at, id)| at.lineage_of(id))
            .ok_or_else(|| format!("Spark read no lineage of the {side} image's row: {e}"))?;
        want.insert(side.to_string(), lineage.json());
    }
    let want = Value::Object(want);
    if *have != want {
        return Err(format!("lineage {have}, Spark reads {want}: {e}"));
    }
    Ok(())
}

/// The written histories of `seeds` in `mode`.
fn histories<'a>(written: &'a Written, mode: &str, seeds: &[u64]) -> Vec<&'a History> {
    seeds
        .iter()
        .map(|&seed| {
            written
                .document
                .histories
                .iter()
                .find(|h| h.mode == mode && h.seed == seed)
                .unwrap_or_else(|| panic!("the writer wrote no {mode} history of seed {seed}"))
        })
        .collect()
}

/// Checks the histories of `seeds` in `mode` ("mor" or "cow"), registered to pair rows by
/// `pairing`, against one node; every failing seed is reported, with the snapshots that
/// differ.
async fn check(
    mode: &str,
    seeds: &[u64],
    pairing: Pairing,
    var: &str,
    other_var: &str,
    test: &str,
) {
    if seeds.is_empty() {
        eprintln!("spark: no {mode} seeds ({var} is empty)");
        return;
    }
    let written = written_off_the_runtime().await;
    let started = Instant::now();
    let histories = histories(&written, mode, seeds);

    let (node, _store) = Node::start_fresh().await;
    let mut ids = Vec::new();
    for h in &histories {
        ids.push(register(&node, &written.warehouse(), h, pairing, "earliest").await);
    }
    let what = format!("{mode} seeds {seeds:?}");
    compare_histories(node, &histories, &ids, pairing, &what, started, |h| {
        format!("{var}={} {other_var}= cargo test --test it {test}", h.seed)
    })
    .await;
}

/// Random ranges of the history's feed that span one schema (net changes compare rows
/// of one schema): their net changes must be the diff of the table at their ends, by
/// key, or as multisets of whole rows for a table registered without a key.
async fn check_net_changes(
    node: &Node,
    id: &str,
    h: &History,
    pairing: Pairing,
) -> Result<(), String> {
    const RANGES: usize = 3;
    let snapshots: Vec<i64> = h.snapshots.iter().map(|s| s.snapshot_id).collect();
    let (events, _) = node.all_events(id, None, 500).await;
    let cursors = state_cursors(&events, &snapshots);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(h.seed);
    for _ in 0..RANGES {
        // The range covers snapshots a..b: all of b - 1's schema.
        let b = rand::Rng::random_range(&mut rng, 1..=snapshots.len());
        let end = &h.snapshots[b - 1];
        let mut first = b - 1;
        while first > 0 && h.snapshots[first - 1].schema_id == end.schema_id {
            first -= 1;
        }
        let a = rand::Rng::random_range(&mut rng, first..b);
        let Some(until) = cursors[b].as_deref() else {
            continue;
        };
        let columns = end.columns();
        let mut states = vec![match a {
            0 => Vec::new(),
            _ => {
                let start = &h.snapshots[a - 1];
                let from = start.columns();
                start
                    .rows
                    .iter()
                    .map(|r| project(r, &from, &columns))
                    .collect()
            }
        }];
        states.extend(h.snapshots[a..b].iter().map(|s| s.rows.clone()));
        let key: Vec<&str> = match pairing {
            Pairing::Key => end.identifier.iter().map(String::as_str).collect(),
            Pairing::RowId => Vec::new(),
        };
        let range = NetRange {
            after: cursors[a].as_deref(),
            until,
            states: &states,
            snapshots: &snapshots[a..b],
            key: &key,
        };
        check_range(node, id, &range, 50)
            .await
            .map_err(|e| format!("net changes after state {a} up to {b}: {e}"))?;
    }
    Ok(())
}

/// Compares the feeds of `histories` (registered as `ids` on `node`, which is shut down
/// after, to pair rows by `pairing`) with what Spark wrote: change sets, schemas and
/// lineage; every failing seed is reported, with the snapshots that differ and the
/// command that reruns it alone (`rerun`).
async fn compare_histories(
    node: Node,
    histories: &[&History],
    ids: &[String],
    pairing: Pairing,
    what: &str,
    started: Instant,
    rerun: impl Fn(&History) -> String,
) {
    let mut failures = Vec::new();
    let mut events = 0;
    let mut quiet = 0;
    let mut statements: BTreeMap<String, usize> = BTreeMap::new();
    for (h, id) in histories.iter().zip(ids) {
        if h.mode == "cow" {
            let with_deletes: Vec<String> = h
                .snapshots
                .iter()
                .filter(|s| {
                    s.summary
                        .get("added-delete-files")
                        .is_some_and(|n| n != "0")
                })
                .map(Snapshot::label)
                .collect();
            assert!(
                with_deletes.is_empty(),
                "{}: copy-on-write statements added delete files: {with_deletes:?}",
                h.describe()
            );
        }
        let expected = h.expected(pairing);
        events += expected.iter().map(|(_, c)| c.len()).sum::<usize>();
        quiet += expected.iter().filter(|(_, c)| c.is_empty()).count();
        for s in &h.snapshots {
            *statements
                .entry(format!("{} [{}]", s.statement, s.operation))
                .or_default() += 1;
        }
        let (labels, sequence) = labels(&h.snapshots);
        let compared = async {
            compare_feed(&node, id, &h.describe(), &labels, &sequence, &expected).await?;
            check_schemas(&node, id, &h.snapshots).await?;
            check_lineage(&node, id, h, pairing).await?;
            check_net_changes(&node, id, h, pairing).await
        }
        .await;
        if let Err(failure) = compared {
            failures.push(format!(
                "seed {} ({}): {failure}\n  rerun it alone with {}",
                h.seed,
                h.mode,
                rerun(h)
            ));
        }
    }
    eprintln!(
        "spark: {what}: {} snapshots {statements:?}, {quiet} without changes, \
         {events} events expected; written in {:.1} s, compared in {:.1?}; {} of {} seeds failed",
        histories.iter().map(|h| h.snapshots.len()).sum::<usize>(),
        histories.iter().map(|h| h.seconds).sum::<f64>(),
        started.elapsed(),
        failures.len(),
        histories.len()
    );
    node.shutdown().await;
    assert!(
        failures.is_empty(),
        "icefeed differs from Spark on {} of {} histories ({what}):\n\n{}",
        failures.len(),
        histories.len(),
        failures.join("\n\n")
    );
}

/// Merge-on-read histories (position deletes on v2, deletion vectors on v3), with some
/// steps in copy-on-write mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_merge_on_read_histories_match_icefeed() {
    check(
        "mor",
        &mor_seeds(),
        Pairing::Key,
        "ICEFEED_SPARK_SEEDS",
        "ICEFEED_SPARK_COW_SEEDS",
        "spark_merge_on_read",
    )
    .await;
}

/// Three `icefeed serve` processes follow the merge-on-read histories; the one running a
/// shuffle task is SIGKILLed; every change set must still equal Spark's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_merge_on_read_shuffle_loses_and_duplicates_nothing() {
    use crate::nodes::{kill_a_task_runner, stop_survivors, three_nodes};

    let seeds = mor_seeds();
    if seeds.is_empty() {
        return;
    }
    let written = written_off_the_runtime().await;
    let histories = histories(&written, "mor", &seeds);
    let db = crate::support::fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let mut nodes = three_nodes(&db, store.path().as_os_str(), &[]).await;
    let client = Node::remote(nodes[1].base.clone());
    let mut ids = Vec::new();
    for h in &histories {
        ids.push(register(&client, &written.warehouse(), h, Pairing::Key, "earliest").await);
    }
    kill_a_task_runner(&db, &mut nodes).await;
    let survivor = Node::remote(nodes[0].base.clone());
    for (h, id) in histories.iter().zip(&ids) {
        let (labels, sequence) = labels(&h.snapshots);
        if let Err(failure) = compare_feed(
            &survivor,
            id,
            &h.describe(),
            &labels,
            &sequence,
            &h.expected(Pairing::Key),
        )
        .await
        {
            panic!("seed {} after a node was killed: {failure}", h.seed);
        }
    }
    stop_survivors(&db, nodes).await;
}

/// The v3 merge-on-read histories (seeds with bit 1) registered without identifier
/// columns: a deleted and an added row of one row id pair into an update without `key`,
/// one whose values stayed is carryover (also when its last updated sequence number
/// moved), the others are deletes and inserts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_keyless_v3_histories_pair_updates_by_row_id() {
    let seeds: Vec<u64> = mor_seeds().into_iter().filter(|s| s & 2 != 0).collect();
    if seeds.is_empty() {
        eprintln!("spark: none of the merge-on-read seeds is v3 (bit 1): no keyless v3 histories");
        return;
    }
    check(
        "mor",
        &seeds,
        Pairing::RowId,
        "ICEFEED_SPARK_SEEDS",
        "ICEFEED_SPARK_COW_SEEDS",
        "spark_keyless_v3",
    )
    .await;
}

/// The merge-on-read histories exported (`"start": "snapshot"`): every live row of the
/// last snapshot is one insert with the lineage Spark reads there. Rows of data files
/// with deletes are copied with the positions deleted in them, so a row's inherited id
/// is its position in the file, not among the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_exports_carry_the_lineage_of_their_rows() {
    let seeds = mor_seeds();
    if seeds.is_empty() {
        eprintln!("spark: no merge-on-read seeds (ICEFEED_SPARK_SEEDS is empty)");
        return;
    }
    let written = written_off_the_runtime().await;
    let (node, _store) = Node::start_fresh().await;
    let mut failures = Vec::new();
    for h in histories(&written, "mor", &seeds) {
        let last = h.snapshots.last().expect("a history with snapshots");
        let id = register(&node, &written.warehouse(), h, Pairing::Key, "snapshot").await;
        node.wait_for_checkpoint(&id, last.snapshot_id).await;
        let (events, _) = node.all_events(&id, None, 500).await;
        let key = &last.identifier[0];
        let mut rows: Vec<&Value> = events.iter().map(|e| &e["after"]).collect();
        rows.sort_by_key(|r| r[key].as_i64());
        let v3 = h.format_version >= 3;
        let wrong: Vec<String> = events
            .iter()
            .filter_map(|e| lineage_error(e, None, last, v3, Pairing::Key).err())
            .collect();
        if rows != last.rows.iter().collect::<Vec<_>>() || !wrong.is_empty() {
            failures.push(format!(
                "{}: the export of snapshot {} has {} events ({} rows live), {} with wrong \
                 lineage, e.g. {:?}",
                h.describe(),
                last.snapshot_id,
                events.len(),
                last.rows.len(),
                wrong.len(),
                &wrong[..wrong.len().min(2)]
            ));
        }
    }
    node.shutdown().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Copy-on-write-only histories: Spark rewrites files, never writes delete files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_copy_on_write_histories_match_icefeed() {
    check(
        "cow",
        &cow_seeds(),
        Pairing::Key,
        "ICEFEED_SPARK_COW_SEEDS",
        "ICEFEED_SPARK_SEEDS",
        "spark_copy_on_write",
    )
    .await;
}

/// Copy-on-write histories (and a merge-on-read one) written by Spark through a REST
/// catalog onto S3 with S3FileIO, followed by icefeed through the same catalog into a
/// change store on S3: the feeds must equal Spark's states, as from a local warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_copy_on_write_histories_on_s3_match_icefeed() {
    use crate::s3;

    let cow = spark_seeds("ICEFEED_SPARK_S3_SEEDS", DEFAULT_S3_COW_SEEDS);
    let mor = spark_seeds("ICEFEED_SPARK_S3_MOR_SEEDS", DEFAULT_S3_MOR_SEEDS);
    if cow.is_empty() && mor.is_empty() {
        eprintln!(
            "spark: no seeds on S3 (ICEFEED_SPARK_S3_SEEDS and ICEFEED_SPARK_S3_MOR_SEEDS are \
             empty)"
        );
        return;
    }
    let namespace = s3::unique("spark");
    let catalog = Catalog::Rest {
        namespace: namespace.clone(),
    };
    let (mor_seeds, cow_seeds) = (mor.clone(), cow.clone());
    let written =
        match tokio::task::spawn_blocking(move || run_writer(&mor_seeds, &cow_seeds, &catalog))
            .await
        {
            Ok(Ok(written)) => written,
            Ok(Err(failure)) => panic!("{failure}"),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
    let started = Instant::now();
    let mut chosen = histories(&written, "cow", &cow);
    chosen.extend(histories(&written, "mor", &mor));

    let (settings, _prefix) = s3::node_settings().await;
    let node = Node::start(settings).await;
    // Only the keys: the catalog's answers name the S3 endpoint, region and path style.
    let keys: BTreeMap<String, String> = s3::file_io()
        .into_iter()
        .filter(|(k, _)| k.ends_with("access-key-id") || k.ends_with("secret-access-key"))
        .collect();
    let mut ids = Vec::new();
    for h in &chosen {
        let prefix = format!("s3://{}/{namespace}/", s3::TABLE_BUCKET);
        assert!(
            h.table.starts_with(&format!("{namespace}.")) && h.location.starts_with(&prefix),
            "{} at {} is not in the namespace {namespace} on S3",
            h.table,
            h.location
        );
        let catalog = s3::rest_catalog(keys.clone());
        ids.push(register_in(&node, catalog, h, Pairing::Key, "earliest").await);
    }
    let what = format!("on S3, cow seeds {cow:?} and mor seeds {mor:?}");
    compare_histories(node, &chosen, &ids, Pairing::Key, &what, started, |h| {
        let (var, other) = if h.mode == "cow" {
            ("ICEFEED_SPARK_S3_SEEDS", "ICEFEED_SPARK_S3_MOR_SEEDS")
        } else {
            ("ICEFEED_SPARK_S3_MOR_SEEDS", "ICEFEED_SPARK_S3_SEEDS")
        };
        format!(
            "{var}={} {other}= cargo test --test it spark_copy_on_write_histories_on_s3",
            h.seed
        )
    })
    .await;
}
