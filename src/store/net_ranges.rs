//! Net ranges: the net changes of a range of a table's feed, computed once by leased
//! tasks and kept, with their segments, while consumers read them.
//! Must not reach: `catalog`, `changelog`, `workers` (PostgreSQL only).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::retention::queue_garbage;
use super::{SegmentRecord, Store, StoreError, TableId};
use crate::changes::{NetRangeKey, Position, ShuffleKey};
use crate::failure::{Failure, FailureCode};

/// Where a range's computation stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetState {
    Computing,
    Ready { event_count: i64 },
    Failed(Failure),
}

/// A range of a table's feed whose net changes are (being) computed.
#[derive(Clone, Debug)]
pub struct NetRange {
    pub key: NetRangeKey,
    /// The events after this position…
    pub after: Position,
    /// …up to and including this one.
    pub until: Position,
    pub schema_id: i32,
    /// Indexes of the identifier columns in the schema; empty: rows are netted whole.
    pub key_columns: Vec<usize>,
    pub state: NetState,
}

/// One Parquet file of a range's result, in event order.
#[derive(Clone, Debug)]
pub struct NetSegment {
    pub segment_no: i32,
    pub first_event: i64,
    pub event_count: i64,
    pub path: String,
    pub size_bytes: i64,
    pub decoded_bytes: Option<i64>,
}

impl super::StoredSegment for NetSegment {
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

/// What every event of one change set shares: the snapshot a net event names.
#[derive(Clone, Debug)]
pub struct ChangeSetHead {
    pub ordinal: i64,
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub committed_at: DateTime<Utc>,
    pub schema_id: i32,
    pub push_version: i64,
}

struct RangeRow {
    id: i64,
    table_id: TableId,
    after_ordinal: i64,
    after_consumed: i64,
    until_ordinal: i64,
    until_consumed: i64,
    schema_id: i32,
    key_columns: Vec<i32>,
    state: String,
    error_code: Option<String>,
    error: Option<String>,
    event_count: Option<i64>,
}

impl From<RangeRow> for NetRange {
    fn from(r: RangeRow) -> Self {
        let state = match r.state.as_str() {
            "ready" => NetState::Ready {
                event_count: r.event_count.unwrap_or(0),
            },
            "failed" => NetState::Failed(Failure::new(
                r.error_code
                    .as_deref()
                    .and_then(FailureCode::parse)
                    .unwrap_or(FailureCode::Internal),
                r.error.unwrap_or_default(),
            )),
            _ => NetState::Computing,
        };
        NetRange {
            key: NetRangeKey {
                table: r.table_id,
                range: r.id,
            },
            after: Position {
                ordinal: r.after_ordinal,
                consumed: r.after_consumed,
            },
            until: Position {
                ordinal: r.until_ordinal,
                consumed: r.until_consumed,
            },
            schema_id: r.schema_id,
            key_columns: r.key_columns.iter().map(|&i| i as usize).collect(),
            state,
        }
    }
}

impl Store {
    /// The range of `table` from `after` to `until`, created if no consumer asked for it
    /// before (true when this call created it), marked as read now.
    pub async fn net_range_for(
        &self,
        table: TableId,
        after: Position,
        until: Position,
        schema_id: i32,
        key_columns: &[usize],
    ) -> Result<(NetRange, bool), StoreError> {
        let key_columns: Vec<i32> = key_columns.iter().map(|&i| i as i32).collect();
        // `xmax = 0`: the row was inserted, not updated by the conflict.
        let row = sqlx::query!(
            r#"INSERT INTO net_ranges (table_id, after_ordinal, after_consumed, until_ordinal,
                                       until_consumed, schema_id, key_columns)
               VALUES ($1, $2, $3, $4, $5, $6, $7)
               ON CONFLICT (table_id, after_ordinal, after_consumed, until_ordinal, until_consumed)
               DO UPDATE SET read_at = now()
               RETURNING id, table_id AS "table_id: TableId", after_ordinal, after_consumed,
                         until_ordinal, until_consumed, schema_id, key_columns, state,
                         error_code, error, event_count, (xmax = 0) AS "created!""#,
            table.0,
            after.ordinal,
            after.consumed,
            until.ordinal,
            until.consumed,
            schema_id,
            &key_columns
        )
        .fetch_one(&self.pool)
        .await?;
        let range = RangeRow {
            id: row.id,
            table_id: row.table_id,
            after_ordinal: row.after_ordinal,
            after_consumed: row.after_consumed,
            until_ordinal: row.until_ordinal,
            until_consumed: row.until_consumed,
            schema_id: row.schema_id,
            key_columns: row.key_columns,
            state: row.state,
            error_code: row.error_code,
            error: row.error,
            event_count: row.event_count,
        };
        Ok((range.into(), row.created))
    }

