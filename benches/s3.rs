//! Object-storage benchmark: the same taxi table on local disk and on a local S3 server
//! (SeaweedFS, `scripts/seaweedfs.sh`), each followed by a node whose change store is
//! beside it (a local directory; a prefix of the table's S3 bucket, where the server
//! copies data files), and the S3 table once more with the change store in another
//! bucket (copies pass through the node), in one run.
//!
//! `cargo bench --bench s3 -- [--rows 10000000] [--changed 50000]`
//!
//! Per side: the initial load (registration to the head's change set published), with the
//! bytes of data files the node copied through itself and those the S3 server copied
//! (`icefeed_insert_bytes_copied_total`), then
//! a scattered copy-on-write update of `--changed` rows (commit to published change set),
//! whose events are counted through a subscription. The local table is a scratch copy of
//! the one `--bench load` generates; the S3 table is generated with the same seeds into
//! `s3://warehouse/bench-<rows>-<random>` and deleted at the end.
//!
//! PostgreSQL: `ICEFEED_BENCH_DATABASE_URL`; S3: `ICEFEED_BENCH_S3_URL` (default
//! `http://127.0.0.1:8333`, keys `admin` / `adminsecret`); the other bucket is made with
//! `weed shell` (`ICEFEED_BENCH_WEED`, by default what `scripts/seaweedfs.sh --binary`
//! names).

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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use iceberg::table::Table;
use iceberg_catalog_sql::SqlCatalog;
use icefeed_testkit::rewrite::live_data_files;
use icefeed_testkit::writer;
use object_store::ObjectStore;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cdc::{
    Kind, commit_plan, copy_table, metrics_text, plan_scattered, register, scratch_dir,
    wait_checkpoint,
};
use crate::database::{Database, node_settings};

const BUCKET: &str = "warehouse";
/// A change store's bucket that is not the table's.
const OTHER_BUCKET: &str = "bench-changes";

