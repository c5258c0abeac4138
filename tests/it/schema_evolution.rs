//! Schema evolution between commits, with histories written by pyiceberg 0.12
//! (tests/python/pyiceberg_history.py): columns added (null in older files, sometimes
//! under the name of a dropped column), dropped, renamed (the identifier column too, on
//! seeds divisible by 3), moved, promoted (int to long, float to double, decimal(p,s) to
//! decimal(p',s)), between appends, copy-on-write deletes and overwrites with a filter,
//! and upserts; every history has a copy-on-write rewrite whose removed files were
//! written under an older schema than its added ones.
//!
//! The oracle knows nothing of icefeed: after every commit the writer reads the table
//! state through pyiceberg at that snapshot, with the snapshot's schema, checked against
//! a plain model of the rows. A snapshot's expected change set is the diff of its
//! parent's rows, projected onto the snapshot's columns by field id (`diffing::project`:
//! what an older file reads as under a newer schema), and its own rows, by the snapshot's
//! identifier columns. Carried rows of a rewrite read the same under both, so they must
//! cancel. icefeed, registered on the same SQLite SQL catalog with `"start": "earliest"`,
//! must publish exactly those changes, each event with its snapshot's `schema_id`, and
//! `GET /v1/tables/{id}/schemas/{schema_id}` must answer that snapshot's columns.
//!
//! `ICEFEED_PYICEBERG_EVOLUTION_SEEDS` picks the seeds (default 1..=6, the syntax of
//! `ICEFEED_ORACLE_SEEDS`; odd seeds are partitioned by identity on `region`). Needs
//! `ICEFEED_TEST_PYTHON` with pyiceberg (scripts/test.sh sets it).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::diffing::{
    Column, OracleSnapshot, check_schemas, compare_feed, expected_changes, labels, seeds_in,
};
use crate::support::{Node, run_with_deadline};

/// Seeds run when `ICEFEED_PYICEBERG_EVOLUTION_SEEDS` is unset: partitioned and not,
/// with (3, 6) and without an identifier rename.
const DEFAULT_SEEDS: std::ops::RangeInclusive<u64> = 1..=6;
/// The writer is stopped after this long.
const WRITER_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// The catalog name the writer's SQL catalog uses.
const CATALOG: &str = "py";

// ---------------------------------------------------------------------------------------
// The writer's document (see tests/python/pyiceberg_history.py)
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Document {
    pyiceberg: String,
    seconds: f64,
    histories: Vec<History>,
}

#[derive(Deserialize)]
struct History {
    seed: u64,
    table: String,
    partitioned: bool,
    identifier: Vec<String>,
    seconds: f64,
    steps: Vec<Step>,
    snapshots: Vec<Snapshot>,
}

#[derive(Deserialize)]
struct Step {
    kind: String,
}

#[derive(Deserialize)]
struct Snapshot {
    snapshot_id: i64,
    sequence_number: i64,
    operation: String,
    statement: String,
    schema_changes: Vec<String>,
    schema_id: i32,
    columns: Vec<Field>,
    identifier: Vec<String>,
    summary: BTreeMap<String, String>,
    removed_file_schemas: Vec<i32>,
    rows: Vec<Value>,
}

/// A top-level field of a snapshot's schema, with its type as the writer names it
/// (`long`, `decimal(15,2)`).
#[derive(Deserialize)]
struct Field {
    id: i32,
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

impl OracleSnapshot for Snapshot {
    fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }
    fn sequence_number(&self) -> i64 {
        self.sequence_number
    }
    /// `statement [operation, schema N after changes; files]`, for messages.
    fn label(&self) -> String {
        let mut files = Vec::new();
        for (key, name) in [
            ("added-data-files", "+data"),
            ("deleted-data-files", "-data"),
        ] {
            if let Some(n) = self.summary.get(key) {
                files.push(format!("{name} {n}"));
            }
        }
        if !self.removed_file_schemas.is_empty() {
            files.push(format!(
                "removed files of schemas {:?}",
                self.removed_file_schemas
            ));
        }
        let changes = if self.schema_changes.is_empty() {
            String::new()
        } else {
            format!(" after {}", self.schema_changes.join("; "))
        };
        format!(
            "{} [{}, schema {}{changes}; {}]",
            self.statement,
            self.operation,
            self.schema_id,
            files.join(", ")
        )
    }
    fn schema_id(&self) -> i32 {
        self.schema_id
    }
    fn columns(&self) -> Vec<Column> {
        self.columns
            .iter()
            .map(|f| Column {
                id: f.id,
                name: f.name.clone(),
            })
            .collect()
    }
    fn types(&self) -> Option<Vec<String>> {
        Some(self.columns.iter().map(|f| f.ty.clone()).collect())
    }
    fn identifier(&self) -> &[String] {
        &self.identifier
    }
    fn rows(&self) -> &[Value] {
        &self.rows
    }
}