    /// Range `id` of `table`, marked as read now.
    pub async fn net_range(&self, table: TableId, id: i64) -> Result<Option<NetRange>, StoreError> {
        let row = sqlx::query_as!(
            RangeRow,
            r#"UPDATE net_ranges SET read_at = now() WHERE id = $1 AND table_id = $2
               RETURNING id, table_id AS "table_id: TableId", after_ordinal, after_consumed,
                         until_ordinal, until_consumed, schema_id, key_columns, state,
                         error_code, error, event_count"#,
            id,
            table.0
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// The ranges being computed, for nodes to move on.
    pub async fn computing_net_ranges(&self) -> Result<Vec<NetRange>, StoreError> {
        let rows = sqlx::query_as!(
            RangeRow,
            r#"SELECT id, table_id AS "table_id: TableId", after_ordinal, after_consumed,
                      until_ordinal, until_consumed, schema_id, key_columns, state, error_code,
                      error, event_count
                 FROM net_ranges WHERE state = 'computing' ORDER BY id"#
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// The schemas of the change sets holding events between `after` and `until`, each
    /// with the first ordinal that has it, in feed order.
    pub async fn schemas_between(
        &self,
        table: TableId,
        after: Position,
        until: Position,
    ) -> Result<Vec<(i64, i32)>, StoreError> {
        // The range: segments of change sets after `after` with events after it, up to
        // `until` with events up to it (as in `segments_between`).
        let rows = sqlx::query!(
            r#"SELECT min(s.ordinal) AS "ordinal!", c.schema_id
                 FROM segments s JOIN change_sets c USING (table_id, ordinal)
                WHERE s.table_id = $1
                  AND (s.ordinal > $2 OR (s.ordinal = $2 AND s.first_event + s.event_count > $3))
                  AND (s.ordinal < $4 OR (s.ordinal = $4 AND s.first_event < $5))
                GROUP BY c.schema_id ORDER BY 1"#,
            table.0,
            after.ordinal,
            after.consumed,
            until.ordinal,
            until.consumed
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.ordinal, r.schema_id)).collect())
    }

    /// Every segment holding events between `after` and `until`, in feed order.
    pub async fn segments_between(
        &self,
        table: TableId,
        after: Position,
        until: Position,
    ) -> Result<Vec<SegmentRecord>, StoreError> {
        // A segment of change set `ordinal` with events `first .. first + count` holds
        // events of the range when it ends after `after` and starts up to `until`.
        Ok(sqlx::query_as!(
            SegmentRecord,
            "SELECT s.ordinal, s.segment_no, s.first_event, s.event_count, s.layout, s.path, \
                    s.size_bytes, s.decoded_bytes, s.deleted_rows, s.first_row_id, \
                    s.lineage_sequence_number, \
                    c.snapshot_id, c.sequence_number, c.committed_at, c.schema_id, \
                    c.push_version \
               FROM segments s JOIN change_sets c USING (table_id, ordinal) \
              WHERE s.table_id = $1 \
                AND (s.ordinal > $2 OR (s.ordinal = $2 AND s.first_event + s.event_count > $3)) \
                AND (s.ordinal < $4 OR (s.ordinal = $4 AND s.first_event < $5)) \
              ORDER BY s.ordinal, s.segment_no",
            table.0,
            after.ordinal,
            after.consumed,
            until.ordinal,
            until.consumed
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The position after the last event `table`'s feed published: the end of its last
    /// change set, as a reader that read it all holds it.
    pub async fn feed_head(&self, table: TableId) -> Result<Position, StoreError> {
        let last = sqlx::query!(
            "SELECT ordinal, event_count FROM change_sets WHERE table_id = $1 \
              ORDER BY ordinal DESC LIMIT 1",
            table.0
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(Position::START, |r| Position {
            ordinal: r.ordinal,
            consumed: r.event_count,
        }))
    }

    /// Whether `table`'s feed has events after `position`.
    pub async fn has_events_after(
        &self,
        table: TableId,
        position: Position,
    ) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM segments
                               WHERE table_id = $1 AND (ordinal, end_event) > ($2, $3)) AS "exists!""#,
            table.0,
            position.ordinal,
            position.consumed
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The snapshots of `table`'s change sets `ordinals`.
    pub async fn change_set_heads(
        &self,
        table: TableId,
        ordinals: &[i64],
    ) -> Result<Vec<ChangeSetHead>, StoreError> {
        Ok(sqlx::query_as!(
            ChangeSetHead,
            "SELECT ordinal, snapshot_id, sequence_number, committed_at, schema_id, push_version \
               FROM change_sets WHERE table_id = $1 AND ordinal = ANY($2)",
            table.0,
            ordinals
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Records a computed range's result and forgets its tasks; its shuffle files become
    /// garbage. A no-op unless the range is still computing (another node finished it).
    pub async fn finish_net_range(
        &self,
        key: &NetRangeKey,
        segments: &[NetSegment],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query!(
            "UPDATE net_ranges SET state = 'ready', event_count = $2 \
              WHERE id = $1 AND state = 'computing'",
            key.range,
            segments.iter().map(|s| s.event_count).sum::<i64>()
        )
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(());
        }
        sqlx::query!(
            "INSERT INTO net_segments (range_id, segment_no, first_event, event_count, path, \
                                       size_bytes, decoded_bytes) \
             SELECT $1, u.* FROM unnest($2::int[], $3::bigint[], $4::bigint[], $5::text[], \
                                        $6::bigint[], $7::bigint[]) AS u",
            key.range,
            &segments.iter().map(|s| s.segment_no).collect::<Vec<_>>(),
            &segments.iter().map(|s| s.first_event).collect::<Vec<_>>(),
            &segments.iter().map(|s| s.event_count).collect::<Vec<_>>(),
            &segments.iter().map(|s| s.path.clone()).collect::<Vec<_>>(),
            &segments.iter().map(|s| s.size_bytes).collect::<Vec<_>>(),
            &segments.iter().map(|s| s.decoded_bytes).collect::<Vec<_>>() as &[Option<i64>]
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!("DELETE FROM tasks WHERE net_range = $1", key.range)
            .execute(&mut *tx)
            .await?;
        queue_garbage(&mut tx, &[key.shuffle_prefix()], Duration::ZERO).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records why a range could not be computed; a no-op unless it is still computing.
    pub async fn fail_net_range(
        &self,
        key: &NetRangeKey,
        failure: &Failure,
    ) -> Result<(), StoreError> {
        sqlx::query!(
            "UPDATE net_ranges SET state = 'failed', error_code = $2, error = $3 \
              WHERE id = $1 AND state = 'computing'",
            key.range,
            failure.code.as_str(),
            failure.message
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Drops range `key` (with its tasks), its objects queued as garbage.
    pub async fn drop_net_range(&self, key: &NetRangeKey) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query!("DELETE FROM net_ranges WHERE id = $1", key.range)
            .execute(&mut *tx)
            .await?;
        queue_garbage(
            &mut tx,
            &[key.prefix(), key.shuffle_prefix()],
            Duration::ZERO,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Drops the ranges nobody read for `idle`; returns how many.
    pub async fn drop_idle_net_ranges(&self, idle: Duration) -> Result<usize, StoreError> {
        let idle = sqlx::query!(
            r#"SELECT id, table_id AS "table_id: TableId" FROM net_ranges
                WHERE read_at < now() - make_interval(secs => $1)"#,
            idle.as_secs_f64()
        )
        .fetch_all(&self.pool)
        .await?;
        for r in &idle {
            let (table, range) = (r.table_id, r.id);
            self.drop_net_range(&NetRangeKey { table, range }).await?;
        }
        Ok(idle.len())
    }

    /// Up to `max` segments of range `range` holding events after the first `consumed`.
    pub async fn net_segments_after(
        &self,
        range: i64,
        consumed: i64,
        max: i64,
    ) -> Result<Vec<NetSegment>, StoreError> {
        Ok(sqlx::query_as!(
            NetSegment,
            "SELECT segment_no, first_event, event_count, path, size_bytes, decoded_bytes \
               FROM net_segments \
              WHERE range_id = $1 AND first_event + event_count > $2 \
              ORDER BY segment_no LIMIT $3",
            range,
            consumed,
            max
        )
        .fetch_all(&self.pool)
        .await?)
    }
}
