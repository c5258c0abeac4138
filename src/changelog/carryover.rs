//! Carryover removal and update pairing: the row-level heart of copy-on-write changes.
//! Must not reach: `changes`, `store` (rows in, changes out).
//!
//! A copy-on-write commit rewrites whole files, copying most rows unchanged. Within one
//! partition group the rows of the removed files and of the added files are compared as
//! multisets of whole rows; identical rows cancel pairwise (duplicates counted). What
//! survives is the real change, which is then paired by identifier columns.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use std::hash::BuildHasher;

use arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use arrow::buffer::ScalarBuffer;
use arrow::compute::{interleave_record_batch, take};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};
use foldhash::fast::FixedState;

use super::copied::copied_in_order;
use crate::change::{ChangeRow, Op, Survivors, has_lineage, table_columns, table_width};

/// Cancels rows that appear identically in `removed` and `added` (a multiset difference).
/// Survivors keep their input order. Copies in the order they were removed are paired
/// first (`copied`); only what that leaves is held in the row format: the removed side's
/// rows, while added rows are converted a batch at a time and probed. `regained[b]` says
/// whether added batch `b` holds rows a data file regained (missing: it does not).
pub fn cancel_carryover(
    schema: &SchemaRef,
    removed: &[RecordBatch],
    added: &[RecordBatch],
    regained: &[bool],
) -> Result<Survivors, ArrowError> {
    // Rows with lineage pair with the copy that kept their row id, when one did.
    let compared = table_width(schema) + usize::from(has_lineage(schema));
    let copied = copied_in_order(removed, added, compared)?;
    let converter = whole_row_converter(schema)?;
    let removed_rows = removed
        .iter()
        .zip(&copied.removed)
        .map(|(batch, paired)| Unpaired::convert(&converter, batch, paired))
        .collect::<Result<Vec<_>, _>>()?;
    // Removed rows by hash; rows sharing a hash are chained through `next`, so the index
    // costs no allocation per row. `at` holds (batch, index among its unpaired rows).
    let total: usize = removed_rows.iter().map(|u| u.rows.len()).sum();
    let mut at: Vec<(usize, usize)> = Vec::with_capacity(total);
    let mut next: Vec<u32> = Vec::with_capacity(total);
    let mut heads: HashMap<u64, u32, FixedState> =
        HashMap::with_capacity_and_hasher(total, FixedState::default());
    for (b, unpaired) in removed_rows.iter().enumerate() {
        for (r, row) in unpaired.converted.iter().enumerate() {
            next.push(
                heads
                    .insert(row_hash(row.as_ref()), at.len() as u32)
                    .unwrap_or(NONE),
            );
            at.push((b, r));
        }
    }
    let removed_row = |i: u32| {
        let (b, r) = at[i as usize];
        removed_rows[b].converted.row(r)
    };
    let mut live = vec![true; total];
    let mut inserted = Vec::new();
    let mut regained_rows = Vec::new();
    for (b, (batch, paired)) in added.iter().zip(&copied.added).enumerate() {
        let unpaired = Unpaired::convert(&converter, batch, paired)?;
        let batch_regained = regained.get(b).copied().unwrap_or(false);
        for (&r, row) in unpaired.rows.iter().zip(unpaired.converted.iter()) {
            let hash = row_hash(row.as_ref());
            let mut prev = NONE;
            let mut i = heads.get(&hash).copied().unwrap_or(NONE);
            while i != NONE && removed_row(i) != row {
                (prev, i) = (i, next[i as usize]);
            }
            if i == NONE {
                if batch_regained {
                    regained_rows.push(inserted.len() as u32);
                }
                inserted.push((b, r as usize));
                continue;
            }
            // A copy: unlink the matched removed row so duplicates are counted.
            live[i as usize] = false;
            let after = next[i as usize];
            match (prev, after) {
                (NONE, NONE) => drop(heads.remove(&hash)),
                (NONE, _) => drop(heads.insert(hash, after)),
                _ => next[prev as usize] = after,
            }
        }
    }
    let deleted: Vec<(usize, usize)> = at
        .iter()
        .zip(live)
        .filter_map(|(&(b, r), live)| live.then_some((b, removed_rows[b].rows[r] as usize)))
        .collect();
    Ok(Survivors {
        deleted: gather(schema, removed, &deleted)?,
        inserted: gather(schema, added, &inserted)?,
        regained: regained_rows,
    })
}