impl Snapshot {
    /// A copy-on-write rewrite that carried rows of files written under an older schema
    /// into files of its own schema.
    fn rewrites_across_schemas(&self) -> bool {
        self.operation == "overwrite"
            && self
                .removed_file_schemas
                .iter()
                .any(|&s| s < self.schema_id)
            && self.carried() > 0
    }

    /// Rows a pyiceberg `overwrite` snapshot wrote again (it only ever rewrites the rows
    /// a delete left in a file; new rows come in an `append` snapshot).
    fn carried(&self) -> usize {
        self.summary
            .get("added-records")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl History {
    fn describe(&self) -> String {
        format!(
            "{} (seed {}, {})",
            self.table,
            self.seed,
            if self.partitioned {
                "partitioned by region"
            } else {
                "unpartitioned"
            }
        )
    }

    /// The snapshots (1-based, with the old and new names) whose identifier columns are
    /// named otherwise than their parent's.
    fn identifier_renames(&self) -> Vec<String> {
        self.snapshots
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0].identifier != w[1].identifier)
            .map(|(i, w)| {
                format!(
                    "#{} {} ({:?} -> {:?})",
                    i + 2,
                    w[1].snapshot_id,
                    w[0].identifier,
                    w[1].identifier
                )
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Running the writer
// ---------------------------------------------------------------------------------------

fn seeds() -> Vec<u64> {
    seeds_in("ICEFEED_PYICEBERG_EVOLUTION_SEEDS").unwrap_or_else(|| DEFAULT_SEEDS.collect())
}

fn run_writer(dir: &Path, seeds: &[u64]) -> Document {
    let out = dir.join("histories.json");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/pyiceberg_history.py"
    );
    let seed_list = seeds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let (status, log) = run_with_deadline(
        Command::new(crate::pyiceberg::python())
            .arg(script)
            .arg("--warehouse")
            .arg(dir)
            .arg("--out")
            .arg(&out)
            .arg("--seeds")
            .arg(&seed_list)
            .current_dir(dir),
        WRITER_TIMEOUT,
    );
    match status {
        Some(status) if status.success() => {}
        Some(status) => panic!("the pyiceberg writer failed ({status}) on seeds {seeds:?}:\n{log}"),
        None => panic!("the pyiceberg writer did not finish within {WRITER_TIMEOUT:?}:\n{log}"),
    }
    for line in log.lines().filter(|l| l.starts_with("pyiceberg_history:")) {
        eprintln!("{line}");
    }
    let bytes = std::fs::read(&out)
        .unwrap_or_else(|e| panic!("the writer's document {}: {e}", out.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("the writer's document: {e}"))
}

// ---------------------------------------------------------------------------------------
// icefeed's side
// ---------------------------------------------------------------------------------------

/// Registers `history`'s table from the writer's SQL catalog, from its earliest snapshot;
/// the identifier columns come from the table's (current) schema.
async fn register(node: &Node, dir: &Path, history: &History) -> String {
    let body = json!({
        "catalog": {"type": "sql", "uri": format!("sqlite:{}/catalog.db", dir.display()),
                    "warehouse": format!("file://{}/warehouse", dir.display()), "name": CATALOG},
        "table": history.table, "poll_interval_ms": 100, "start": "earliest",
    });
    let id = node.register(&body).await;
    let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(t["identifier_columns"], json!(history.identifier), "{t}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pyiceberg_schema_evolution_histories_match_icefeed() {
    let seeds = seeds();
    let dir = tempfile::Builder::new()
        .prefix("icefeed-evolution-")
        .tempdir()
        .unwrap();
    let started = Instant::now();
    let path = dir.path().to_path_buf();
    let writer_seeds = seeds.clone();
    let document = tokio::task::spawn_blocking(move || run_writer(&path, &writer_seeds))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let written = started.elapsed();
    assert_eq!(
        document
            .histories
            .iter()
            .map(|h| h.seed)
            .collect::<Vec<_>>(),
        seeds
    );

    let compared = Instant::now();
    let (node, _store) = Node::start_fresh().await;
    let mut ids = Vec::new();
    for h in &document.histories {
        ids.push(register(&node, dir.path(), h).await);
    }
    let mut failures = Vec::new();
    let mut steps: BTreeMap<&str, usize> = BTreeMap::new();
    let mut operations: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut events, mut quiet, mut rewrites, mut carried) = (0, 0, 0, 0);
    for (h, id) in document.histories.iter().zip(&ids) {
        for s in &h.steps {
            *steps.entry(&s.kind).or_default() += 1;
        }
        for s in &h.snapshots {
            *operations.entry(&s.operation).or_default() += 1;
        }
        let across: Vec<&Snapshot> = h
            .snapshots
            .iter()
            .filter(|s| s.rewrites_across_schemas())
            .collect();
        assert!(
            !across.is_empty(),
            "{}: the writer made no copy-on-write rewrite across schemas",
            h.describe()
        );
        rewrites += across.len();
        carried += across.iter().map(|s| s.carried()).sum::<usize>();
        let expected = expected_changes(&h.snapshots);
        events += expected.iter().map(|(_, c)| c.len()).sum::<usize>();
        quiet += expected.iter().filter(|(_, c)| c.is_empty()).count();
        let (labels, sequence) = labels(&h.snapshots);
        let mut problems = Vec::new();
        if let Err(failure) =
            compare_feed(&node, id, &h.describe(), &labels, &sequence, &expected).await
        {
            problems.push(failure);
        }
        if let Err(failure) = check_schemas(&node, id, &h.snapshots).await {
            problems.push(format!("schemas of {}:\n  {failure}", h.describe()));
        }
        if let Err(failure) = crate::net_changes::check_split_at_schema_changes(&node, id).await {
            problems.push(format!("net changes of {}:\n  {failure}", h.describe()));
        }
        if !problems.is_empty() {
            let renames = h.identifier_renames();
            let note = if renames.is_empty() {
                "the identifier column is never renamed".to_string()
            } else {
                format!(
                    "the identifier column is renamed at snapshot {} (now {:?})",
                    renames.join(", "),
                    h.identifier
                )
            };
            failures.push(format!(
                "seed {} ({note}):\n{}\n  rerun it alone with \
                 ICEFEED_PYICEBERG_EVOLUTION_SEEDS={} cargo test --test it schema_evolution",
                h.seed,
                problems.join("\n"),
                h.seed
            ));
        }
    }
    eprintln!(
        "schema_evolution: pyiceberg {} seeds {seeds:?}: steps {steps:?}; {} snapshots \
         {operations:?}, {quiet} without changes, {events} events expected; {rewrites} \
         copy-on-write rewrites across schemas carrying {carried} rows; written in {:.1?} \
         (pyiceberg {:.1} s, {:.1} s in histories), compared in {:.1?}; {} of {} seeds failed",
        document.pyiceberg,
        document
            .histories
            .iter()
            .map(|h| h.snapshots.len())
            .sum::<usize>(),
        written,
        document.seconds,
        document.histories.iter().map(|h| h.seconds).sum::<f64>(),
        compared.elapsed(),
        failures.len(),
        document.histories.len()
    );
    node.shutdown().await;
    assert!(
        failures.is_empty(),
        "icefeed differs from pyiceberg on {} of {} schema evolution histories:\n\n{}",
        failures.len(),
        document.histories.len(),
        failures.join("\n\n")
    );
}
