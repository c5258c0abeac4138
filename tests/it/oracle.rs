//! A differential test of copy-on-write change sets. Seeded random histories (appends,
//! updates, partition-moving updates, row deletes, whole-file deletes, multi-partition
//! rewrites, no-op rewrites and compactions, each ONE snapshot written with the iceberg
//! crate) run against tables with and without identifier columns, partitioned by
//! `identity(part)` and not. The oracle knows nothing of icefeed: it scans the table at
//! every snapshot with the iceberg crate and diffs consecutive states (by key with
//! identifier columns, as multisets without). icefeed, registered with
//! `"start": "earliest"`, must publish exactly those changes, snapshot by snapshot.
//!
//! `ICEFEED_ORACLE_SEEDS` picks the seeds: `7`, `1..20`, `1..=20` or `3,5,9`. A failure
//! names its seed; rerun it alone with `ICEFEED_ORACLE_SEEDS=<seed> cargo test --test it oracle`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use futures::FutureExt;
use iceberg::spec::{
    DataFile, NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use icefeed_testkit::rewrite;
use icefeed_testkit::writer::{self, AppendOptions};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::diffing::{change, compare_feed, diff, parse_seeds, seeds_in};
use crate::support::{Node, Warehouse, counter, fresh_database, in_place, test_settings};

/// Seeds run when `ICEFEED_ORACLE_SEEDS` is unset: two of each table shape.
const DEFAULT_SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

// ---------------------------------------------------------------------------------------
// Rows and the model of the table
// ---------------------------------------------------------------------------------------

/// A row of `(id long, part int, payload string, n long)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Row {
    id: i64,
    part: i32,
    payload: Option<String>,
    n: Option<i64>,
}

impl Row {
    fn new(id: i64, part: i32, payload: &str, n: i64) -> Self {
        Self {
            id,
            part,
            payload: Some(payload.to_string()),
            n: Some(n),
        }
    }

    fn from_json(v: &Value) -> Self {
        Self {
            id: v["id"].as_i64().expect("id"),
            part: v["part"].as_i64().expect("part") as i32,
            payload: v["payload"].as_str().map(str::to_string),
            n: v["n"].as_i64(),
        }
    }

    /// The row as icefeed writes it in `before`/`after`.
    fn json(&self) -> Value {
        json!({"id": self.id, "part": self.part, "payload": self.payload, "n": self.n})
    }
}

fn schema(identifier: bool) -> Schema {
    let mut builder = Schema::builder().with_schema_id(0);
    if identifier {
        builder = builder.with_identifier_field_ids([1]);
    }
    builder
        .with_fields([
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "part", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(3, "payload", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "n", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap()
}

fn spec() -> UnboundPartitionSpec {
    UnboundPartitionSpec::builder()
        .add_partition_field(2, "part", Transform::Identity)
        .unwrap()
        .build()
}

fn batch(rows: &[Row]) -> RecordBatch {
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema(false)).unwrap());
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.id))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.part))),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.payload.as_deref()),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.n))),
    ];
    RecordBatch::try_new(arrow, columns).unwrap()
}

/// Rows of Arrow batches as JSON objects in icefeed's form: longs and ints are numbers,
/// strings are strings, nulls are null. Independent of icefeed's own encoder.
fn json_rows(batches: &[RecordBatch]) -> Vec<Value> {
    let mut rows = Vec::new();
    for b in batches {
        let mut objects = vec![serde_json::Map::new(); b.num_rows()];
        for (field, column) in b.schema().fields().iter().zip(b.columns()) {
            for (i, object) in objects.iter_mut().enumerate() {
                let value = if column.is_null(i) {
                    Value::Null
                } else {
                    match column.data_type() {
                        DataType::Int64 => json!(column.as_primitive::<Int64Type>().value(i)),
                        DataType::Int32 => json!(column.as_primitive::<Int32Type>().value(i)),
                        DataType::Utf8 => json!(column.as_string::<i32>().value(i)),
                        DataType::LargeUtf8 => json!(column.as_string::<i64>().value(i)),
                        DataType::Utf8View => json!(column.as_string_view().value(i)),
                        other => panic!("the oracle does not convert {other} ({})", field.name()),
                    }
                };
                object.insert(field.name().clone(), value);
            }
        }
        rows.extend(objects.into_iter().map(Value::Object));
    }
    rows
}

