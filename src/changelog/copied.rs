//! Copies found in order: most writers rewrite a file row by row (pyiceberg, the iceberg
//! crate, Spark without a shuffle), so the rows a rewrite copied come in the order of the
//! file it removed. Walking both sides side by side finds those copies with a comparison
//! per column, where the multiset difference (`carryover`) converts every row of both
//! sides to the row format and hashes it.
//!
//! The walk only pairs rows that are equal, so what it leaves over has the same multiset
//! difference as the whole: the difference stays exact whatever the order, and rows the
//! walk cannot place (reordered or shuffled writes) cost what they cost before.
//! Must not reach: `changes`, `store` (rows in, changes out).

use arrow::array::{
    Array, ArrayRef, ArrowNativeTypeOp, AsArray, GenericByteArray, RecordBatch, downcast_primitive,
    make_comparator,
};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::SortOptions;
use arrow::compute::kernels::cmp::not_distinct;
use arrow::datatypes::{
    ArrowNativeType, BinaryType, ByteArrayType, DataType, LargeBinaryType, LargeUtf8Type,
    ToByteSlice, Utf8Type,
};
use arrow::error::ArrowError;
use arrow::util::bit_chunk_iterator::BitChunks;

/// How far past a difference the walk looks for the copies to go on: a run of up to
/// this many changed, deleted or inserted rows in a row keeps it in step.
const LOOKAHEAD: usize = 8;

/// Differences in a row the walk could not step over before it gives up: the sides are
/// not in the same order, and the multiset difference pairs what is left.
const GIVE_UP: usize = 32;

/// Which rows of each batch of each side the walk paired with an equal row of the other.
#[derive(Debug)]
pub struct Copied {
    pub removed: Vec<Vec<bool>>,
    pub added: Vec<Vec<bool>>,
}

#[cfg(test)]
impl Copied {
    /// Rows paired on each side (the same count).
    fn pairs(&self) -> usize {
        self.removed.iter().flatten().filter(|&&c| c).count()
    }
}

/// Pairs the rows of `added` that copy rows of `removed` in the same order, comparing the
/// first `columns` columns (the table's, and the row id where rows have lineage).
pub fn copied_in_order(
    removed: &[RecordBatch],
    added: &[RecordBatch],
    columns: usize,
) -> Result<Copied, ArrowError> {
    let mut copied = Copied {
        removed: removed.iter().map(|b| vec![false; b.num_rows()]).collect(),
        added: added.iter().map(|b| vec![false; b.num_rows()]).collect(),
    };
    let equal = |r: Row, a: Row| {
        let run = equal_run(&removed[r.batch], r.row, &added[a.batch], a.row, 1, columns);
        run.map(|n| n == 1)
    };
    let (mut r, mut a) = (Row::first(removed), Row::first(added));
    let (mut misses, mut window) = (0, MIN_WINDOW);
    while let (Some(rr), Some(ar)) = (r, a) {
        let (rb, ab) = (&removed[rr.batch], &added[ar.batch]);
        let n = window
            .min(rb.num_rows() - rr.row)
            .min(ab.num_rows() - ar.row);
        let same = equal_run(rb, rr.row, ab, ar.row, n, columns)?;
        copied.removed[rr.batch][rr.row..rr.row + same].fill(true);
        copied.added[ar.batch][ar.row..ar.row + same].fill(true);
        (r, a) = (rr.after(removed, same), ar.after(added, same));
        if same > 0 {
            misses = 0;
        }
        if same == n {
            window = (window * 2).min(MAX_WINDOW);
            continue;
        }
        window = MIN_WINDOW;
        let (Some(rr), Some(ar)) = (r, a) else { break };
        // A difference: the rows just after it that are equal again say what it was (an
        // update, deleted rows or inserted rows); the rows stepped over stay unpaired.
        let mut step = None;
        'look: for d in 1..=LOOKAHEAD {
            for (dr, da) in [(d, d), (d, 0), (0, d)] {
                if let (Some(rn), Some(an)) = (rr.after(removed, dr), ar.after(added, da))
                    && equal(rn, an)?
                {
                    step = Some((rn, an));
                    break 'look;
                }
            }
        }
        (r, a) = match step {
            Some((rn, an)) => (Some(rn), Some(an)),
            None => {
                misses += 1;
                if misses == GIVE_UP {
                    break;
                }
                (rr.after(removed, 1), ar.after(added, 1))
            }
        };
    }
    Ok(copied)
}

