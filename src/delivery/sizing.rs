//! How many events of a segment are decoded, rendered and put in a page at a time: up to
//! [`CHUNK_EVENTS`] per rendered chunk for narrow rows, fewer for wide ones, so that a
//! decoded window, a rendered chunk and a page hold about as many bytes whatever the
//! table. Counted in events alone, a table of 1 MB documents would have a page of ten
//! decode 32,768 of them.
//!
//! Sizes follow what the index records of a segment (its stored bytes per event, or a
//! quarter of its decoded bytes where rows compress far better than usual: see
//! `StoredSegment::stored_bytes_per_event`), so every reader on every node cuts a
//! segment alike and shares its chunks and windows.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use crate::store::{SegmentRecord, StoredSegment};

/// Events per rendered chunk of narrow rows: many pages of the default `limit` (1000),
/// and a few MB rendered.
pub const CHUNK_EVENTS: usize = 8192;

/// Stored bytes of a chunk's events, at most (unless a single event stores more): a
/// chunk of the widest rows renders to tens of MB, not to gigabytes.
const CHUNK_STORED_BYTES: u64 = 1 << 20;

/// Chunks per decoded window: enough to make a decompressor's set-up and a page's
/// partial decode small next to the rows a window yields.
const CHUNKS_PER_WINDOW: usize = 4;

/// Stored bytes of a page's events, at most (unless its first event stores more): a page
/// of `limit` wide rows ends early, with `more`, instead of holding gigabytes.
pub const PAGE_STORED_BYTES: u64 = 8 << 20;

/// Events per rendered chunk of `segment`.
pub fn chunk_events(segment: &SegmentRecord) -> usize {
    segment.events_within(CHUNK_STORED_BYTES, CHUNK_EVENTS)
}

/// Events per decoded window of `segment`: whole chunks, so that a chunk is sliced from
/// one window.
pub fn window_events(segment: &SegmentRecord) -> usize {
    CHUNKS_PER_WINDOW * chunk_events(segment)
}

/// How many more events of `segment` a page takes that holds `count` events storing
/// `stored` bytes: up to `limit` in all, and as many as store [`PAGE_STORED_BYTES`] (at
/// least one, in an empty page).
pub fn page_room(limit: usize, count: usize, stored: u64, segment: &impl StoredSegment) -> usize {
    let left = PAGE_STORED_BYTES.saturating_sub(stored);
    let fits = usize::try_from(left / segment.stored_bytes_per_event()).unwrap_or(usize::MAX);
    let fits = if count == 0 { fits.max(1) } else { fits };
    limit.saturating_sub(count).min(fits)
}

/// Window `index` of a segment of `total` events cut in windows (or chunks) of `span`
/// events: its first event and its length.
pub fn span_at(index: usize, span: usize, total: usize) -> (usize, usize) {
    let first = index * span;
    (first, span.min(total - first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(event_count: i64, size_bytes: i64) -> SegmentRecord {
        SegmentRecord::sample(1, 0, event_count, "changes", size_bytes)
    }

    #[test]
    fn wide_rows_are_read_in_fewer_events_at_a_time() {
        // 40 stored bytes an event: chunks and windows of events, as for any narrow table.
        let narrow = segment(1_000_000, 40_000_000);
        assert_eq!(chunk_events(&narrow), CHUNK_EVENTS);
        assert_eq!(window_events(&narrow), 4 * CHUNK_EVENTS);
        // 100 KB an event: a chunk stores about 1 MB, a window 4 MB.
        let wide = segment(1000, 100_000_000);
        assert_eq!(chunk_events(&wide), 10);
        assert_eq!(window_events(&wide), 40);
        // Wider than a chunk's bytes: one at a time.
        let huge = segment(10, 50_000_000);
        assert_eq!(chunk_events(&huge), 1);
        assert_eq!(window_events(&huge), 4);
        // An index without sizes (or an empty segment) reads as the narrowest.
        assert_eq!(chunk_events(&segment(0, 0)), CHUNK_EVENTS);
        assert_eq!(chunk_events(&segment(100, 0)), CHUNK_EVENTS);
    }

    #[test]
    fn rows_that_compress_far_better_than_usual_go_by_what_they_decode_to() {
        // 1 KB stored and 100 KB decoded an event (a repeated document): a chunk decodes
        // to about 4 MB, not 100 MB, and a page to about 32 MB, not 800 MB.
        let mut repetitive = segment(1000, 1_000_000);
        repetitive.decoded_bytes = Some(100_000_000);
        assert_eq!(chunk_events(&repetitive), (1 << 20) / 25_000);
        let page = (PAGE_STORED_BYTES / 25_000) as usize;
        assert_eq!(page_room(10_000, 0, 0, &repetitive), page);
        // Rows decoding to a few times what they store go by their stored size.
        let mut narrow = segment(1000, 1_000_000);
        narrow.decoded_bytes = Some(4_000_000);
        assert_eq!(chunk_events(&narrow), (1 << 20) / 1000);
        assert_eq!(page_room(10_000, 0, 0, &narrow), 8388);
        // A segment whose decoded size is unknown goes by its stored size alone.
        assert_eq!(page_room(10_000, 0, 0, &segment(1000, 1_000_000)), 8388);
    }

    #[test]
    fn spans_cut_a_segment_without_gaps() {
        assert_eq!(span_at(0, 40, 100), (0, 40));
        assert_eq!(span_at(2, 40, 100), (80, 20));
    }
}
