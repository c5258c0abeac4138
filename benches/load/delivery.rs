//! The streaming phases: server-sent events to one consumer and to many consumers of one
//! table at once, and the node's memory while a consumer is stalled behind a backlog.
//!
//! Consumers are reqwest clients that read the stream as a browser's `EventSource`
//! would: split it into events, parse each `data:` line as JSON, and stop after a given
//! number of events (dropping the connection).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use reqwest::StatusCode;
use serde::de::IgnoredAny;
use tokio::io::AsyncWriteExt;

use crate::harness::status_kib;

/// What the streaming phases do.
#[derive(Clone, Debug)]
pub struct DeliveryPlan {
    /// Events the single consumer reads.
    pub sse_events: u64,
    /// `limit` of the streams (events read and sent at a time); `None`: the node's default.
    pub sse_limit: Option<u64>,
    /// Concurrent consumers of the fan-out phase.
    pub consumers: usize,
    /// Events each of them reads.
    pub consumer_events: u64,
    /// How long the stalled consumer stays connected without reading.
    pub stall: Duration,
}

/// What the streaming phases measured.
pub struct Delivery {
    pub single: SseRun,
    pub fan_out: SseRun,
    pub stalled: Stalled,
}

/// Consumers reading the same table's stream at the same time.
pub struct SseRun {
    pub consumers: usize,
    /// From the first request to the last consumer done.
    pub elapsed: Duration,
    pub readers: Vec<Reader>,
}

impl SseRun {
    pub fn events(&self) -> u64 {
        self.readers.iter().map(|r| r.events).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.readers.iter().map(|r| r.bytes).sum()
    }

    /// Time all consumers spent parsing events (they share the node's cores).
    pub fn client(&self) -> Duration {
        self.readers.iter().map(|r| r.client).sum()
    }

    /// Events per second of each consumer, ascending.
    pub fn per_consumer(&self) -> Vec<f64> {
        let mut rates: Vec<f64> = self
            .readers
            .iter()
            .map(|r| r.events as f64 / r.elapsed.as_secs_f64())
            .collect();
        rates.sort_by(f64::total_cmp);
        rates
    }

    /// "ok" or what did not add up.
    pub fn check(&self, expected_each: u64) -> String {
        let short: Vec<String> = self
            .readers
            .iter()
            .enumerate()
            .filter(|(_, r)| r.events != expected_each)
            .map(|(i, r)| format!("consumer {i} read {} events", r.events))
            .collect();
        if short.is_empty() {
            "ok".into()
        } else {
            short.join("; ")
        }
    }
}

/// One consumer's read.
pub struct Reader {
    pub events: u64,
    pub bytes: u64,
    /// From sending the request to the last event wanted.
    pub elapsed: Duration,
    /// Of `elapsed`, the time spent splitting and parsing events.
    pub client: Duration,
}

/// Memory of the process (the node runs in it) around a stalled consumer.
pub struct Stalled {
    /// `VmRSS` just before the stalled consumer connected, in KiB.
    pub idle_kib: u64,
    /// The highest `VmRSS` sampled while it stayed connected without reading, in KiB.
    pub stalled_kib: u64,
    /// The stream's `limit`: the events the node reads and sends at a time.
    pub limit: u64,
    pub held: Duration,
}

/// Runs the streaming phases against the node at `addr` serving table `id`.
pub async fn run(
    client: &reqwest::Client,
    addr: SocketAddr,
    id: &str,
    table_rows: u64,
    plan: &DeliveryPlan,
) -> anyhow::Result<Delivery> {
    let url = format!("http://{addr}/v1/tables/{id}/changes/stream");
    let single = sse(
        client,
        &url,
        plan.sse_limit,
        1,
        plan.sse_events.min(table_rows),
    )
    .await?;
    println!(
        "SSE, 1 consumer: {} events in {:.2}s",
        single.events(),
        single.elapsed.as_secs_f64()
    );
    let fan_out = sse(
        client,
        &url,
        plan.sse_limit,
        plan.consumers,
        plan.consumer_events.min(table_rows),
    )
    .await?;
    println!(
        "SSE, {} consumers: {} events in {:.2}s",
        plan.consumers,
        fan_out.events(),
        fan_out.elapsed.as_secs_f64()
    );
    let stalled = stalled(addr, id, plan.stall).await?;
    Ok(Delivery {
        single,
        fan_out,
        stalled,
    })
}