/// Rows compared at once: the window starts small after a difference and doubles while
/// the sides stay equal. Every column before the one that differs compares the whole
/// window (see [`equal_run`]), so a fixed large window would cost many times the run when
/// differences are a few hundred rows apart (an update of every 200th row).
const MIN_WINDOW: usize = 64;
const MAX_WINDOW: usize = 2048;

/// How many of the `n` rows from `r` of `removed` and from `a` of `added` are equal to
/// each other before the first that is not, a column at a time: each column compares
/// only the rows that all columns before it found equal.
fn equal_run(
    removed: &RecordBatch,
    r: usize,
    added: &RecordBatch,
    a: usize,
    mut n: usize,
    columns: usize,
) -> Result<usize, ArrowError> {
    for c in 0..columns {
        if n == 0 {
            break;
        }
        n = column_run(removed.column(c), r, added.column(c), a, n)?;
    }
    Ok(n)
}

/// How many of the `n` values from `r` of `left` and from `a` of `right` are equal before
/// the first that is not (nulls equal nulls). Primitive and byte array values are
/// compared in place, 64 at a time; other types by the comparison kernel (or, nested,
/// the comparator).
fn column_run(
    left: &ArrayRef,
    r: usize,
    right: &ArrayRef,
    a: usize,
    n: usize,
) -> Result<usize, ArrowError> {
    let (lv, rv) = (left.nulls(), right.nulls());
    let in_place = |equal: &dyn Fn(usize, usize) -> u64| {
        masked_run(n, |at, len| {
            let (lvalid, rvalid) = (valid_bits(lv, r + at, len), valid_bits(rv, a + at, len));
            // Equal where both hold equal values or both are null.
            (lvalid & rvalid & equal(at, len)) | !(lvalid | rvalid)
        })
    };
    if left.data_type() == right.data_type() {
        macro_rules! primitive {
            ($t:ty) => {{
                let (l, rt) = (left.as_primitive::<$t>(), right.as_primitive::<$t>());
                let (l, rt) = (&l.values()[r..r + n], &rt.values()[a..a + n]);
                // A copy is mostly the same bytes: the whole run is compared at once
                // first, and 64 values at a time only where it differs.
                if l.to_byte_slice() == rt.to_byte_slice() && same_validity(lv, r, rv, a, n) {
                    return Ok(n);
                }
                return Ok(in_place(&|at, len| {
                    let (x, y) = (&l[at..at + len], &rt[at..at + len]);
                    // Most chunks of a copy hold the same bytes, compared at once; equal
                    // bytes are equal values (floats compare by their bits).
                    if x.to_byte_slice() == y.to_byte_slice() {
                        u64::MAX
                    } else {
                        equal_mask(x.iter().zip(y), |(x, y)| x.is_eq(*y))
                    }
                }));
            }};
        }
        macro_rules! bytes {
            ($t:ty) => {{
                let (l, rt) = (left.as_bytes::<$t>(), right.as_bytes::<$t>());
                if same_bytes(l, r, rt, a, n) && same_validity(lv, r, rv, a, n) {
                    return Ok(n);
                }
                return Ok(in_place(&|at, len| {
                    let (from, to) = ((r + at..r + at + len), (a + at..a + at + len));
                    equal_mask(from.zip(to), |(i, j)| {
                        let (x, y): (&[u8], &[u8]) = (l.value(i).as_ref(), rt.value(j).as_ref());
                        x == y
                    })
                }));
            }};
        }
        downcast_primitive! {
            left.data_type() => (primitive),
            DataType::Utf8 => bytes!(Utf8Type),
            DataType::LargeUtf8 => bytes!(LargeUtf8Type),
            DataType::Binary => bytes!(BinaryType),
            DataType::LargeBinary => bytes!(LargeBinaryType),
            _ => {}
        }
    }
    if left.data_type().is_nested() {
        // The comparison kernels leave nested nulls undefined; the comparator does not.
        let cmp = make_comparator(left, right, SortOptions::default())?;
        return Ok((0..n).take_while(|&i| cmp(r + i, a + i).is_eq()).count());
    }
    Ok(leading_ones(
        not_distinct(&left.slice(r, n), &right.slice(a, n))?.values(),
    ))
}

