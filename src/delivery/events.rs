//! The events a sink renders: runs of one segment's events as read ([`EventBatch`]),
//! and the sinks' traits. Reading lives in [`super::pull`], rendering in the sinks.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use arrow::array::{Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{FieldRef, Int8Type, Int64Type};

use super::error::FeedError;
use super::rendered::RenderedChunk;
use crate::change::{Anomaly, Op, table_width};
use crate::changes::json::JsonOptions;
use crate::changes::writer;
use crate::changes::{Position, ReadSchema};
use crate::store::{SegmentRecord, SourceTable, TableId};

/// An Iceberg schema of published change sets, parsed once.
pub struct SchemaEntry {
    pub schema: iceberg::spec::Schema,
    pub read: ReadSchema,
    /// `read` with the row lineage columns, for `inserts` segments of v3 tables.
    pub(super) with_lineage: ReadSchema,
}

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
    pub(super) fn new(
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

    /// Whether any event of the batch may have an anomaly.
    pub fn has_anomalies(&self) -> bool {
        self.anomalies
            .is_some_and(|codes| codes.null_count() < codes.len())
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

/// What is the same for every batch of a segment.
#[derive(Clone, Copy)]
pub(super) struct BatchHead<'a> {
    pub(super) table: &'a SourceTable,
    pub(super) segment: &'a SegmentRecord,
    pub(super) schema: &'a SchemaEntry,
    pub(super) key: &'a [usize],
    pub(super) columns: &'a [usize],
    pub(super) whole_rows: bool,
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
