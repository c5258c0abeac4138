//! Rendering events as canonical JSON: a JSON array page or NDJSON lines.

use std::io::Write;
use std::ops::Range;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use iceberg::spec::NestedFieldRef;

use super::pull::{EventBatch, EventSink, FeedError, Image};
use crate::change::Op;
use crate::changes::Position;
use crate::changes::json::{BoundRecord, JsonOptions, RecordEncoder, write_json_string};
use crate::store::{SegmentRecord, SourceTable, TableId};

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

/// Turns an event's position in a table's feed into the cursor a consumer sees.
pub type CursorFn<'a> = &'a (dyn Fn(TableId, Position) -> String + Sync);

/// Appends events as canonical JSON to a body.
pub struct JsonSink<'a> {
    body: Vec<u8>,
    count: usize,
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
            framing,
            options,
            cursor,
            meta: None,
            spans: None,
        }
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

impl EventSink for JsonSink<'_> {
    fn write(&mut self, batch: &EventBatch<'_>, rows: &[usize]) -> Result<(), FeedError> {
        let fields = batch.schema.schema.as_struct().fields();
        let before_encoder = encoder(fields, batch.before.as_ref(), self.options)?;
        let after_encoder = encoder(fields, batch.after.as_ref(), self.options)?;
        let before = bind(before_encoder.as_ref(), batch.before.as_ref())?;
        let after = bind(after_encoder.as_ref(), batch.after.as_ref())?;

        let id = (batch.table.id, batch.segment.ordinal);
        if self.meta.as_ref().is_none_or(|(m, _)| *m != id) {
            self.meta = Some((id, EventMeta::new(batch.table, batch.segment)));
        }
        let meta = &self.meta.as_ref().expect("set above").1;
        for &row in rows {
            let b = side(before.as_ref(), row);
            let a = side(after.as_ref(), row);
            let op = batch.op(row)?;
            let cursor = (self.cursor)(batch.table.id, batch.position(row));
            if self.framing == Framing::JsonArray && self.count > 0 {
                self.body.push(b',');
            }
            let out = &mut self.body;
            if self.framing == Framing::Sse {
                out.extend_from_slice(b"id: ");
                out.extend_from_slice(cursor.as_bytes());
                out.extend_from_slice(b"\nevent: change\ndata: ");
            }
            let start = out.len();
            out.extend_from_slice(b"{\"position\":\"");
            out.extend_from_slice(cursor.as_bytes());
            out.extend_from_slice(b"\",\"op\":\"");
            out.extend_from_slice(op.as_str().as_bytes());
            out.extend_from_slice(b"\",\"table\":");
            out.extend_from_slice(&meta.table);
            let mut key = None;
            if let Some(rows) = a.or(b).filter(|_| !batch.key.is_empty()) {
                out.extend_from_slice(b",\"key\":");
                let at = out.len();
                rows.write_fields(row, batch.key, out);
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
                    if batch.whole_rows {
                        rows.write_row(row, out);
                    } else {
                        rows.write_fields(row, batch.columns, out);
                    }
                    *span = Some(at..out.len());
                }
            }
            out.extend_from_slice(&meta.tail);
            if let Some(spans) = &mut self.spans {
                let [before, after] = images;
                spans.push(EventSpans {
                    event: start..self.body.len(),
                    op,
                    table: batch.table.id,
                    key,
                    before,
                    after,
                    sequence_number: batch.segment.sequence_number,
                    push_version: batch.segment.push_version,
                    committed_at: batch.segment.committed_at.trunc_subsecs(3),
                });
            }
            let out = &mut self.body;
            match self.framing {
                Framing::JsonArray => {}
                Framing::Ndjson => out.push(b'\n'),
                // The event is one line of JSON: strings escape their newlines.
                Framing::Sse => out.extend_from_slice(b"\n\n"),
            }
            self.count += 1;
        }
        Ok(())
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
struct EventMeta {
    /// The table name as a JSON string.
    table: Vec<u8>,
    /// `,"snapshot_id":"…","sequence_number":"…","committed_at":"…","schema_id":…}`, the
    /// 64-bit ids as strings (see `int64`).
    tail: Vec<u8>,
}

impl EventMeta {
    fn new(table: &SourceTable, segment: &SegmentRecord) -> Self {
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
