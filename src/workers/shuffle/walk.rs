//! Copies paired while a map task streams a partition group too large to hold (`spill`):
//! a window of each side's rows at a time goes through the in-order walk
//! (`changelog::copied`), whose pairs cancel there, and only what it leaves is spilled.
//! Most writers rewrite a file row by row, so an update of a few rows of large files
//! spills those rows rather than the files. The walk only pairs equal rows, so what it
//! leaves has the multiset difference of the whole: exact whatever the windows.
//! Must not reach: `store`, `catalog` (rows in, rows out).

use std::cmp::Ordering;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::error::ArrowError;

use crate::changelog::copied::copied_in_order;

/// Rows of one side of a rewrite held for the walk, in file order, each batch with its
/// `_side` (see `files`).
#[derive(Default)]
struct Held {
    batches: Vec<RecordBatch>,
    sides: Vec<i8>,
    bytes: usize,
    /// Its files are read to the end.
    ended: bool,
}

/// A spilled batch of rows with their `_side`.
pub(super) type Sided = (RecordBatch, i8);

/// The rows of both sides that the next walk compares.
pub(super) struct Windows {
    removed: Held,
    added: Held,
    /// Bytes each side reads up to before a walk.
    limit: usize,
    /// Columns the walk compares: the table's, and the row id where rows have lineage.
    compared: usize,
}

impl Windows {
    pub fn new(limit: usize, compared: usize) -> Self {
        Self {
            removed: Held::default(),
            added: Held::default(),
            limit,
            compared,
        }
    }

    fn side(&mut self, removed: bool) -> &mut Held {
        if removed {
            &mut self.removed
        } else {
            &mut self.added
        }
    }

    /// Whether the removed (or the added) side reads on before the next walk.
    pub fn wants(&self, removed: bool) -> bool {
        let held = if removed { &self.removed } else { &self.added };
        !held.ended && held.bytes < self.limit
    }

    /// Holds `batch` of the removed (or the added) side, whose rows are on `side`.
    pub fn push(&mut self, removed: bool, batch: RecordBatch, side: i8) {
        let held = self.side(removed);
        held.bytes += batch.get_array_memory_size();
        held.batches.push(batch);
        held.sides.push(side);
    }

    /// The removed (or the added) side's files are read to the end.
    pub fn end(&mut self, removed: bool) {
        self.side(removed).ended = true;
    }

    /// Both sides are read and walked.
    pub fn done(&self) -> bool {
        let done = |held: &Held| held.ended && held.batches.is_empty();
        done(&self.removed) && done(&self.added)
    }

    /// Walks what is held, drops the pairs it finds and returns the rows to spill: what
    /// it left unpaired, except each side's rows after its last pair, which stay for the
    /// next window while the other side reads on and they fill at most half a window
    /// (the walk stopped there because the other side's window ended, not at a
    /// difference).
    pub fn walk(&mut self) -> Result<Vec<Sided>, ArrowError> {
        let copied = copied_in_order(&self.removed.batches, &self.added.batches, self.compared)?;
        let room = self.limit / 2;
        let (removed_reads_on, added_reads_on) = (!self.removed.ended, !self.added.ended);
        let mut spill = Vec::new();
        let removed = std::mem::take(&mut self.removed);
        self.removed = removed.leave(&copied.removed, added_reads_on, room, &mut spill)?;
        let added = std::mem::take(&mut self.added);
        self.added = added.leave(&copied.added, removed_reads_on, room, &mut spill)?;
        Ok(spill)
    }
}

impl Held {
    /// What stays of this side once a walk paired its `paired` rows: unpaired rows go to
    /// `spill`, except those after its last pair while `other_reads_on` and they hold at
    /// most `room` bytes.
    fn leave(
        self,
        paired: &[Vec<bool>],
        other_reads_on: bool,
        room: usize,
        spill: &mut Vec<Sided>,
    ) -> Result<Held, ArrowError> {
        // (batch, row) just after the last pair.
        let (tail_batch, tail_row) = paired
            .iter()
            .enumerate()
            .rev()
            .find_map(|(b, rows)| Some((b, rows.iter().rposition(|&p| p)? + 1)))
            .unwrap_or((0, 0));
        let mut kept = Held {
            ended: self.ended,
            ..Held::default()
        };
        for (b, (batch, side)) in self.batches.into_iter().zip(self.sides).enumerate() {
            let rows = batch.num_rows();
            let from = match b.cmp(&tail_batch) {
                Ordering::Less => rows,
                Ordering::Equal => tail_row,
                Ordering::Greater => 0,
            };
            // Rows the walk stepped over: an update's, a delete's or an insert's.
            let stepped: Vec<bool> = (0..rows).map(|r| r < from && !paired[b][r]).collect();
            if stepped.contains(&true) {
                let rows = filter_record_batch(&batch, &BooleanArray::from(stepped))?;
                spill.push((rows, side));
            }
            if from < rows {
                let rest = batch.slice(from, rows - from);
                kept.bytes += rest.get_array_memory_size();
                kept.batches.push(rest);
                kept.sides.push(side);
            }
        }
        if !other_reads_on || kept.bytes > room {
            spill.extend(kept.batches.drain(..).zip(kept.sides.drain(..)));
            kept.bytes = 0;
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::Int64Type;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::changelog::carryover::tests::schema;

    type Row = (i64, String);

    fn batch(rows: &[Row]) -> RecordBatch {
        let ids: Int64Array = rows.iter().map(|r| Some(r.0)).collect();
        let values: StringArray = rows.iter().map(|r| Some(r.1.as_str())).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(values)]).unwrap()
    }

