//! Changing the benchmark table: scratch copies of it, copy-on-write updates and deletes
//! of chosen rows, and waiting for an in-process node to publish them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arrow::array::{Array, AsArray, BooleanArray, Float64Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::Float64Type;
use futures::{StreamExt, TryStreamExt};
use iceberg::Catalog;
use iceberg::spec::{DataFile, Literal, PrimitiveLiteral};
use iceberg::table::Table;
use icefeed_testkit::rewrite::{read_data_file, rewrite_with};
use icefeed_testkit::writer::AppendOptions;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::Connection;

const CHECKPOINT_POLL: Duration = Duration::from_millis(20);
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(3600);
/// Files read at the same time while preparing a rewrite (not timed).
const READ_CONCURRENCY: usize = 4;

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Update,
    Delete,
    Insert,
}

impl Kind {
    pub fn op(self) -> &'static str {
        match self {
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::Insert => "insert",
        }
    }
}

/// A file to rewrite and the positions of its rows to change.
pub struct Planned {
    pub file: DataFile,
    pub rows: Vec<usize>,
}

pub fn day_of(file: &DataFile) -> i32 {
    match file.partition().fields().first() {
        Some(Some(Literal::Primitive(PrimitiveLiteral::Int(d)))) => *d,
        _ => i32::MIN,
    }
}

/// `changed` rows of consecutive day partitions starting `at` thirds into the year: all
/// files of those partitions are rewritten, and their first rows (in file order) change.
pub fn plan_clustered(files: &[DataFile], changed: u64, at: usize) -> anyhow::Result<Vec<Planned>> {
    let mut by_day: BTreeMap<i32, Vec<&DataFile>> = BTreeMap::new();
    for f in files {
        by_day.entry(day_of(f)).or_default().push(f);
    }
    let days: Vec<i32> = by_day.keys().copied().collect();
    let mut plan = Vec::new();
    let mut left = changed as usize;
    for day in &days[days.len() * at / 3..] {
        if left == 0 {
            break;
        }
        for f in &by_day[day] {
            let take = left.min(f.record_count() as usize);
            left -= take;
            plan.push(Planned {
                file: (*f).clone(),
                rows: (0..take).collect(),
            });
        }
    }
    anyhow::ensure!(left == 0, "not enough rows after the chosen partitions");
    Ok(plan)
}

/// `changed` rows evenly spaced over all live files (every `total / changed`-th row).
pub fn plan_scattered(files: &[DataFile], changed: u64) -> anyhow::Result<Vec<Planned>> {
    plan_scattered_at(files, changed, 0, 1)
}

/// Like [`plan_scattered`], with the rows shifted by `phase / phases` of the stride: plans
/// of different phases over the same files choose disjoint rows (merge-on-read changes
/// leave the files in place, so a later change must not pick the rows an earlier one
/// deleted).
pub fn plan_scattered_at(
    files: &[DataFile],
    changed: u64,
    phase: u64,
    phases: u64,
) -> anyhow::Result<Vec<Planned>> {
    let total: u64 = files.iter().map(|f| f.record_count()).sum();
    anyhow::ensure!(total >= changed, "the table holds only {total} rows");
    let stride = total / changed;
    anyhow::ensure!(
        phase < phases && phases <= stride,
        "{phases} disjoint plans of {changed} rows do not fit in {total} rows"
    );
    let offset = stride * phase / phases;
    let mut plan = Vec::new();
    let mut global = 0u64;
    let mut taken = 0u64;
    for f in files {
        let count = f.record_count();
        let mut rows = Vec::new();
        // First `offset + k * stride` at or after `global`.
        let mut next = (global.max(offset) - offset).div_ceil(stride) * stride + offset;
        while next < global + count && taken < changed {
            rows.push((next - global) as usize);
            taken += 1;
            next += stride;
        }
        global += count;
        if !rows.is_empty() {
            plan.push(Planned {
                file: f.clone(),
                rows,
            });
        }
    }
    anyhow::ensure!(taken == changed, "planned {taken} of {changed} rows");
    Ok(plan)
}

/// Commits `plan` as one copy-on-write snapshot (`overwrite` for updates, `delete` for
/// deletes); the table after it, and the files it removed.
pub async fn commit_plan(
    catalog: &dyn Catalog,
    table: &Table,
    plan: &[Planned],
    kind: Kind,
) -> anyhow::Result<(Table, Vec<DataFile>)> {
    let (remove, batches) = apply(table, plan, kind).await?;
    let options = AppendOptions {
        max_rows_per_file: Some(crate::generate::DEFAULT_MAX_ROWS_PER_FILE),
        ..Default::default()
    };
    let op = if kind == Kind::Update {
        "overwrite"
    } else {
        "delete"
    };
    let after = rewrite_with(catalog, table, &remove, &batches, op, &options).await?;
    Ok((after, remove))
}

