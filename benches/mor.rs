//! Merge-on-read benchmark: how long icefeed takes to publish one merge-on-read snapshot
//! (rows deleted or updated through delete files, the data files left in place) compared
//! with the physical floor of decoding what that snapshot makes it read, and with the
//! copy-on-write commit of the same change; and the export of a table with deletion
//! vectors next to the export of the same rows without deletes.
//!
//! `cargo bench --bench mor -- [--rows N] [--changed 50000] [--only NAME]
//! [--export-deleted 10]`
//!
//! 1. copies the taxi table of `benches/load.rs` (generated there when missing) into
//!    scratch directories next to it, in a Hadoop catalog's layout: one made merge-on-read
//!    in format v2, one upgraded to v3 (Iceberg Java's `format-version` upgrade);
//! 2. registers each with an in-process node (`filesystem` warehouse, `start: "latest"`,
//!    poll 100 ms, key `trip_id`) on a fresh PostgreSQL database;
//! 3. per scenario commits ONE snapshot with Iceberg's own Java API (the writer of
//!    `tests/iceberg-writer`, one JVM per commit, see `load/hadoop.rs`) and times from the
//!    commit returning to the checkpoint reaching it (`GET /v1/tables/{id}` every 20 ms):
//!    * `update N pos-deletes v2` / `update N DVs v3`: N scattered rows (every
//!      `rows / N`-th, over all data files) get `fare_amount + 1`: one row delta with a
//!      position delete file per day partition (v2) or a deletion vector per data file
//!      in one Puffin file (v3), and the new rows in one data file per partition;
//!      expects N `update` events;
//!    * `delete N …`: other N scattered rows, deleted the same way; N `delete` events;
//!    * `upsert N eq-deletes v2|v3`: other N scattered rows upserted as Flink does: an
//!      equality delete file on `trip_id` per partition and the new rows; N `update`s;
//!
//!    and measures the floor in the same run (median of 3): bare decoding, on 2 threads,
//!    of the delete files the snapshot added (Parquet delete files with the Parquet
//!    reader, deletion vectors with the `roaring` crate), every row of the data files
//!    whose rows it deletes, and the data files it added;
//! 4. commits the same scattered UPDATE and DELETE copy-on-write (`load/scenario.rs`, as
//!    `--bench cow` does) to a SQL-catalog copy, for the copy-on-write figure of each
//!    scenario (the upsert is compared with the update);
//! 5. exports (registration with `start: "snapshot"` to the first change set published)
//!    a v3 copy with `--export-deleted` percent of its rows (scattered) deleted by one DV
//!    commit, and a copy with those rows deleted copy-on-write (the same live rows, no
//!    delete files), each next to a bare decode of its files (and the DV copy next to
//!    decoding its live rows and writing them again as zstd Parquet on 2 threads, what an
//!    export of files with deletes must do), and pulls each feed as Arrow to count the
//!    rows;
//! 6. prints a table with each time, its floor and the ratio, and the copy-on-write time.
//!
//! `--only upsert` runs the scenarios whose name has that word (`v2`, `DVs`,
//! `copy-on-write`, `export`, …). PostgreSQL: `ICEFEED_BENCH_DATABASE_URL` (a role that may
//! create databases). The Java writer: `ICEFEED_BENCH_ICEBERG_WRITER`, else what
//! `scripts/iceberg-writer.sh` prints (Java 17 and Maven; built once).

#[path = "load/body.rs"]
mod body;
#[path = "load/cdc.rs"]
#[allow(dead_code)]
mod cdc;
#[path = "load/database.rs"]
mod database;
#[path = "load/delivery.rs"]
#[allow(dead_code)]
mod delivery;
#[path = "load/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "load/hadoop.rs"]
mod hadoop;
#[path = "load/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "load/scan.rs"]
#[allow(dead_code)]
mod scan;
#[path = "load/scenario.rs"]
mod scenario;
#[path = "load/service.rs"]
#[allow(dead_code)]
mod service;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use iceberg::spec::{DataContentType, DataFileFormat};
use icefeed_testkit::rewrite::live_data_files;
use serde_json::{Value, json};

