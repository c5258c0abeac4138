//! Pages of change events: the events after a position, read from the change store and
//! rendered as canonical JSON events.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use chrono::SecondsFormat;

use crate::changelog::key_indexes;
use arrow::array::{Array, AsArray, Int8Array, RecordBatch, StructArray};
use arrow::datatypes::Int8Type;
use iceberg::spec::NestedFieldRef;

use crate::changelog::carryover::Op;
use crate::changes::json::{BoundRecord, JsonOptions, RecordEncoder, write_json_string};
use crate::changes::writer;
use crate::changes::{ChangeStoreError, Position, ReadSchema, SegmentReader};
use crate::store::{SegmentRecord, SourceTable, Store, StoreError, TableId};

/// Segments fetched from the index per round trip.
const SEGMENTS_PER_QUERY: i64 = 64;

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

/// A page of events.
#[derive(Debug)]
pub struct Page {
    /// The encoded events, framed as asked.
    pub body: Vec<u8>,
    /// Number of events in the page.
    pub count: usize,
    /// The position after the last event (the request's position when empty).
    pub next: Position,
    /// Whether more events are published after `next` right now.
    pub more: bool,
}

/// Failures while assembling a page.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The index could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A segment could not be read.
    #[error(transparent)]
    Segment(#[from] ChangeStoreError),
    /// A change set's schema is missing or unreadable.
    #[error("schema {0} of the change set is unavailable: {1}")]
    Schema(i32, String),
    /// A segment holds something other than what icefeed writes.
    #[error("segment {0} is corrupt")]
    Corrupt(String),
    /// Rows could not be encoded.
    #[error("encoding events: {0}")]
    Encode(#[from] crate::changes::json::JsonError),
}

struct SchemaEntry {
    schema: iceberg::spec::Schema,
    read: ReadSchema,
}

/// Parsed schemas by (table, schema id); schemas of published change sets never change.
type SchemaCache = Arc<Mutex<HashMap<(TableId, i32), Arc<SchemaEntry>>>>;

/// Reads pages of any table's feed; cheap to clone.
#[derive(Clone)]
pub struct Feed {
    store: Store,
    reader: SegmentReader,
    schemas: SchemaCache,
}

impl Feed {
    /// A feed over the index in `store` and the segments `reader` reads.
    pub fn new(store: Store, reader: SegmentReader) -> Self {
        Self {
            store,
            reader,
            schemas: Default::default(),
        }
    }

    /// Up to `limit` events of `table` after `after`.
    pub async fn page(
        &self,
        table: &SourceTable,
        after: Position,
        limit: usize,
        options: &JsonOptions,
        framing: Framing,
    ) -> Result<Page, FeedError> {
        let mut page = Page {
            body: Vec::with_capacity(limit.min(1024) * 256),
            count: 0,
            next: after,
            more: false,
        };
        loop {
            let segments = self
                .store
                .segments_after(
                    table.id,
                    page.next.ordinal,
                    page.next.consumed,
                    SEGMENTS_PER_QUERY,
                )
                .await?;
            let exhausted = (segments.len() as i64) < SEGMENTS_PER_QUERY;
            for segment in &segments {
                if page.count == limit {
                    page.more = true;
                    return Ok(page);
                }
                self.read_segment(table, segment, limit, options, framing, &mut page)
                    .await?;
            }
            if page.count == limit {
                page.more = !self
                    .store
                    .segments_after(table.id, page.next.ordinal, page.next.consumed, 1)
                    .await?
                    .is_empty();
                return Ok(page);
            }
            if exhausted {
                return Ok(page);
            }
        }
    }

    async fn read_segment(
        &self,
        table: &SourceTable,
        segment: &SegmentRecord,
        limit: usize,
        options: &JsonOptions,
        framing: Framing,
        page: &mut Page,
    ) -> Result<(), FeedError> {
        let consumed = if segment.ordinal == page.next.ordinal {
            page.next.consumed
        } else {
            0
        };
        let offset = (consumed - segment.first_event).max(0) as usize;
        let take = (segment.event_count as usize - offset).min(limit - page.count);
        let entry = self.schema(table.id, segment.schema_id).await?;
        let size = segment.size_bytes as u64;
        let key = key_indexes(&entry.schema, &table.identifier_columns);
        let fields = entry.schema.as_struct().fields();
        let meta = EventMeta::new(table, segment);
        let mut writer = EventWriter {
            page,
            framing,
            table: table.id,
            meta: &meta,
            ordinal: segment.ordinal,
            index: segment.first_event + offset as i64,
        };
        match segment.layout.as_str() {
            "inserts" => {
                let batches = self
                    .reader
                    .read(&segment.path, size, Some(&entry.read), offset, take)
                    .await?;
                for batch in &batches {
                    let encoder = RecordEncoder::try_new(fields, batch.schema().fields(), options)?;
                    let rows = encoder.bind(batch.columns())?;
                    for row in 0..batch.num_rows() {
                        writer.write(Op::Insert, &key, None, Some((&rows, row)));
                    }
                }
            }
            _ => {
                let batches = self
                    .reader
                    .read(&segment.path, size, None, offset, take)
                    .await?;
                for batch in &batches {
                    let change = ChangeColumns::new(batch, fields, options)?;
                    let before = change.before.bind(change.before_array.columns())?;
                    let after = change.after.bind(change.after_array.columns())?;
                    for row in 0..batch.num_rows() {
                        let op = Op::from_code(change.ops.value(row))
                            .ok_or(FeedError::Corrupt(segment.path.clone()))?;
                        let b = change.before_array.is_valid(row).then_some((&before, row));
                        let a = change.after_array.is_valid(row).then_some((&after, row));
                        writer.write(op, &key, b, a);
                    }
                }
            }
        }
        Ok(())
    }

    async fn schema(&self, table: TableId, schema_id: i32) -> Result<Arc<SchemaEntry>, FeedError> {
        if let Some(entry) = self
            .schemas
            .lock()
            .expect("schema cache")
            .get(&(table, schema_id))
        {
            return Ok(entry.clone());
        }
        let json = self
            .store
            .table_schema(table, schema_id)
            .await?
            .ok_or_else(|| FeedError::Schema(schema_id, "not recorded".into()))?;
        let schema: iceberg::spec::Schema = serde_json::from_value(json)
            .map_err(|e| FeedError::Schema(schema_id, e.to_string()))?;
        let read =
            ReadSchema::new(&schema).map_err(|e| FeedError::Schema(schema_id, e.to_string()))?;
        let entry = Arc::new(SchemaEntry { schema, read });
        self.schemas
            .lock()
            .expect("schema cache")
            .insert((table, schema_id), entry.clone());
        Ok(entry)
    }
}

/// The parts of an event that are the same for every row of a segment, pre-encoded.
struct EventMeta {
    /// The table name as a JSON string.
    table: Vec<u8>,
    /// `,"snapshot_id":…,"sequence_number":…,"committed_at":"…","schema_id":…}`.
    tail: Vec<u8>,
}

impl EventMeta {
    fn new(table: &SourceTable, segment: &SegmentRecord) -> Self {
        let mut name = Vec::new();
        write_json_string(&table.table_name, &mut name);
        let mut tail = Vec::new();
        write!(
            tail,
            ",\"snapshot_id\":{},\"sequence_number\":{},\"committed_at\":\"{}\",\"schema_id\":{}}}",
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

/// The columns of a `changes` segment batch, with encoders for both images.
struct ChangeColumns<'a> {
    ops: &'a Int8Array,
    before_array: &'a StructArray,
    after_array: &'a StructArray,
    before: RecordEncoder,
    after: RecordEncoder,
}

impl<'a> ChangeColumns<'a> {
    fn new(
        batch: &'a RecordBatch,
        fields: &[NestedFieldRef],
        options: &JsonOptions,
    ) -> Result<Self, FeedError> {
        let corrupt = || FeedError::Corrupt("changes segment".into());
        let column = |name| batch.column_by_name(name).ok_or_else(corrupt);
        let ops = column(writer::OP)?
            .as_primitive_opt::<Int8Type>()
            .ok_or_else(corrupt)?;
        let before_array = column(writer::BEFORE)?
            .as_struct_opt()
            .ok_or_else(corrupt)?;
        let after_array = column(writer::AFTER)?.as_struct_opt().ok_or_else(corrupt)?;
        Ok(Self {
            ops,
            before: RecordEncoder::try_new(fields, before_array.fields(), options)?,
            after: RecordEncoder::try_new(fields, after_array.fields(), options)?,
            before_array,
            after_array,
        })
    }
}

/// Appends events to a page, tracking positions.
struct EventWriter<'a> {
    page: &'a mut Page,
    framing: Framing,
    table: TableId,
    meta: &'a EventMeta,
    ordinal: i64,
    /// Events of the change set before the next one.
    index: i64,
}

impl EventWriter<'_> {
    fn write(
        &mut self,
        op: Op,
        key: &[usize],
        before: Option<(&BoundRecord<'_>, usize)>,
        after: Option<(&BoundRecord<'_>, usize)>,
    ) {
        self.index += 1;
        let position = Position {
            ordinal: self.ordinal,
            consumed: self.index,
        };
        let page = &mut *self.page;
        if self.framing == Framing::JsonArray && page.count > 0 {
            page.body.push(b',');
        }
        let out = &mut page.body;
        let cursor = position.to_cursor(self.table);
        if self.framing == Framing::Sse {
            out.extend_from_slice(b"id: ");
            out.extend_from_slice(cursor.as_bytes());
            out.extend_from_slice(b"\nevent: change\ndata: ");
        }
        out.extend_from_slice(b"{\"position\":\"");
        out.extend_from_slice(cursor.as_bytes());
        out.extend_from_slice(b"\",\"op\":\"");
        out.extend_from_slice(op.as_str().as_bytes());
        out.extend_from_slice(b"\",\"table\":");
        out.extend_from_slice(&self.meta.table);
        if let Some((rows, row)) = after.or(before).filter(|_| !key.is_empty()) {
            out.extend_from_slice(b",\"key\":");
            rows.write_fields(row, key, out);
        }
        if let Some((rows, row)) = before {
            out.extend_from_slice(b",\"before\":");
            rows.write_row(row, out);
        }
        if let Some((rows, row)) = after {
            out.extend_from_slice(b",\"after\":");
            rows.write_row(row, out);
        }
        out.extend_from_slice(&self.meta.tail);
        match self.framing {
            Framing::JsonArray => {}
            Framing::Ndjson => out.push(b'\n'),
            // The event is one line of JSON: strings escape their newlines.
            Framing::Sse => out.extend_from_slice(b"\n\n"),
        }
        page.count += 1;
        page.next = position;
    }
}
