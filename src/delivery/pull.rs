//! Reading a table's feed: the events after a position, read from the change store in
//! feed order, filtered by operation, and handed to a sink that renders them (JSON and
//! NDJSON in [`super::json_page`], Arrow in [`super::arrow_page`]).
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;

use super::ahead::{chunks_ahead, holds_after, windows_ahead};
use super::decoded::{self, DecodedCache, Windows};
use super::error::FeedError;
use super::events::{BatchHead, EventBatch, EventSink, RenderedSink, SchemaEntry};
use super::json_page::{EventMeta, render_chunk};
use super::published::PublishedCounts;
use super::rendered::{self, ChunkKey, RenderedCache, RenderedChunk};
use super::selection::{OpSet, Selection};
use super::sizing::{self, span_at};
use crate::change::Op;
use crate::changelog::{inherit_lineage, key_indexes};
use crate::changes::json::JsonOptions;
use crate::changes::{Position, ReadSchema, SegmentFile, SegmentReader};
use crate::store::{SegmentRecord, SourceTable, Store, StoredSegment, TableId};
use crate::telemetry::metric::EVENTS_RENDERED;

/// Segments fetched from the index by a read's first round trip: a page mostly lies
/// within one or two, and every row fetched is decoded on both sides.
const FIRST_SEGMENTS: i64 = 8;
/// Segments fetched by each further round trip of a read that goes on past those.
const SEGMENTS_PER_QUERY: i64 = 64;
/// Events one request examines at most: a filter that matches almost nothing still
/// answers promptly, with `more` set and the position advanced past what it skipped.
const SCAN_BUDGET: usize = 1_000_000;
/// Pages of the same size a reader prepares ahead (renders their chunks, or decodes their
/// windows): a window takes longer to decode than a page of it takes to send, so
/// preparing only the very next page left the reader waiting for it.
const PAGES_AHEAD: usize = 2;
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
    /// Bytes the change store holds for the events handed to the sink (a page ends at
    /// `sizing::PAGE_STORED_BYTES`).
    stored: u64,
}

impl PageEnd {
    /// How many more events of `segment` the page takes ([`sizing::page_room`]).
    fn room(&self, limit: usize, segment: &SegmentRecord) -> usize {
        sizing::page_room(limit, self.count, self.stored, segment)
    }

    /// Counts `events` events of `segment` handed to the sink.
    fn took(&mut self, events: usize, segment: &SegmentRecord) {
        self.count += events;
        self.stored += events as u64 * segment.stored_bytes_per_event();
    }
}

/// Parsed schemas by (table, schema id); schemas of published change sets never change.
type SchemaCache = Arc<Mutex<HashMap<(TableId, i32), Arc<SchemaEntry>>>>;

/// Takes a chunk off [`Feed::ahead`] when its rendering ahead ends, however it ends.
struct RenderedAhead(Arc<Mutex<HashSet<ChunkKey>>>, ChunkKey);

impl Drop for RenderedAhead {
    fn drop(&mut self) {
        self.0.lock().expect("chunks ahead").remove(&self.1);
    }
}

/// A [`BatchHead`] that owns its parts, to render a chunk ahead of the request for it.
struct OwnedHead {
    table: SourceTable,
    segment: SegmentRecord,
    entry: Arc<SchemaEntry>,
    key: Vec<usize>,
    columns: Vec<usize>,
    whole_rows: bool,
}

impl OwnedHead {
    /// The head of `segment` of `table`, read with `entry` as `selection` says.
    fn new(
        table: SourceTable,
        segment: SegmentRecord,
        entry: Arc<SchemaEntry>,
        selection: &Selection,
    ) -> Result<Self, FeedError> {
        let (key, columns) = key_and_columns(&table, segment.schema_id, &entry, selection)?;
        Ok(Self {
            table,
            segment,
            entry,
            key,
            columns,
            whole_rows: selection.columns.is_none(),
        })
    }

    fn head(&self) -> BatchHead<'_> {
        BatchHead {
            table: &self.table,
            segment: &self.segment,
            schema: &self.entry,
            key: &self.key,
            columns: &self.columns,
            whole_rows: self.whole_rows,
        }
    }
}

/// The indexes in the top-level fields of `entry` (schema `schema_id`) of `table`'s
/// identifier columns and of the columns `selection` keeps.
pub(super) fn key_and_columns(
    table: &SourceTable,
    schema_id: i32,
    entry: &SchemaEntry,
    selection: &Selection,
) -> Result<(Vec<usize>, Vec<usize>), FeedError> {
    let key = key_indexes(
        &entry.schema,
        table.identifier_field_ids.as_deref(),
        &table.identifier_columns,
    )
    .map_err(|reason| FeedError::Schema(schema_id, reason))?;
    let columns = selection.column_indexes(entry.schema.as_struct().fields());
    Ok((key, columns))
}

