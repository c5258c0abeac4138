//! Reading a table's feed: the events after a position, read from the change store in
//! feed order, filtered by operation, and handed to a sink that renders them (JSON and
//! NDJSON in [`super::json_page`], Arrow in [`super::arrow_page`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{FieldRef, Int8Type, Int64Type};

use super::json_page::{EventMeta, render_chunk};
use super::rendered::{self, CHUNK_EVENTS, ChunkKey, RenderedCache, RenderedChunk};
use super::selection::{OpSet, Selection};
use crate::change::{Anomaly, Op, table_width};
use crate::changelog::{inherit_lineage, key_indexes};
use crate::changes::json::JsonOptions;
use crate::changes::writer;
use crate::changes::{ChangeStoreError, Position, ReadSchema, SegmentFile, SegmentReader};
use crate::store::{SegmentRecord, SourceTable, Store, StoreError, TableId};
use crate::telemetry::metric::EVENTS_RENDERED;

/// Segments fetched from the index per round trip.
const SEGMENTS_PER_QUERY: i64 = 64;
/// Events one request examines at most: a filter that matches almost nothing still
/// answers promptly, with `more` set and the position advanced past what it skipped.
const SCAN_BUDGET: usize = 1_000_000;
/// Rows read at a time while filtering (a filtered page cannot know how many it needs).
const FILTER_CHUNK: usize = 8192;

/// What to read: up to `limit` events after `after`, as `selection` says.
#[derive(Clone, Copy, Debug)]
pub struct PageRequest<'a> {
    pub after: Position,
    pub limit: usize,
    pub selection: &'a Selection,
}

/// Where a read stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageEnd {
    /// Events handed to the sink.
    pub count: usize,
    /// The position after the last event examined (the request's when nothing was).
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
    /// Rows could not be encoded as JSON.
    #[error("encoding events: {0}")]
    Encode(#[from] crate::changes::json::JsonError),
    /// Rows could not be assembled or encoded as Arrow.
    #[error("encoding Arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A failure of a shared rendering, as another reader met it.
    #[error("{0}")]
    Shared(String),
}

/// An Iceberg schema of published change sets, parsed once.
pub struct SchemaEntry {
    pub schema: iceberg::spec::Schema,
    pub read: ReadSchema,
    /// `read` with the row lineage columns, for `inserts` segments of v3 tables.
    with_lineage: ReadSchema,
}

/// Parsed schemas by (table, schema id); schemas of published change sets never change.
type SchemaCache = Arc<Mutex<HashMap<(TableId, i32), Arc<SchemaEntry>>>>;

/// One side (`before` or `after`) of a run of events: the table's columns.
pub struct Image<'a> {
    pub columns: &'a [ArrayRef],
    pub fields: &'a [FieldRef],
    /// Rows where the side is present; `None` when it is present in every row.
    pub present: Option<&'a NullBuffer>,
}

impl Image<'_> {
    /// Whether row `row` has this side.
    pub fn has(&self, row: usize) -> bool {
        self.present.is_none_or(|n| n.is_valid(row))
    }
}

/// The row lineage (v3) of one side of a run of events.
#[derive(Clone, Copy)]
pub struct RowLineage<'a> {
    pub row_ids: &'a Int64Array,
    pub last_updated: &'a Int64Array,
}

impl RowLineage<'_> {
    /// Row `row`'s id and last-updated sequence number (null where unknown).
    pub fn of(&self, row: usize) -> [Option<i64>; 2] {
        [self.row_ids, self.last_updated].map(|c| c.is_valid(row).then(|| c.value(row)))
    }
}

/// A run of consecutive events of one segment, as read.
pub struct EventBatch<'a> {
    pub table: &'a SourceTable,
    pub segment: &'a SegmentRecord,
    pub schema: &'a SchemaEntry,
    /// Indexes of the identifier columns in the schema's top-level fields.
    pub key: &'a [usize],
    /// Indexes of the selected columns in the schema's top-level fields.
    pub columns: &'a [usize],
    /// Whether `columns` is every column in order.
    pub whole_rows: bool,
    /// Index in the change set (0-based) of row 0.
    pub first: i64,
    pub rows: usize,
    /// Operation codes; `None` in `inserts` segments.
    ops: Option<&'a Int8Array>,
    /// Anomaly codes; `None` in segments without anomalies.
    anomalies: Option<&'a Int8Array>,
    pub before: Option<Image<'a>>,
    pub after: Option<Image<'a>>,
    /// Row lineage of the `before` and `after` sides, for tables of format version 3.
    pub lineage: [Option<RowLineage<'a>>; 2],
}