/// The rows of a batch the in-order walk left unpaired, in the row format.
struct Unpaired {
    /// Their indexes in the batch.
    rows: ScalarBuffer<u32>,
    converted: Rows,
}

impl Unpaired {
    fn convert(
        converter: &RowConverter,
        batch: &RecordBatch,
        paired: &[bool],
    ) -> Result<Self, ArrowError> {
        let rows = UInt32Array::from_iter_values(
            (0..batch.num_rows() as u32).filter(|&r| !paired[r as usize]),
        );
        let columns = table_columns(batch);
        let converted = if rows.len() == batch.num_rows() {
            converter.convert_columns(columns)?
        } else {
            let taken = columns
                .iter()
                .map(|c| take(c, &rows, None))
                .collect::<Result<Vec<_>, _>>()?;
            converter.convert_columns(&taken)?
        };
        Ok(Self {
            rows: rows.values().clone(),
            converted,
        })
    }
}

const NONE: u32 = u32::MAX;

/// The rows at `(batch, row)` of `batches`, in that order, as one batch.
pub fn gather(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    rows: &[(usize, usize)],
) -> Result<RecordBatch, ArrowError> {
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    let batches: Vec<&RecordBatch> = batches.iter().collect();
    interleave_record_batch(&batches, rows)
}

/// A converter of whole rows (the table's columns, without lineage: a row copied by a
/// rewrite may get a new id) to the row format, in which identical rows are identical
/// bytes.
pub fn whole_row_converter(schema: &SchemaRef) -> Result<RowConverter, ArrowError> {
    converter_for(schema, &(0..table_width(schema)).collect::<Vec<_>>())
}

/// Hash of a row in the row format: equal rows hash alike.
pub fn row_hash(row: &[u8]) -> u64 {
    FixedState::with_seed(0x1cef_eed5).hash_one(row)
}

/// Two rows on the same side with the same key: the identifier columns are not unique.
#[derive(Debug, thiserror::Error)]
#[error("two {side} rows share one key (row {first} and row {second})")]
pub struct DuplicateKey {
    /// `deleted` or `inserted`.
    pub side: &'static str,
    /// Index of the first row with the key on that side.
    pub first: u32,
    /// Index of the second.
    pub second: u32,
}