/// Arguments after `--` of `cargo bench --bench s3`.
#[derive(Debug, Parser)]
#[command(name = "s3", about = "icefeed on local disk and on S3")]
struct Args {
    /// Rows of the taxi table.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Rows the scattered update changes.
    #[arg(long, default_value_t = 50_000)]
    changed: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One table and where its node keeps change sets.
struct Side {
    name: &'static str,
    catalog: Arc<SqlCatalog>,
    /// The table as generated; each side loads its current state.
    table: Table,
    registration: Value,
    change_store: String,
    change_store_options: BTreeMap<String, String>,
}

/// What one side measured.
struct Measured {
    load: Duration,
    /// Bytes of data files copied through the node and by the S3 server.
    copied: Copied,
    update: Duration,
    check: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    harness::init_logging();
    let runtime = harness::runtime()?;
    let admin_url = harness::admin_url();
    let endpoint =
        std::env::var("ICEFEED_BENCH_S3_URL").unwrap_or_else(|_| "http://127.0.0.1:8333".into());
    runtime.block_on(run(&args, &admin_url, &endpoint))
}

fn file_io(endpoint: &str) -> HashMap<String, String> {
    [
        ("s3.endpoint", endpoint),
        ("s3.access-key-id", "admin"),
        ("s3.secret-access-key", "adminsecret"),
        ("s3.region", "us-east-1"),
        ("s3.path-style-access", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn store_options(endpoint: &str) -> BTreeMap<String, String> {
    [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", "admin"),
        ("aws_secret_access_key", "adminsecret"),
        ("aws_region", "us-east-1"),
        ("aws_allow_http", "true"),
        ("aws_virtual_hosted_style_request", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn run(args: &Args, admin_url: &str, endpoint: &str) -> anyhow::Result<()> {
    let max_rows = generate::DEFAULT_MAX_ROWS_PER_FILE;
    // Local: a scratch copy of the load benchmark's table (updates commit to it).
    let source = generate::default_dir(args.rows)?;
    generate::ensure_table(&source, args.rows, max_rows).await?;
    let scratch = scratch_dir(&source, "s3b-")?;
    copy_table(&source, &scratch).await?;
    let local = generate::ensure_table(&scratch, args.rows, max_rows).await?;
    println!("{}", local.describe());
    let local_catalog = writer::open_sql_catalog(&scratch, generate::CATALOG_NAME).await?;
    let ident = iceberg::TableIdent::from_strs(["bench", "taxi"])?;
    let local_table = iceberg::Catalog::load_table(&local_catalog, &ident).await?;
    let local_catalog = Arc::new(local_catalog);
    let changes = tempfile::Builder::new()
        .prefix("icefeed-bench-changes")
        .tempdir()?;

    // S3: the same rows, generated into a fresh prefix of the bucket.
    let prefix = format!(
        "bench-{}-{}",
        args.rows,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let s3_dir = tempfile::Builder::new()
        .prefix("icefeed-bench-s3")
        .tempdir()?;
    let warehouse = format!("s3://{BUCKET}/{prefix}/warehouse");
    let s3_catalog = Arc::new(
        writer::open_sql_catalog_at(
            s3_dir.path(),
            generate::CATALOG_NAME,
            &warehouse,
            &file_io(endpoint),
        )
        .await?,
    );
    let started = Instant::now();
    println!("generating {} rows into {warehouse}", args.rows);
    let s3_table = generate::generate_into(s3_catalog.as_ref(), args.rows, max_rows).await?;
    println!("  generated in {:.1}s", started.elapsed().as_secs_f64());
    let (db_file, _) = writer::catalog_paths(s3_dir.path())?;
    let mut s3_registration = local.registration();
    s3_registration["catalog"] = json!({
        "type": "sql", "uri": format!("sqlite:{}", db_file.display()), "warehouse": warehouse,
        "name": generate::CATALOG_NAME, "properties": file_io(endpoint),
    });

    let sides = [
        Side {
            name: "local disk",
            catalog: local_catalog,
            table: local_table,
            registration: local.registration(),
            change_store: changes.path().display().to_string(),
            change_store_options: BTreeMap::new(),
        },
        Side {
            name: "S3, same bucket",
            catalog: s3_catalog.clone(),
            table: s3_table.clone(),
            registration: s3_registration.clone(),
            change_store: format!("s3://{BUCKET}/{prefix}/changes"),
            change_store_options: store_options(endpoint),
        },
        Side {
            name: "S3, other bucket",
            catalog: s3_catalog,
            table: s3_table,
            registration: s3_registration,
            change_store: format!("s3://{OTHER_BUCKET}/{prefix}"),
            change_store_options: store_options(endpoint),
        },
    ];
    // Left by an interrupted run, the bucket is there already; the run removes it.
    weed_shell(
        &format!("s3.bucket.create -name {OTHER_BUCKET}"),
        "already exists",
    )?;
    let mut results = Vec::new();
    for side in &sides {
        println!("{} ...", side.name);
        results.push(measure(side, args, admin_url).await?);
    }
    remove_prefix(endpoint, BUCKET, &prefix).await?;
    remove_prefix(endpoint, OTHER_BUCKET, &prefix).await?;
    weed_shell(&format!("s3.bucket.delete -name {OTHER_BUCKET}"), "")?;

    println!();
    println!(
        "{:<16} {:>12} {:>14} {:>14} {:>14}  events",
        "side", "load s", "by node MB", "by server MB", "update s"
    );
    for (side, m) in sides.iter().zip(&results) {
        println!(
            "{:<16} {:>12.2} {:>14.1} {:>14.1} {:>14.2}  {}",
            side.name,
            m.load.as_secs_f64(),
            m.copied.node as f64 / 1e6,
            m.copied.server as f64 / 1e6,
            m.update.as_secs_f64(),
            m.check
        );
    }
    let disk = &results[0];
    for (side, s3) in sides.iter().zip(&results).skip(1) {
        println!(
            "{} / local disk: initial load {:.2}x, scattered update of {} rows {:.2}x",
            side.name,
            s3.load.as_secs_f64() / disk.load.as_secs_f64(),
            args.changed,
            s3.update.as_secs_f64() / disk.update.as_secs_f64()
        );
    }
    println!(
        "(by node / by server: data files copied into insert segments during the initial load)"
    );
    Ok(())
}

async fn measure(side: &Side, args: &Args, admin_url: &str) -> anyhow::Result<Measured> {
    let db = Database::create(admin_url).await?;
    let mut settings = node_settings(&db.url, std::path::Path::new("unused"));
    settings.change_store = side.change_store.clone();
    settings.change_store_options = side.change_store_options.clone();
    let stop = CancellationToken::new();
    let node = icefeed::app::start(settings, stop.clone()).await?;
    let base = format!("http://{}", node.addr);
    let result = measure_on(side, args, &base).await;
    node.shutdown().await?;
    db.drop().await?;
    result
}

async fn measure_on(side: &Side, args: &Args, base: &str) -> anyhow::Result<Measured> {
    let client = reqwest::Client::new();
    let mut registration = side.registration.clone();
    registration["poll_interval_ms"] = json!(100);
    registration["identifier_columns"] = json!(["trip_id"]);
    let table =
        iceberg::Catalog::load_table(side.catalog.as_ref(), side.table.identifier()).await?;
    let head = table
        .metadata()
        .current_snapshot_id()
        .context("no snapshot")?;
    let copied_before = Copied::now(&client, base).await?;
    let id = register(&client, base, &registration).await?;
    let load = wait_checkpoint(&client, base, &id, head).await?;
    let copied = Copied::now(&client, base).await?.since(&copied_before);
    println!("  initial load {:.2}s", load.as_secs_f64());

    // A subscription after the head counts the update's events.
    let name = format!("bench-{id}");
    let created = client
        .post(format!("{base}/v1/subscriptions"))
        .json(&json!({"name": name, "tables": [id], "start": {"snapshot_id": head}}))
        .send()
        .await?;
    if !created.status().is_success() {
        bail!("subscription: {}", created.text().await?);
    }
    let files = live_data_files(&table).await?;
    let plan = plan_scattered(&files, args.changed)?;
    let (after, _) = commit_plan(side.catalog.as_ref(), &table, &plan, Kind::Update).await?;
    let snapshot = after
        .metadata()
        .current_snapshot_id()
        .context("no snapshot")?;
    let update = wait_checkpoint(&client, base, &id, snapshot).await?;
    println!("  scattered update {:.2}s", update.as_secs_f64());
    let updates = count_events(&client, base, &name).await?;
    let check = if updates == args.changed {
        format!("ok ({updates} updates)")
    } else {
        format!(
            "MISMATCH: {updates} events, expected {} updates",
            args.changed
        )
    };
    Ok(Measured {
        load,
        copied,
        update,
        check,
    })
}

/// Events of the subscription `name` that are updates, paging to the end.
async fn count_events(client: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<u64> {
    let (mut updates, mut after): (u64, Option<String>) = (0, None);
    loop {
        let mut request = client
            .get(format!("{base}/v1/subscriptions/{name}/events"))
            .query(&[("limit", "10000")]);
        if let Some(cursor) = &after {
            request = request.query(&[("after", cursor)]);
        }
        let page: Value = request.send().await?.error_for_status()?.json().await?;
        let events = page["events"].as_array().context("events")?;
        updates += events.iter().filter(|e| e["op"] == "update").count() as u64;
        after = page["next"].as_str().map(str::to_string);
        if page["more"] != true || events.is_empty() {
            return Ok(updates);
        }
    }
}

/// Bytes of data files copied into insert segments so far, by who moved them.
struct Copied {
    node: u64,
    server: u64,
}

impl Copied {
    async fn now(client: &reqwest::Client, base: &str) -> anyhow::Result<Self> {
        let text = metrics_text(client, base).await?;
        let by = |who: &str| {
            let series = format!("icefeed_insert_bytes_copied_total{{by=\"{who}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        Ok(Self {
            node: by("node"),
            server: by("server"),
        })
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            node: self.node - before.node,
            server: self.server - before.server,
        }
    }
}

/// Runs one `weed shell` command against the S3 server's master; a failure whose
/// message contains `harmless` (when not empty) is none.
fn weed_shell(command: &str, harmless: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let weed = match std::env::var("ICEFEED_BENCH_WEED") {
        Ok(weed) => weed,
        Err(_) => {
            let out = std::process::Command::new("scripts/seaweedfs.sh")
                .arg("--binary")
                .output()?;
            String::from_utf8(out.stdout)?.trim().to_string()
        }
    };
    let mut child = std::process::Command::new(weed)
        .args(["shell", "-master=127.0.0.1:9333"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("weed shell")?;
    writeln!(child.stdin.take().context("stdin")?, "{command}")?;
    let out = child.wait_with_output()?;
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && (harmless.is_empty() || !said.contains(harmless)) {
        bail!("weed shell {command:?}: {said}");
    }
    Ok(())
}

/// Deletes everything the benchmark wrote below `prefix` of `bucket`.
async fn remove_prefix(endpoint: &str, bucket: &str, prefix: &str) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let url = url::Url::parse(&format!("s3://{bucket}"))?;
    let (store, _) = object_store::parse_url_opts(&url, store_options(endpoint))?;
    let store: std::sync::Arc<dyn ObjectStore> = std::sync::Arc::from(store);
    let paths = store
        .list(Some(&object_store::path::Path::from(prefix)))
        .map_ok(|meta| meta.location)
        .boxed();
    let deleted: Vec<_> = store.delete_stream(paths).try_collect().await?;
    println!(
        "removed {} objects below s3://{bucket}/{prefix}",
        deleted.len()
    );
    Ok(())
}