/// A table being written, with the rows each live data file holds.
pub(crate) struct Model {
    name: String,
    pub(crate) identifier: bool,
    partitioned: bool,
    pub(crate) table: Table,
    files: Vec<(DataFile, Vec<Row>)>,
    /// Every committed snapshot, oldest first, with a label for messages.
    pub(crate) snapshots: Vec<(i64, String)>,
    next_id: i64,
}

impl Model {
    async fn create(wh: &Warehouse, name: &str, identifier: bool, partitioned: bool) -> Self {
        let table = wh
            .create(name, schema(identifier), partitioned.then(spec))
            .await;
        Self {
            name: name.to_string(),
            identifier,
            partitioned,
            table,
            files: Vec::new(),
            snapshots: Vec::new(),
            next_id: 1,
        }
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self.files.iter().flat_map(|f| f.1.clone()).collect();
        rows.sort();
        rows
    }

    fn fresh_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// One `fast_append` snapshot of `rows`, at most `per_file` rows per file.
    async fn append(&mut self, wh: &Warehouse, rows: &[Row], per_file: Option<usize>, label: &str) {
        let options = AppendOptions {
            max_rows_per_file: per_file,
            ..Default::default()
        };
        let table = writer::append(wh.catalog.as_ref(), &self.table, &[batch(rows)], &options)
            .await
            .unwrap();
        self.committed(table, &[], label).await;
    }

    /// One copy-on-write snapshot: removes the files at `remove` (indexes into `files`)
    /// and writes `rows` as new files.
    async fn rewrite(
        &mut self,
        wh: &Warehouse,
        remove: &[usize],
        rows: &[Row],
        operation: &str,
        per_file: Option<usize>,
        label: &str,
    ) {
        let files: Vec<DataFile> = remove.iter().map(|&i| self.files[i].0.clone()).collect();
        let options = AppendOptions {
            max_rows_per_file: per_file,
            ..Default::default()
        };
        let add: Vec<RecordBatch> = if rows.is_empty() {
            Vec::new()
        } else {
            vec![batch(rows)]
        };
        let table = rewrite::rewrite_with(
            wh.catalog.as_ref(),
            &self.table,
            &files,
            &add,
            operation,
            &options,
        )
        .await
        .unwrap();
        self.committed(table, remove, label).await;
    }

    /// Follows a commit: drops removed files, reads the new ones, checks that a scan of
    /// the new snapshot holds exactly the rows the model expects.
    async fn committed(&mut self, table: Table, removed: &[usize], label: &str) {
        let parent = self.snapshots.last().map(|s| s.0);
        let head = table.metadata().current_snapshot().unwrap();
        assert_eq!(head.parent_snapshot_id(), parent, "{label}: parent");
        let mut removed = removed.to_vec();
        removed.sort_unstable();
        for i in removed.into_iter().rev() {
            self.files.remove(i);
        }
        let live = rewrite::live_data_files(&table).await.unwrap();
        for (known, _) in &self.files {
            assert!(
                live.iter().any(|f| f.file_path() == known.file_path()),
                "{label}: a file that was not removed is gone: {}",
                known.file_path()
            );
        }
        // New files in order of their rows, not of the writer's tasks, so that a seed
        // always replays the same history.
        let mut new_files = Vec::new();
        for file in live {
            if self
                .files
                .iter()
                .any(|f| f.0.file_path() == file.file_path())
            {
                continue;
            }
            let batches = rewrite::read_data_file(&table, &file).await.unwrap();
            let rows: Vec<Row> = json_rows(&batches).iter().map(Row::from_json).collect();
            assert_eq!(rows.len() as u64, file.record_count(), "{label}");
            new_files.push((file, rows));
        }
        new_files.sort_by(|a, b| a.1.cmp(&b.1));
        self.files.extend(new_files);
        let scanned = scan_state(&table, head.snapshot_id()).await;
        let mut scanned: Vec<Row> = scanned.iter().map(Row::from_json).collect();
        scanned.sort();
        assert_eq!(scanned, self.rows(), "{label}: scan differs from the model");
        if self.identifier {
            let mut ids: Vec<i64> = scanned.iter().map(|r| r.id).collect();
            ids.dedup();
            assert_eq!(ids.len(), scanned.len(), "{label}: keys must stay unique");
        }
        self.snapshots.push((head.snapshot_id(), label.to_string()));
        self.table = table;
    }

