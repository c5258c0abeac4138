//! Rendering events as an Arrow IPC stream: the table's (selected) columns plus Spark's
//! changelog columns, one row per insert or delete and two per update, so that pyarrow,
//! polars or Spark code written against `create_changelog_view` reads a page as is; then
//! the row lineage of v3 tables (`_row_id`, `_last_updated_sequence_number`; null for
//! other tables) and `_anomaly`, icefeed's own.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, new_null_array};
use arrow::compute::{cast, interleave};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::error::FeedError;
use super::events::{EventBatch, EventSink};
use super::ipc_stream::write_stream;
use super::page_body::PageBody;
use crate::change::{Anomaly, LAST_UPDATED, Op, ROW_ID};
use crate::changes::ReadSchema;
use crate::store::{SegmentRecord, TableId};

/// `INSERT`, `DELETE`, `UPDATE_BEFORE` or `UPDATE_AFTER`.
pub const CHANGE_TYPE: &str = "_change_type";
/// The ordinal of the event's change set in the table's feed.
pub const CHANGE_ORDINAL: &str = "_change_ordinal";
/// The snapshot that made the change.
pub const COMMIT_SNAPSHOT_ID: &str = "_commit_snapshot_id";
/// What is anomalous about the change (the event's `anomaly`), null for valid commits.
pub const ANOMALY: &str = "_anomaly";

/// Collects events of one table and one schema as Arrow batches.
#[derive(Default)]
pub struct ArrowSink {
    /// The table and schema of the page, fixed by its first segment.
    scope: Option<(TableId, i32)>,
    schema: Option<SchemaRef>,
    batches: Vec<RecordBatch>,
    events: usize,
}

impl ArrowSink {
    /// A sink for the events of any one table and schema.
    pub fn new() -> Self {
        Self::default()
    }

    /// The schema id of the page's events, once the first segment was accepted.
    pub fn schema_id(&self) -> Option<i32> {
        self.scope.map(|(_, id)| id)
    }

    /// Events written (an update is one event and two rows).
    pub fn events(&self) -> usize {
        self.events
    }

    /// Whether no event was written yet (the page's columns are then unknown).
    pub fn is_empty(&self) -> bool {
        self.schema.is_none()
    }

    /// The page as an Arrow IPC stream. An empty page carries the columns of `empty`
    /// (the schema the table's next events are expected in, with the selected columns).
    pub fn finish(self, empty: Option<(&ReadSchema, &[usize])>) -> Result<PageBody, FeedError> {
        let schema = match (self.schema, empty) {
            (Some(schema), _) => schema,
            (None, Some((read, columns))) => {
                let table = read.batch_schema();
                output_schema(columns.iter().map(|&i| table.field(i).clone()).collect())
            }
            (None, None) => output_schema(Vec::new()),
        };
        Ok(write_stream(&schema, &self.batches)?)
    }
}

/// The table's columns followed by the changelog columns.
fn output_schema(mut fields: Vec<Field>) -> SchemaRef {
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, false));
    fields.push(Field::new(CHANGE_ORDINAL, DataType::Int64, false));
    fields.push(Field::new(COMMIT_SNAPSHOT_ID, DataType::Int64, false));
    fields.push(Field::new(ROW_ID, DataType::Int64, true));
    fields.push(Field::new(LAST_UPDATED, DataType::Int64, true));
    fields.push(Field::new(ANOMALY, DataType::Utf8, true));
    Arc::new(Schema::new(fields))
}

/// Which image an output row comes from.
const BEFORE: usize = 0;
const AFTER: usize = 1;

impl EventSink for ArrowSink {
    fn accepts(&mut self, table: TableId, segment: &SegmentRecord) -> bool {
        let scope = (table, segment.schema_id);
        *self.scope.get_or_insert(scope) == scope
    }