use crate::cdc::{
    Kind, Planned, commit_plan, copy_table, local_path, plan_scattered, plan_scattered_at,
    register_and_wait, register_at_head, scratch_dir,
};
use crate::database::with_node;
use crate::hadoop::{HadoopTable, JavaWriter};
use crate::harness::short;
use crate::scan::{Decode, Decoded, FLOOR_RUNS, Rewrite, Vector, bare_decode_median, bare_rewrite};
use crate::scenario::{Feed, check_events};

/// Arguments after `--` of `cargo bench --bench mor`.
#[derive(Debug, Parser)]
#[command(name = "mor", about = "icefeed merge-on-read benchmark")]
struct Args {
    /// Rows of the taxi table (the one `--bench load` generates for that many rows).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Rows each update, delete and upsert scenario changes.
    #[arg(long, default_value_t = 50_000)]
    changed: u64,
    /// Run only the scenarios whose name contains this (for example `v3` or `upsert`).
    #[arg(long)]
    only: Option<String>,
    /// Percent of the rows the deletion vectors of the export scenario delete.
    #[arg(long, default_value_t = 10)]
    export_deleted: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Args {
    fn runs(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| name.contains(only.as_str()))
    }
}

/// A merge-on-read change of the scenarios.
#[derive(Clone, Copy, PartialEq)]
enum Change {
    Update,
    Delete,
    Upsert,
}

impl Change {
    const ALL: [Change; 3] = [Change::Update, Change::Delete, Change::Upsert];

    /// Its name in format `version`.
    fn name(self, changed: u64, version: u8) -> String {
        let how = match (self, version) {
            (Change::Upsert, _) => "eq-deletes",
            (_, 2) => "pos-deletes",
            _ => "DVs",
        };
        let what = match self {
            Change::Update => "update",
            Change::Delete => "delete",
            Change::Upsert => "upsert",
        };
        format!("{what} {} {how} v{version}", short(changed))
    }

    /// The copy-on-write change it is compared with.
    fn copy_on_write(self) -> Kind {
        match self {
            Change::Update | Change::Upsert => Kind::Update,
            Change::Delete => Kind::Delete,
        }
    }

    fn op(self) -> &'static str {
        match self {
            Change::Update | Change::Upsert => "update",
            Change::Delete => "delete",
        }
    }

    fn step(self, plan: &[Planned], version: u8) -> Value {
        match self {
            Change::Update => hadoop::update_by_position(plan, version),
            Change::Delete => hadoop::delete_by_position(plan, version),
            Change::Upsert => hadoop::upsert_by_equality(plan),
        }
    }
}

/// One line of the results table.
struct Outcome {
    name: String,
    rows: u64,
    /// Delete files the snapshot added (DVs counted one by one).
    delete_files: usize,
    /// Data files the floor decoded.
    data_files: usize,
    elapsed: Duration,
    floor: Decoded,
    /// For an export of files with deletes: the floor of writing their live rows again.
    rewrite: Option<Decoded>,
    /// The copy-on-write change of the same rows, when measured.
    copy_on_write: Option<Kind>,
    check: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    anyhow::ensure!(
        args.rows > 0 && args.changed > 0,
        "--rows and --changed must be positive"
    );
    anyhow::ensure!(
        (1..100).contains(&args.export_deleted),
        "--export-deleted is a percentage (1 to 99)"
    );
    let runtime = harness::runtime()?;
    let admin_url = harness::admin_url();
    runtime.block_on(run(&args, &admin_url))
}