    fn rows_of(batch: &RecordBatch) -> Vec<Row> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let values = batch.column(1).as_string::<i32>();
        (0..batch.num_rows())
            .map(|i| (ids.value(i), values.value(i).to_string()))
            .collect()
    }

    /// Feeds `removed` and `added` (sides 0 and 1) through windows of `limit` bytes in
    /// batches of `batch_rows` rows, as a spilling map task does; the rows spilled, by side.
    fn spilled(removed: &[Row], added: &[Row], batch_rows: usize, limit: usize) -> [Vec<Row>; 2] {
        let mut sides = [
            removed
                .chunks(batch_rows)
                .map(batch)
                .collect::<Vec<_>>()
                .into_iter(),
            added
                .chunks(batch_rows)
                .map(batch)
                .collect::<Vec<_>>()
                .into_iter(),
        ];
        let mut windows = Windows::new(limit, 2);
        let mut out = [Vec::new(), Vec::new()];
        let mut walks = 0;
        while !windows.done() {
            for (stream, (removed, side)) in sides.iter_mut().zip([(true, 0), (false, 1)]) {
                while windows.wants(removed) {
                    match stream.next() {
                        Some(batch) => windows.push(removed, batch, side),
                        None => windows.end(removed),
                    }
                }
            }
            for (batch, side) in windows.walk().unwrap() {
                out[side as usize].extend(rows_of(&batch));
            }
            walks += 1;
            assert!(walks < 10_000, "the windows never end");
        }
        out
    }

    /// `rows` less `other`, as multisets.
    fn difference(rows: &[Row], other: &[Row]) -> BTreeMap<Row, i64> {
        let mut counts = BTreeMap::new();
        for row in rows {
            *counts.entry(row.clone()).or_default() += 1;
        }
        for row in other {
            *counts.entry(row.clone()).or_default() -= 1;
        }
        counts.retain(|_, n| *n != 0);
        counts
    }

    fn row(id: i64, value: &str) -> Row {
        (id, value.to_string())
    }

    /// A 64-byte value, so that a window's bytes count rows.
    fn value(n: i64) -> String {
        format!("{n:064}")
    }

    #[test]
    fn a_rewrite_in_order_spills_only_its_changes_across_windows() {
        let removed: Vec<Row> = (0..5000).map(|i| row(i, &value(i))).collect();
        let mut added = removed.clone();
        added[10] = row(10, "updated");
        added.remove(2500);
        added.insert(4000, row(9999, &value(9999)));
        added.push(row(10_000, &value(10_000)));
        // Windows of a few hundred rows, batches that straddle them.
        let [gone, came] = spilled(&removed, &added, 97, 64 << 10);
        assert_eq!(gone, vec![row(10, &value(10)), row(2500, &value(2500))]);
        assert_eq!(
            came,
            vec![
                row(10, "updated"),
                row(9999, &value(9999)),
                row(10_000, &value(10_000))
            ]
        );
    }

    #[test]
    fn sides_in_different_orders_spill_everything_and_end() {
        let removed: Vec<Row> = (0..3000).map(|i| row(i, &value(i))).collect();
        let added: Vec<Row> = removed.iter().rev().cloned().collect();
        let [gone, came] = spilled(&removed, &added, 100, 16 << 10);
        assert_eq!((gone.len(), came.len()), (3000, 3000));
    }

    #[test]
    fn what_is_spilled_has_the_multiset_difference_of_the_whole() {
        let mut rng = StdRng::seed_from_u64(17);
        for case in 0..300 {
            // Duplicates, updates, deletes, inserts and moved runs of rows.
            let len = rng.random_range(0..400);
            let removed: Vec<Row> = (0..len)
                .map(|_| row(rng.random_range(0..60), ["a", "b"][rng.random_range(0..2)]))
                .collect();
            let mut added = Vec::new();
            for r in &removed {
                match rng.random_range(0..20) {
                    0 => {}
                    1 => added.push(row(r.0, "c")),
                    2 => added.extend([r.clone(), row(rng.random_range(0..60), "a")]),
                    _ => added.push(r.clone()),
                }
            }
            if rng.random_bool(0.3) && added.len() > 10 {
                let at = rng.random_range(0..added.len() - 10);
                let moved: Vec<Row> = added.drain(at..at + 10).collect();
                added.extend(moved);
            }
            let batch_rows = rng.random_range(1..50);
            let limit = rng.random_range(0..8192);
            let [gone, came] = spilled(&removed, &added, batch_rows, limit);
            assert_eq!(
                difference(&gone, &came),
                difference(&removed, &added),
                "case {case}: batches of {batch_rows}, windows of {limit} bytes"
            );
            assert!(gone.len() <= removed.len() && came.len() <= added.len());
        }
    }
}