    /// Positions `(file, row)` of `count` distinct random rows.
    fn pick_rows(
        &self,
        rng: &mut StdRng,
        count: std::ops::RangeInclusive<usize>,
    ) -> Vec<(usize, usize)> {
        let count = rng.random_range(count);
        let mut all: Vec<(usize, usize)> = self
            .files
            .iter()
            .enumerate()
            .flat_map(|(f, (_, rows))| (0..rows.len()).map(move |r| (f, r)))
            .collect();
        all.shuffle(rng);
        all.truncate(count);
        all
    }
}

/// The table's rows at `snapshot_id`, from an iceberg-crate scan.
pub(crate) async fn scan_state(table: &Table, snapshot_id: i64) -> Vec<Value> {
    json_rows(&rewrite::scan_rows(table, Some(snapshot_id)).await.unwrap())
}

// ---------------------------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------------------------

/// The oracle's change set of every snapshot of `model`, oldest first, from scans.
pub(crate) async fn oracle(model: &Model) -> Vec<(i64, Vec<String>)> {
    let key_columns: &[&str] = if model.identifier { &["id"] } else { &[] };
    let mut prev = Vec::new();
    let mut out = Vec::new();
    for (snapshot_id, _) in &model.snapshots {
        let cur = scan_state(&model.table, *snapshot_id).await;
        out.push((*snapshot_id, diff(&prev, &cur, key_columns)));
        prev = cur;
    }
    out
}

// ---------------------------------------------------------------------------------------
// icefeed's side
// ---------------------------------------------------------------------------------------

/// Registers `model`'s table from its earliest snapshot; returns the registration id.
pub(crate) async fn register(node: &Node, wh: &Warehouse, model: &Model) -> String {
    let columns = if model.identifier {
        json!(["id"])
    } else {
        json!([])
    };
    let body = wh.registration(
        &model.name,
        json!({"start": "earliest", "identifier_columns": columns}),
    );
    let id = node.register(&body).await;
    let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(t["identifier_columns"], columns, "{t}");
    id
}

/// Waits until icefeed published `model`'s last snapshot, then compares every snapshot's
/// events with the oracle.
pub(crate) async fn compare(node: &Node, id: &str, model: &Model, expected: &[(i64, Vec<String>)]) {
    let sequence: HashMap<i64, i64> = model
        .table
        .metadata()
        .snapshots()
        .map(|s| (s.snapshot_id(), s.sequence_number()))
        .collect();
    let compared = compare_feed(node, id, &model.name, &model.snapshots, &sequence, expected).await;
    if let Err(failure) = compared {
        panic!("{failure}");
    }
}

/// Runs `f`, naming `seed` and how to rerun it when it panics.
async fn with_seed<T>(seed: u64, f: impl Future<Output = T>) -> T {
    match AssertUnwindSafe(f).catch_unwind().await {
        Ok(v) => v,
        Err(panic) => {
            eprintln!(
                "oracle seed {seed} failed; rerun it alone with \
                 ICEFEED_ORACLE_SEEDS={seed} cargo test --test it oracle"
            );
            std::panic::resume_unwind(panic)
        }
    }
}

fn seeds() -> Vec<u64> {
    seeds_in("ICEFEED_ORACLE_SEEDS").unwrap_or_else(|| DEFAULT_SEEDS.collect())
}

// ---------------------------------------------------------------------------------------
// Random histories
// ---------------------------------------------------------------------------------------

const PARTS: i32 = 4;

fn random_row(rng: &mut StdRng, id: i64) -> Row {
    Row {
        id,
        part: rng.random_range(0..PARTS),
        payload: (!rng.random_bool(0.1)).then(|| format!("p{}", rng.random_range(0..50))),
        n: (!rng.random_bool(0.1)).then(|| rng.random_range(-1000..1000)),
    }
}

/// A changed version of `row`: other payload and/or n (sometimes the same values).
fn changed(rng: &mut StdRng, row: &Row) -> Row {
    let mut new = row.clone();
    match rng.random_range(0..4) {
        0 => new.payload = Some(format!("u{}", rng.random_range(0..50))),
        1 => new.n = Some(rng.random_range(-1000..1000)),
        2 => {
            new.payload = None;
            new.n = Some(row.n.unwrap_or(0) + 1);
        }
        _ => {} // an "update" that changes nothing
    }
    new
}

fn per_file(rng: &mut StdRng) -> Option<usize> {
    rng.random_bool(0.4).then(|| rng.random_range(1..=3))
}