async fn run(args: &Args, admin_url: &str) -> anyhow::Result<()> {
    let source = generate::default_dir(args.rows)?;
    let table =
        generate::ensure_table(&source, args.rows, generate::DEFAULT_MAX_ROWS_PER_FILE).await?;
    println!("{}", table.describe());
    let writer = JavaWriter::new()?;

    let (outcomes, copy_on_write) = with_node(admin_url, async |node| {
        scenarios(args, &source, &node.base, &writer).await
    })
    .await?;

    println!();
    println!(
        "{:<28} {:>9} {:>6} {:>6} {:>8} {:>8} {:>7} {:>8} {:>8}",
        "scenario", "rows", "delete", "data", "seconds", "floor s", "ratio", "CoW s", "vs CoW"
    );
    for o in &outcomes {
        let cow = o
            .copy_on_write
            .and_then(|k| copy_on_write.iter().find(|(kind, _)| *kind == k))
            .map(|(_, m)| m.elapsed);
        println!(
            "{:<28} {:>9} {:>6} {:>6} {:>8.2} {:>8.2} {:>6.1}x {:>8} {:>8}",
            o.name,
            o.rows,
            o.delete_files,
            o.data_files,
            o.elapsed.as_secs_f64(),
            o.floor.elapsed.as_secs_f64(),
            o.elapsed.as_secs_f64() / o.floor.elapsed.as_secs_f64(),
            cow.map_or("-".into(), |c| format!("{:.2}", c.as_secs_f64())),
            cow.map_or("-".into(), |c| format!(
                "{:.2}x",
                o.elapsed.as_secs_f64() / c.as_secs_f64()
            )),
        );
    }
    for (kind, m) in &copy_on_write {
        println!(
            "{:<28} {:>9} {:>6} {:>6} {:>8.2} {:>8.2} {:>6.1}x",
            format!("{} {} copy-on-write", kind.op(), short(args.changed)),
            args.changed,
            0,
            m.removed + m.added,
            m.elapsed.as_secs_f64(),
            m.floor.as_secs_f64(),
            m.elapsed.as_secs_f64() / m.floor.as_secs_f64(),
        );
    }
    println!("(rows: rows changed, or exported; delete: delete files added (each DV counted);");
    println!(" data: data files the floor decoded; seconds: commit returned → checkpoint at the");
    println!(" snapshot, or registration → first checkpoint for exports, polled every 20 ms;");
    println!(" floor: bare decode on 2 threads of the delete files added, every row of the data");
    println!(" files they delete rows of, and the data files added (copy-on-write: removed +");
    println!(" added files); CoW s: the copy-on-write commit of the same rows, same run)");
    for o in &outcomes {
        println!(
            "{}: floor decoded {} rows and {} DV positions; events check: {}",
            o.name, o.floor.rows, o.floor.positions, o.check
        );
        if let Some(r) = o.rewrite {
            println!(
                "{}: decode + Parquet re-write (zstd 1) of its {} live rows on 2 threads \
                 {:.2}s, icefeed {:.1}x that",
                o.name,
                r.rows,
                r.elapsed.as_secs_f64(),
                o.elapsed.as_secs_f64() / r.elapsed.as_secs_f64()
            );
        }
    }
    for (kind, m) in &copy_on_write {
        println!(
            "{} copy-on-write: floor scanned {} rows; events check: {}",
            kind.op(),
            m.floor_rows,
            m.check
        );
    }
    Ok(())
}

type CopyOnWrite = Vec<(Kind, scenario::Measured)>;