impl<'a> EventBatch<'a> {
    fn new(
        head: BatchHead<'a>,
        first: i64,
        batch: &'a RecordBatch,
        inserts: bool,
    ) -> Result<Self, FeedError> {
        let corrupt = || FeedError::Corrupt(head.segment.path.clone());
        let int64 =
            |column: &'a ArrayRef| column.as_primitive_opt::<Int64Type>().ok_or_else(corrupt);
        let (ops, anomalies, before, after, lineage) = if inserts {
            let width = table_width(batch.schema_ref());
            let after = Image {
                columns: &batch.columns()[..width],
                fields: &batch.schema_ref().fields()[..width],
                present: None,
            };
            let lineage = match &batch.columns()[width..] {
                [row_ids, last_updated] => Some(RowLineage {
                    row_ids: int64(row_ids)?,
                    last_updated: int64(last_updated)?,
                }),
                _ => None,
            };
            (None, None, None, Some(after), [None, lineage])
        } else {
            let column = |name| batch.column_by_name(name).ok_or_else(corrupt);
            let lineage = |[row_ids, last_updated]: [&str; 2]| -> Result<_, FeedError> {
                match (
                    batch.column_by_name(row_ids),
                    batch.column_by_name(last_updated),
                ) {
                    (Some(r), Some(u)) => Ok(Some(RowLineage {
                        row_ids: int64(r)?,
                        last_updated: int64(u)?,
                    })),
                    _ => Ok(None),
                }
            };
            let image = |name| -> Result<Image<'a>, FeedError> {
                let side = column(name)?.as_struct_opt().ok_or_else(corrupt)?;
                Ok(Image {
                    columns: side.columns(),
                    fields: side.fields(),
                    present: side.nulls(),
                })
            };
            let ops = column(writer::OP)?
                .as_primitive_opt::<Int8Type>()
                .ok_or_else(corrupt)?;
            let anomalies = match batch.column_by_name(writer::ANOMALY) {
                Some(c) => Some(c.as_primitive_opt::<Int8Type>().ok_or_else(corrupt)?),
                None => None,
            };
            (
                Some(ops),
                anomalies,
                Some(image(writer::BEFORE)?),
                Some(image(writer::AFTER)?),
                [
                    lineage(writer::BEFORE_LINEAGE)?,
                    lineage(writer::AFTER_LINEAGE)?,
                ],
            )
        };
        Ok(Self {
            table: head.table,
            segment: head.segment,
            schema: head.schema,
            key: head.key,
            columns: head.columns,
            whole_rows: head.whole_rows,
            first,
            rows: batch.num_rows(),
            ops,
            anomalies,
            before,
            after,
            lineage,
        })
    }

    /// The operation of row `row`.
    pub fn op(&self, row: usize) -> Result<Op, FeedError> {
        match self.ops {
            None => Ok(Op::Insert),
            Some(ops) => Op::from_code(ops.value(row))
                .ok_or_else(|| FeedError::Corrupt(self.segment.path.clone())),
        }
    }

    /// What is anomalous about the event in row `row`, if anything.
    pub fn anomaly(&self, row: usize) -> Result<Option<Anomaly>, FeedError> {
        match self.anomalies {
            Some(codes) if codes.is_valid(row) => Anomaly::from_code(codes.value(row))
                .map(Some)
                .ok_or_else(|| FeedError::Corrupt(self.segment.path.clone())),
            _ => Ok(None),
        }
    }

    /// The position just after the event in row `row`.
    pub fn position(&self, row: usize) -> Position {
        Position {
            ordinal: self.segment.ordinal,
            consumed: self.first + row as i64 + 1,
        }
    }
}