/// Rows of the files at `files` after `edit` (row position → replacement rows).
fn rewritten(model: &Model, files: &[usize], edit: &HashMap<(usize, usize), Vec<Row>>) -> Vec<Row> {
    let mut rows = Vec::new();
    for &f in files {
        for (r, row) in model.files[f].1.iter().enumerate() {
            match edit.get(&(f, r)) {
                Some(replacement) => rows.extend(replacement.iter().cloned()),
                None => rows.push(row.clone()),
            }
        }
    }
    rows
}

fn files_of(positions: &[(usize, usize)]) -> Vec<usize> {
    let mut files: Vec<usize> = positions.iter().map(|p| p.0).collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// Commits one random operation to `model`.
async fn random_step(
    wh: &Warehouse,
    model: &mut Model,
    rng: &mut StdRng,
    deleted_ids: &mut Vec<i64>,
) {
    let total: usize = model.files.iter().map(|f| f.1.len()).sum();
    let choice = if total == 0 {
        0
    } else {
        rng.random_range(0..15)
    };
    match choice {
        // Append new rows (without identifier columns sometimes copies of existing rows,
        // with them sometimes a key deleted earlier).
        0..=2 => {
            let mut rows = Vec::new();
            for _ in 0..rng.random_range(1..=6) {
                let id = model.fresh_id();
                rows.push(random_row(rng, id));
            }
            if !model.identifier && total > 0 && rng.random_bool(0.4) {
                let existing = model.rows();
                for _ in 0..rng.random_range(1..=2) {
                    rows.push(existing.choose(rng).unwrap().clone());
                }
            }
            if model.identifier && !deleted_ids.is_empty() && rng.random_bool(0.4) {
                let id = deleted_ids.swap_remove(rng.random_range(0..deleted_ids.len()));
                rows.push(random_row(rng, id));
            }
            let per_file = per_file(rng);
            model.append(wh, &rows, per_file, "append").await;
        }
        // Update some rows: every file holding one is rewritten, other rows copied.
        3..=5 => {
            let picked = model.pick_rows(rng, 1..=3);
            let mut edit = HashMap::new();
            for &(f, r) in &picked {
                edit.insert((f, r), vec![changed(rng, &model.files[f].1[r])]);
            }
            let files = files_of(&picked);
            let rows = rewritten(model, &files, &edit);
            let per_file = per_file(rng);
            model
                .rewrite(wh, &files, &rows, "overwrite", per_file, "update")
                .await;
        }
        // Update that moves rows to another partition.
        6..=7 => {
            let picked = model.pick_rows(rng, 1..=2);
            let mut edit = HashMap::new();
            for &(f, r) in &picked {
                let mut row = model.files[f].1[r].clone();
                row.part = (row.part + rng.random_range(1..PARTS)) % PARTS;
                if rng.random_bool(0.5) {
                    row = changed(rng, &row);
                }
                edit.insert((f, r), vec![row]);
            }
            let files = files_of(&picked);
            let rows = rewritten(model, &files, &edit);
            model
                .rewrite(wh, &files, &rows, "overwrite", None, "move partition")
                .await;
        }
        // Delete rows: their files are rewritten without them.
        8..=9 => {
            let picked = model.pick_rows(rng, 1..=3);
            let mut edit = HashMap::new();
            for &(f, r) in &picked {
                deleted_ids.push(model.files[f].1[r].id);
                edit.insert((f, r), Vec::new());
            }
            let files = files_of(&picked);
            let rows = rewritten(model, &files, &edit);
            model
                .rewrite(wh, &files, &rows, "overwrite", None, "delete rows")
                .await;
        }
        // Delete whole files.
        10 => {
            let mut files: Vec<usize> = (0..model.files.len()).collect();
            files.shuffle(rng);
            files.truncate(rng.random_range(1..=2));
            for &f in &files {
                deleted_ids.extend(model.files[f].1.iter().map(|r| r.id));
            }
            model
                .rewrite(wh, &files, &[], "delete", None, "delete files")
                .await;
        }
        // A rewrite across several files and partitions: updates, moves, deletes and
        // inserts in one snapshot.
        11..=12 => {
            let picked = model.pick_rows(rng, 2..=6);
            let mut edit = HashMap::new();
            for &(f, r) in &picked {
                let row = model.files[f].1[r].clone();
                let replacement = match rng.random_range(0..4) {
                    0 => {
                        deleted_ids.push(row.id);
                        Vec::new()
                    }
                    1 => {
                        let mut moved = changed(rng, &row);
                        moved.part = rng.random_range(0..PARTS);
                        vec![moved]
                    }
                    2 if !model.identifier => vec![row.clone(), row], // a duplicate
                    _ => vec![changed(rng, &row)],
                };
                edit.insert((f, r), replacement);
            }
            let files = files_of(&picked);
            let mut rows = rewritten(model, &files, &edit);
            for _ in 0..rng.random_range(0..=2) {
                let id = model.fresh_id();
                rows.push(random_row(rng, id));
            }
            let per_file = per_file(rng);
            model
                .rewrite(
                    wh,
                    &files,
                    &rows,
                    "overwrite",
                    per_file,
                    "multi-file rewrite",
                )
                .await;
        }
        // A rewrite that changes nothing: same rows, new files.
        13 => {
            let mut files: Vec<usize> = (0..model.files.len()).collect();
            files.shuffle(rng);
            files.truncate(rng.random_range(1..=2));
            files.sort_unstable();
            let mut rows = rewritten(model, &files, &HashMap::new());
            rows.shuffle(rng);
            model
                .rewrite(wh, &files, &rows, "overwrite", None, "no-op rewrite")
                .await;
        }
        // Compaction: the files of a partition (or of the table) merged, same rows.
        _ => {
            let part = model.files.choose(rng).unwrap().1.first().map(|r| r.part);
            let files: Vec<usize> = (0..model.files.len())
                .filter(|&f| !model.partitioned || model.files[f].1.first().map(|r| r.part) == part)
                .collect();
            let rows = rewritten(model, &files, &HashMap::new());
            model
                .rewrite(wh, &files, &rows, "replace", None, "compaction")
                .await;
        }
    }
}

/// A random history for `seed`: the seed's low bits choose the table shape so that
/// consecutive seeds cover all four.
pub(crate) async fn random_history(wh: &Warehouse, seed: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let partitioned = seed & 1 == 1;
    let identifier = seed & 2 == 2;
    let name = format!("oracle.seed_{seed}");
    let mut model = Model::create(wh, &name, identifier, partitioned).await;
    let mut deleted_ids = Vec::new();
    for _ in 0..rng.random_range(10..=16) {
        random_step(wh, &mut model, &mut rng, &mut deleted_ids).await;
    }
    model
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_random_histories_match_icefeed() {
    let (node, _store) = Node::start_fresh().await;
    check_random_histories(&Warehouse::new().await, &seeds(), &node).await;
    node.shutdown().await;
}

/// The first four seeds again, on a node whose map tasks may hold only 4 KB: every
/// partition group is streamed and cancelled through spill partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_random_histories_match_icefeed_when_map_tasks_spill() {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.scheduler.map_memory_bytes = 4096;
    let node = Node::start(settings).await;
    let before = spilled_partitions(&node).await;
    let seeds: Vec<u64> = seeds().into_iter().take(4).collect();
    check_random_histories(&Warehouse::new().await, &seeds, &node).await;
    let spilled = spilled_partitions(&node).await - before;
    eprintln!("oracle: {spilled} spill partitions");
    assert!(spilled > 0, "no map task took the spill path");
    node.shutdown().await;
}

/// Every seed and the keyed hand-made histories on a node that computes every rewrite
/// in place, as small ones are by default, rather than through the shuffle's tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_histories_match_icefeed_computed_in_place() {
    let store = tempfile::tempdir().unwrap();
    let settings = in_place(test_settings(&fresh_database().await, store.path()));
    let node = Node::start(settings).await;
    let in_place_before = counter(&node, IN_PLACE).await;
    let wh = Warehouse::new().await;
    check_random_histories(&wh, &seeds(), &node).await;
    for model in [keyed_history(&wh).await.0, duplicates_history(&wh).await.0] {
        let expected = oracle(&model).await;
        let id = register(&node, &wh, &model).await;
        compare(&node, &id, &model, &expected).await;
    }
    let computed = counter(&node, IN_PLACE).await - in_place_before;
    eprintln!("oracle: {computed} rewrites computed in place");
    assert!(computed > 0, "no rewrite was computed in place");
    node.shutdown().await;
}

