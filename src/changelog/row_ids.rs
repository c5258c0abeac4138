//! Row lineage of data files (Iceberg v3): where a file's rows get their `_row_id` and
//! `_last_updated_sequence_number` when they do not carry them. The iceberg crate reads
//! a data file's `first_row_id` as written; a file added without one inherits it from
//! its manifest, which is computed here as readers do (spec: Row Lineage).
//! Must not reach: `changes`, `store`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, Int64Builder, RecordBatch};
use arrow::datatypes::Int64Type;
use arrow::error::ArrowError;
use iceberg::spec::{
    FormatVersion, ManifestEntry, ManifestFile, ManifestStatus, Snapshot, TableMetadata,
};

use super::SnapshotPlan;
use crate::change::{FileLineage, table_width};

/// Whether the rows of `metadata`'s table have lineage.
pub fn tracks_lineage(metadata: &TableMetadata) -> bool {
    metadata.format_version() >= FormatVersion::V3
}

/// The first row ids of one manifest's data files: every data entry must be passed to
/// [`FirstRowIds::lineage`] in manifest order, since a live file without a first row id
/// takes the manifest's plus the rows of the live files before it that had none.
pub struct FirstRowIds {
    next: Option<u64>,
    tracked: bool,
}

impl FirstRowIds {
    /// For the entries of `manifest` of a table whose rows have lineage if `tracked`.
    pub fn of(manifest: &ManifestFile, tracked: bool) -> Self {
        Self {
            next: manifest.first_row_id,
            tracked,
        }
    }

    /// The lineage of data entry `entry`, the next of the manifest; `None` when the
    /// table's rows have none.
    pub fn lineage(&mut self, entry: &ManifestEntry) -> Option<FileLineage> {
        let own = entry.data_file().first_row_id();
        // A manifest's ids cover its live rows (added and existing, as the manifest list
        // counts them): a deleted entry inherits none and takes none from the others.
        let first_row_id = match entry.status() {
            ManifestStatus::Deleted => own.and_then(|id| u64::try_from(id).ok()),
            _ => self.first_row_id(own, entry.record_count()),
        };
        // The sequence number of the commit that added the file: Iceberg Java's readers
        // (Spark) inherit it, not the data sequence number, which a compaction keeps older.
        let added_at = entry.file_sequence_number.or(entry.sequence_number());
        self.tracked.then(|| FileLineage {
            first_row_id,
            sequence_number: added_at.unwrap_or(0),
        })
    }

    /// The first row id of the next data file, which recorded `own`, of `rows` rows.
    fn first_row_id(&mut self, own: Option<i64>, rows: u64) -> Option<u64> {
        match own {
            Some(id) => u64::try_from(id).ok(),
            None => self.next.inspect(|id| self.next = Some(id + rows)),
        }
    }
}

/// `plan` of a snapshot whose parent state is `parent`, with the removed rows' lineage as
/// the parent gave it: none when the parent was committed before the table became v3.
/// (The commit that upgrades a table gives older files row ids in its own manifest list,
/// which is where the removed files are read from; readers of the parent see none.)
pub fn as_of_parent(plan: SnapshotPlan, parent: Option<&Snapshot>) -> SnapshotPlan {
    match plan {
        SnapshotPlan::Rewrite { mut removed, added }
            if parent.is_some_and(|p| p.first_row_id().is_none()) =>
        {
            for lineage in removed.iter_mut().filter_map(|f| f.lineage.as_mut()) {
                lineage.first_row_id = None;
            }
            SnapshotPlan::Rewrite { removed, added }
        }
        plan => plan,
    }
}

/// `batch` (rows of `file` at positions `positions`, in order, read with lineage) with
/// the lineage its rows did not materialize inherited from `file`: `_row_id` is
/// `first_row_id + position`, `_last_updated_sequence_number` the sequence number the file
/// was added at; both stay null in a file written before the table became v3.
pub fn inherit_lineage(
    batch: &RecordBatch,
    file: &FileLineage,
    positions: &mut impl Iterator<Item = u64>,
) -> Result<RecordBatch, ArrowError> {
    let width = table_width(batch.schema_ref());
    let rows = batch.num_rows();
    let (ids, updated) = (
        batch.column(width).as_primitive::<Int64Type>(),
        batch.column(width + 1).as_primitive::<Int64Type>(),
    );
    let mut row_ids = Int64Builder::with_capacity(rows);
    let mut sequence_numbers = Int64Builder::with_capacity(rows);
    for (row, position) in (0..rows).zip(positions) {
        let own = |column: &Int64Array| column.is_valid(row).then(|| column.value(row));
        let inherited = || Some((file.first_row_id? + position) as i64);
        row_ids.append_option(own(ids).or_else(inherited));
        sequence_numbers.append_option(
            own(updated).or_else(|| file.first_row_id.map(|_| file.sequence_number)),
        );
    }
    let mut columns = batch.columns()[..width].to_vec();
    columns.push(Arc::new(row_ids.finish()) as ArrayRef);
    columns.push(Arc::new(sequence_numbers.finish()));
    RecordBatch::try_new(batch.schema(), columns)
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::change::lineage_fields;

    #[test]
    fn files_without_a_first_row_id_inherit_the_manifests_in_order() {
        let mut ids = FirstRowIds {
            next: Some(100),
            tracked: true,
        };
        let assigned: Vec<Option<u64>> = [(None, 3), (Some(7), 5), (None, 2), (None, 1)]
            .into_iter()
            .map(|(own, rows)| ids.first_row_id(own, rows))
            .collect();
        assert_eq!(assigned, [Some(100), Some(7), Some(103), Some(105)]);

        let mut before_v3 = FirstRowIds {
            next: None,
            tracked: true,
        };
        assert_eq!(before_v3.first_row_id(None, 3), None);
        assert_eq!(before_v3.first_row_id(Some(4), 3), Some(4));
    }

    #[test]
    fn rows_keep_the_lineage_they_carry_and_inherit_the_rest() {
        let mut fields = vec![Field::new("id", DataType::Int64, true)];
        fields.extend(lineage_fields());
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Int64Array::from(vec![Some(40), None, None])),
                Arc::new(Int64Array::from(vec![None, Some(6), None])),
            ],
        )
        .unwrap();
        let lineage = |first_row_id| FileLineage {
            first_row_id,
            sequence_number: 9,
        };
        let columns = |b: RecordBatch| -> Vec<Vec<Option<i64>>> {
            b.columns()[1..]
                .iter()
                .map(|c| c.as_primitive::<Int64Type>().iter().collect())
                .collect()
        };
        // Rows at positions 0, 5 and 6 of a file whose first row id is 1000.
        let inherited =
            inherit_lineage(&batch, &lineage(Some(1000)), &mut [0, 5, 6].into_iter()).unwrap();
        assert_eq!(
            columns(inherited),
            [
                vec![Some(40), Some(1005), Some(1006)],
                vec![Some(9), Some(6), Some(9)]
            ]
        );
        let before_v3 = inherit_lineage(&batch, &lineage(None), &mut (0..)).unwrap();
        assert_eq!(
            columns(before_v3),
            [vec![Some(40), None, None], vec![None, Some(6), None]]
        );
    }
}
