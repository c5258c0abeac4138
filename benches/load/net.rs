//! One range of a table's feed read two ways, as NDJSON pages of [`PAGE_LIMIT`] events
//! counted by op as a client would: every per-snapshot event, and the net changes of
//! the range (`?net=true`: at most one event per key), whose first request starts their
//! computation. Each pass also keeps its pages' latencies and the process's peak RSS
//! (node and benchmark).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use icefeed::api::pages::{COUNT_HEADER, MORE_HEADER, NDJSON, NEXT_CURSOR_HEADER};
use memchr::memmem;
use reqwest::StatusCode;
use reqwest::header::ACCEPT;

use crate::harness::{page_header, reset_peak_rss, status_kib};

/// Events per page.
pub const PAGE_LIMIT: u64 = 10_000;
/// `wait` of the requests that start or await a computation: the node's maximum.
const NET_WAIT: u64 = 60;
const NET_TIMEOUT: Duration = Duration::from_secs(3600);
/// The ops an event may have, in the order [`count_ops`] counts them.
const OPS: [&str; 3] = ["insert", "update", "delete"];

/// A pass over a range, page by page.
#[derive(Default)]
pub struct Read {
    pub events: u64,
    pub pages: u64,
    /// NDJSON bytes received.
    pub bytes: u64,
    pub elapsed: Duration,
    /// Of `elapsed`, the time the benchmark spent counting events by op.
    pub client: Duration,
    pub ops: BTreeMap<&'static str, u64>,
    /// The last page's `next`.
    pub next: String,
    /// Request sent → body received, per page.
    pub latencies: Vec<Duration>,
    /// Peak RSS during the pass.
    pub peak_kib: Option<u64>,
}

impl Read {
    /// Events of `op`.
    pub fn op(&self, op: &str) -> u64 {
        self.ops.get(op).copied().unwrap_or(0)
    }

    /// e.g. "41000000 insert, 100000 update".
    pub fn describe_ops(&self) -> String {
        let ops: Vec<String> = self.ops.iter().map(|(k, v)| format!("{v} {k}")).collect();
        if ops.is_empty() {
            "no events".into()
        } else {
            ops.join(", ")
        }
    }