/// Whether the `n` values from `r` of `left` and from `a` of `right` have the same
/// lengths and, run together, the same bytes: then each is equal to its counterpart.
fn same_bytes<T: ByteArrayType>(
    left: &GenericByteArray<T>,
    r: usize,
    right: &GenericByteArray<T>,
    a: usize,
    n: usize,
) -> bool {
    let (lo, ro) = (
        &left.value_offsets()[r..=r + n],
        &right.value_offsets()[a..=a + n],
    );
    let (l0, r0) = (lo[0], ro[0]);
    lo.iter().zip(ro).all(|(&x, &y)| x - l0 == y - r0)
        && left.value_data()[l0.as_usize()..lo[n].as_usize()]
            == right.value_data()[r0.as_usize()..ro[n].as_usize()]
}

/// Whether the `n` values from `r` of the left array and from `a` of the right one are
/// null at the same positions.
fn same_validity(
    left: Option<&NullBuffer>,
    r: usize,
    right: Option<&NullBuffer>,
    a: usize,
    n: usize,
) -> bool {
    if left.is_none() && right.is_none() {
        return true;
    }
    (0..n).step_by(64).all(|at| {
        let len = (n - at).min(64);
        let differ = valid_bits(left, r + at, len) ^ valid_bits(right, a + at, len);
        differ & (u64::MAX >> (64 - len)) == 0
    })
}

/// How many of `n` positions are equal before the first that is not, from `equal(at,
/// len)`: a mask of which of the `len` (at most 64) positions from `at` are equal.
fn masked_run(n: usize, equal: impl Fn(usize, usize) -> u64) -> usize {
    let mut at = 0;
    while at < n {
        let len = (n - at).min(64);
        let ones = equal(at, len).trailing_ones() as usize;
        if ones < len {
            return at + ones;
        }
        at += len;
    }
    n
}

/// Bit `i` set where the `i`th of up to 64 pairs is equal; branch-free, so that the
/// compiler can compare several at once.
fn equal_mask<P>(pairs: impl Iterator<Item = P>, eq: impl Fn(P) -> bool) -> u64 {
    pairs
        .enumerate()
        .fold(0, |mask, (i, pair)| mask | (u64::from(eq(pair)) << i))
}

/// The validity of the `len` (at most 64) values from `at`, a bit each: all set without
/// a null buffer.
fn valid_bits(nulls: Option<&NullBuffer>, at: usize, len: usize) -> u64 {
    let Some(nulls) = nulls else {
        return u64::MAX;
    };
    let bits = nulls.inner();
    let chunks = BitChunks::new(bits.values(), bits.offset() + at, len);
    chunks.iter_padded().next().unwrap_or(0)
}

/// How many bits at the start of `bits` are set.
fn leading_ones(bits: &BooleanBuffer) -> usize {
    let chunks = bits.bit_chunks();
    let mut ones = 0;
    for chunk in chunks.iter() {
        let run = chunk.trailing_ones() as usize;
        ones += run;
        if run < 64 {
            return ones;
        }
    }
    ones + (chunks.remainder_bits().trailing_ones() as usize).min(chunks.remainder_len())
}

/// A row of one side: its batch, and its index in that batch.
#[derive(Clone, Copy, Debug)]
struct Row {
    batch: usize,
    row: usize,
}

impl Row {
    fn first(batches: &[RecordBatch]) -> Option<Self> {
        Self { batch: 0, row: 0 }.after(batches, 0)
    }

