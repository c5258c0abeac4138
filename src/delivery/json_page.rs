//! Rendering events as canonical JSON: a JSON array page or NDJSON lines.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::io::Write;
use std::ops::Range;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use iceberg::spec::NestedFieldRef;

use super::error::FeedError;
use super::events::{EventBatch, EventSink, Image, RenderedSink, RowLineage};
use super::rendered::RenderedChunk;
use crate::change::{Anomaly, Op};
use crate::changes::Position;
use crate::changes::json::{BoundRecord, JsonOptions, RecordEncoder, write_json_string};
use crate::changes::position::CURSOR_LEN;
use crate::store::{SegmentRecord, SourceTable, TableId};

/// Bytes a page reserves ahead for the events it expects, at most.
const RESERVED_AHEAD: usize = 64 << 20;

/// How events are separated in a page body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `{...},{...}`: the inside of a JSON array.
    JsonArray,
    /// `{...}\n{...}\n`: newline-delimited JSON.
    Ndjson,
    /// Server-sent events: `id: <position>\nevent: change\ndata: {...}\n\n`.
    Sse,
}

/// Appends the cursor a consumer sees of an event's position in a table's feed.
pub type CursorFn<'a> = &'a (dyn Fn(TableId, Position, &mut Vec<u8>) + Sync);

/// The [`CursorFn`] of a table's own feed: the position's cursor.
pub fn feed_cursor(table: TableId, position: Position, out: &mut Vec<u8>) {
    position.write_cursor(table, out);
}

/// Appends events as canonical JSON to a body.
pub struct JsonSink<'a> {
    body: Vec<u8>,
    count: usize,
    /// Events the page may hold.
    limit: usize,
    framing: Framing,
    options: &'a JsonOptions,
    cursor: CursorFn<'a>,
    /// The pre-encoded metadata of the last segment written, by (table, ordinal).
    meta: Option<((TableId, i64), EventMeta)>,
    /// Where each event's parts lie, when asked for.
    spans: Option<Vec<EventSpans>>,
}

/// Where the parts of one event lie in the body, and the event's fields a push needs: a
/// push batch makes its bulk items of these instead of parsing the lines it just wrote.
#[derive(Clone, Debug)]
pub struct EventSpans {
    /// The event's JSON object, without framing.
    pub event: Range<usize>,
    pub op: Op,
    pub table: TableId,
    pub key: Option<Range<usize>>,
    pub before: Option<Range<usize>>,
    pub after: Option<Range<usize>>,
    pub sequence_number: i64,
    /// The external version of its change set.
    pub push_version: i64,
    /// As rendered: to the millisecond.
    pub committed_at: DateTime<Utc>,
}

impl<'a> JsonSink<'a> {
    /// An empty page expecting up to `limit` events.
    pub fn new(
        framing: Framing,
        options: &'a JsonOptions,
        cursor: CursorFn<'a>,
        limit: usize,
    ) -> Self {
        Self {
            body: Vec::with_capacity(limit.min(1024) * 256),
            count: 0,
            limit,
            framing,
            options,
            cursor,
            meta: None,
            spans: None,
        }
    }

    /// Starts the body with `prefix` (an envelope's opening, so that closing it costs no
    /// copy of the events).
    pub fn with_prefix(mut self, prefix: &[u8]) -> Self {
        self.body.extend_from_slice(prefix);
        self
    }

    /// Also records where each event's parts lie ([`Self::into_body_and_spans`]).
    pub fn with_spans(mut self) -> Self {
        self.spans = Some(Vec::new());
        self
    }

    /// Events written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The encoded events.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    /// The encoded events and, if recorded, where each one's parts lie.
    pub fn into_body_and_spans(self) -> (Vec<u8>, Vec<EventSpans>) {
        (self.body, self.spans.unwrap_or_default())
    }
}

impl JsonSink<'_> {
    /// Starts an event at `position` of `table`: its framing and `{"position":"…`.
    /// Returns where the event's JSON object starts.
    fn open_event(&mut self, table: TableId, position: Position) -> usize {
        if self.framing == Framing::JsonArray && self.count > 0 {
            self.body.push(b',');
        }
        let out = &mut self.body;
        let mut written = None;
        if self.framing == Framing::Sse {
            out.extend_from_slice(b"id: ");
            let at = out.len();
            (self.cursor)(table, position, out);
            written = Some(at..out.len());
            out.extend_from_slice(b"\nevent: change\ndata: ");
        }
        let start = out.len();
        out.extend_from_slice(b"{\"position\":\"");
        match written {
            Some(cursor) => out.extend_from_within(cursor),
            None => (self.cursor)(table, position, out),
        }
        start
    }

    /// Ends the event begun by [`Self::open_event`], its tail written.
    fn close_event(&mut self) {
        match self.framing {
            Framing::JsonArray => {}
            Framing::Ndjson => self.body.push(b'\n'),
            // The event is one line of JSON: strings escape their newlines.
            Framing::Sse => self.body.extend_from_slice(b"\n\n"),
        }
        self.count += 1;
    }
}