    /// Page latencies: "p50 …, p99 …, max … ms".
    pub fn describe_latency(&self) -> String {
        let mut ms: Vec<f64> = self
            .latencies
            .iter()
            .map(|l| l.as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
        if ms.is_empty() {
            "no pages".into()
        } else {
            format!(
                "p50 {:.0}, p99 {:.0}, max {:.0} ms",
                at(0.5),
                at(0.99),
                at(1.0)
            )
        }
    }

    /// Counts an NDJSON page answer to a request sent at `sent` in; its `more`.
    async fn add(&mut self, response: reqwest::Response, sent: Instant) -> anyhow::Result<bool> {
        let status = response.status();
        if status != StatusCode::OK {
            bail!("page request answered {status}: {}", response.text().await?);
        }
        let header = |name: &str| page_header(&response, name, "NDJSON");
        let next = header(NEXT_CURSOR_HEADER)?;
        let more = header(MORE_HEADER)? == "true";
        let announced: u64 = header(COUNT_HEADER)?.parse()?;
        let body = response.bytes().await?;
        self.latencies.push(sent.elapsed());
        let counting = Instant::now();
        let mut counts = [0; OPS.len()];
        let count = count_ops(&body, &mut counts)?;
        self.client += counting.elapsed();
        self.pages += 1;
        anyhow::ensure!(
            count == announced && count <= PAGE_LIMIT,
            "page {} held {count} events, {COUNT_HEADER} said {announced}, limit {PAGE_LIMIT}",
            self.pages
        );
        // A page that moves nowhere would be asked for again forever.
        anyhow::ensure!(
            !more || count > 0 || next != self.next,
            "page {} is empty and ends where it started, yet more=true",
            self.pages
        );
        for (op, n) in OPS.into_iter().zip(counts) {
            if n > 0 {
                *self.ops.entry(op).or_insert(0) += n;
            }
        }
        self.events += count;
        self.bytes += body.len() as u64;
        self.next = next;
        Ok(more)
    }
}

/// The net changes of a range: how long until their first page, and the pages.
pub struct Net {
    /// First request → the first page with events (the computation, from the range's
    /// creation).
    pub computed: Duration,
    /// Empty pages before it (each a long poll of `NET_WAIT` that ended first).
    pub pending: u32,
    /// Peak RSS until then.
    pub compute_peak_kib: Option<u64>,
    /// From the first page with events to the last page.
    pub read: Read,
}

fn changes_url(base: &str, id: &str) -> String {
    format!("{base}/v1/tables/{id}/changes")
}

/// Pages through every per-snapshot event from the start of the feed to its end (the
/// last page's `more` is false: nothing commits meanwhile).
pub async fn read_feed(client: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<Read> {
    let url = changes_url(base, id);
    let mut read = Read::default();
    reset_peak_rss();
    let started = Instant::now();
    loop {
        let mut request = client
            .get(&url)
            .header(ACCEPT, NDJSON)
            .query(&[("limit", PAGE_LIMIT)]);
        if read.pages > 0 {
            request = request.query(&[("after", &read.next)]);
        }
        let sent = Instant::now();
        if !read.add(request.send().await?, sent).await? {
            break;
        }
    }
    read.elapsed = started.elapsed();
    read.peak_kib = status_kib("VmHWM:");
    Ok(read)
}

/// Asks for the net changes from the start of the feed to `until` (a feed cursor), with
/// `wait`, and again after the cursor of every empty page that says more are coming (the
/// range is still computed), then follows their cursors until a page's `next` is
/// `until`, the cursor their last page hands back.
pub async fn read_net(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    until: &str,
) -> anyhow::Result<Net> {
    let url = changes_url(base, id);
    let page = |query: &[(&str, &str)]| {
        client
            .get(&url)
            .header(ACCEPT, NDJSON)
            .query(query)
            .query(&[("limit", PAGE_LIMIT), ("wait", NET_WAIT)])
    };
    reset_peak_rss();
    let started = Instant::now();
    let mut pending = 0;
    let mut first = page(&[("net", "true"), ("until", until)]).send().await?;
    loop {
        let header = |name: &str| page_header(&first, name, "NDJSON");
        let (count, more, next) = (
            header(COUNT_HEADER)?,
            header(MORE_HEADER)?,
            header(NEXT_CURSOR_HEADER)?,
        );
        if count != "0" || more != "true" || next == until {
            break;
        }
        pending += 1;
        if started.elapsed() > NET_TIMEOUT {
            bail!("net changes still computing after {NET_TIMEOUT:?}");
        }
        first = page(&[("after", next.as_str())]).send().await?;
    }
    let computed = started.elapsed();
    let compute_peak_kib = status_kib("VmHWM:");
    reset_peak_rss();
    let mut read = Read::default();
    // The first page's latency counts from its answer, after the computation.
    let mut more = read.add(first, Instant::now()).await?;
    while read.next != until {
        anyhow::ensure!(
            more,
            "net pages ended at {} without reaching until={until}",
            read.next
        );
        let sent = Instant::now();
        let response = page(&[("after", read.next.as_str())]).send().await?;
        more = read.add(response, sent).await?;
    }
    read.elapsed = started.elapsed() - computed;
    read.peak_kib = status_kib("VmHWM:");
    Ok(Net {
        computed,
        pending,
        compute_peak_kib,
        read,
    })
}

/// Events of an NDJSON body, each added to `counts` by its op: a line's first `"op":"`
/// is its op's, since only the event's position comes before it.
fn count_ops(body: &[u8], counts: &mut [u64; OPS.len()]) -> anyhow::Result<u64> {
    let finder = memmem::Finder::new(br#""op":""#);
    let mut events = 0;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len())) {
        let line = &body[start..end];
        start = end + 1;
        if line.is_empty() {
            continue;
        }
        let at = finder.find(line).map(|i| i + finder.needle().len());
        let op = at.and_then(|at| {
            let rest = &line[at..];
            let len = memchr::memchr(b'"', rest)?;
            OPS.iter().position(|op| op.as_bytes() == &rest[..len])
        });
        match op {
            Some(i) => counts[i] += 1,
            None => bail!(
                "an event without a known op: {}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            ),
        }
        events += 1;
    }
    Ok(events)
}