/// The series of rewrites computed in place.
const IN_PLACE: &str = "icefeed_rewrites_total{how=\"in_place\"}";

/// A few seeds with the tables' files and the change store on S3 (the SeaweedFS server):
/// `ICEFEED_ORACLE_S3_SEEDS`, by default the first four of `ICEFEED_ORACLE_SEEDS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_random_histories_on_s3_match_icefeed() {
    let (settings, _prefix) = crate::s3::node_settings().await;
    let node = Node::start(settings).await;
    let seeds = seeds_in("ICEFEED_ORACLE_S3_SEEDS")
        .unwrap_or_else(|| seeds().into_iter().take(4).collect());
    check_random_histories(&Warehouse::on_s3().await, &seeds, &node).await;
    node.shutdown().await;
}

/// The tables' files on Google Cloud Storage (the fake-gcs-server), the change store
/// local: `ICEFEED_ORACLE_GCS_SEEDS`, by default 2, 4, 6 and 8. Even seeds are the
/// unpartitioned shapes: the iceberg crate's writer names a partitioned file
/// `part=2/…` in the manifest but uploads it to GCS as `part%3D2/…` (OpenDAL's upload
/// name arrives encoded twice), so no reader finds those files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_random_histories_on_gcs_match_icefeed() {
    let store = tempfile::tempdir().unwrap();
    let node = Node::start(test_settings(&fresh_database().await, store.path())).await;
    let seeds = seeds_in("ICEFEED_ORACLE_GCS_SEEDS").unwrap_or_else(|| vec![2, 4, 6, 8]);
    check_random_histories(&Warehouse::on_gcs().await, &seeds, &node).await;
    node.shutdown().await;
}