impl EventSink for JsonSink<'_> {
    fn write(&mut self, batch: &EventBatch<'_>, rows: &[usize]) -> Result<(), FeedError> {
        let id = (batch.table.id, batch.segment.ordinal);
        if self.meta.as_ref().is_none_or(|(m, _)| *m != id) {
            self.meta = Some((id, EventMeta::new(batch.table, batch.segment)));
        }
        let meta = self.meta.take().expect("set above");
        let encoders = Encoders::new(batch, self.options)?;
        let tails = encoders.bind(batch, &meta.1)?;
        for &row in rows {
            let op = batch.op(row)?;
            let anomaly = batch.anomaly(row)?;
            let start = self.open_event(batch.table.id, batch.position(row));
            let spans = tails.write(row, op, anomaly, &mut self.body);
            if let Some(all) = &mut self.spans {
                all.push(EventSpans {
                    event: start..self.body.len(),
                    op,
                    table: batch.table.id,
                    key: spans.key,
                    before: spans.before,
                    after: spans.after,
                    sequence_number: batch.segment.sequence_number,
                    push_version: batch.segment.push_version,
                    committed_at: batch.segment.committed_at.trunc_subsecs(3),
                });
            }
            self.close_event();
        }
        self.meta = Some(meta);
        Ok(())
    }

    fn rendered(&mut self) -> Option<&mut dyn RenderedSink> {
        // A push needs the parts of each event, which a shared rendering does not record.
        match self.spans {
            None => Some(self),
            Some(_) => None,
        }
    }
}

impl RenderedSink for JsonSink<'_> {
    fn options(&self) -> JsonOptions {
        *self.options
    }

    fn write_rendered(
        &mut self,
        table: TableId,
        chunk: &RenderedChunk,
        first: Position,
        events: &[usize],
    ) {
        // Each event: its tail, and its framing and cursor (a subscription's is longer).
        let framed = chunk.tail_bytes(events) + events.len() * (2 * CURSOR_LEN + 48);
        // Room for the rest of the page too, at these events' size, so that a page of
        // several chunks is not copied as it grows; not for `limit` wide events, which
        // a page ends before (`sizing::PAGE_STORED_BYTES`).
        let rest = self.limit.saturating_sub(self.count + events.len());
        let ahead = rest * framed.div_ceil(events.len().max(1));
        self.body.reserve(framed + ahead.min(RESERVED_AHEAD));
        for &i in events {
            let position = Position {
                ordinal: first.ordinal,
                consumed: first.consumed + i as i64 + 1,
            };
            self.open_event(table, position);
            self.body.extend_from_slice(chunk.tail(i));
            self.close_event();
        }
    }
}

/// Renders every event of `batch` into `chunk`, each from just after its position.
pub fn render_chunk(
    batch: &EventBatch<'_>,
    options: &JsonOptions,
    meta: &EventMeta,
    chunk: &mut RenderedChunk,
) -> Result<(), FeedError> {
    let encoders = Encoders::new(batch, options)?;
    let tails = encoders.bind(batch, meta)?;
    for row in 0..batch.rows {
        let op = batch.op(row)?;
        let anomaly = batch.anomaly(row)?;
        chunk.push(op, |out| {
            tails.write(row, op, anomaly, out);
        });
    }
    Ok(())
}

/// The JSON encoders of a batch's images.
struct Encoders {
    before: Option<RecordEncoder>,
    after: Option<RecordEncoder>,
}

impl Encoders {
    fn new(batch: &EventBatch<'_>, options: &JsonOptions) -> Result<Self, FeedError> {
        let fields = batch.schema.schema.as_struct().fields();
        Ok(Self {
            before: encoder(fields, batch.before.as_ref(), options)?,
            after: encoder(fields, batch.after.as_ref(), options)?,
        })
    }

    fn bind<'a>(
        &'a self,
        batch: &'a EventBatch<'a>,
        meta: &'a EventMeta,
    ) -> Result<Tails<'a>, FeedError> {
        Ok(Tails {
            before: bind(self.before.as_ref(), batch.before.as_ref())?,
            after: bind(self.after.as_ref(), batch.after.as_ref())?,
            lineage: batch.lineage,
            key: batch.key,
            columns: batch.columns,
            whole_rows: batch.whole_rows,
            meta,
        })
    }
}