/// `consumers` streams from the start of the feed at once, each read until `events`.
async fn sse(
    client: &reqwest::Client,
    url: &str,
    limit: Option<u64>,
    consumers: usize,
    events: u64,
) -> anyhow::Result<SseRun> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let mut request = client.get(url);
            if let Some(limit) = limit {
                request = request.query(&[("limit", limit)]);
            }
            tokio::spawn(read_events(request, events))
        })
        .collect();
    let mut readers = Vec::with_capacity(consumers);
    for task in tasks {
        readers.push(task.await??);
    }
    Ok(SseRun {
        consumers,
        elapsed: started.elapsed(),
        readers,
    })
}

/// Reads a stream until it has delivered `wanted` change events, parsing each.
async fn read_events(request: reqwest::RequestBuilder, wanted: u64) -> anyhow::Result<Reader> {
    let started = Instant::now();
    let response = request.send().await?;
    if response.status() != StatusCode::OK {
        bail!(
            "stream answered {}: {}",
            response.status(),
            response.text().await?
        );
    }
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut reader = Reader {
        events: 0,
        bytes: 0,
        elapsed: Duration::ZERO,
        client: Duration::ZERO,
    };
    while reader.events < wanted {
        let chunk = match body.next().await {
            Some(chunk) => chunk?,
            None => bail!("the stream ended after {} events", reader.events),
        };
        reader.bytes += chunk.len() as u64;
        let parsing = Instant::now();
        buffer.extend_from_slice(&chunk);
        let consumed = parse_events(&buffer, wanted - reader.events, &mut reader.events)?;
        buffer.drain(..consumed);
        reader.client += parsing.elapsed();
    }
    reader.elapsed = started.elapsed();
    Ok(reader)
}

/// Parses the complete events at the start of `buffer`, at most `wanted` change events
/// (counted into `events`); returns the bytes consumed.
fn parse_events(buffer: &[u8], wanted: u64, events: &mut u64) -> anyhow::Result<usize> {
    let mut start = 0;
    let mut taken = 0;
    while taken < wanted {
        let Some(len) = memchr::memmem::find(&buffer[start..], b"\n\n") else {
            break;
        };
        let block = &buffer[start..start + len];
        start += len + 2;
        let mut data = None;
        let mut change = false;
        let mut has_id = false;
        for line in block.split(|b| *b == b'\n') {
            if let Some(d) = line.strip_prefix(b"data: ") {
                data = Some(d);
            } else if line == b"event: change" {
                change = true;
            } else if line.starts_with(b"id: ") {
                has_id = true;
            } else if line.starts_with(b"event: ") {
                bail!("unexpected event: {}", String::from_utf8_lossy(block));
            }
        }
        if let (true, Some(data)) = (change, data) {
            anyhow::ensure!(has_id, "a change event without id");
            serde_json::from_slice::<IgnoredAny>(data).context("an event's data")?;
            taken += 1;
        }
    }
    *events += taken;
    Ok(start)
}

/// Opens a stream from the start of the feed (the whole table behind it) with the largest
/// page size, reads nothing, and samples the process's RSS for `hold`.
async fn stalled(addr: SocketAddr, id: &str, hold: Duration) -> anyhow::Result<Stalled> {
    // The node's largest `limit`: the most a stalled consumer may make it hold.
    const LIMIT: u64 = 10_000;
    let idle_kib = status_kib("VmRSS:").context("VmRSS")?;
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "GET /v1/tables/{id}/changes/stream?limit={LIMIT} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await?;
    let mut stalled_kib = idle_kib;
    let started = Instant::now();
    while started.elapsed() < hold {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stalled_kib = stalled_kib.max(status_kib("VmRSS:").context("VmRSS")?);
    }
    drop(socket);
    println!(
        "stalled consumer: RSS {} MiB idle, at most {} MiB over {:.0}s stalled",
        idle_kib / 1024,
        stalled_kib / 1024,
        hold.as_secs_f64()
    );
    Ok(Stalled {
        idle_kib,
        stalled_kib,
        limit: LIMIT,
        held: hold,
    })
}
