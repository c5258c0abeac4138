//! The change-set index: which Parquet segments hold which events of which snapshot,
//! and the publish transaction that records them and advances the checkpoint at once.
//! Must not reach: `catalog`, `changelog`, `workers` (PostgreSQL only).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::leases::{Lease, fence};
use super::{Store, StoreError, TableId};
use crate::change::FileLineage;
use crate::changes::{ChangeSetKey, ShuffleKey};

/// Channel on which every publish is announced (payload: the table id).
pub const CHANGES_CHANNEL: &str = "icefeed_changes";

/// A change set ready to publish.
#[derive(Clone, Debug)]
pub struct NewChangeSet {
    /// Its table, snapshot and the ordinal it was planned for: its objects are keyed by
    /// it, and it is published only if the feed's last change set is still the one before.
    pub key: ChangeSetKey,
    pub sequence_number: i64,
    pub operation: String,
    /// `export`, `snapshot` or `reset`.
    pub kind: &'static str,
    /// For a reset: the checkpoint it went from.
    pub reset_from: Option<i64>,
    /// Rows the snapshot brought back by dropping deletes without a replacement.
    pub resurrected_rows: i64,
    pub committed_at: DateTime<Utc>,
    pub schema_id: i32,
    /// The Iceberg schema (JSON) the rows were read with.
    pub schema: serde_json::Value,
    pub segments: Vec<NewSegment>,
    /// Change-store prefixes the publish makes garbage (the snapshot's shuffle files);
    /// the snapshot's tasks are forgotten in the same transaction.
    pub garbage: Vec<String>,
}

/// One Parquet file of a change set, in event order.
#[derive(Clone, Debug)]
pub struct NewSegment {
    pub event_count: i64,
    pub layout: &'static str,
    pub path: String,
    pub size_bytes: i64,
    /// What its events take decoded, where the writer knew it (see [`StoredSegment`]).
    pub decoded_bytes: Option<i64>,
    /// Key of the positions of the file at `path` that are not events (see
    /// [`crate::changes::deleted_rows`]), for a copied data file with deleted rows.
    pub deleted_rows: Option<String>,
    /// Where an `inserts` segment's rows inherit their lineage from (v3 tables).
    pub lineage: Option<FileLineage>,
}

impl NewSegment {
    /// A `changes` segment icefeed encoded.
    pub fn changes(path: String, event_count: i64, size_bytes: i64, decoded: Option<i64>) -> Self {
        Self {
            event_count,
            layout: "changes",
            path,
            size_bytes,
            decoded_bytes: decoded,
            deleted_rows: None,
            lineage: None,
        }
    }
}

/// A published change set.
#[derive(Clone, Debug)]
pub struct ChangeSetRecord {
    pub ordinal: i64,
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub operation: String,
    pub kind: String,
    pub reset_from_snapshot_id: Option<i64>,
    pub committed_at: DateTime<Utc>,
    pub schema_id: i32,
    pub event_count: i64,
    pub resurrected_rows: i64,
}

/// A published segment with the metadata of its change set: segments `s` joined with
/// their change sets `c`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SegmentRecord {
    pub ordinal: i64,
    pub segment_no: i32,
    pub first_event: i64,
    pub event_count: i64,
    pub layout: String,
    pub path: String,
    pub size_bytes: i64,
    pub decoded_bytes: Option<i64>,
    pub deleted_rows: Option<String>,
    /// With `lineage_sequence_number`: an `inserts` segment's [`FileLineage`].
    pub first_row_id: Option<i64>,
    pub lineage_sequence_number: Option<i64>,
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub committed_at: DateTime<Utc>,
    pub schema_id: i32,
    /// The external version its events carry in OpenSearch.
    pub push_version: i64,
}

/// A segment of the change store, by the size its index records: how wide its events
/// are decides how many are read at a time.
pub trait StoredSegment {
    /// Bytes of the segment's file (of the source file, for an `inserts` segment).
    fn size_bytes(&self) -> i64;
    /// Events of the segment.
    fn event_count(&self) -> i64;

    /// Bytes its events take decoded, where the writer recorded it.
    fn decoded_bytes(&self) -> Option<i64>;

    /// Bytes the change store holds per event of this segment (at least 1), or a
    /// [`DECODED_PER_STORED`]th of its decoded bytes per event when that is more. Decoded
    /// or rendered, an event takes some 2 to 20 times what it stores; rows that compress
    /// far better (a document repeated) count by what they decode to, so that sizes
    /// reckoned in stored bytes bound what is decoded whatever the rows.
    fn stored_bytes_per_event(&self) -> u64 {
        let events = self.event_count().max(1) as u64;
        let stored = self.size_bytes().max(0) as u64 / events;
        let decoded = self.decoded_bytes().unwrap_or(0).max(0) as u64 / events;
        stored.max(decoded / DECODED_PER_STORED).max(1)
    }