/// Writes what follows an event's position: `","op":…,"schema_id":…}`, with
/// `"anomaly":…` before the snapshot's members when the event has one.
struct Tails<'a> {
    before: Option<(BoundRecord<'a>, &'a Image<'a>)>,
    after: Option<(BoundRecord<'a>, &'a Image<'a>)>,
    lineage: [Option<RowLineage<'a>>; 2],
    key: &'a [usize],
    columns: &'a [usize],
    whole_rows: bool,
    meta: &'a EventMeta,
}

/// Where an event's key and images lie in the body.
struct TailSpans {
    key: Option<Range<usize>>,
    before: Option<Range<usize>>,
    after: Option<Range<usize>>,
}

impl Tails<'_> {
    fn write(&self, row: usize, op: Op, anomaly: Option<Anomaly>, out: &mut Vec<u8>) -> TailSpans {
        let b = side(self.before.as_ref(), row);
        let a = side(self.after.as_ref(), row);
        out.extend_from_slice(b"\",\"op\":\"");
        out.extend_from_slice(op.as_str().as_bytes());
        out.extend_from_slice(b"\",\"table\":");
        out.extend_from_slice(&self.meta.table);
        let mut key = None;
        if let Some(rows) = a.or(b).filter(|_| !self.key.is_empty()) {
            out.extend_from_slice(b",\"key\":");
            let at = out.len();
            rows.write_fields(row, self.key, out);
            key = Some(at..out.len());
        }
        let mut images = [None, None];
        for ((name, image), span) in [(&b",\"before\":"[..], b), (&b",\"after\":"[..], a)]
            .into_iter()
            .zip(&mut images)
        {
            if let Some(rows) = image {
                out.extend_from_slice(name);
                let at = out.len();
                if self.whole_rows {
                    rows.write_row(row, out);
                } else {
                    rows.write_fields(row, self.columns, out);
                }
                *span = Some(at..out.len());
            }
        }
        if self.lineage.iter().any(Option::is_some) {
            write_lineage(&self.lineage, row, [b.is_some(), a.is_some()], out);
        }
        if let Some(anomaly) = anomaly {
            out.extend_from_slice(b",\"anomaly\":\"");
            out.extend_from_slice(anomaly.as_str().as_bytes());
            out.push(b'"');
        }
        out.extend_from_slice(&self.meta.tail);
        let [before, after] = images;
        TailSpans { key, before, after }
    }
}

/// Writes `,"lineage":{"before":{"row_id":…,"last_updated_sequence_number":…},"after":…}`
/// for the sides an event has (`present`: before, after), the numbers as strings.
fn write_lineage(
    lineage: &[Option<RowLineage<'_>>; 2],
    row: usize,
    present: [bool; 2],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b",\"lineage\":{");
    let mut first = true;
    for ((name, side), present) in [&b"\"before\":"[..], b"\"after\":"]
        .into_iter()
        .zip(lineage)
        .zip(present)
    {
        if !present {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        out.extend_from_slice(name);
        let [row_id, last_updated] = side.map_or([None, None], |l| l.of(row));
        out.extend_from_slice(b"{\"row_id\":");
        write_int64_string(row_id, out);
        out.extend_from_slice(b",\"last_updated_sequence_number\":");
        write_int64_string(last_updated, out);
        out.push(b'}');
    }
    out.push(b'}');
}

/// A 64-bit integer as a JSON string (see `int64`), or `null`.
fn write_int64_string(value: Option<i64>, out: &mut Vec<u8>) {
    match value {
        Some(v) => write!(out, "\"{v}\"").expect("writing to a Vec"),
        None => out.extend_from_slice(b"null"),
    }
}

fn encoder(
    fields: &[NestedFieldRef],
    image: Option<&Image<'_>>,
    options: &JsonOptions,
) -> Result<Option<RecordEncoder>, FeedError> {
    Ok(image
        .map(|i| RecordEncoder::try_new(fields, i.fields, options))
        .transpose()?)
}

fn bind<'a>(
    encoder: Option<&'a RecordEncoder>,
    image: Option<&'a Image<'a>>,
) -> Result<Option<(BoundRecord<'a>, &'a Image<'a>)>, FeedError> {
    match (encoder, image) {
        (Some(e), Some(i)) => Ok(Some((e.bind(i.columns)?, i))),
        _ => Ok(None),
    }
}

/// The bound rows of an image, if row `row` has it.
fn side<'a, 'b>(
    side: Option<&'b (BoundRecord<'a>, &'a Image<'a>)>,
    row: usize,
) -> Option<&'b BoundRecord<'a>> {
    side.filter(|(_, image)| image.has(row))
        .map(|(bound, _)| bound)
}

/// The parts of an event that are the same for every row of a segment, pre-encoded.
pub struct EventMeta {
    /// The table name as a JSON string.
    table: Vec<u8>,
    /// `,"snapshot_id":"…","sequence_number":"…","committed_at":"…","schema_id":…}`, the
    /// 64-bit ids as strings (see `int64`).
    tail: Vec<u8>,
}

impl EventMeta {
    pub fn new(table: &SourceTable, segment: &SegmentRecord) -> Self {
        let mut name = Vec::new();
        write_json_string(&table.table_name, &mut name);
        let mut tail = Vec::new();
        write!(
            tail,
            ",\"snapshot_id\":\"{}\",\"sequence_number\":\"{}\",\"committed_at\":\"{}\",\"schema_id\":{}}}",
            segment.snapshot_id,
            segment.sequence_number,
            segment
                .committed_at
                .to_rfc3339_opts(SecondsFormat::Millis, true),
            segment.schema_id
        )
        .expect("writing to a Vec");
        Self { table: name, tail }
    }
}