/// Reads the planned files and returns them (to remove) with their new rows: chosen rows
/// get `fare_amount + 1` (updates) or are left out (deletes); all others are copied.
pub async fn apply(
    table: &Table,
    plan: &[Planned],
    kind: Kind,
) -> anyhow::Result<(Vec<DataFile>, Vec<RecordBatch>)> {
    let batches: Vec<RecordBatch> = futures::stream::iter(plan)
        .map(|p| async move {
            let batches = read_data_file(table, &p.file).await?;
            let schema = batches
                .first()
                .map(|b| b.schema())
                .context("a data file without batches")?;
            let batch = concat_batches(&schema, &batches)?;
            let mut chosen = vec![false; batch.num_rows()];
            for &r in &p.rows {
                chosen[r] = true;
            }
            anyhow::Ok(match kind {
                Kind::Update => {
                    let at = schema.index_of("fare_amount")?;
                    let fare = batch.column(at).as_primitive::<Float64Type>();
                    let new: Float64Array = (0..batch.num_rows())
                        .map(|i| {
                            let old = fare.is_valid(i).then(|| fare.value(i));
                            if chosen[i] {
                                Some(old.unwrap_or(0.0) + 1.0)
                            } else {
                                old
                            }
                        })
                        .collect();
                    let mut columns = batch.columns().to_vec();
                    columns[at] = Arc::new(new);
                    RecordBatch::try_new(schema, columns)?
                }
                _ => {
                    let keep: BooleanArray = chosen.iter().map(|c| Some(!c)).collect();
                    filter_record_batch(&batch, &keep)?
                }
            })
        })
        .buffered(READ_CONCURRENCY)
        .try_collect()
        .await?;
    Ok((plan.iter().map(|p| p.file.clone()).collect(), batches))
}

pub async fn register(
    client: &reqwest::Client,
    base: &str,
    body: &Value,
) -> anyhow::Result<String> {
    let response = client
        .post(format!("{base}/v1/tables"))
        .json(body)
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if status != StatusCode::CREATED {
        bail!("registration answered {status}: {body}");
    }
    Ok(body["id"]
        .as_str()
        .context("registration without id")?
        .to_string())
}

/// A registered bench table: the Iceberg table, its icefeed id, and how long its first
/// publish (up to the head) took.
pub struct Registered {
    pub catalog: iceberg_catalog_sql::SqlCatalog,
    pub table: Table,
    pub id: String,
    pub waited: Duration,
}

/// Opens the table of `registration` in the SQL catalog under `dir`, registers it with the
/// service at `base`, and waits until the head snapshot is published.
pub async fn register_and_wait(
    client: &reqwest::Client,
    dir: &Path,
    base: &str,
    registration: &Value,
) -> anyhow::Result<Registered> {
    let catalog =
        icefeed_testkit::writer::open_sql_catalog(dir, super::generate::CATALOG_NAME).await?;
    let name = registration["table"].as_str().context("table name")?;
    let ident = iceberg::TableIdent::from_strs(name.split('.'))?;
    let table = iceberg::Catalog::load_table(&catalog, &ident).await?;
    let (id, waited) = register_at_head(client, base, registration, &table).await?;
    Ok(Registered {
        catalog,
        table,
        id,
        waited,
    })
}

/// Registers `registration` (of `table`, loaded from its catalog) with the service at
/// `base` and waits until its head snapshot is published; the id and the wait.
pub async fn register_at_head(
    client: &reqwest::Client,
    base: &str,
    registration: &Value,
    table: &Table,
) -> anyhow::Result<(String, Duration)> {
    let id = register(client, base, registration).await?;
    let head = table
        .metadata()
        .current_snapshot_id()
        .context("no snapshot")?;
    let waited = wait_checkpoint(client, base, &id, head).await?;
    Ok((id, waited))
}

/// Polls the table until its checkpoint is `snapshot`; returns the time that took.
pub async fn wait_checkpoint(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    snapshot: i64,
) -> anyhow::Result<Duration> {
    wait_checkpoint_since(client, base, id, snapshot, Instant::now()).await
}