/// Chunk `index` of a segment of `total` events: its first event and its length.
fn chunk_span(index: usize, total: usize) -> (usize, usize) {
    let first = index * CHUNK_EVENTS;
    (first, CHUNK_EVENTS.min(total - first))
}

/// The key of chunk `index` of `head`'s segment, rendered with `options` for `request`.
fn chunk_key(
    head: BatchHead<'_>,
    index: usize,
    options: JsonOptions,
    request: &PageRequest<'_>,
) -> ChunkKey {
    ChunkKey {
        table: head.table.id,
        segment: head.segment.path.clone(),
        index,
        options,
        columns: request.selection.columns.clone(),
    }
}

/// What is the same for every batch of a segment.
#[derive(Clone, Copy)]
struct BatchHead<'a> {
    table: &'a SourceTable,
    segment: &'a SegmentRecord,
    schema: &'a SchemaEntry,
    key: &'a [usize],
    columns: &'a [usize],
    whole_rows: bool,
}

/// Renders events into a page.
pub trait EventSink: Send {
    /// Whether events of `segment` of `table` may join the page. A sink that holds one
    /// schema per page refuses a segment of another table or schema, ending the page
    /// before it.
    fn accepts(&mut self, _table: TableId, _segment: &SegmentRecord) -> bool {
        true
    }

    /// Appends the events in rows `rows` (ascending) of `batch`.
    fn write(&mut self, batch: &EventBatch<'_>, rows: &[usize]) -> Result<(), FeedError>;

    /// This sink as one that takes events rendered as JSON and shared with other readers,
    /// if it can; it is then given those instead of batches.
    fn rendered(&mut self) -> Option<&mut dyn RenderedSink> {
        None
    }
}

/// A sink that takes events rendered once for every reader ([`RenderedChunk`]).
pub trait RenderedSink: Send {
    /// How the events are to be rendered.
    fn options(&self) -> JsonOptions;

    /// Appends events `events` (ascending indexes) of `chunk`, whose event 0 is the one
    /// just after `first` in `table`'s feed.
    fn write_rendered(
        &mut self,
        table: TableId,
        chunk: &RenderedChunk,
        first: Position,
        events: &[usize],
    );
}

/// Reads pages of any table's feed; cheap to clone.
#[derive(Clone)]
pub struct Feed {
    store: Store,
    reader: SegmentReader,
    schemas: SchemaCache,
    rendered: RenderedCache,
}

impl Feed {
    /// A feed over the index in `store` and the segments `reader` reads.
    pub fn new(store: Store, reader: SegmentReader) -> Self {
        Self {
            store,
            reader,
            schemas: Default::default(),
            rendered: RenderedCache::new(rendered::CACHE_BYTES),
        }
    }