async fn scenarios(
    args: &Args,
    source: &Path,
    base: &str,
    writer: &JavaWriter,
) -> anyhow::Result<(Vec<Outcome>, CopyOnWrite)> {
    let client = reqwest::Client::new();
    let n = args.changed;
    let mut outcomes = Vec::new();

    // Merge-on-read, v2 then v3: each change on other rows of the same table.
    for version in [2u8, 3] {
        let selected: Vec<Change> = Change::ALL
            .into_iter()
            .filter(|c| args.runs(&c.name(n, version)))
            .collect();
        if selected.is_empty() {
            continue;
        }
        let table =
            HadoopTable::copy(source, &scratch_dir(source, &format!("mor{version}"))?).await?;
        table
            .commit(writer, vec![hadoop::merge_on_read(version)])
            .await?;
        let loaded = table.load().await?;
        anyhow::ensure!(
            loaded.metadata().format_version() as u8 == version,
            "the copy is in format {:?}, not v{version}",
            loaded.metadata().format_version()
        );
        // The rows are planned over the files the copy started with.
        let files = live_data_files(&loaded).await?;
        let mut feed = follow(&client, base, table.registration(), &loaded).await?;
        println!(
            "v{version} copy in {} registered as {}",
            table.dir.display(),
            feed.id
        );
        for (phase, change) in Change::ALL.into_iter().enumerate() {
            if !selected.contains(&change) {
                continue;
            }
            let name = change.name(n, version);
            println!("{name} ...");
            let plan = plan_scattered_at(&files, n, phase as u64, Change::ALL.len() as u64)?;
            let outcome =
                merge_on_read(&mut feed, &table, writer, &plan, change, version, name).await?;
            outcomes.push(outcome);
        }
    }

    // Copy-on-write, the same rows as the update and the delete above.
    let mut copy_on_write = Vec::new();
    let kinds: Vec<(usize, Kind)> = [(0, Kind::Update), (1, Kind::Delete)]
        .into_iter()
        .filter(|(_, k)| args.runs(&format!("{} {} copy-on-write", k.op(), short(n))))
        .collect();
    if !kinds.is_empty() {
        let dir = scratch_dir(source, "morw")?;
        copy_table(source, &dir).await?;
        let mut registration = generate::registration(&dir);
        latest(&mut registration);
        let cdc::Registered {
            catalog,
            mut table,
            id,
            ..
        } = register_and_wait(&client, &dir, base, &registration).await?;
        let mut feed = Feed {
            client: client.clone(),
            base: base.to_string(),
            id,
            cursor: None,
        };
        feed.read_new().await?;
        for (phase, kind) in kinds {
            println!("{} {} copy-on-write ...", kind.op(), short(n));
            // Copy-on-write rewrites keep the rows' order: the same phase picks the same
            // rows as the merge-on-read change.
            let files = live_data_files(&table).await?;
            let plan = plan_scattered_at(&files, n, phase as u64, Change::ALL.len() as u64)?;
            let (after, measured) =
                scenario::copy_on_write(&mut feed, &catalog, &table, &plan, kind).await?;
            copy_on_write.push((kind, measured));
            table = after;
        }
    }

    // Exports.
    let deleted = args.rows * args.export_deleted / 100;
    let with_dvs = format!("export, {}% deleted by DVs v3", args.export_deleted);
    let without = "export, same rows, no deletes".to_string();
    if args.runs(&with_dvs) {
        println!("{with_dvs} ...");
        outcomes.push(export_with_dvs(&client, base, source, writer, deleted, with_dvs).await?);
    }
    if args.runs(&without) {
        println!("{without} ...");
        outcomes.push(export_without_deletes(&client, base, source, deleted, without).await?);
    }
    Ok((outcomes, copy_on_write))
}

/// `start: latest`, fast polls, key `trip_id`.
fn latest(registration: &mut Value) {
    registration["start"] = json!("latest");
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);
}

/// Registers a table from its head (`start: latest`) and reads what that published.
async fn follow(
    client: &reqwest::Client,
    base: &str,
    mut registration: Value,
    table: &iceberg::table::Table,
) -> anyhow::Result<Feed> {
    latest(&mut registration);
    let (id, _) = register_at_head(client, base, &registration, table).await?;
    let mut feed = Feed {
        client: client.clone(),
        base: base.to_string(),
        id,
        cursor: None,
    };
    feed.read_new().await?;
    Ok(feed)
}

