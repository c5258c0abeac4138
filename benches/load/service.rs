//! The service phases: a node on a fresh database, the initial export of the table,
//! paging through its feed as JSON, NDJSON and Arrow, and the streaming phases of
//! [`crate::delivery`].

use std::time::{Duration, Instant};

use crate::body::BodyCheck;
use crate::database::{Database, node_settings};
use anyhow::{Context, bail};
use icefeed::api::pages::{ARROW_STREAM, COUNT_HEADER, MORE_HEADER, NDJSON, NEXT_CURSOR_HEADER};
use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::delivery::{self, Delivery, DeliveryPlan};
use crate::generate::BenchTable;

/// Events pulled before the timed pulls.
const WARM_UP_EVENTS: u64 = 500_000;
const CHECKPOINT_POLL: Duration = Duration::from_millis(20);
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(3600);

/// What the service phases measured.
pub struct Outcome {
    /// From sending the registration to seeing the checkpoint.
    pub initial_load: Duration,
    /// Bytes the export copied into the change store.
    pub initial_load_bytes: u64,
    pub pulls: Vec<Pull>,
    /// The streaming phases.
    pub delivery: Delivery,
}

/// The representation a pull asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    Json,
    Ndjson,
    Arrow,
}

impl Wire {
    /// Events per page of the pull phases: the largest page the benchmark's node (of
    /// default API settings) answers in this representation.
    pub fn page_limit(self) -> u64 {
        let api = icefeed::config::ApiSettings::default();
        u64::from(match self {
            Wire::Json | Wire::Ndjson => api.max_limit,
            Wire::Arrow => api.max_arrow_limit,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Wire::Json => "JSON",
            Wire::Ndjson => "NDJSON",
            Wire::Arrow => "Arrow",
        }
    }
}

/// One pass over the feed.
pub struct Pull {
    pub format: &'static str,
    /// The `limit` of its pages.
    pub limit: u64,
    pub events: u64,
    pub pages: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Of `elapsed`, the time the benchmark spent checking bodies (JSON and NDJSON events
    /// counted, Arrow IPC read).
    pub client: Duration,
    pub last_more: bool,
    /// "ok" or what did not add up.
    pub check: String,
}

/// Runs the node on a database of its own, always dropping the database afterwards.
pub async fn run(
    admin_url: &str,
    table: &BenchTable,
    pulls: &[Wire],
    pull_events: u64,
    plan: &DeliveryPlan,
) -> anyhow::Result<Outcome> {
    let db = Database::create(admin_url).await?;
    let result = run_node(&db.url, table, pulls, pull_events, plan).await;
    let dropped = db.drop().await;
    let outcome = result?;
    dropped?;
    Ok(outcome)
}

async fn run_node(
    database_url: &str,
    table: &BenchTable,
    wires: &[Wire],
    pull_events: u64,
    plan: &DeliveryPlan,
) -> anyhow::Result<Outcome> {
    let changes = tempfile::Builder::new()
        .prefix("icefeed-bench-changes")
        .tempdir()?;
    let settings = node_settings(database_url, changes.path());
    let stop = CancellationToken::new();
    let node = icefeed::app::start(settings, stop.clone()).await?;
    let base = format!("http://{}", node.addr);
    let client = reqwest::Client::new();
    let result = async {
        let (id, initial_load) = initial_load(&client, &base, &table.registration()).await?;
        println!(
            "initial load: {} rows in {:.2}s",
            table.rows,
            initial_load.as_secs_f64()
        );
        let initial_load_bytes = dir_size(changes.path())?;
        // Untimed pages first, as the floors are timed warm: a fresh process's first
        // pages pay for growing its allocator's heap and for cold caches.
        if let Some(&wire) = wires.first() {
            let events = WARM_UP_EVENTS.min(pull_events);
            let warm_up = pull(&client, &base, &id, events, table.rows, wire).await?;
            anyhow::ensure!(warm_up.check == "ok", "warm-up pull: {}", warm_up.check);
        }
        let mut pulls = Vec::new();
        for &wire in wires {
            let pull = pull(&client, &base, &id, pull_events, table.rows, wire).await?;
            println!(
                "pull {}: {} events in {:.2}s",
                pull.format,
                pull.events,
                pull.elapsed.as_secs_f64()
            );
            pulls.push(pull);
        }
        let delivery = delivery::run(&client, node.addr, &id, table.rows, plan).await?;
        anyhow::Ok(Outcome {
            initial_load,
            initial_load_bytes,
            pulls,
            delivery,
        })
    }
    .await;
    node.shutdown().await?;
    result
}

/// Registers a table (`registration`, the body of `POST /v1/tables`) and waits for its
/// first checkpoint; returns the id and the time.
pub async fn initial_load(
    client: &reqwest::Client,
    base: &str,
    registration: &Value,
) -> anyhow::Result<(String, Duration)> {
    let started = Instant::now();
    let response = client
        .post(format!("{base}/v1/tables"))
        .json(registration)
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if status != StatusCode::CREATED {
        bail!("registration answered {status}: {body}");
    }
    let id = body["id"]
        .as_str()
        .context("registration without id")?
        .to_string();
    loop {
        let view: Value = client
            .get(format!("{base}/v1/tables/{id}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if !view["checkpoint"].is_null() {
            return Ok((id, started.elapsed()));
        }
        if view["state"] == "error" {
            bail!("the table went to the error state: {}", view["last_error"]);
        }
        if started.elapsed() > CHECKPOINT_TIMEOUT {
            bail!("no checkpoint after {CHECKPOINT_TIMEOUT:?}: {view}");
        }
        tokio::time::sleep(CHECKPOINT_POLL).await;
    }
}

/// Pages through the feed from its start, up to `max` events, checking each body against
/// its headers as it arrives (see [`BodyCheck`]); checks that it holds `table_rows` events (all
/// inserts: an export).
pub async fn pull(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    max: u64,
    table_rows: u64,
    wire: Wire,
) -> anyhow::Result<Pull> {
    let url = format!("{base}/v1/tables/{id}/changes");
    let page_limit = wire.page_limit();
    let mut after: Option<String> = None;
    let (mut events, mut pages, mut bytes, mut last_more) = (0u64, 0u64, 0u64, true);
    let mut problems = Vec::new();
    let mut checking = Duration::ZERO;
    let started = Instant::now();
    while events < max {
        let limit = page_limit.min(max - events);
        let mut request = client.get(&url).query(&[("limit", limit)]);
        if let Some(cursor) = &after {
            request = request.query(&[("after", cursor)]);
        }
        match wire {
            Wire::Json => {}
            Wire::Ndjson => request = request.header(ACCEPT, NDJSON),
            Wire::Arrow => request = request.header(ACCEPT, ARROW_STREAM),
        }
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            bail!("page request answered {status}: {}", response.text().await?);
        }
        let header = |name: &str| crate::harness::page_header(&response, name, wire.name());
        let next = header(NEXT_CURSOR_HEADER)?;
        let more = header(MORE_HEADER)? == "true";
        let announced: u64 = header(COUNT_HEADER)?.parse()?;
        let mut body = BodyCheck::new(wire, pages == 0);
        let mut response = response;
        while let Some(chunk) = response.chunk().await? {
            let reading = Instant::now();
            body.feed(chunk)?;
            checking += reading.elapsed();
        }
        let page_bytes = body.bytes();
        let count = body.finish(&next, more)?;
        if count != announced {
            problems.push(format!(
                "page {} decoded {count} events, {COUNT_HEADER} said {announced}",
                pages + 1
            ));
        }
        pages += 1;
        events += count;
        bytes += page_bytes;
        last_more = more;
        after = Some(next);
        if count > limit {
            problems.push(format!(
                "page {pages} held {count} events for limit {limit}"
            ));
        }
        if count < limit {
            if more {
                problems.push(format!("page {pages} was short ({count}) yet more=true"));
            }
            break;
        }
        if !more {
            break;
        }
    }
    let elapsed = started.elapsed();
    let expected = max.min(table_rows);
    if events != expected {
        problems.push(format!("read {events} events, expected {expected}"));
    }
    if last_more != (events < table_rows) {
        problems.push(format!(
            "last page more={last_more} after {events} of {table_rows} events"
        ));
    }
    Ok(Pull {
        format: wire.name(),
        limit: page_limit,
        events,
        pages,
        bytes,
        elapsed,
        client: checking,
        last_more,
        check: if problems.is_empty() {
            "ok".into()
        } else {
            problems.join("; ")
        },
    })
}

/// Bytes of all files below `dir`.
fn dir_size(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