/// `icefeed_shuffle_spilled_partitions_total`: only the test above spills.
async fn spilled_partitions(node: &Node) -> u64 {
    counter(node, "icefeed_shuffle_spilled_partitions_total").await
}

/// Generates `seeds`' histories, registers them with `node` and compares every change
/// set with the oracle.
async fn check_random_histories(wh: &Warehouse, seeds: &[u64], node: &Node) {
    let started = Instant::now();
    let mut models = Vec::new();
    for &seed in seeds {
        models.push(with_seed(seed, random_history(wh, seed)).await);
    }
    let mut expected = Vec::new();
    for (seed, model) in seeds.iter().zip(&models) {
        expected.push(with_seed(*seed, oracle(model)).await);
    }
    let generated = started.elapsed();

    let mut ids = Vec::new();
    for model in &models {
        ids.push(register(node, wh, model).await);
    }
    for ((seed, model), (id, expected)) in seeds.iter().zip(&models).zip(ids.iter().zip(&expected))
    {
        with_seed(*seed, compare(node, id, model, expected)).await;
    }
    // What was compared, so a run that checks little shows it.
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    let mut quiet = 0;
    for (model, expected) in models.iter().zip(&expected) {
        for ((_, label), (_, changes)) in model.snapshots.iter().zip(expected) {
            *ops.entry(label.clone()).or_default() += 1;
            quiet += usize::from(changes.is_empty());
        }
    }
    let events: usize = expected.iter().flatten().map(|(_, c)| c.len()).sum();
    eprintln!(
        "oracle: seeds {seeds:?}: {} snapshots {ops:?}, {quiet} without changes, \
         {events} events compared; generated in {generated:.1?}, total {:.1?}",
        models.iter().map(|m| m.snapshots.len()).sum::<usize>(),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// Hand-made histories
// ---------------------------------------------------------------------------------------

fn ins(row: &Row, keyed: bool) -> String {
    let key = if keyed {
        json!({"id": row.id})
    } else {
        Value::Null
    };
    change("insert", &key, &Value::Null, &row.json())
}

fn del(row: &Row, keyed: bool) -> String {
    let key = if keyed {
        json!({"id": row.id})
    } else {
        Value::Null
    };
    change("delete", &key, &row.json(), &Value::Null)
}

fn upd(before: &Row, after: &Row) -> String {
    change(
        "update",
        &json!({"id": before.id}),
        &before.json(),
        &after.json(),
    )
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Index of the live file holding a row equal to `row`.
fn file_with(model: &Model, row: &Row) -> usize {
    model
        .files
        .iter()
        .position(|f| f.1.contains(row))
        .unwrap_or_else(|| panic!("no file holds {row:?}"))
}

/// Keyed and partitioned: carryover, a partition move, emptied partitions, a no-op
/// rewrite, a compaction and a row delete. Returns the model and, per snapshot, the
/// changes a reader must see, written out by hand.
/// One commit rewrites 24 partitions: small groups are packed several to a map task,
/// which cancels carryover group by group. Each partition gets an update, one row moves
/// from the first partition to the last, and the rest is carried over.
async fn packed_history(wh: &Warehouse) -> Model {
    let mut m = Model::create(wh, "oracle.packed", true, true).await;
    let rows: Vec<Row> = (0..24)
        .flat_map(|part| (0..3).map(move |i| Row::new(part as i64 * 3 + i, part, "x", i)))
        .collect();
    m.append(wh, &rows, None, "append 24 partitions").await;
    let rewritten: Vec<Row> = rows
        .iter()
        .map(|r| match (r.id % 3, r.id) {
            (_, 0) => Row::new(0, 23, "moved", 0),
            (1, _) => Row::new(r.id, r.part, "updated", 100),
            _ => r.clone(),
        })
        .collect();
    let all: Vec<usize> = (0..m.files.len()).collect();
    m.rewrite(
        wh,
        &all,
        &rewritten,
        "overwrite",
        None,
        "update every partition",
    )
    .await;
    m
}

async fn keyed_history(wh: &Warehouse) -> (Model, Vec<Vec<String>>) {
    let mut m = Model::create(wh, "oracle.keyed", true, true).await;
    let r1 = Row::new(1, 0, "a", 10);
    let r2 = Row::new(2, 0, "b", 20);
    let r3 = Row::new(3, 1, "c", 30);
    let r4 = Row::new(4, 2, "d", 40);
    let mut expected = Vec::new();

    m.append(
        wh,
        &[r1.clone(), r2.clone(), r3.clone(), r4.clone()],
        None,
        "append 1-4",
    )
    .await;
    expected.push(vec![
        ins(&r1, true),
        ins(&r2, true),
        ins(&r3, true),
        ins(&r4, true),
    ]);

    // Key 1 is deleted and re-inserted with the same values (carryover): only 2 changes.
    let r2b = Row::new(2, 0, "B", 21);
    let f = file_with(&m, &r1);
    m.rewrite(
        wh,
        &[f],
        &[r1.clone(), r2b.clone()],
        "overwrite",
        None,
        "update 2",
    )
    .await;
    expected.push(vec![upd(&r2, &r2b)]);

    // Row 3 moves from partition 1 (now empty) to partition 2: one update.
    let r3b = Row::new(3, 2, "c", 30);
    let f = file_with(&m, &r3);
    m.rewrite(
        wh,
        &[f],
        std::slice::from_ref(&r3b),
        "overwrite",
        None,
        "move 3 to part 2",
    )
    .await;
    expected.push(vec![upd(&r3, &r3b)]);

    // Deleting every file of partition 2 empties it.
    let files = vec![file_with(&m, &r4), file_with(&m, &r3b)];
    m.rewrite(wh, &files, &[], "delete", None, "delete partition 2")
        .await;
    expected.push(vec![del(&r3b, true), del(&r4, true)]);

    // Rewriting a file with the same rows publishes nothing.
    let f = file_with(&m, &r1);
    m.rewrite(
        wh,
        &[f],
        &[r2b.clone(), r1.clone()],
        "overwrite",
        None,
        "no-op rewrite",
    )
    .await;
    expected.push(vec![]);

    let r5 = Row::new(5, 0, "e", 50);
    m.append(wh, std::slice::from_ref(&r5), None, "append 5")
        .await;
    expected.push(vec![ins(&r5, true)]);

    // Compaction of partition 0's two files: nothing.
    let files = vec![file_with(&m, &r1), file_with(&m, &r5)];
    m.rewrite(
        wh,
        &files,
        &[r1.clone(), r2b.clone(), r5.clone()],
        "replace",
        None,
        "compaction",
    )
    .await;
    expected.push(vec![]);

    // A row delete inside a file: the rest is carried over.
    let f = file_with(&m, &r1);
    m.rewrite(
        wh,
        &[f],
        &[r2b.clone(), r5.clone()],
        "overwrite",
        None,
        "delete 1",
    )
    .await;
    expected.push(vec![del(&r1, true)]);

    // Key 1 comes back with other values: an insert.
    let r1b = Row::new(1, 3, "again", 11);
    m.append(wh, std::slice::from_ref(&r1b), None, "re-insert 1")
        .await;
    expected.push(vec![ins(&r1b, true)]);
    (m, expected.into_iter().map(sorted).collect())
}

/// No identifier columns, unpartitioned, with identical duplicate rows: every copy counts.
async fn duplicates_history(wh: &Warehouse) -> (Model, Vec<Vec<String>>) {
    let mut m = Model::create(wh, "oracle.duplicates", false, false).await;
    let x = Row::new(1, 0, "x", 1);
    let y = Row::new(2, 0, "y", 2);
    let mut expected = Vec::new();

    m.append(wh, &[x.clone(), x.clone(), y.clone()], None, "append x x y")
        .await;
    expected.push(vec![ins(&x, false), ins(&x, false), ins(&y, false)]);

    // One of the two copies goes.
    m.rewrite(
        wh,
        &[0],
        &[x.clone(), y.clone()],
        "overwrite",
        None,
        "drop one x",
    )
    .await;
    expected.push(vec![del(&x, false)]);

    m.append(wh, std::slice::from_ref(&x), None, "append x")
        .await;
    expected.push(vec![ins(&x, false)]);

    // An update without keys: a delete and an insert.
    let y2 = Row::new(2, 0, "y2", 2);
    let f = file_with(&m, &y);
    m.rewrite(
        wh,
        &[f],
        &[x.clone(), y2.clone()],
        "overwrite",
        None,
        "update y",
    )
    .await;
    expected.push(vec![del(&y, false), ins(&y2, false)]);

    // Whole-file delete of a file holding one copy of x.
    let f = m.files.iter().position(|f| f.1 == vec![x.clone()]).unwrap();
    m.rewrite(wh, &[f], &[], "delete", None, "delete file x")
        .await;
    expected.push(vec![del(&x, false)]);

    // A copy of x is added while the other rows are carried over.
    let f = file_with(&m, &y2);
    m.rewrite(
        wh,
        &[f],
        &[y2.clone(), x.clone(), x.clone()],
        "overwrite",
        Some(1),
        "duplicate x",
    )
    .await;
    expected.push(vec![ins(&x, false)]);

    // Compaction of the three one-row files.
    let all: Vec<usize> = (0..m.files.len()).collect();
    m.rewrite(
        wh,
        &all,
        &[x.clone(), x.clone(), y2.clone()],
        "replace",
        None,
        "compaction",
    )
    .await;
    expected.push(vec![]);
    (m, expected.into_iter().map(sorted).collect())
}

/// The oracle and the writer on their own, no icefeed: hand-made histories give exactly
/// the hand-written change sets.
#[tokio::test]
async fn oracle_diffs_of_hand_made_histories() {
    let wh = Warehouse::new().await;
    for (model, expected) in [keyed_history(&wh).await, duplicates_history(&wh).await] {
        let computed = oracle(&model).await;
        assert_eq!(computed.len(), expected.len());
        for (i, ((_, got), want)) in computed.iter().zip(&expected).enumerate() {
            assert_eq!(
                got,
                want,
                "{} snapshot #{} ({})",
                model.name,
                i + 1,
                model.snapshots[i].1
            );
        }
        // Rewrites are one snapshot each, chained.
        assert_eq!(
            model.table.metadata().snapshots().count(),
            model.snapshots.len()
        );
    }

    // The diff itself: multisets without keys, by key with them.
    let a = Row::new(1, 0, "a", 1).json();
    let b = Row::new(1, 0, "b", 1).json();
    assert_eq!(
        diff(&[a.clone(), a.clone()], std::slice::from_ref(&a), &[]).len(),
        1
    );
    assert_eq!(
        diff(std::slice::from_ref(&a), std::slice::from_ref(&b), &[]).len(),
        2
    );
    assert_eq!(
        diff(std::slice::from_ref(&a), std::slice::from_ref(&b), &["id"]),
        vec![change("update", &json!({"id": 1}), &a, &b)]
    );
    assert!(diff(&[a.clone(), b.clone()], &[b, a], &[]).is_empty());
    assert_eq!(parse_seeds("1..4"), Some(vec![1, 2, 3]));
    assert_eq!(parse_seeds("1..=3"), Some(vec![1, 2, 3]));
    assert_eq!(parse_seeds("3, 5"), Some(vec![3, 5]));
    assert_eq!(parse_seeds("x"), None);
}

/// icefeed on the hand-made histories.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oracle_hand_made_histories_match_icefeed() {
    let wh = Warehouse::new().await;
    let models = [
        keyed_history(&wh).await.0,
        duplicates_history(&wh).await.0,
        packed_history(&wh).await,
    ];
    let (node, _store) = Node::start_fresh().await;
    for model in &models {
        let expected = oracle(model).await;
        let id = register(&node, &wh, model).await;
        compare(&node, &id, model, &expected).await;
    }
    node.shutdown().await;
}