/// Renders `batches`, events `first .. first + len` of a segment.
fn render_rows(
    head: BatchHead<'_>,
    batches: &[RecordBatch],
    first: usize,
    len: usize,
    options: &JsonOptions,
) -> Result<RenderedChunk, FeedError> {
    let segment = head.segment;
    let inserts = segment.layout == "inserts";
    let meta = EventMeta::new(head.table, segment);
    let mut chunk = RenderedChunk::with_capacity(len);
    let mut at = first;
    for batch in batches {
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

/// `segment` as the cache of decoded windows cuts it.
fn windows_of(segment: &SegmentRecord) -> Windows<'_> {
    Windows {
        path: &segment.path,
        total: segment.event_count as usize,
        span: sizing::window_events(segment),
    }
}

/// Chunk `index` of `segment`: its first event and its length.
fn chunk_span(index: usize, segment: &SegmentRecord) -> (usize, usize) {
    let total = segment.event_count as usize;
    span_at(index, sizing::chunk_events(segment), total)
}

/// The key of chunk `index` of `segment` of `table`, rendered with `options` for
/// `request`.
fn chunk_key(
    table: TableId,
    segment: &SegmentRecord,
    index: usize,
    options: JsonOptions,
    request: &PageRequest<'_>,
) -> ChunkKey {
    ChunkKey {
        table,
        segment: segment.path.clone(),
        index,
        options,
        columns: request.selection.columns.clone(),
    }
}

/// Reads pages of any table's feed; cheap to clone.
#[derive(Clone)]
pub struct Feed {
    store: Store,
    reader: SegmentReader,
    schemas: SchemaCache,
    rendered: RenderedCache,
    decoded: DecodedCache,
    /// Chunks being rendered ahead: a reader that would render one ahead again (the
    /// cache does not show them until they are rendered) leaves it to the task at it.
    ahead: Arc<Mutex<HashSet<ChunkKey>>>,
    published: PublishedCounts,
}

impl Feed {
    /// A feed over the index in `store` and the segments `reader` reads.
    pub fn new(store: Store, reader: SegmentReader) -> Self {
        Self {
            store,
            reader,
            schemas: Default::default(),
            rendered: RenderedCache::new(rendered::CACHE_BYTES),
            decoded: DecodedCache::new(decoded::CACHE_BYTES),
            ahead: Default::default(),
            published: Default::default(),
        }
    }

    /// Whether `p` lies beyond `table`'s published feed (see [`Store::is_beyond_feed`]).
    pub async fn is_beyond(&self, table: &SourceTable, p: Position) -> Result<bool, FeedError> {
        Ok(self.published.is_beyond(&self.store, table, p).await?)
    }

    /// The coordination store the feed reads its index from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What reads the segments.
    pub(super) fn reader(&self) -> &SegmentReader {
        &self.reader
    }

    /// Hands up to `request.limit` events of `table` to `sink`. Fails with
    /// [`FeedError::Expired`] when retention pruned events after `request.after` before
    /// they were read.
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
            stored: 0,
        };
        let mut scanned = 0usize;
        let mut max = FIRST_SEGMENTS;
        let rendering = sink.rendered().map(|sink| sink.options());
        loop {
            let segments = self
                .store
                .segments_after(table.id, end.next.ordinal, end.next.consumed, max)
                .await?;
            if segments.is_empty() {
                // Caught up, or retention pruned what follows: only the floor tells.
                let floor = self.store.floor(table.id).await?;
                if floor.is_gone(end.next) {
                    return Err(FeedError::Expired {
                        table: table.id,
                        earliest: floor.earliest(),
                    });
                }
                return Ok(end);
            }
            let exhausted = (segments.len() as i64) < max;
            max = SEGMENTS_PER_QUERY;
            for segment in &segments {
                if end.room(request.limit, segment) == 0
                    || scanned >= SCAN_BUDGET
                    || !sink.accepts(table.id, segment)
                {
                    end.more = true;
                    self.read_ahead(table, &segments, end.next, request, rendering);
                    return Ok(end);
                }
                scanned += self
                    .read_segment(table, segment, request, sink, &mut end)
                    .await?;
                if holds_after(segment, end.next) {
                    // Stopped inside it (the page's limit or bytes, or the scan budget):
                    // more without asking, and none from the segments after it.
                    end.more = true;
                    self.read_ahead(table, &segments, end.next, request, rendering);
                    return Ok(end);
                }
            }
            if end.count == request.limit || scanned >= SCAN_BUDGET {
                end.more = self.store.has_events_after(table.id, end.next).await?;
                self.read_ahead(table, &segments, end.next, request, rendering);
                return Ok(end);
            }
            if exhausted {
                return Ok(end);
            }
        }
    }

    /// Prepares in the background what the next [`PAGES_AHEAD`] pages of the same size
    /// after `next` would read, across `segments`, so that a consumer paging on finds it
    /// ready while it takes this page: rendered chunks for a sink of shared renderings
    /// (`rendering`), decoded windows for others.
    fn read_ahead(
        &self,
        table: &SourceTable,
        segments: &[SegmentRecord],
        next: Position,
        request: &PageRequest<'_>,
        rendering: Option<JsonOptions>,
    ) {
        match rendering {
            Some(options) => self.render_ahead(table, segments, next, request, options),
            None => self.decode_ahead(table, segments, next, request),
        }
    }

    /// Decodes in the background the windows of `segments` that the next
    /// [`PAGES_AHEAD`] pages of the same size after `next` would read (up to a page's
    /// stored bytes: `ahead::windows_ahead`), each in a task of its own.
    fn decode_ahead(
        &self,
        table: &SourceTable,
        segments: &[SegmentRecord],
        next: Position,
        request: &PageRequest<'_>,
    ) {
        let skip_inserts = !request.selection.ops.contains(Op::Insert);
        let windows: Vec<(SegmentRecord, usize)> =
            windows_ahead(segments, next, PAGES_AHEAD * request.limit, skip_inserts)
                .filter(|(segment, index)| !self.decoded.contains(&segment.path, *index))
                .map(|(segment, index)| (segment.clone(), index))
                .collect();
        for (segment, index) in windows {
            let (feed, table) = (self.clone(), table.id);
            tokio::spawn(async move {
                let decoded = async {
                    let entry = feed.schema(table, segment.schema_id).await?;
                    let decode = |first, len| feed.read_rows(&segment, &entry, first, len);
                    feed.decoded
                        .window(windows_of(&segment), index, decode)
                        .await
                };
                if let Err(e) = decoded.await {
                    tracing::debug!(segment = %segment.path, error = %e, "decoding ahead failed");
                }
            });
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
        let (key, columns) = key_and_columns(table, segment.schema_id, &entry, request.selection)?;
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
                .read_rendered(head, request, rendered, end, offset)
                .await;
        }
        let filtered = ops != OpSet::ALL;
        let window = sizing::window_events(segment);
        let mut selected = Vec::new();
        while offset < total && offset - start < SCAN_BUDGET {
            let wanted = match end.room(request.limit, segment) {
                0 => break,
                room if filtered => room.max(FILTER_CHUNK),
                room => room,
            };
            // At most a window at a time: what is read stays bounded in bytes too.
            let chunk = wanted.min(window).min(total - offset);
            let batches = self.rows(segment, &entry, offset, chunk).await?;
            if batches.iter().all(|b| b.num_rows() == 0) {
                return Err(FeedError::Corrupt(segment.path.clone()));
            }
            for batch in &batches {
                let events =
                    EventBatch::new(head, segment.first_event + offset as i64, batch, inserts)?;
                selected.clear();
                let room = end.room(request.limit, segment);
                let mut examined = 0;
                while examined < events.rows && selected.len() < room {
                    if ops.contains(events.op(examined)?) {
                        selected.push(examined);
                    }
                    examined += 1;
                }
                if !selected.is_empty() {
                    sink.write(&events, &selected)?;
                }
                end.took(selected.len(), segment);
                offset += examined;
                end.next = advance(offset);
                if selected.len() == room {
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
        while offset < total && offset - start < SCAN_BUDGET {
            let room = end.room(request.limit, segment);
            if room == 0 {
                break;
            }
            let index = offset / sizing::chunk_events(segment);
            let (first, len) = chunk_span(index, segment);
            let key = chunk_key(head.table.id, segment, index, options, request);
            let chunk = self
                .rendered
                .get(key, self.render(head, first, len, options))
                .await?;
            selected.clear();
            let mut examined = offset - first;
            while examined < len && selected.len() < room {
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
            end.took(selected.len(), segment);
            offset = first + examined;
            end.next = Position {
                ordinal: segment.ordinal,
                consumed: segment.first_event + offset as i64,
            };
        }
        Ok(offset - start)
    }

    /// Renders in the background, into the shared cache, the chunks of `segments` that
    /// the next [`PAGES_AHEAD`] pages of the same size after `next` would read (and at
    /// least the chunk after `next`'s, up to `ahead::CHUNKS_AHEAD`), each in a task of its
    /// own: the other core renders them while this page is copied, sent and parsed.
    /// Readers asking for one of them meanwhile wait for it; a failure is left for a
    /// reader to meet.
    fn render_ahead(
        &self,
        table: &SourceTable,
        segments: &[SegmentRecord],
        next: Position,
        request: &PageRequest<'_>,
        options: JsonOptions,
    ) {
        let skip_inserts = !request.selection.ops.contains(Op::Insert);
        let events = (PAGES_AHEAD * request.limit).max(sizing::CHUNK_EVENTS);
        let chunks: Vec<(SegmentRecord, ChunkKey)> = {
            let mut ahead = self.ahead.lock().expect("chunks ahead");
            chunks_ahead(segments, next, events, skip_inserts)
                .map(|(segment, index)| {
                    let key = chunk_key(table.id, segment, index, options, request);
                    (segment, key)
                })
                .filter(|(_, key)| !self.rendered.contains(key) && ahead.insert(key.clone()))
                .map(|(segment, key)| (segment.clone(), key))
                .collect()
        };
        for (segment, key) in chunks {
            let (feed, table) = (self.clone(), table.clone());
            let selection = request.selection.clone();
            let done = RenderedAhead(feed.ahead.clone(), key.clone());
            tokio::spawn(async move {
                let _done = done;
                let path = segment.path.clone();
                let (first, len) = chunk_span(key.index, &segment);
                let rendered = async {
                    let entry = feed.schema(table.id, segment.schema_id).await?;
                    let head = OwnedHead::new(table, segment, entry, &selection)?;
                    feed.rendered
                        .get(key, feed.render(head.head(), first, len, options))
                        .await
                };
                if let Err(e) = rendered.await {
                    tracing::debug!(segment = %path, error = %e, "rendering ahead failed");
                }
            });
        }
    }

    /// Events `first .. first + len` of `head`'s segment, rendered.
    async fn render(
        &self,
        head: BatchHead<'_>,
        first: usize,
        len: usize,
        options: JsonOptions,
    ) -> Result<RenderedChunk, FeedError> {
        let batches = self.rows(head.segment, head.schema, first, len).await?;
        render_rows(head, &batches, first, len, &options)
    }

    /// Events `offset .. offset + count` of `segment`, through the shared windows.
    async fn rows(
        &self,
        segment: &SegmentRecord,
        entry: &SchemaEntry,
        offset: usize,
        count: usize,
    ) -> Result<Vec<RecordBatch>, FeedError> {
        let decode = |first, len| self.read_rows(segment, entry, first, len);
        (self.decoded)
            .rows(windows_of(segment), offset, count, decode)
            .await
    }

    /// Events `offset .. offset + count` of `segment` as stored: a copied source file
    /// (`inserts`) read under the change set's schema, icefeed's own segments as written.
    pub(crate) async fn read_rows(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_ends_at_its_limit_or_at_the_bytes_it_may_hold() {
        let narrow = SegmentRecord::sample(1, 0, 100_000, "inserts", 4_000_000);
        let wide = SegmentRecord::sample(2, 0, 1000, "changes", 1_000_000_000);
        let mut end = PageEnd {
            count: 0,
            next: Position::START,
            more: false,
            stored: 0,
        };
        // Narrow rows: the limit decides.
        assert_eq!(end.room(10_000, &narrow), 10_000);
        // 1 MB an event: as many as fit in the page's bytes.
        let fits = (sizing::PAGE_STORED_BYTES / 1_000_000) as usize;
        assert_eq!(end.room(10_000, &wide), fits);
        // Both: what the narrow events took is not left for wide ones.
        end.took(9000, &narrow);
        assert_eq!(end.room(10_000, &narrow), 1000);
        let left = sizing::PAGE_STORED_BYTES - 9000 * 40;
        assert_eq!(end.room(10_000, &wide), (left / 1_000_000) as usize);
        end.took(end.room(10_000, &wide), &wide);
        assert_eq!(end.room(10_000, &wide), 0);
        assert!(end.room(10_000, &narrow) > 0, "narrow events still fit");
        // An event wider than a page still makes a page of its own.
        let huge = SegmentRecord::sample(3, 0, 1, "changes", 2 * sizing::PAGE_STORED_BYTES as i64);
        let empty = PageEnd {
            stored: 0,
            count: 0,
            ..end
        };
        assert_eq!(empty.room(10_000, &huge), 1);
        let mut full = empty;
        full.took(1, &huge);
        assert_eq!(full.room(10_000, &huge), 0);
        assert_eq!(full.room(10_000, &narrow), 0);
    }
}