    /// The coordination store the feed reads its index from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Hands up to `request.limit` events of `table` to `sink`.
    pub async fn read(
        &self,
        table: &SourceTable,
        request: &PageRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<PageEnd, FeedError> {
        let mut end = PageEnd {
            count: 0,
            next: request.after,
            more: false,
        };
        let mut scanned = 0usize;
        loop {
            let segments = self
                .store
                .segments_after(
                    table.id,
                    end.next.ordinal,
                    end.next.consumed,
                    SEGMENTS_PER_QUERY,
                )
                .await?;
            let exhausted = (segments.len() as i64) < SEGMENTS_PER_QUERY;
            for segment in &segments {
                if end.count == request.limit
                    || scanned >= SCAN_BUDGET
                    || !sink.accepts(table.id, segment)
                {
                    end.more = true;
                    return Ok(end);
                }
                scanned += self
                    .read_segment(table, segment, request, sink, &mut end)
                    .await?;
            }
            if end.count == request.limit || scanned >= SCAN_BUDGET {
                end.more = !self
                    .store
                    .segments_after(table.id, end.next.ordinal, end.next.consumed, 1)
                    .await?
                    .is_empty();
                return Ok(end);
            }
            if exhausted {
                return Ok(end);
            }
        }
    }

    /// Reads the events of `segment` after `end.next`; returns how many it examined.
    async fn read_segment(
        &self,
        table: &SourceTable,
        segment: &SegmentRecord,
        request: &PageRequest<'_>,
        sink: &mut dyn EventSink,
        end: &mut PageEnd,
    ) -> Result<usize, FeedError> {
        let consumed = if segment.ordinal == end.next.ordinal {
            end.next.consumed
        } else {
            0
        };
        let total = segment.event_count as usize;
        let mut offset = (consumed - segment.first_event).max(0) as usize;
        let start = offset;
        let advance = |offset: usize| Position {
            ordinal: segment.ordinal,
            consumed: segment.first_event + offset as i64,
        };
        let ops = request.selection.ops;
        let inserts = segment.layout == "inserts";
        if inserts && !ops.contains(Op::Insert) {
            end.next = advance(total);
            return Ok(total - start);
        }

        let entry = self.schema(table.id, segment.schema_id).await?;
        let fields = entry.schema.as_struct().fields();
        let key = key_indexes(&entry.schema, table)
            .map_err(|reason| FeedError::Schema(segment.schema_id, reason))?;
        let columns = request.selection.column_indexes(fields);
        let head = BatchHead {
            table,
            segment,
            schema: &entry,
            key: &key,
            whole_rows: request.selection.columns.is_none(),
            columns: &columns,
        };
        if let Some(rendered) = sink.rendered() {
            return self
                .read_rendered(head, &entry, request, rendered, end, offset)
                .await;
        }
        let filtered = ops != OpSet::ALL;
        let mut selected = Vec::new();
        while offset < total && end.count < request.limit && offset - start < SCAN_BUDGET {
            let wanted = request.limit - end.count;
            let chunk = if filtered {
                wanted.max(FILTER_CHUNK)
            } else {
                wanted
            }
            .min(total - offset);
            let batches = self.read_rows(segment, &entry, offset, chunk).await?;
            if batches.iter().all(|b| b.num_rows() == 0) {
                return Err(FeedError::Corrupt(segment.path.clone()));
            }
            for batch in &batches {
                let events =
                    EventBatch::new(head, segment.first_event + offset as i64, batch, inserts)?;
                selected.clear();
                let mut examined = 0;
                while examined < events.rows && end.count + selected.len() < request.limit {
                    if ops.contains(events.op(examined)?) {
                        selected.push(examined);
                    }
                    examined += 1;
                }
                if !selected.is_empty() {
                    sink.write(&events, &selected)?;
                }
                end.count += selected.len();
                offset += examined;
                end.next = advance(offset);
                if end.count == request.limit {
                    break;
                }
            }
        }
        Ok(offset - start)
    }

    /// [`Self::read_segment`] for a sink of shared renderings: the events of the segment
    /// from `offset` on, chunk by chunk, each rendered once for every reader.
    async fn read_rendered(
        &self,
        head: BatchHead<'_>,
        entry: &Arc<SchemaEntry>,
        request: &PageRequest<'_>,
        sink: &mut dyn RenderedSink,
        end: &mut PageEnd,
        mut offset: usize,
    ) -> Result<usize, FeedError> {
        let segment = head.segment;
        let (start, total) = (offset, segment.event_count as usize);
        let ops = request.selection.ops;
        let options = sink.options();
        let mut selected = Vec::new();
        while offset < total && end.count < request.limit && offset - start < SCAN_BUDGET {
            let index = offset / CHUNK_EVENTS;
            let (first, len) = chunk_span(index, total);
            let key = chunk_key(head, index, options, request);
            let chunk = self
                .rendered
                .get(key, self.render(head, entry, first, len, &options))
                .await?;
            // A reader of this chunk will likely go on into the next: render it on another
            // core while this one is read, copied and taken.
            if first + len < total {
                let next = chunk_key(head, index + 1, options, request);
                self.prefetch(head, entry, next, options);
            }
            selected.clear();
            let mut examined = offset - first;
            while examined < len && end.count + selected.len() < request.limit {
                if ops.contains(chunk.op(examined)) {
                    selected.push(examined);
                }
                examined += 1;
            }
            let at = Position {
                ordinal: segment.ordinal,
                consumed: segment.first_event + first as i64,
            };
            sink.write_rendered(head.table.id, &chunk, at, &selected);
            end.count += selected.len();
            offset = first + examined;
            end.next = Position {
                ordinal: segment.ordinal,
                consumed: segment.first_event + offset as i64,
            };
        }
        Ok(offset - start)
    }

    /// Renders chunk `index` of a segment into the shared cache in the background, unless
    /// it is kept (one being rendered is waited for, not rendered twice); a failure is
    /// left for a reader to meet.
    fn prefetch(
        &self,
        head: BatchHead<'_>,
        entry: &Arc<SchemaEntry>,
        key: ChunkKey,
        options: JsonOptions,
    ) {
        if self.rendered.contains(&key) {
            return;
        }
        let (feed, entry) = (self.clone(), entry.clone());
        let (table, segment) = (head.table.clone(), head.segment.clone());
        let (key_columns, columns) = (head.key.to_vec(), head.columns.to_vec());
        let whole_rows = head.whole_rows;
        tokio::spawn(async move {
            let head = BatchHead {
                table: &table,
                segment: &segment,
                schema: &entry,
                key: &key_columns,
                columns: &columns,
                whole_rows,
            };
            let (first, len) = chunk_span(key.index, segment.event_count as usize);
            let render = feed.render(head, &entry, first, len, &options);
            if let Err(e) = feed.rendered.get(key, render).await {
                tracing::debug!(segment = %segment.path, error = %e, "rendering ahead failed");
            }
        });
    }

    /// Events `first .. first + len` of a segment, rendered.
    async fn render(
        &self,
        head: BatchHead<'_>,
        entry: &SchemaEntry,
        first: usize,
        len: usize,
        options: &JsonOptions,
    ) -> Result<RenderedChunk, FeedError> {
        let segment = head.segment;
        let inserts = segment.layout == "inserts";
        let batches = self.read_rows(segment, entry, first, len).await?;
        let meta = EventMeta::new(head.table, segment);
        let mut chunk = RenderedChunk::with_capacity(len);
        let mut at = first;
        for batch in &batches {
            let events = EventBatch::new(head, segment.first_event + at as i64, batch, inserts)?;
            render_chunk(&events, options, &meta, &mut chunk)?;
            at += events.rows;
        }
        // Fewer rows than the index counts: the segment is not what was published.
        if chunk.len() != len {
            return Err(FeedError::Corrupt(segment.path.clone()));
        }
        metrics::counter!(EVENTS_RENDERED.name).increment(len as u64);
        Ok(chunk)
    }

    /// Events `offset .. offset + count` of `segment` as stored: a copied source file
    /// (`inserts`) read under the change set's schema, icefeed's own segments as written.
    async fn read_rows(
        &self,
        segment: &SegmentRecord,
        entry: &SchemaEntry,
        offset: usize,
        count: usize,
    ) -> Result<Vec<RecordBatch>, FeedError> {
        let file = SegmentFile {
            key: &segment.path,
            size: segment.size_bytes as u64,
            deleted_rows: segment.deleted_rows.as_deref(),
        };
        if segment.layout != "inserts" {
            return Ok(self.reader.read(file, None, offset, count).await?);
        }
        let Some(lineage) = segment.lineage() else {
            return Ok(self
                .reader
                .read(file, Some(&entry.read), offset, count)
                .await?);
        };
        let batches = self
            .reader
            .read(file, Some(&entry.with_lineage), offset, count)
            .await?;
        let positions = self.reader.positions(file, offset, count).await?;
        let mut positions = positions.into_iter();
        Ok(batches
            .iter()
            .map(|batch| inherit_lineage(batch, &lineage, &mut positions))
            .collect::<Result<_, _>>()?)
    }

    /// The parsed schema `schema_id` of `table`'s change sets.
    pub async fn schema(
        &self,
        table: TableId,
        schema_id: i32,
    ) -> Result<Arc<SchemaEntry>, FeedError> {
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
        let with_lineage = read.clone().with_lineage(true);
        let entry = Arc::new(SchemaEntry {
            schema,
            read,
            with_lineage,
        });
        self.schemas
            .lock()
            .expect("schema cache")
            .insert((table, schema_id), entry.clone());
        Ok(entry)
    }
}