/// Pairs surviving deletes and inserts by the columns at `key`: same key on both sides
/// is an update. Without key columns, rows with lineage pair by row id (a v3 writer keeps
/// the id of a row it updates) and others do not pair. The order is deterministic (by
/// key, or by whole row without keys), so every node produces the same change set.
pub fn pair(survivors: &Survivors, key: &[usize]) -> Result<Vec<ChangeRow>, PairError> {
    let schema = survivors.deleted.schema();
    let columns: Vec<usize> = if key.is_empty() {
        (0..table_width(&schema)).collect()
    } else {
        key.to_vec()
    };
    let converter = converter_for(&schema, &columns)?;
    let project = |b: &RecordBatch| {
        columns
            .iter()
            .map(|&i| b.column(i).clone())
            .collect::<Vec<_>>()
    };
    let deleted = converter.convert_columns(&project(&survivors.deleted))?;
    let inserted = converter.convert_columns(&project(&survivors.inserted))?;

    if key.is_empty() {
        let mut changes: Vec<(Vec<u8>, ChangeRow)> = by_row_id(survivors)
            .into_iter()
            .map(|c| {
                let row = match c.before {
                    Some(b) => deleted.row(b as usize),
                    None => inserted.row(c.after.expect("a change has a side") as usize),
                };
                (row.as_ref().to_vec(), c)
            })
            .collect();
        // Deletes come before updates and inserts (as they did before lineage paired any).
        let rank = |op: Op| match op {
            Op::Delete => 0,
            Op::Update => 1,
            Op::Insert => 2,
        };
        changes.sort_by(|a, b| (rank(a.1.op), &a.0).cmp(&(rank(b.1.op), &b.0)));
        return Ok(changes.into_iter().map(|(_, c)| c).collect());
    }

    let before = index_unique(&deleted, "deleted")?;
    let after = index_unique(&inserted, "inserted")?;
    let mut keys: Vec<&[u8]> = before.keys().chain(after.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    Ok(keys
        .into_iter()
        .map(|k| {
            let (b, a) = (before.get(k).copied(), after.get(k).copied());
            let op = match (b, a) {
                (Some(_), Some(_)) => Op::Update,
                (Some(_), None) => Op::Delete,
                _ => Op::Insert,
            };
            ChangeRow {
                op,
                before: b,
                after: a,
            }
        })
        .collect())
}

/// The changes of rows without a key: a delete and an insert with the same row id
/// (lineage) are an update, every other row a delete or an insert of its own.
fn by_row_id(survivors: &Survivors) -> Vec<ChangeRow> {
    let ids = |batch: &RecordBatch| {
        has_lineage(batch.schema_ref()).then(|| {
            let ids = batch.column(table_width(batch.schema_ref()));
            ids.as_primitive::<Int64Type>().clone()
        })
    };
    let mut before: HashMap<i64, u32> = HashMap::new();
    if let Some(ids) = ids(&survivors.deleted) {
        for (i, id) in ids.iter().enumerate() {
            // A row id twice on one side is no update of one row: those stay unpaired.
            if let Some(id) = id {
                before.entry(id).or_insert(i as u32);
            }
        }
    }
    let inserted_ids = ids(&survivors.inserted);
    let mut paired = vec![false; survivors.deleted.num_rows()];
    let mut changes = Vec::new();
    for after in 0..survivors.inserted.num_rows() {
        let id = inserted_ids
            .as_ref()
            .and_then(|ids| ids.is_valid(after).then(|| ids.value(after)));
        let before = id
            .and_then(|id| before.get(&id).copied())
            .filter(|&b| !std::mem::replace(&mut paired[b as usize], true));
        changes.push(ChangeRow {
            op: if before.is_some() {
                Op::Update
            } else {
                Op::Insert
            },
            before,
            after: Some(after as u32),
        });
    }
    changes.extend(
        (0..survivors.deleted.num_rows() as u32)
            .filter(|&b| !paired[b as usize])
            .map(|b| ChangeRow {
                op: Op::Delete,
                before: Some(b),
                after: None,
            }),
    );
    changes
}

/// Failures of pairing.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// The identifier columns are not unique on one side.
    #[error(transparent)]
    DuplicateKey(#[from] DuplicateKey),
    /// Converting rows failed.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
}

fn index_unique<'a>(
    rows: &'a Rows,
    side: &'static str,
) -> Result<HashMap<&'a [u8], u32>, DuplicateKey> {
    let mut index = HashMap::with_capacity(rows.num_rows());
    for (i, row) in rows.iter().enumerate() {
        match index.entry(row.data()) {
            Entry::Vacant(v) => {
                v.insert(i as u32);
            }
            Entry::Occupied(o) => {
                return Err(DuplicateKey {
                    side,
                    first: *o.get(),
                    second: i as u32,
                });
            }
        }
    }
    Ok(index)
}

