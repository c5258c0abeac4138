//! The rows of a copied data file that are not events: a table export copies a data file
//! that merge-on-read deletes apply to byte for byte, and keeps the deleted positions
//! beside it as a portable 64-bit Roaring bitmap, instead of decoding and re-encoding the
//! file to drop them. A reader maps the segment's event range to the file's rows here.
//! Must not reach: the rest of the crate.

use bytes::Bytes;
use parquet::arrow::arrow_reader::RowSelector;
use roaring::RoaringTreemap;

/// The stored form of `deleted`.
pub fn encode(deleted: &RoaringTreemap) -> Bytes {
    let mut bytes = Vec::with_capacity(deleted.serialized_size());
    deleted
        .serialize_into(&mut bytes)
        .expect("writing to memory cannot fail");
    Bytes::from(bytes)
}

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> std::io::Result<RoaringTreemap> {
    RoaringTreemap::deserialize_from(bytes)
}

/// The file rows that hold events `offset .. offset + count` of a file whose `deleted`
/// rows are not events: the first of them, and a selection from there that reads the
/// events and skips the deleted rows between them.
pub fn file_rows(deleted: &RoaringTreemap, offset: u64, count: u64) -> (u64, Vec<RowSelector>) {
    let first = file_row_of_event(deleted, offset);
    let mut selectors = Vec::new();
    let (mut row, mut wanted) = (first, count);
    let mut gaps = deleted.iter();
    gaps.advance_to(first);
    let mut gaps = gaps.peekable();
    while wanted > 0 {
        let Some(gap) = gaps.next() else {
            selectors.push(RowSelector::select(wanted as usize));
            break;
        };
        let run = (gap - row).min(wanted);
        if run > 0 {
            selectors.push(RowSelector::select(run as usize));
            wanted -= run;
        }
        if wanted == 0 {
            break;
        }
        // Skip this deleted row and any that follow it directly.
        row = gap + 1;
        while gaps.next_if_eq(&row).is_some() {
            row += 1;
        }
        selectors.push(RowSelector::skip((row - gap) as usize));
    }
    (first, selectors)
}

/// The file row of event `event`: the smallest row `r` that is not deleted and has
/// `event` rows before it that are not deleted either.
fn file_row_of_event(deleted: &RoaringTreemap, event: u64) -> u64 {
    // Events before file row `r`: `r` minus the deleted rows below it. It grows with `r`,
    // so the row is found by bisection between `event` and `event` + every deletion.
    let events_before = |r: u64| r - if r == 0 { 0 } else { deleted.rank(r - 1) };
    let (mut low, mut high) = (event, event + deleted.len());
    while low < high {
        let mid = low + (high - low) / 2;
        if events_before(mid + 1) > event {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file rows the selection reads, expanded.
    fn expand(first: u64, selectors: &[RowSelector]) -> Vec<u64> {
        let mut rows = Vec::new();
        let mut row = first;
        for s in selectors {
            if !s.skip {
                rows.extend(row..row + s.row_count as u64);
            }
            row += s.row_count as u64;
        }
        rows
    }

    #[test]
    fn selections_read_exactly_the_events_asked_for() {
        let cases: Vec<(u64, Vec<u64>)> = vec![
            (10, vec![]),
            (10, vec![0]),
            (10, vec![9]),
            (10, vec![0, 1, 2, 5, 6, 9]),
            (20, vec![3, 4, 5, 6, 7, 8, 15]),
            (12, (0..12).filter(|r| r % 2 == 1).collect()),
        ];
        for (rows, dead) in cases {
            let deleted: RoaringTreemap = dead.iter().copied().collect();
            let live: Vec<u64> = (0..rows).filter(|r| !deleted.contains(*r)).collect();
            for offset in 0..live.len() {
                for count in 1..=live.len() - offset {
                    let (first, selectors) = file_rows(&deleted, offset as u64, count as u64);
                    let read = expand(first, &selectors);
                    assert_eq!(
                        read,
                        live[offset..offset + count],
                        "rows {rows}, deleted {dead:?}, events {offset}+{count}"
                    );
                    assert!(
                        selectors.last().is_some_and(|s| !s.skip),
                        "no trailing skip: {selectors:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn large_files_with_scattered_deletes_map_like_a_scan() {
        // Every seventh row of a million, and a run of 70,000 (a whole container).
        let mut deleted: RoaringTreemap = (0..1_000_000u64).step_by(7).collect();
        deleted.insert_range(300_000..370_000);
        let live: Vec<u64> = (0..1_000_000).filter(|r| !deleted.contains(*r)).collect();
        for (offset, count) in [
            (0, 10),
            (250_000, 8192),
            (259_000, 5000),
            (live.len() - 3, 3),
        ] {
            let (first, selectors) = file_rows(&deleted, offset as u64, count as u64);
            assert_eq!(expand(first, &selectors), live[offset..offset + count]);
        }
    }

    #[test]
    fn the_stored_form_reads_back() {
        let deleted: RoaringTreemap = [1u64, 5, 1 << 33].into_iter().collect();
        assert_eq!(decode(&encode(&deleted)).unwrap(), deleted);
        assert!(decode(b"not a bitmap").is_err());
    }
}