/// Commits `change` of the planned rows and measures it.
async fn merge_on_read(
    feed: &mut Feed,
    table: &HadoopTable,
    writer: &JavaWriter,
    plan: &[Planned],
    change: Change,
    version: u8,
    name: String,
) -> anyhow::Result<Outcome> {
    let rows: u64 = plan.iter().map(|p| p.rows.len() as u64).sum();
    let tasks_before = scenario::task_seconds(&feed.client, &feed.base).await?;
    let prepare = Instant::now();
    let (lines, committed) = table
        .commit(writer, vec![change.step(plan, version)])
        .await?;
    let snapshot = lines
        .last()
        .and_then(|l| l["snapshot_id"].as_i64())
        .context("the writer named no snapshot")?;
    let elapsed = feed.wait(snapshot, committed).await?;
    let tasks = scenario::tasks_between(
        &tasks_before,
        &scenario::task_seconds(&feed.client, &feed.base).await?,
    );
    println!(
        "  committed snapshot {snapshot} ({:.1}s to prepare and commit); published in {:.2}s \
         ({tasks})",
        (committed - prepare).as_secs_f64(),
        elapsed.as_secs_f64()
    );

    // The floor: what the snapshot added, and the data files whose rows it deletes.
    let after = table.load().await?;
    anyhow::ensure!(
        after.metadata().current_snapshot_id() == Some(snapshot),
        "the table moved past snapshot {snapshot}"
    );
    let added = hadoop::added_files(&after).await?;
    let mut jobs: Vec<Decode> = plan
        .iter()
        .map(|p| Decode::Parquet(local_path(p.file.file_path())))
        .collect();
    let mut delete_files = 0;
    for f in &added {
        let path = local_path(f.file_path());
        if f.content_type() != DataContentType::Data {
            delete_files += 1;
        }
        jobs.push(match f.file_format() {
            DataFileFormat::Puffin => Decode::Vector(vector(f)?),
            DataFileFormat::Parquet => Decode::Parquet(path),
            format => anyhow::bail!("unexpected {format:?} file {}", f.file_path()),
        });
    }
    let data_files = plan.len() + added.len() - delete_files;
    let floor = bare_decode_median(&jobs, 2, FLOOR_RUNS)?;
    let ops = feed.read_new().await?;
    let check = check_events(&ops, change.op(), rows);
    println!(
        "  floor {:.2}s ({} rows of {data_files} data files and {delete_files} delete files, \
         {} DV positions); events: {check}",
        floor.elapsed.as_secs_f64(),
        floor.rows,
        floor.positions
    );
    Ok(Outcome {
        name,
        rows,
        delete_files,
        data_files,
        elapsed,
        floor,
        rewrite: None,
        copy_on_write: Some(change.copy_on_write()),
        check,
    })
}