    /// The row `by` rows on, across batch bounds; `None` past the last.
    fn after(self, batches: &[RecordBatch], by: usize) -> Option<Self> {
        let (mut batch, mut row) = (self.batch, self.row + by);
        while row >= batches.get(batch)?.num_rows() {
            row -= batches[batch].num_rows();
            batch += 1;
        }
        Some(Self { batch, row })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(rows: &[(i64, Option<&str>, f64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("x", DataType::Float64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    fn unpaired(marks: &[Vec<bool>]) -> Vec<(usize, usize)> {
        marks
            .iter()
            .enumerate()
            .flat_map(|(b, rows)| {
                rows.iter()
                    .enumerate()
                    .filter(|(_, c)| !**c)
                    .map(move |(r, _)| (b, r))
            })
            .collect()
    }

    #[test]
    fn a_rewrite_in_order_leaves_only_its_changes_unpaired() {
        let removed = [
            batch(&[(1, Some("a"), 1.0), (2, None, 2.0), (3, Some("c"), 3.0)]),
            batch(&[]),
            batch(&[
                (4, Some("d"), 4.0),
                (5, Some("e"), 5.0),
                (6, Some("f"), 6.0),
            ]),
        ];
        // Row 2 updated, row 4 deleted, a row inserted after 5, across other batch bounds.
        let added = [
            batch(&[(1, Some("a"), 1.0), (2, Some("b"), 2.0)]),
            batch(&[(3, Some("c"), 3.0), (5, Some("e"), 5.0), (9, None, 9.0)]),
            batch(&[(6, Some("f"), 6.0)]),
        ];
        let copied = copied_in_order(&removed, &added, 3).unwrap();
        assert_eq!(unpaired(&copied.removed), [(0, 1), (2, 0)]);
        assert_eq!(unpaired(&copied.added), [(0, 1), (1, 2)]);
        assert_eq!(copied.pairs(), 4);
    }

    #[test]
    fn nulls_pair_with_nulls_and_floats_by_their_bits() {
        let removed = [batch(&[(1, None, 0.0), (2, None, f64::NAN)])];
        let added = [batch(&[(1, None, -0.0), (2, None, f64::NAN)])];
        let copied = copied_in_order(&removed, &added, 3).unwrap();
        assert_eq!(copied.removed, [vec![false, true]]);
        assert_eq!(copied.added, [vec![false, true]]);
    }

    #[test]
    fn nulls_are_alike_whatever_lies_under_them() {
        use arrow::buffer::{NullBuffer, ScalarBuffer};
        let ints = |values: Vec<i64>, valid: Option<Vec<bool>>| -> ArrayRef {
            let nulls = valid.map(NullBuffer::from);
            Arc::new(Int64Array::new(ScalarBuffer::from(values), nulls))
        };
        let run = |l: &ArrayRef, r, rt: &ArrayRef, a, n| column_run(l, r, rt, a, n).unwrap();
        // Nulls equal nulls, whatever value the buffer holds under them.
        let left = ints(vec![1, 5, 3], Some(vec![true, false, true]));
        let right = ints(vec![1, 7, 3], Some(vec![true, false, true]));
        assert_eq!(run(&left, 0, &right, 0, 3), 3);
        // A null is not a value, even the one under it.
        let valued = ints(vec![1, 5, 3], None);
        assert_eq!(run(&left, 0, &valued, 0, 3), 1);
        assert_eq!(run(&valued, 1, &left, 1, 2), 0);
        // Long runs, from offsets on both sides.
        let long: Vec<i64> = (0..300).collect();
        let mut changed = long.clone();
        changed[137] = -1;
        let (long, changed) = (ints(long, None), ints(changed, None));
        assert_eq!(run(&long, 0, &long, 0, 300), 300);
        assert_eq!(run(&long, 0, &changed, 0, 300), 137);
        assert_eq!(run(&long, 7, &changed, 7, 200), 130);
        assert_eq!(run(&long, 137, &changed, 137, 5), 0);
        assert_eq!(run(&long, 1, &long, 0, 10), 0);
    }

    #[test]
    fn strings_are_equal_by_value_not_by_their_bytes_run_together() {
        let strings = |v: &[Option<&str>]| -> ArrayRef { Arc::new(StringArray::from(v.to_vec())) };
        let run = |l: &ArrayRef, r, rt: &ArrayRef, a, n| column_run(l, r, rt, a, n).unwrap();
        let left = strings(&[Some("x"), Some("ab"), Some("c")]);
        let right = strings(&[Some("x"), Some("a"), Some("bc")]);
        assert_eq!(run(&left, 0, &right, 0, 3), 1);
        let same = strings(&[Some("y"), Some("x"), Some("ab"), Some("c")]);
        assert_eq!(run(&left, 0, &same, 1, 3), 3);
        assert_eq!(run(&left, 1, &same, 2, 2), 2);
        let nulls = strings(&[Some("x"), None, Some("c")]);
        let empty = strings(&[Some("x"), Some(""), Some("c")]);
        assert_eq!(run(&nulls, 0, &nulls, 0, 3), 3);
        assert_eq!(run(&nulls, 0, &empty, 0, 3), 1);
    }

    #[test]
    fn runs_match_a_value_by_value_comparison_across_words_offsets_and_nulls() {
        use arrow::array::{BinaryArray, Int32Array, LargeStringArray};
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(0x64);
        for round in 0..400 {
            let len = rng.random_range(1..300);
            // Few distinct values and frequent nulls, so long equal runs end anywhere.
            let values: Vec<Option<i32>> = (0..len)
                .map(|_| (rng.random_range(0..4) > 0).then(|| rng.random_range(0..2)))
                .collect();
            let mut other = values.clone();
            for _ in 0..rng.random_range(0..4) {
                let i = rng.random_range(0..len);
                other[i] = match other[i] {
                    Some(v) if rng.random_bool(0.5) => Some(v + 1),
                    Some(_) => None,
                    None => Some(0),
                };
            }
            let array = |v: &[Option<i32>]| -> ArrayRef {
                match round % 4 {
                    0 => Arc::new(Int32Array::from(v.to_vec())),
                    1 => Arc::new(Float64Array::from_iter(v.iter().map(|x| x.map(f64::from)))),
                    2 => Arc::new(LargeStringArray::from_iter(
                        v.iter().map(|x| x.map(|x| "s".repeat(x as usize))),
                    )),
                    _ => Arc::new(BinaryArray::from_iter(
                        v.iter().map(|x| x.map(|x| vec![7u8; x as usize])),
                    )),
                }
            };
            // Sliced arrays, so that values and nulls start at offsets within a byte.
            let cut = rng.random_range(0..len);
            let (left, right) = (array(&values).slice(cut, len - cut), array(&other));
            let (r, a) = (rng.random_range(0..len - cut), rng.random_range(0..len));
            let n = rng.random_range(0..=(len - cut - r).min(len - a));
            let want = (0..n)
                .take_while(|&i| values[cut + r + i] == other[a + i])
                .count();
            assert_eq!(
                column_run(&left, r, &right, a, n).unwrap(),
                want,
                "round {round}: cut {cut}, r {r}, a {a}, n {n}"
            );
        }
    }

    #[test]
    fn sides_in_different_orders_are_given_up_on_and_left_unpaired() {
        let rows: Vec<(i64, Option<&str>, f64)> =
            (0..200).map(|i| (i, Some("same"), i as f64)).collect();
        let reversed: Vec<_> = rows.iter().rev().copied().collect();
        let copied = copied_in_order(&[batch(&rows)], &[batch(&reversed)], 3).unwrap();
        // The walk gives up long before the middle, where the reversal would meet.
        assert_eq!(copied.pairs(), 0, "{copied:?}");
    }

    #[test]
    fn leading_ones_counts_across_words_and_offsets() {
        let bits = |v: &[bool]| BooleanBuffer::from(v.to_vec());
        assert_eq!(leading_ones(&bits(&[])), 0);
        assert_eq!(leading_ones(&bits(&[true; 70])), 70);
        let mut v = vec![true; 130];
        v[100] = false;
        assert_eq!(leading_ones(&bits(&v)), 100);
        assert_eq!(leading_ones(&bits(&v).slice(3, 120)), 97);
        assert_eq!(leading_ones(&bits(&v).slice(101, 29)), 29);
    }

    #[test]
    fn nested_columns_are_compared_by_the_comparator() {
        let ints = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as arrow::array::ArrayRef;
        let structs = |v: Vec<i64>, valid: Vec<bool>| {
            let field = Arc::new(Field::new("n", DataType::Int64, true));
            arrow::array::StructArray::new(
                vec![field.as_ref().clone()].into(),
                vec![ints(v)],
                Some(valid.into()),
            )
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", structs(vec![], vec![]).data_type().clone(), true),
        ]));
        let make = |ids: Vec<i64>, s: arrow::array::StructArray| {
            RecordBatch::try_new(schema.clone(), vec![ints(ids), Arc::new(s)]).unwrap()
        };
        // Row 1 differs in the struct only; row 2's nulls hide different child values.
        let removed = make(
            vec![1, 2, 3],
            structs(vec![10, 20, 7], vec![true, true, false]),
        );
        let added = make(
            vec![1, 2, 3],
            structs(vec![10, 21, 8], vec![true, true, false]),
        );
        let copied = copied_in_order(&[removed], &[added], 2).unwrap();
        assert_eq!(copied.removed, [vec![true, false, true]]);
    }

    /// Rows as `(id, name)` strings, for comparing multisets.
    fn rendered(batch: &RecordBatch) -> Vec<String> {
        let ids = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let names = batch.column(1).as_string::<i32>();
        (0..batch.num_rows())
            .map(|i| {
                format!(
                    "{}/{:?}",
                    ids.value(i),
                    names.is_valid(i).then(|| names.value(i))
                )
            })
            .collect()
    }

    /// `a` minus `b` as multisets, in `a`'s order.
    fn minus(a: &[String], b: &[String]) -> Vec<String> {
        let mut left: Vec<&String> = b.iter().collect();
        a.iter()
            .filter(|row| match left.iter().position(|l| l == row) {
                Some(i) => {
                    left.swap_remove(i);
                    false
                }
                None => true,
            })
            .cloned()
            .collect()
    }

    #[test]
    fn cancelling_is_the_multiset_difference_whatever_the_rewrite_did() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(0x1cef);
        for round in 0..300 {
            // Few distinct values, so duplicates and lookalikes are common.
            let value = |rng: &mut StdRng| {
                let name = ["a", "b", "c"][rng.random_range(0..3)];
                (
                    rng.random_range(0..6),
                    (rng.random_range(0..8) > 0).then_some(name),
                    0.0,
                )
            };
            let removed: Vec<_> = (0..rng.random_range(0..120))
                .map(|_| value(&mut rng))
                .collect();
            let mut added = Vec::new();
            for row in &removed {
                match rng.random_range(0..20) {
                    0 => {}
                    1 => added.push(value(&mut rng)),
                    2 => {
                        added.push(*row);
                        added.push(value(&mut rng));
                    }
                    _ => added.push(*row),
                }
            }
            if round % 5 == 0 {
                // A writer that shuffles.
                for i in (1..added.len()).rev() {
                    added.swap(i, rng.random_range(0..=i));
                }
            }
            let split = |rows: &[(i64, Option<&str>, f64)], rng: &mut StdRng| {
                let mut batches = Vec::new();
                let mut at = 0;
                while at < rows.len() {
                    let n = rng.random_range(0..=(rows.len() - at).min(40));
                    batches.push(batch(&rows[at..at + n]));
                    at += n;
                }
                batches
            };
            let (r, a) = (split(&removed, &mut rng), split(&added, &mut rng));
            let schema = batch(&[]).schema();
            let survivors =
                crate::changelog::carryover::cancel_carryover(&schema, &r, &a, &[]).unwrap();
            let all =
                |batches: &[RecordBatch]| batches.iter().flat_map(rendered).collect::<Vec<_>>();
            let (r, a) = (all(&r), all(&a));
            let (mut deleted, mut inserted) =
                (rendered(&survivors.deleted), rendered(&survivors.inserted));
            let (mut want_deleted, mut want_inserted) = (minus(&r, &a), minus(&a, &r));
            for v in [
                &mut deleted,
                &mut inserted,
                &mut want_deleted,
                &mut want_inserted,
            ] {
                v.sort();
            }
            assert_eq!(
                (deleted, inserted),
                (want_deleted, want_inserted),
                "round {round}"
            );
        }
    }
}
