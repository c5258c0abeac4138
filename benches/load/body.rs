//! Checking a page's body as it arrives, chunk by chunk, as a streaming consumer reads
//! it: Arrow IPC decoded message by message (pyarrow's `open_stream` on a socket), JSON
//! and NDJSON events counted as their bytes come in. Collecting a body into one buffer
//! first, then reading it, copies every byte twice more on the cores the node runs on.

use anyhow::Context;
use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamDecoder;
use bytes::Bytes;
use serde_json::Value;

use crate::service::Wire;

/// Where a JSON page's envelope opens.
const JSON_OPENING: &[u8] = b"{\"events\":[";
/// The opening member of every JSON event, which no string holds unescaped (the benchmark
/// table has no nested `position` field).
const JSON_EVENT: &[u8] = b"{\"position\":\"";

/// Bytes of a body's end kept: more than a JSON page's closing, with its cursor.
const TAIL: usize = 1024;

/// What one page's body held, read as it arrived.
pub struct BodyCheck {
    reader: Reader,
    events: u64,
    bytes: u64,
    /// The first page's body, parsed whole (JSON) or up to its first line (NDJSON).
    first: Option<Vec<u8>>,
}

/// What reading a body of one representation keeps between its chunks.
enum Reader {
    Arrow(StreamDecoder),
    Ndjson,
    Json {
        /// The body's first bytes: the envelope's opening.
        head: Vec<u8>,
        /// The body's last bytes: the envelope's closing, and an event's opening cut by
        /// a chunk's end.
        tail: Vec<u8>,
    },
}

impl BodyCheck {
    /// A check of a body in `wire`; the first page of a pull is parsed, not only counted.
    pub fn new(wire: Wire, first_page: bool) -> Self {
        let reader = match wire {
            Wire::Arrow => Reader::Arrow(StreamDecoder::new()),
            Wire::Ndjson => Reader::Ndjson,
            Wire::Json => Reader::Json {
                head: Vec::new(),
                tail: Vec::new(),
            },
        };
        Self {
            reader,
            events: 0,
            bytes: 0,
            first: first_page.then(Vec::new),
        }
    }

    /// Bytes of the body so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: Bytes) -> anyhow::Result<()> {
        self.bytes += chunk.len() as u64;
        match &mut self.reader {
            Reader::Arrow(decoder) => {
                // Every row of the benchmark table is an insert: one row per event.
                let mut buffer = Buffer::from(chunk);
                while !buffer.is_empty() {
                    if let Some(batch) = decoder.decode(&mut buffer)? {
                        self.events += batch.num_rows() as u64;
                    }
                }
            }
            Reader::Ndjson => {
                if let Some(first) = &mut self.first
                    && !first.contains(&b'\n')
                {
                    first.extend_from_slice(&chunk);
                }
                self.events += count_newlines(&chunk);
            }
            Reader::Json { head, tail } => {
                if let Some(first) = &mut self.first {
                    first.extend_from_slice(&chunk);
                }
                if head.len() < JSON_OPENING.len() {
                    let wanted = (JSON_OPENING.len() - head.len()).min(chunk.len());
                    head.extend_from_slice(&chunk[..wanted]);
                }
                self.events += count_across(tail, &chunk, JSON_EVENT);
                keep_last(tail, &chunk, TAIL);
            }
        }
        Ok(())
    }

    /// The events the body held, once it ended: its envelope (JSON) checked against the
    /// page's headers, and the first page's first event checked to be an insert.
    pub fn finish(self, next: &str, more: bool) -> anyhow::Result<u64> {
        match self.reader {
            Reader::Arrow(mut decoder) => decoder.finish()?,
            Reader::Ndjson => {
                if let Some(first) = self.first.filter(|body| !body.is_empty()) {
                    let line = first.split(|b| *b == b'\n').next().unwrap_or_default();
                    is_insert(&serde_json::from_slice(line)?)?;
                }
            }
            Reader::Json { head, tail } => {
                let closing = format!("],\"next\":\"{next}\",\"more\":{more}}}");
                anyhow::ensure!(
                    head == JSON_OPENING && tail.ends_with(closing.as_bytes()),
                    "a JSON page whose envelope does not match its headers"
                );
                if let Some(first) = self.first {
                    let page: Value = serde_json::from_slice(&first)?;
                    let events = page["events"]
                        .as_array()
                        .context("a JSON page without events")?;
                    anyhow::ensure!(
                        events.len() as u64 == self.events,
                        "{} events counted, {} parsed",
                        self.events,
                        events.len()
                    );
                    if let Some(event) = events.first() {
                        is_insert(event)?;
                    }
                }
            }
        }
        Ok(self.events)
    }
}

/// Checks a page's first event: every event of the benchmark's export is an insert.
fn is_insert(event: &Value) -> anyhow::Result<()> {
    anyhow::ensure!(event["op"] == "insert", "first event: {event}");
    Ok(())
}

/// Occurrences of `pattern` in `chunk`, and those that begin in `before` (the bytes just
/// before it, at most a few hundred) and end in `chunk`.
fn count_across(before: &[u8], chunk: &[u8], pattern: &[u8]) -> u64 {
    let reach = (pattern.len() - 1).min(before.len());
    let mut seam = before[before.len() - reach..].to_vec();
    seam.extend_from_slice(&chunk[..(pattern.len() - 1).min(chunk.len())]);
    let across = memchr::memmem::find_iter(&seam, pattern).count();
    (across + memchr::memmem::find_iter(chunk, pattern).count()) as u64
}

/// Keeps the last `n` bytes of what `kept` was followed by `chunk`.
fn keep_last(kept: &mut Vec<u8>, chunk: &[u8], n: usize) {
    if chunk.len() >= n {
        kept.clear();
        kept.extend_from_slice(&chunk[chunk.len() - n..]);
    } else {
        kept.extend_from_slice(chunk);
        let excess = kept.len().saturating_sub(n);
        kept.drain(..excess);
    }
}

/// Newlines in `body`, counted 255 bytes at a time in a byte the compiler vectorizes.
fn count_newlines(body: &[u8]) -> u64 {
    body.chunks(255)
        .map(|chunk| {
            let n = chunk
                .iter()
                .fold(0u8, |n, &b| n.wrapping_add(u8::from(b == b'\n')));
            u64::from(n)
        })
        .sum()
}