    fn write(&mut self, batch: &EventBatch<'_>, rows: &[usize]) -> Result<(), FeedError> {
        let mut picks = Vec::with_capacity(rows.len() + rows.len() / 4);
        let mut types = Vec::with_capacity(picks.capacity());
        for &row in rows {
            match batch.op(row)? {
                Op::Insert => {
                    picks.push((AFTER, row));
                    types.push("INSERT");
                }
                Op::Delete => {
                    picks.push((BEFORE, row));
                    types.push("DELETE");
                }
                Op::Update => {
                    picks.extend([(BEFORE, row), (AFTER, row)]);
                    types.extend(["UPDATE_BEFORE", "UPDATE_AFTER"]);
                }
            }
        }
        let after = batch
            .after
            .as_ref()
            .ok_or_else(|| FeedError::Corrupt(batch.segment.path.clone()))?;
        // `inserts` segments have no before image; their picks never ask for one.
        let before = batch.before.as_ref().unwrap_or(after);

        let schema = self.schema.get_or_insert_with(|| {
            output_schema(
                batch
                    .columns
                    .iter()
                    .map(|&i| {
                        let f = &after.fields[i];
                        Field::new(f.name(), f.data_type().clone(), true)
                    })
                    .collect(),
            )
        });
        let run = run_of(&picks);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (&i, field) in batch.columns.iter().zip(schema.fields()) {
            let sources = [&before.columns[i], &after.columns[i]];
            let column = match run {
                // Consecutive rows of one side (a run of inserts, say): shared, not copied.
                Some((side, first)) => sources[side].slice(first, picks.len()),
                None => interleave(&sources.map(|c| c.as_ref()), &picks)?,
            };
            // Files of one schema written by different writers may name nested children
            // differently; the page keeps the names of its first batch.
            columns.push(if column.data_type() == field.data_type() {
                column
            } else {
                cast(&column, field.data_type())?
            });
        }
        self.events += rows.len();
        let n = picks.len();
        columns.push(Arc::new(StringArray::from(types)));
        columns.push(Arc::new(Int64Array::from(vec![batch.segment.ordinal; n])));
        columns.push(Arc::new(Int64Array::from(vec![
            batch.segment.snapshot_id;
            n
        ])));
        for part in 0..2 {
            columns.push(if batch.lineage.iter().all(Option::is_none) {
                new_null_array(&DataType::Int64, n)
            } else {
                let lineage: Int64Array = picks
                    .iter()
                    .map(|&(side, row)| batch.lineage[side].and_then(|l| l.of(row)[part]))
                    .collect();
                Arc::new(lineage)
            });
        }
        columns.push(if batch.has_anomalies() {
            let anomalies = picks
                .iter()
                .map(|&(_, row)| Ok(batch.anomaly(row)?.map(Anomaly::as_str)))
                .collect::<Result<StringArray, FeedError>>()?;
            Arc::new(anomalies)
        } else {
            new_null_array(&DataType::Utf8, n)
        });
        self.batches
            .push(RecordBatch::try_new(schema.clone(), columns)?);
        Ok(())
    }
}

/// The side and first row of `picks` when they are consecutive rows of one side.
fn run_of(picks: &[(usize, usize)]) -> Option<(usize, usize)> {
    let &(side, first) = picks.first()?;
    picks
        .iter()
        .enumerate()
        .all(|(i, &(s, row))| s == side && row == first + i)
        .then_some((side, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_consecutive_rows_of_one_side() {
        assert_eq!(
            run_of(&[(AFTER, 3), (AFTER, 4), (AFTER, 5)]),
            Some((AFTER, 3))
        );
        assert_eq!(run_of(&[(BEFORE, 0)]), Some((BEFORE, 0)));
        assert_eq!(run_of(&[]), None);
        // An update's two rows, a gap, a step back: copied row by row.
        assert_eq!(run_of(&[(BEFORE, 1), (AFTER, 1)]), None);
        assert_eq!(run_of(&[(AFTER, 1), (AFTER, 3)]), None);
        assert_eq!(run_of(&[(AFTER, 2), (AFTER, 1)]), None);
    }
}
