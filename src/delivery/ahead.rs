//! What a reader prepares ahead of its page: the windows (or rendered chunks) the next
//! pages of the same size will read, across the segments the page fetched.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use super::sizing::{self, span_at};
use crate::changes::Position;
use crate::store::{SegmentRecord, StoredSegment};

/// Chunks a reader renders ahead of the one it reads, at most.
const CHUNKS_AHEAD: usize = 3;

/// Stored bytes of the windows a reader decodes ahead of its page, at most (and at least
/// one window): a page's worth. Decoded, that is some 30–40 MB of ordinary rows (a taxi
/// trip stores 31 bytes and decodes to about 150): room for the windows of two pages of
/// 100,000 narrow Arrow events, and about half the node's decoded cache, which keeps
/// the windows of the page being read beside them. Counted in windows instead (three),
/// a page of Arrow events that spans four was left to decode one itself while a core
/// idled.
const WINDOWS_AHEAD_STORED_BYTES: u64 = sizing::PAGE_STORED_BYTES;

/// Whether `segment` holds events after `position`.
pub(super) fn holds_after(segment: &SegmentRecord, position: Position) -> bool {
    segment.ordinal > position.ordinal
        || (segment.ordinal == position.ordinal
            && segment.first_event + segment.event_count > position.consumed)
}

/// The chunks of `segments` that the `events` events after `next` lie in, at most
/// [`CHUNKS_AHEAD`], in feed order (without `inserts` segments if `skip_inserts`).
pub(super) fn chunks_ahead(
    segments: &[SegmentRecord],
    next: Position,
    events: usize,
    skip_inserts: bool,
) -> impl Iterator<Item = (&SegmentRecord, usize)> {
    spans_ahead(segments, next, events, skip_inserts, sizing::chunk_events)
        .map(|(segment, index, _)| (segment, index))
        .take(CHUNKS_AHEAD)
}

/// The windows of `segments` that the `events` events after `next` lie in, as many as
/// store [`WINDOWS_AHEAD_STORED_BYTES`] (at least one), in feed order (without `inserts`
/// segments if `skip_inserts`).
pub(super) fn windows_ahead(
    segments: &[SegmentRecord],
    next: Position,
    events: usize,
    skip_inserts: bool,
) -> impl Iterator<Item = (&SegmentRecord, usize)> {
    let mut stored = 0;
    spans_ahead(segments, next, events, skip_inserts, sizing::window_events)
        .take_while(move |(segment, _, len)| {
            let bytes = *len as u64 * segment.stored_bytes_per_event();
            let taken = stored == 0 || stored + bytes <= WINDOWS_AHEAD_STORED_BYTES;
            stored += bytes;
            taken
        })
        .map(|(segment, index, _)| (segment, index))
}