    /// How many of this segment's events store about `bytes`: from 1 (a wider event is
    /// still read alone) to `max`.
    fn events_within(&self, bytes: u64, max: usize) -> usize {
        let events = bytes / self.stored_bytes_per_event();
        usize::try_from(events).unwrap_or(usize::MAX).clamp(1, max)
    }
}

/// Decoded bytes of an event that count as one stored byte: about what rows of ordinary
/// tables decode to per byte of a segment, so that their sizes go by what they store.
const DECODED_PER_STORED: u64 = 4;

impl StoredSegment for SegmentRecord {
    fn size_bytes(&self) -> i64 {
        self.size_bytes
    }

    fn decoded_bytes(&self) -> Option<i64> {
        self.decoded_bytes
    }

    fn event_count(&self) -> i64 {
        self.event_count
    }
}

#[cfg(test)]
impl SegmentRecord {
    /// A segment of change set `ordinal` holding `event_count` events from `first_event`
    /// in `size_bytes`, for tests of how segments are read.
    pub fn sample(
        ordinal: i64,
        first_event: i64,
        event_count: i64,
        layout: &str,
        size_bytes: i64,
    ) -> Self {
        Self {
            ordinal,
            segment_no: 0,
            first_event,
            event_count,
            layout: layout.into(),
            path: format!("{ordinal}/{first_event}"),
            size_bytes,
            decoded_bytes: None,
            deleted_rows: None,
            first_row_id: None,
            lineage_sequence_number: None,
            snapshot_id: ordinal,
            sequence_number: ordinal,
            committed_at: DateTime::UNIX_EPOCH,
            schema_id: 0,
            push_version: 0,
        }
    }
}

impl SegmentRecord {
    /// Where the rows of an `inserts` segment of a v3 table inherit their lineage from.
    pub fn lineage(&self) -> Option<FileLineage> {
        Some(FileLineage {
            first_row_id: self.first_row_id.map(|id| id as u64),
            sequence_number: self.lineage_sequence_number?,
        })
    }
}

/// Push versions leave this many values free above every sequence number, for the
/// change sets a reset publishes before the table's next commit.
const VERSIONS_PER_SEQUENCE_NUMBER: i64 = 256;

/// The external version of a change set with `sequence_number` published after one with
/// version `last`: its sequence number, scaled, as long as that grows; one more than the
/// last otherwise (a reset goes back to an older snapshot, and the rows it restores must
/// still overwrite the newer ones).
fn push_version(sequence_number: i64, last: i64) -> i64 {
    sequence_number
        .saturating_mul(VERSIONS_PER_SEQUENCE_NUMBER)
        .max(last.saturating_add(1))
}

/// The change-store prefixes of the plans for the ordinal of `published` that were
/// abandoned for it, from the snapshots their tasks were for.
fn abandoned_prefixes(published: &ChangeSetKey, planned: Vec<i64>) -> Vec<String> {
    let abandoned: std::collections::BTreeSet<i64> = planned
        .into_iter()
        .filter(|s| *s != published.snapshot_id)
        .collect();
    abandoned
        .into_iter()
        .flat_map(|snapshot_id| {
            let key = ChangeSetKey {
                snapshot_id,
                ..*published
            };
            [key.prefix(), key.shuffle_prefix()]
        })
        .collect()
}

