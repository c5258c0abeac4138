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
    Arrow(StreamDecoder, Messages),
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
            Wire::Arrow => Reader::Arrow(StreamDecoder::new(), Messages::default()),
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
            Reader::Arrow(decoder, messages) => {
                let mut chunk = &chunk[..];
                while let Some(mut message) = messages.gather(&mut chunk)? {
                    while !message.is_empty() {
                        // Every row of the benchmark table is an insert: one row per event.
                        if let Some(batch) = decoder.decode(&mut message)? {
                            self.events += batch.num_rows() as u64;
                        }
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
            Reader::Arrow(mut decoder, messages) => {
                anyhow::ensure!(
                    messages.gathered.is_empty(),
                    "an Arrow body cut in a message"
                );
                decoder.finish()?
            }
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

/// Arrow IPC messages gathered whole, each into one buffer of its length, before they are
/// decoded. `StreamDecoder` fed chunk by chunk grows its buffer as a message's body comes
/// in and copies the body about twice over; a reader that takes a message's length from
/// its metadata first (pyarrow on a socket) copies it once.
#[derive(Default)]
struct Messages {
    /// The bytes of the message being gathered.
    gathered: Vec<u8>,
    /// Its length, once its metadata is in.
    length: Option<usize>,
}

impl Messages {
    /// Takes bytes off the front of `chunk` until it ends or a message is whole; returns
    /// that message.
    fn gather(&mut self, chunk: &mut &[u8]) -> anyhow::Result<Option<Buffer>> {
        while !chunk.is_empty() {
            let length = self.length()?;
            let (taken, rest) = chunk.split_at((length - self.gathered.len()).min(chunk.len()));
            self.gathered.extend_from_slice(taken);
            *chunk = rest;
            // Whole once its length is known to be no more than what is in.
            if self.gathered.len() == length && self.length()? == length {
                self.length = None;
                return Ok(Some(Buffer::from(std::mem::take(&mut self.gathered))));
            }
        }
        Ok(None)
    }

    /// The length of the message being gathered as far as its bytes so far tell: its
    /// prefix (the continuation marker and its metadata's length), its metadata, then its
    /// body, whose length the metadata holds (the buffer is reserved for it then). A
    /// prefix of metadata length 0 is the end of the stream, whole.
    fn length(&mut self) -> anyhow::Result<usize> {
        const PREFIX: usize = 8;
        if let Some(length) = self.length {
            return Ok(length);
        }
        let Some(metadata) = self.gathered.get(4..PREFIX) else {
            return Ok(PREFIX);
        };
        let metadata = u32::from_le_bytes(metadata.try_into()?) as usize;
        let length = match self.gathered.get(PREFIX..PREFIX + metadata) {
            _ if metadata == 0 => PREFIX,
            None => return Ok(PREFIX + metadata),
            Some(bytes) => {
                let body = arrow::ipc::root_as_message(bytes)
                    .map_err(|e| anyhow::anyhow!("an Arrow message's metadata: {e}"))?
                    .bodyLength();
                PREFIX + metadata + usize::try_from(body)?
            }
        };
        self.gathered.reserve_exact(length - self.gathered.len());
        self.length = Some(length);
        Ok(length)
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
