//! One measured change to a followed table: the time from its commit returning to the
//! checkpoint reaching its snapshot, a floor measured in the same run, and the events it
//! published, counted by op. Shared by the copy-on-write and merge-on-read benchmarks.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use iceberg::Catalog;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use icefeed_testkit::rewrite::live_data_files;
use serde::Deserialize;

use crate::cdc::{
    Kind, Planned, commit_plan, local_path, metrics_text, rewrite_counters, wait_checkpoint_since,
};
use crate::scan::{Decode, FLOOR_RUNS, bare_decode_median};

const PAGE_LIMIT: u64 = 10_000;

/// A registered table's feed as a benchmark reads it: the node, the table's id, and the
/// cursor after the events read so far.
pub struct Feed {
    pub client: reqwest::Client,
    pub base: String,
    pub id: String,
    pub cursor: Option<String>,
}

impl Feed {
    /// Waits until the checkpoint is `snapshot`; the time since `committed`.
    pub async fn wait(&self, snapshot: i64, committed: Instant) -> anyhow::Result<Duration> {
        wait_checkpoint_since(&self.client, &self.base, &self.id, snapshot, committed).await
    }

    /// Pages through the events after the cursor to the end of the feed, moving the
    /// cursor there; the count of each op.
    pub async fn read_new(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut ops = BTreeMap::new();
        loop {
            let mut request = self
                .client
                .get(format!("{}/v1/tables/{}/changes", self.base, self.id))
                .query(&[("limit", PAGE_LIMIT)]);
            if let Some(cursor) = &self.cursor {
                request = request.query(&[("after", cursor)]);
            }
            let response = request.send().await?;
            let status = response.status();
            if !status.is_success() {
                bail!("page request answered {status}: {}", response.text().await?);
            }
            let page: Page = serde_json::from_slice(&response.bytes().await?)?;
            let count = page.events.len() as u64;
            for e in page.events {
                *ops.entry(e.op).or_insert(0) += 1;
            }
            self.cursor = Some(page.next);
            if !page.more || count == 0 {
                return Ok(ops);
            }
        }
    }
}

/// Seconds and count of the shuffle tasks the node ran so far, by kind (`map`,
/// `reduce`), from `icefeed_task_duration_seconds` of its `/metrics`.
pub async fn task_seconds(
    client: &reqwest::Client,
    base: &str,
) -> anyhow::Result<BTreeMap<String, (f64, u64)>> {
    let text = metrics_text(client, base).await?;
    let mut tasks: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("icefeed_task_duration_seconds_") else {
            continue;
        };
        let (Some((what, rest)), Some(value)) = (rest.split_once('{'), line.rsplit(' ').next())
        else {
            continue;
        };
        let Some(kind) = rest
            .split(',')
            .find_map(|label| label.strip_prefix("kind=\""))
            .and_then(|k| k.split('"').next())
        else {
            continue;
        };
        let entry = tasks.entry(kind.to_string()).or_default();
        match what {
            "sum" => entry.0 = value.parse()?,
            "count" => entry.1 = value.parse()?,
            _ => {}
        }
    }
    Ok(tasks)
}

/// What ran between two [`task_seconds`]: e.g. "map 12 tasks 3.10 s, reduce 2 tasks 0.40 s"
/// (task seconds, summed over the node's task workers).
pub fn tasks_between(
    before: &BTreeMap<String, (f64, u64)>,
    after: &BTreeMap<String, (f64, u64)>,
) -> String {
    let ran: Vec<String> = after
        .iter()
        .filter_map(|(kind, (sum, count))| {
            let (sum0, count0) = before.get(kind).copied().unwrap_or_default();
            (*count > count0)
                .then(|| format!("{kind} {} tasks {:.2} s", count - count0, sum - sum0))
        })
        .collect();
    if ran.is_empty() {
        "no shuffle tasks".to_string()
    } else {
        ran.join(", ")
    }
}

#[derive(Deserialize)]
struct Event {
    op: String,
}

#[derive(Deserialize)]
struct Page {
    events: Vec<Event>,
    next: String,
    more: bool,
}