fn converter_for(schema: &SchemaRef, columns: &[usize]) -> Result<RowConverter, ArrowError> {
    RowConverter::new(
        columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// `(id long, v string)`, for tests of carryover elsewhere too.
    pub(crate) fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    fn rows(data: &[(i64, &str)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(
                    data.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    data.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    }

    fn changes(
        removed: &[(i64, &str)],
        added: &[(i64, &str)],
        key: &[usize],
    ) -> Vec<(Op, Option<i64>, Option<i64>)> {
        let s = cancel_carryover(&schema(), &[rows(removed)], &[rows(added)], &[]).unwrap();
        paired_ids(&s, key)
    }

    /// The changes `pair` makes of `s`, each side as its row's id.
    fn paired_ids(s: &Survivors, key: &[usize]) -> Vec<(Op, Option<i64>, Option<i64>)> {
        let (d, i) = (ids(&s.deleted), ids(&s.inserted));
        pair(s, key)
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    c.op,
                    c.before.map(|b| d[b as usize]),
                    c.after.map(|a| i[a as usize]),
                )
            })
            .collect()
    }

    #[test]
    fn a_rewrite_that_copies_rows_unchanged_has_no_changes() {
        let same = [(1, "a"), (2, "b"), (3, "c")];
        assert!(changes(&same, &same, &[0]).is_empty());
        assert!(
            changes(&same, &[(3, "c"), (1, "a"), (2, "b")], &[]).is_empty(),
            "order does not matter"
        );
    }

    #[test]
    fn changed_rows_pair_into_updates_and_the_rest_stay_lone() {
        let got = changes(
            &[(1, "a"), (2, "b"), (3, "c")],
            &[(1, "a"), (2, "B"), (4, "d")],
            &[0],
        );
        assert_eq!(
            got,
            vec![
                (Op::Update, Some(2), Some(2)),
                (Op::Delete, Some(3), None),
                (Op::Insert, None, Some(4))
            ]
        );
    }

    #[test]
    fn duplicates_are_counted_not_collapsed() {
        // Two identical rows removed, one written back: one delete remains.
        let got = changes(&[(1, "a"), (1, "a")], &[(1, "a")], &[]);
        assert_eq!(got, vec![(Op::Delete, Some(1), None)]);
        let got = changes(&[(1, "a")], &[(1, "a"), (1, "a")], &[]);
        assert_eq!(got, vec![(Op::Insert, None, Some(1))]);
    }

    #[test]
    fn without_keys_deletes_and_inserts_never_pair() {
        let got = changes(&[(1, "a")], &[(1, "b")], &[]);
        assert_eq!(
            got,
            vec![(Op::Delete, Some(1), None), (Op::Insert, None, Some(1))]
        );
    }

    #[test]
    fn a_key_twice_on_one_side_is_an_error() {
        let s =
            cancel_carryover(&schema(), &[rows(&[(1, "a"), (1, "b")])], &[rows(&[])], &[]).unwrap();
        let err = pair(&s, &[0]).unwrap_err();
        assert!(
            matches!(
                err,
                PairError::DuplicateKey(DuplicateKey {
                    side: "deleted",
                    ..
                })
            ),
            "{err}"
        );
    }

    #[test]
    fn a_delete_and_reinsert_of_the_same_row_is_carryover() {
        assert!(changes(&[(1, "a")], &[(1, "a")], &[0]).is_empty());
    }

    #[test]
    fn regained_rows_stay_marked_through_cancelling() {
        let s = cancel_carryover(
            &schema(),
            &[rows(&[(1, "a"), (3, "c")])],
            &[rows(&[(2, "b"), (1, "a")]), rows(&[(3, "c"), (4, "d")])],
            &[false, true],
        )
        .unwrap();
        assert_eq!(ids(&s.inserted), vec![2, 4]);
        assert_eq!(s.regained, vec![1], "(3, c) cancelled; (4, d) regained");
        assert_eq!(
            s.anomaly(Some(1)),
            Some(crate::change::Anomaly::Resurrected)
        );
        assert_eq!(s.anomaly(Some(0)), None);
        assert_eq!(s.anomaly(None), None);
    }

    /// `(id long, v string)` rows with row lineage `(row id, last updated)`.
    fn with_lineage(data: &[(i64, &str, Option<i64>)]) -> RecordBatch {
        let mut fields: Vec<Field> = schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(crate::change::lineage_fields());
        let plain = rows(&data.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>());
        let mut columns = plain.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(
            data.iter().map(|r| r.2).collect::<Vec<_>>(),
        )));
        columns.push(Arc::new(Int64Array::from(vec![Some(1); data.len()])));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    #[test]
    fn without_keys_rows_with_lineage_pair_by_row_id() {
        let removed = with_lineage(&[(1, "a", Some(10)), (2, "b", Some(11)), (3, "c", None)]);
        let added = with_lineage(&[
            // (1, a) copied under a new id: carryover all the same.
            (1, "a", Some(20)),
            (2, "B", Some(11)),
            (3, "C", None),
            (4, "d", Some(12)),
        ]);
        let s = cancel_carryover(&removed.schema(), &[removed], &[added], &[]).unwrap();
        assert_eq!(
            paired_ids(&s, &[]),
            vec![
                (Op::Delete, Some(3), None),
                (Op::Update, Some(2), Some(2)),
                (Op::Insert, None, Some(3)),
                (Op::Insert, None, Some(4)),
            ],
            "a row without an id stays a delete and an insert"
        );
    }
}