/// A v3 copy with `deleted` scattered rows deleted by one DV commit, exported.
async fn export_with_dvs(
    client: &reqwest::Client,
    base: &str,
    source: &Path,
    writer: &JavaWriter,
    deleted: u64,
    name: String,
) -> anyhow::Result<Outcome> {
    let table = HadoopTable::copy(source, &scratch_dir(source, "morx")?).await?;
    let plan = plan_scattered(&live_data_files(&table.load().await?).await?, deleted)?;
    let started = Instant::now();
    table
        .commit(
            writer,
            vec![
                hadoop::merge_on_read(3),
                hadoop::delete_by_position(&plan, 3),
            ],
        )
        .await?;
    println!(
        "  deleted {} rows by DVs in {:.1}s",
        plan.iter().map(|p| p.rows.len()).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    let loaded = table.load().await?;
    let vectors = hadoop::added_files(&loaded).await?;
    let data = live_data_files(&loaded).await?;
    let mut decode: Vec<Decode> = data
        .iter()
        .map(|f| Decode::Parquet(local_path(f.file_path())))
        .collect();
    let mut rewrite = Vec::new();
    for f in &vectors {
        let referenced = f.referenced_data_file().context("a DV without data file")?;
        decode.push(Decode::Vector(vector(f)?));
        rewrite.push(Rewrite {
            file: local_path(&referenced),
            deleted: Some(vector(f)?),
        });
    }
    let mut registration = table.registration();
    registration["identifier_columns"] = json!(["trip_id"]);
    registration["poll_interval_ms"] = json!(100);
    let exported = ToExport {
        registration,
        decode,
        rewrite,
        delete_files: vectors.len(),
        data_files: data.len(),
    };
    export(client, base, exported, name).await
}

/// A SQL-catalog copy with the same `deleted` rows as [`export_with_dvs`] deleted
/// copy-on-write (the same live rows, no delete files), exported.
async fn export_without_deletes(
    client: &reqwest::Client,
    base: &str,
    source: &Path,
    deleted: u64,
    name: String,
) -> anyhow::Result<Outcome> {
    let dir = scratch_dir(source, "morn")?;
    copy_table(source, &dir).await?;
    let catalog = icefeed_testkit::writer::open_sql_catalog(&dir, generate::CATALOG_NAME).await?;
    let ident = iceberg::TableIdent::from_strs([generate::NAMESPACE, generate::TABLE])?;
    let table = iceberg::Catalog::load_table(&catalog, &ident).await?;
    // The copy lists its files in the source's order: the plan picks the same rows.
    let plan = plan_scattered(&live_data_files(&table).await?, deleted)?;
    let started = Instant::now();
    let (after, _) = commit_plan(&catalog, &table, &plan, Kind::Delete).await?;
    println!(
        "  deleted the same rows copy-on-write in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let data = live_data_files(&after).await?;
    let decode: Vec<Decode> = data
        .iter()
        .map(|f| Decode::Parquet(local_path(f.file_path())))
        .collect();
    let mut registration = generate::registration(&dir);
    registration["identifier_columns"] = json!(["trip_id"]);
    registration["poll_interval_ms"] = json!(100);
    let exported = ToExport {
        registration,
        decode,
        rewrite: Vec::new(),
        delete_files: 0,
        data_files: data.len(),
    };
    export(client, base, exported, name).await
}

/// A deletion vector's blob, as its manifest entry locates it.
fn vector(f: &iceberg::spec::DataFile) -> anyhow::Result<Vector> {
    Ok(Vector {
        path: local_path(f.file_path()),
        offset: f.content_offset().context("a DV without offset")? as u64,
        length: f.content_size_in_bytes().context("a DV without size")? as u64,
    })
}

/// A table to export, and what its floors read.
struct ToExport {
    /// Its registration (`start: snapshot`).
    registration: Value,
    /// Its data files and delete files, for the decode floor.
    decode: Vec<Decode>,
    /// Its data files with deletes, for the floor of writing their live rows again (as
    /// the export must); empty without deletes (the export copies files as they are).
    rewrite: Vec<Rewrite>,
    delete_files: usize,
    data_files: usize,
}

/// Registers the table (`start: snapshot`), times it to its first checkpoint, and pulls
/// the feed as Arrow to check it holds the table's live rows.
async fn export(
    client: &reqwest::Client,
    base: &str,
    table: ToExport,
    name: String,
) -> anyhow::Result<Outcome> {
    let floor = bare_decode_median(&table.decode, 2, FLOOR_RUNS)?;
    let rewrite = if table.rewrite.is_empty() {
        None
    } else {
        Some(scan::median(FLOOR_RUNS, || {
            bare_rewrite(&table.rewrite, 2)
        })?)
    };
    let live = floor.rows - floor.positions;
    let (id, elapsed) = service::initial_load(client, base, &table.registration).await?;
    println!("  exported in {:.2}s", elapsed.as_secs_f64());
    let pull = service::pull(client, base, &id, u64::MAX, live, service::Wire::Arrow).await?;
    let check = if pull.check == "ok" {
        format!("ok ({} insert)", pull.events)
    } else {
        format!("MISMATCH: {}", pull.check)
    };
    println!(
        "  floor {:.2}s ({} rows, {} DV positions){}; pulled {} events as Arrow in {:.2}s: \
         {check}",
        floor.elapsed.as_secs_f64(),
        floor.rows,
        floor.positions,
        rewrite.map_or(String::new(), |r| format!(
            "; re-writing the {} live rows {:.2}s",
            r.rows,
            r.elapsed.as_secs_f64()
        )),
        pull.events,
        pull.elapsed.as_secs_f64()
    );
    Ok(Outcome {
        name,
        rows: live,
        delete_files: table.delete_files,
        data_files: table.data_files,
        elapsed,
        floor,
        rewrite,
        copy_on_write: None,
        check,
    })
}
