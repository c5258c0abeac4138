//! Reading the net changes of a range, page by page: its segments in order, each run of
//! events with the same last change set rendered as that change set's events are, at
//! positions counted through the whole result.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::collections::HashMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;

use super::error::FeedError;
use super::events::{BatchHead, EventBatch, EventSink};
use super::pull::{Feed, key_and_columns};
use super::selection::Selection;
use super::sizing;
use crate::changes::SegmentFile;
use crate::changes::writer::ORDINAL;
use crate::store::{
    ChangeSetHead, NetRange, NetSegment, SegmentRecord, SourceTable, StoredSegment,
};

/// Segments fetched from the index per round trip.
const SEGMENTS_PER_QUERY: i64 = 64;

/// Where a read of a range's net changes stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetPageEnd {
    /// Events handed to the sink.
    pub count: usize,
    /// Events of the result consumed after the page (examined, whether selected or not).
    pub consumed: i64,
}

impl Feed {
    /// Hands up to `limit` events of `range`'s net changes after the first `consumed` to
    /// `sink`, as `selection` says. Each event's position counts events through the
    /// whole result (its `consumed` after the event), in place of a feed position's.
    pub async fn read_net(
        &self,
        table: &SourceTable,
        range: &NetRange,
        consumed: i64,
        limit: usize,
        selection: &Selection,
        sink: &mut dyn EventSink,
    ) -> Result<NetPageEnd, FeedError> {
        let mut end = NetPageEnd { count: 0, consumed };
        // Bytes stored by the events examined: wide rows end a page before `limit`.
        let mut stored = 0;
        let entry = self.schema(table.id, range.schema_id).await?;
        let (key, columns) = key_and_columns(table, range.schema_id, &entry, selection)?;
        let mut heads: HashMap<i64, SegmentRecord> = HashMap::new();
        let mut selected = Vec::new();
        loop {
            let segments = self
                .store()
                .net_segments_after(range.key.range, end.consumed, SEGMENTS_PER_QUERY)
                .await?;
            for segment in &segments {
                let offset = (end.consumed - segment.first_event).max(0) as usize;
                let room = sizing::page_room(limit, end.count, stored, segment);
                if room == 0 {
                    return Ok(end);
                }
                let count = (segment.event_count as usize - offset).min(room);
                stored += count as u64 * segment.stored_bytes_per_event();
                let file = SegmentFile {
                    key: &segment.path,
                    size: segment.size_bytes as u64,
                    deleted_rows: None,
                };
                let batches = self.reader().read(file, None, offset, count).await?;
                let mut at = segment.first_event + offset as i64;
                for batch in &batches {
                    for (run, ordinal) in runs(batch, segment)? {
                        let head = self
                            .head(table, range, ordinal, segment, &mut heads)
                            .await?;
                        // A sink that holds one table and schema per page ends it here.
                        if !sink.accepts(table.id, head) {
                            end.consumed = at;
                            return Ok(end);
                        }
                        let head = BatchHead {
                            table,
                            segment: head,
                            schema: &entry,
                            key: &key,
                            columns: &columns,
                            whole_rows: selection.columns.is_none(),
                        };
                        let events = EventBatch::new(head, at, &run, false)?;
                        selected.clear();
                        for row in 0..events.rows {
                            if selection.ops.contains(events.op(row)?) {
                                selected.push(row);
                            }
                        }
                        if !selected.is_empty() {
                            sink.write(&events, &selected)?;
                        }
                        end.count += selected.len();
                        at += events.rows as i64;
                    }
                }
                if at != segment.first_event + (offset + count) as i64 {
                    return Err(FeedError::Corrupt(segment.path.clone()));
                }
                end.consumed = at;
                if end.count == limit {
                    return Ok(end);
                }
            }
            if (segments.len() as i64) < SEGMENTS_PER_QUERY {
                return Ok(end);
            }
        }
    }

    /// The change set `ordinal` as a segment record whose events a sink renders: its
    /// snapshot, at the path of the range's `segment`.
    async fn head<'a>(
        &self,
        table: &SourceTable,
        range: &NetRange,
        ordinal: i64,
        segment: &NetSegment,
        heads: &'a mut HashMap<i64, SegmentRecord>,
    ) -> Result<&'a SegmentRecord, FeedError> {
        if let std::collections::hash_map::Entry::Vacant(vacant) = heads.entry(ordinal) {
            let found = self.store().change_set_heads(table.id, &[ordinal]).await?;
            let Some(head) = found.into_iter().next() else {
                return Err(FeedError::Pruned(ordinal));
            };
            vacant.insert(record(head, range, segment));
        }
        let record = heads.get_mut(&ordinal).expect("inserted above");
        record.path.clone_from(&segment.path);
        Ok(record)
    }
}

/// The events of change set `head` as they appear in a range's segment.
fn record(head: ChangeSetHead, range: &NetRange, segment: &NetSegment) -> SegmentRecord {
    SegmentRecord {
        ordinal: head.ordinal,
        segment_no: segment.segment_no,
        first_event: 0,
        event_count: 0,
        layout: "changes".into(),
        path: segment.path.clone(),
        size_bytes: segment.size_bytes,
        decoded_bytes: segment.decoded_bytes,
        deleted_rows: None,
        first_row_id: None,
        lineage_sequence_number: None,
        snapshot_id: head.snapshot_id,
        sequence_number: head.sequence_number,
        committed_at: head.committed_at,
        schema_id: range.schema_id,
        push_version: head.push_version,
    }
}

/// `batch` split into runs of events with the same last change set (segments are
/// ordered by it), each with that change set's ordinal.
fn runs(batch: &RecordBatch, segment: &NetSegment) -> Result<Vec<(RecordBatch, i64)>, FeedError> {
    let ordinals = batch
        .column_by_name(ORDINAL)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .filter(|c| c.null_count() == 0)
        .ok_or_else(|| FeedError::Corrupt(segment.path.clone()))?;
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=ordinals.len() {
        if i == ordinals.len() || ordinals.value(i) != ordinals.value(start) {
            runs.push((batch.slice(start, i - start), ordinals.value(start)));
            start = i;
        }
    }
    Ok(runs)
}