impl Store {
    /// Publishes a change set and advances the checkpoint in one transaction fenced by the
    /// table lease, if the feed's last change set is still the one before its ordinal
    /// (else `Conflict`: the plan is stale). Wakes every node's streams.
    pub async fn publish_change_set(
        &self,
        lease: &Lease,
        cs: &NewChangeSet,
    ) -> Result<(), StoreError> {
        let table = cs.key.table;
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        let row = sqlx::query!(
            "SELECT last_ordinal, last_push_version FROM source_tables WHERE id = $1 FOR UPDATE",
            table.0
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        let (last, last_version) = (row.last_ordinal, row.last_push_version);
        let ordinal = cs.key.ordinal;
        if last + 1 != ordinal {
            return Err(StoreError::Conflict(format!(
                "change set {ordinal} was planned after change set {}, but the feed's last \
                 is {last}",
                ordinal - 1
            )));
        }
        let version = push_version(cs.sequence_number, last_version);
        let prefix = cs.key.prefix();
        let event_count: i64 = cs.segments.iter().map(|s| s.event_count).sum();

        sqlx::query!(
            "INSERT INTO table_schemas (table_id, schema_id, schema) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
            table.0,
            cs.schema_id,
            cs.schema
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO change_sets (table_id, ordinal, snapshot_id, sequence_number, operation, \
               kind, reset_from_snapshot_id, committed_at, schema_id, event_count, published_by, \
               prefix, push_version, resurrected_rows) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            table.0,
            ordinal,
            cs.key.snapshot_id,
            cs.sequence_number,
            cs.operation,
            cs.kind,
            cs.reset_from,
            cs.committed_at,
            cs.schema_id,
            event_count,
            lease.owner,
            prefix,
            version,
            cs.resurrected_rows
        )
        .execute(&mut *tx)
        .await?;

        let mut first = Vec::with_capacity(cs.segments.len());
        let mut next = 0i64;
        for s in &cs.segments {
            first.push(next);
            next += s.event_count;
        }
        let segments = &cs.segments;
        let counts: Vec<i64> = segments.iter().map(|s| s.event_count).collect();
        let layouts: Vec<&str> = segments.iter().map(|s| s.layout).collect();
        let paths: Vec<&str> = segments.iter().map(|s| s.path.as_str()).collect();
        let sizes: Vec<i64> = segments.iter().map(|s| s.size_bytes).collect();
        let decoded: Vec<Option<i64>> = segments.iter().map(|s| s.decoded_bytes).collect();
        let deleted: Vec<Option<&str>> =
            segments.iter().map(|s| s.deleted_rows.as_deref()).collect();
        let first_row_ids: Vec<Option<i64>> = segments
            .iter()
            .map(|s| s.lineage.and_then(|l| l.first_row_id).map(|id| id as i64))
            .collect();
        let lineage_sequence_numbers: Vec<Option<i64>> = segments
            .iter()
            .map(|s| s.lineage.map(|l| l.sequence_number))
            .collect();
        // `as` skips the macros' type check, which takes arrays of owned, non-null
        // elements only (`&[String]`, `&[i64]`).
        sqlx::query!(
            "INSERT INTO segments (table_id, ordinal, segment_no, first_event, event_count, \
               layout, path, size_bytes, decoded_bytes, deleted_rows, first_row_id, \
               lineage_sequence_number) \
             SELECT $1, $2, n::int - 1, f, c, l, p, b, e, d, r, q \
               FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], \
                           $8::bigint[], $9::text[], $10::bigint[], $11::bigint[]) \
                    WITH ORDINALITY AS u(f, c, l, p, b, e, d, r, q, n)",
            table.0,
            ordinal,
            &first,
            &counts,
            &layouts as &[&str],
            &paths as &[&str],
            &sizes,
            &decoded as &[Option<i64>],
            &deleted as &[Option<&str>],
            &first_row_ids as &[Option<i64>],
            &lineage_sequence_numbers as &[Option<i64>]
        )
        .execute(&mut *tx)
        .await?;

        // A published snapshot clears the error of the attempts that failed to publish it,
        // with the checkpoint: no reader sees the new checkpoint beside the old error, nor
        // a lag when it reached the head the last poll saw.
        sqlx::query!(
            "UPDATE source_tables SET last_ordinal = $2, last_push_version = $6, mode = 'follow', \
               checkpoint_snapshot_id = $3, checkpoint_sequence_number = $4, \
               checkpoint_committed_at = $5, last_error = NULL, last_error_code = NULL, \
               updated_at = now(), \
               snapshots_behind = CASE WHEN head_snapshot_id = $3 THEN 0 \
                                       ELSE greatest(snapshots_behind - 1, 0) END, \
               oldest_pending_committed_at = CASE WHEN head_snapshot_id = $3 THEN NULL \
                                                  ELSE oldest_pending_committed_at END \
             WHERE id = $1",
            table.0,
            ordinal,
            cs.key.snapshot_id,
            cs.sequence_number,
            cs.committed_at,
            version
        )
        .execute(&mut *tx)
        .await?;
        // Every plan for this ordinal is done with, the published one and any abandoned
        // (the branch moved while it ran): the files of an abandoned one are garbage too.
        let planned: Vec<i64> = sqlx::query_scalar!(
            "DELETE FROM tasks WHERE table_id = $1 AND ordinal = $2 RETURNING snapshot_id",
            table.0,
            ordinal
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut garbage = cs.garbage.clone();
        garbage.extend(abandoned_prefixes(&cs.key, planned));
        super::retention::queue_garbage(&mut tx, &garbage, Duration::ZERO).await?;
        super::notify(&mut *tx, CHANGES_CHANNEL, &table.to_string()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Segments holding events after position (`ordinal`, `consumed`), in feed order:
    /// those ending after it (a change set's segments end one after another), in one
    /// range scan of `segments_by_end`. None when retention pruned the events right after
    /// the position: it removes index rows and raises the floor in one transaction, so
    /// an answer that is not empty holds every segment from the position on.
    pub async fn segments_after(
        &self,
        table: TableId,
        ordinal: i64,
        consumed: i64,
        max: i64,
    ) -> Result<Vec<SegmentRecord>, StoreError> {
        Ok(sqlx::query_as!(
            SegmentRecord,
            "SELECT s.ordinal, s.segment_no, s.first_event, s.event_count, s.layout, s.path, \
                    s.size_bytes, s.decoded_bytes, s.deleted_rows, s.first_row_id, \
                    s.lineage_sequence_number, \
                    c.snapshot_id, c.sequence_number, c.committed_at, c.schema_id, \
                    c.push_version \
               FROM segments s JOIN change_sets c USING (table_id, ordinal) \
                    JOIN source_tables t ON t.id = s.table_id \
              WHERE s.table_id = $1 AND (s.ordinal, s.end_event) > ($2, $3) \
                AND ($2, $3) >= (t.pruned_through_ordinal, t.pruned_through_events) \
              ORDER BY s.ordinal, s.end_event \
              LIMIT $4",
            table.0,
            ordinal,
            consumed,
            max
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The change set with `ordinal`, if published.
    pub async fn change_set(
        &self,
        table: TableId,
        ordinal: i64,
    ) -> Result<Option<ChangeSetRecord>, StoreError> {
        Ok(sqlx::query_as!(
            ChangeSetRecord,
            "SELECT ordinal, snapshot_id, sequence_number, operation, kind, \
                    reset_from_snapshot_id, committed_at, schema_id, event_count, \
                    resurrected_rows \
               FROM change_sets WHERE table_id = $1 AND ordinal = $2",
            table.0,
            ordinal
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// At most `limit` published change sets of a table older than ordinal `before`,
    /// newest first.
    pub async fn list_change_sets(
        &self,
        table: TableId,
        before: i64,
        limit: i64,
    ) -> Result<Vec<ChangeSetRecord>, StoreError> {
        Ok(sqlx::query_as!(
            ChangeSetRecord,
            "SELECT ordinal, snapshot_id, sequence_number, operation, kind, \
                    reset_from_snapshot_id, committed_at, schema_id, event_count, \
                    resurrected_rows \
               FROM change_sets WHERE table_id = $1 AND ordinal < $2 \
              ORDER BY ordinal DESC LIMIT $3",
            table.0,
            before,
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The Iceberg schema (JSON) a table's change sets were read with.
    pub async fn table_schema(
        &self,
        table: TableId,
        schema_id: i32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT schema FROM table_schemas WHERE table_id = $1 AND schema_id = $2",
            table.0,
            schema_id
        )
        .fetch_optional(&self.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_of_plans_abandoned_for_an_ordinal_are_garbage_and_the_published_ones_not() {
        let key = |snapshot_id| ChangeSetKey {
            table: TableId(uuid::Uuid::nil()),
            ordinal: 4,
            snapshot_id,
        };
        let garbage = abandoned_prefixes(&key(7), vec![7, 9, 9, 7]);
        assert_eq!(garbage, [key(9).prefix(), key(9).shuffle_prefix()]);
        assert!(abandoned_prefixes(&key(7), vec![7, 7]).is_empty());
    }

    #[test]
    fn push_versions_grow_with_every_change_set_also_past_a_reset() {
        // Change sets published before versions were scaled pushed their sequence number.
        let first = push_version(5, 5);
        assert_eq!(first, 5 * 256);
        let next = push_version(6, first);
        assert_eq!(next, 6 * 256);
        // A reset to sequence number 3, then the snapshots after it again, then a commit.
        let reset = push_version(3, next);
        let again = push_version(4, reset);
        let again2 = push_version(5, again);
        let commit = push_version(7, again2);
        assert!(next < reset && reset < again && again < again2 && again2 < commit);
        assert_eq!(commit, 7 * 256);
        // More resets than the room between two sequence numbers still grow.
        let mut last = commit;
        for _ in 0..1000 {
            let v = push_version(2, last);
            assert!(v > last);
            last = v;
        }
        assert!(push_version(8, last) > last);
    }
}
