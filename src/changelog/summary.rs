//! The cross-check of a snapshot's summary against its manifests (MERGE_ON_READ V1): a
//! summary that counts other files than the manifests hold means a writer bug or a
//! planner that missed entries, and either would publish a wrong change set.
//! Must not reach: the rest of the crate.

use iceberg::spec::SnapshotRef;

/// The files a plan found the snapshot to add and remove.
#[derive(Debug, Default)]
pub(super) struct FileCounts {
    pub added_data: usize,
    pub removed_data: usize,
    /// `None` where the plan did not count them (no delete manifests were read).
    pub added_deletes: Option<usize>,
    pub removed_deletes: Option<usize>,
}

/// Why the snapshot's summary disagrees with `counts`, if it does. Counts the summary
/// leaves out are not checked (writers may omit them).
pub(super) fn disagreement(snapshot: &SnapshotRef, counts: &FileCounts) -> Option<String> {
    let summary = &snapshot.summary().additional_properties;
    let checks = [
        ("added-data-files", Some(counts.added_data)),
        ("deleted-data-files", Some(counts.removed_data)),
        ("added-delete-files", counts.added_deletes),
        ("removed-delete-files", counts.removed_deletes),
    ];
    let wrong: Vec<String> = checks
        .iter()
        .filter_map(|(key, found)| {
            let found = (*found)?;
            let said: usize = summary.get(*key)?.parse().ok()?;
            (said != found).then(|| format!("{key} is {said}, its manifests hold {found}"))
        })
        .collect();
    (!wrong.is_empty()).then(|| {
        format!(
            "its summary disagrees with its manifests ({}); refusing to guess which is right",
            wrong.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::spec::{Operation, Snapshot, Summary};

    use super::*;

    fn snapshot(summary: &[(&str, &str)]) -> SnapshotRef {
        let properties: HashMap<String, String> = summary
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Arc::new(
            Snapshot::builder()
                .with_snapshot_id(7)
                .with_sequence_number(1)
                .with_timestamp_ms(0)
                .with_manifest_list("list.avro")
                .with_summary(Summary {
                    operation: Operation::Overwrite,
                    additional_properties: properties,
                })
                .build(),
        )
    }

    #[test]
    fn counts_the_summary_gives_must_match_and_missing_ones_pass() {
        let counts = FileCounts {
            added_data: 1,
            removed_data: 2,
            added_deletes: Some(3),
            removed_deletes: None,
        };
        let agreeing = snapshot(&[
            ("added-data-files", "1"),
            ("deleted-data-files", "2"),
            ("added-delete-files", "3"),
            ("removed-delete-files", "9"),
        ]);
        assert_eq!(disagreement(&agreeing, &counts), None);
        assert_eq!(disagreement(&snapshot(&[]), &counts), None);
        let wrong = disagreement(&snapshot(&[("deleted-data-files", "3")]), &counts).unwrap();
        assert!(
            wrong.contains("deleted-data-files is 3, its manifests hold 2"),
            "{wrong}"
        );
    }
}