/// The spans (windows or chunks, of `span(segment)` events) of `segments` that the
/// `events` events after `next` lie in, in feed order (without `inserts` segments if
/// `skip_inserts`), each with its length.
fn spans_ahead(
    segments: &[SegmentRecord],
    next: Position,
    events: usize,
    skip_inserts: bool,
    span: fn(&SegmentRecord) -> usize,
) -> impl Iterator<Item = (&SegmentRecord, usize, usize)> {
    let segments = segments
        .iter()
        .filter(move |s| holds_after(s, next) && !(skip_inserts && s.layout == "inserts"));
    let mut wanted = events;
    segments
        .flat_map(move |segment| {
            let total = segment.event_count as usize;
            let from = match segment.ordinal == next.ordinal {
                true => (next.consumed - segment.first_event).max(0) as usize,
                false => 0,
            };
            let span = span(segment);
            let spans = from / span..total.div_ceil(span);
            spans.map(move |index| (segment, index, from.max(index * span)))
        })
        .map_while(move |(segment, index, from)| {
            let (first, len) = span_at(index, span(segment), segment.event_count as usize);
            let end = first + len;
            let needed = wanted > 0;
            wanted = wanted.saturating_sub(end - from);
            needed.then_some((segment, index, len))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::sizing;

    fn ahead(
        segments: &[SegmentRecord],
        next: (i64, i64),
        events: usize,
        skip_inserts: bool,
    ) -> Vec<(String, usize)> {
        let next = Position {
            ordinal: next.0,
            consumed: next.1,
        };
        windows_ahead(segments, next, events, skip_inserts)
            .map(|(s, index)| (s.path.clone(), index))
            .collect()
    }

    #[test]
    fn the_windows_ahead_of_a_page_follow_it_across_segments() {
        let w = sizing::window_events(&SegmentRecord::sample(1, 0, 1, "inserts", 0)) as i64;
        let segments = [
            SegmentRecord::sample(1, 0, 2 * w + 10, "inserts", 0),
            SegmentRecord::sample(1, 2 * w + 10, 100, "changes", 0),
            SegmentRecord::sample(2, 0, 5 * w, "changes", 0),
        ];
        let path = |s: usize| segments[s].path.clone();
        // Within a window, then into the next one.
        assert_eq!(ahead(&segments, (1, 10), 1000, false), [(path(0), 0)]);
        assert_eq!(
            ahead(&segments, (1, w - 10), 1000, false),
            [(path(0), 0), (path(0), 1)]
        );
        // From the end of a segment into the next ones.
        assert_eq!(
            ahead(&segments, (1, 2 * w + 5), 1000, false),
            [(path(0), 2), (path(1), 0), (path(2), 0)]
        );
        // A long page's windows, as many as it spans.
        assert_eq!(ahead(&segments, (2, 0), 10 * w as usize, false).len(), 5);
        // Segments the page skips are not decoded, nor do they count.
        assert_eq!(
            ahead(&segments, (1, 0), 1000, true),
            [(path(1), 0), (path(2), 0)]
        );
        // Past the segments fetched: nothing.
        assert!(ahead(&segments, (2, 5 * w), 1000, false).is_empty());
    }

    #[test]
    fn the_windows_ahead_of_a_page_store_a_page_s_bytes_at_most() {
        // 100 stored bytes an event: windows of 32,768 events store 3.3 MB, and two of
        // them are all that a page's bytes allow, however many events are asked for.
        let w = sizing::window_events(&SegmentRecord::sample(1, 0, 1, "changes", 100));
        assert_eq!(w, 4 * sizing::CHUNK_EVENTS);
        let events = 10 * w as i64;
        let segments = [SegmentRecord::sample(1, 0, events, "changes", 100 * events)];
        assert_eq!(ahead(&segments, (1, 0), 10 * w, false).len(), 2);
        // A window that stores more than a page's bytes is decoded ahead alone.
        let huge = [SegmentRecord::sample(1, 0, 100, "changes", 1_000_000_000)];
        assert_eq!(
            ahead(&huge, (1, 0), 100, false),
            [(huge[0].path.clone(), 0)]
        );
    }

    #[test]
    fn the_chunks_of_wide_rows_ahead_of_a_page_are_fewer_events() {
        // 100 KB an event: chunks of 10.
        let segments = [SegmentRecord::sample(1, 0, 100, "changes", 10_000_000)];
        let next = Position {
            ordinal: 1,
            consumed: 0,
        };
        let chunks: Vec<usize> = chunks_ahead(&segments, next, 25, false)
            .map(|(_, index)| index)
            .collect();
        assert_eq!(chunks, [0, 1, 2]);
    }

    #[test]
    fn the_chunks_ahead_of_a_page_are_counted_in_chunks() {
        let c = sizing::CHUNK_EVENTS as i64;
        let segments = [
            SegmentRecord::sample(1, 0, c + 10, "inserts", 0),
            SegmentRecord::sample(2, 0, 3 * c, "changes", 0),
        ];
        let next = Position {
            ordinal: 1,
            consumed: 5,
        };
        let chunks: Vec<(i64, usize)> = chunks_ahead(&segments, next, 2 * c as usize, false)
            .map(|(s, index)| (s.ordinal, index))
            .collect();
        assert_eq!(chunks, [(1, 0), (1, 1), (2, 0)]);
        // A long page's: at most CHUNKS_AHEAD.
        let long = chunks_ahead(&segments, next, 10 * c as usize, false);
        assert_eq!(long.count(), CHUNKS_AHEAD);
    }
}