/// "ok (…)" when `ops` is exactly `rows` events of `op`, else what was published.
pub fn check_events(ops: &BTreeMap<String, u64>, op: &str, rows: u64) -> String {
    let got: Vec<String> = ops.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let got = if got.is_empty() {
        "no events".to_string()
    } else {
        got.join(", ")
    };
    let only = ops.len() == 1 && ops.get(op) == Some(&rows);
    if only {
        format!("ok ({got})")
    } else {
        format!("MISMATCH: expected {rows} {op}, got {got}")
    }
}

/// What one measured snapshot gave.
pub struct Measured {
    /// Commit returned → checkpoint at the snapshot.
    pub elapsed: Duration,
    pub floor: Duration,
    /// Rows (and deletion-vector positions) the floor decoded.
    pub floor_rows: u64,
    /// Data files the snapshot removed.
    pub removed: usize,
    /// Files (data and delete) the snapshot added.
    pub added: usize,
    /// "ok (…)" or "MISMATCH: …".
    pub check: String,
}

/// Commits `plan` as one copy-on-write snapshot (see [`commit_plan`]) and measures it:
/// the floor is a bare Arrow scan of the removed and added data files.
pub async fn copy_on_write(
    feed: &mut Feed,
    catalog: &dyn Catalog,
    table: &Table,
    plan: &[Planned],
    kind: Kind,
) -> anyhow::Result<(Table, Measured)> {
    let before = live_data_files(table).await?;
    let prepare = Instant::now();
    let (after, removed) = commit_plan(catalog, table, plan, kind).await?;
    let committed = Instant::now();
    let rows = plan.iter().map(|p| p.rows.len() as u64).sum();
    let measured = copied_on_write(
        feed, prepare, committed, &before, &after, &removed, kind, rows,
    )
    .await?;
    Ok((after, measured))
}

/// Measures a copy-on-write snapshot (or an append) committed at `committed` (its
/// preparation started at `prepare`): waits for its checkpoint, scans the `removed` and
/// added data files with bare Arrow on 2 threads (the median of [`FLOOR_RUNS`]), and
/// checks that the new events are `rows` of `kind`'s op.
#[allow(clippy::too_many_arguments)]
pub async fn copied_on_write(
    feed: &mut Feed,
    prepare: Instant,
    committed: Instant,
    before: &[DataFile],
    after: &Table,
    removed: &[DataFile],
    kind: Kind,
    rows: u64,
) -> anyhow::Result<Measured> {
    let snapshot = after
        .metadata()
        .current_snapshot_id()
        .context("no snapshot")?;
    let elapsed = feed.wait(snapshot, committed).await?;
    println!(
        "  committed snapshot {snapshot} ({:.1}s to prepare and commit); published in {:.2}s",
        (committed - prepare).as_secs_f64(),
        elapsed.as_secs_f64()
    );
    let before_paths: HashSet<&str> = before.iter().map(|f| f.file_path()).collect();
    let live = live_data_files(after).await?;
    let added: Vec<&DataFile> = live
        .iter()
        .filter(|f| !before_paths.contains(f.file_path()))
        .collect();
    let mut paths: Vec<PathBuf> = removed.iter().map(|f| local_path(f.file_path())).collect();
    paths.extend(added.iter().map(|f| local_path(f.file_path())));
    let jobs: Vec<Decode> = paths.iter().cloned().map(Decode::Parquet).collect();
    let decoded = bare_decode_median(&jobs, 2, FLOOR_RUNS)?;
    let (floor_rows, floor) = (decoded.rows, decoded.elapsed);
    let ops = feed.read_new().await?;
    let check = check_events(&ops, kind.op(), rows);
    println!(
        "  floor {:.2}s ({} rows of {} files); events: {check}; node so far: {}",
        floor.as_secs_f64(),
        floor_rows,
        paths.len(),
        rewrite_counters(&feed.client, &feed.base).await?
    );
    Ok(Measured {
        elapsed,
        floor,
        floor_rows,
        removed: removed.len(),
        added: added.len(),
        check,
    })
}