/// The node's `/metrics` text.
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    Ok(client
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// How the node computed its rewrites so far, from its `/metrics`: each series of the
/// counters that say where (in place, shuffled, past their estimate, spilled) with its
/// value, or "none".
pub async fn rewrite_counters(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let text = metrics_text(client, base).await?;
    let counters = [
        "icefeed_rewrites_total",
        "icefeed_decoded_over_estimate_total",
        "icefeed_shuffle_spilled_partitions_total",
    ];
    let mut shown = Vec::new();
    for line in text.lines() {
        if let Some((series, value)) = line.rsplit_once(' ')
            && counters.iter().any(|c| series.starts_with(c))
        {
            shown.push(format!("{series} {value}"));
        }
    }
    Ok(match shown.is_empty() {
        true => "none".to_string(),
        false => shown.join(", "),
    })
}

/// Polls the table until its checkpoint is `snapshot`; returns the time since `started`
/// (when the commit returned).
pub async fn wait_checkpoint_since(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    snapshot: i64,
    started: Instant,
) -> anyhow::Result<Duration> {
    loop {
        let view: Value = client
            .get(format!("{base}/v1/tables/{id}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let at = &view["checkpoint"]["snapshot_id"];
        let at = at
            .as_i64()
            .or_else(|| at.as_str().and_then(|s| s.parse().ok()));
        if at == Some(snapshot) {
            return Ok(started.elapsed());
        }
        if view["state"] == "error" {
            bail!("the table went to the error state: {}", view["last_error"]);
        }
        if started.elapsed() > CHECKPOINT_TIMEOUT {
            bail!("checkpoint not at {snapshot} after {CHECKPOINT_TIMEOUT:?}: {view}");
        }
        tokio::time::sleep(CHECKPOINT_POLL).await;
    }
}

/// A sibling of `source` whose path has the same length (`taxi-N` → `cow--N` for prefix
/// `cow-`, `push-N` for `push`): the copy's
/// metadata is the source's with the directory swapped in place, which keeps the
/// length-prefixed strings of the (uncompressed) Avro manifests valid.
pub fn scratch_dir(source: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let name = source
        .file_name()
        .and_then(|n| n.to_str())
        .context("source directory name")?;
    anyhow::ensure!(name.len() > 4, "unexpected source directory {name}");
    let scratch = source.with_file_name(format!("{prefix}{}", &name[4..]));
    anyhow::ensure!(scratch.as_os_str().len() == source.as_os_str().len());
    Ok(scratch)
}

/// Copies the table under `source` to `dest` (replacing an earlier copy): data files are
/// hard-linked (never modified: rewrites add new files), metadata files are copied with
/// `source`'s path replaced by `dest`'s, and the catalog row is pointed at the copy.
pub async fn copy_table(source: &Path, dest: &Path) -> anyhow::Result<()> {
    if dest.exists() {
        for entry in std::fs::read_dir(dest)? {
            let name = entry?.file_name();
            if name != "catalog.db" && name != "warehouse" {
                bail!("{} holds {name:?}: not a scratch copy", dest.display());
            }
        }
        std::fs::remove_dir_all(dest)?;
    }
    let from = source.as_os_str().as_encoded_bytes().to_vec();
    let to = dest.as_os_str().as_encoded_bytes().to_vec();
    copy_tree(source, dest, &from, &to)?;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dest.join("catalog.db"));
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
    let (from, to) = (source.display().to_string(), dest.display().to_string());
    // Runtime-checked: the SQLite catalog of a fixture, not icefeed's schema.
    sqlx::query(
        "UPDATE iceberg_tables
            SET metadata_location = replace(metadata_location, ?1, ?2),
                previous_metadata_location = replace(previous_metadata_location, ?1, ?2)",
    )
    .bind(&from)
    .bind(&to)
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    Ok(())
}

fn copy_tree(source: &Path, dest: &Path, from: &[u8], to: &[u8]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dest)?;
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let path = entry.path();
        let target = dest.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&path, &target, from, to)?;
        } else if path.extension().is_some_and(|e| e == "parquet") {
            if std::fs::hard_link(&path, &target).is_err() {
                std::fs::copy(&path, &target)?;
            }
        } else if path.extension().is_some_and(|e| e == "json" || e == "avro") {
            let bytes = std::fs::read(&path)?;
            std::fs::write(&target, replace_bytes(&bytes, from, to))?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

fn replace_bytes(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

pub fn local_path(location: &str) -> PathBuf {
    PathBuf::from(
        location
            .strip_prefix("file://")
            .or_else(|| location.strip_prefix("file:"))
            .unwrap_or(location),
    )
}
