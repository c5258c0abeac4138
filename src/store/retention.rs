//! Retention: pruning change sets past a table's limits (keeping what subscriptions still
//! need, unless a hard limit says otherwise) and the floor below which positions are gone.
//! Must not reach: `catalog`, `workers` (PostgreSQL only).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError, TableId};
use crate::changes::{Position, key};

/// A table's retention limits; all absent means change sets are kept forever.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Keep change sets published within this many milliseconds (at most 100 years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3_155_760_000_000_i64)]
    pub max_age_ms: Option<i64>,
    /// Keep at most this many of the newest change sets (at most 2^53 − 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_i64)]
    pub max_change_sets: Option<i64>,
    /// Remove change sets older than this many milliseconds even if subscriptions have
    /// not consumed them yet (they then answer `410 position_expired`). Without it,
    /// change sets a subscription still needs are kept past the limits above. At most
    /// 100 years.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3_155_760_000_000_i64)]
    pub hard_max_age_ms: Option<i64>,
}

impl Retention {
    /// The longest age a limit may have, in milliseconds: 100 years (of 365.25 days),
    /// well within what PostgreSQL intervals and chrono durations hold.
    pub const MAX_AGE_MS: i64 = 36_525 * 86_400_000;
}

/// The pruned prefix of a table's feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    /// Every change set up to this ordinal is gone (0: none).
    pub ordinal: i64,
    /// Events the last pruned change set had.
    pub events: i64,
}

impl Floor {
    /// The earliest position still readable: before the first retained change set.
    pub fn earliest(self) -> Position {
        Position {
            ordinal: self.ordinal + 1,
            consumed: 0,
        }
    }

    /// Whether the events right after `p` were pruned.
    pub fn is_gone(self, p: Position) -> bool {
        p.ordinal < self.ordinal || (p.ordinal == self.ordinal && p.consumed < self.events)
    }
}

/// What one pruning pass removed from one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pruned {
    pub table: TableId,
    pub through: i64,
    pub change_sets: i64,
}

impl Store {
    /// The pruned prefix of `table`'s feed.
    pub async fn floor(&self, table: TableId) -> Result<Floor, StoreError> {
        sqlx::query_as!(
            Floor,
            "SELECT pruned_through_ordinal AS ordinal, pruned_through_events AS events \
               FROM source_tables WHERE id = $1",
            table.0
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// Sets a table's retention limits.
    pub async fn set_retention(&self, table: TableId, r: &Retention) -> Result<(), StoreError> {
        sqlx::query!(
            "UPDATE source_tables SET retention_max_age_ms = $2, retention_max_change_sets = $3, \
               retention_hard_max_age_ms = $4, updated_at = now() WHERE id = $1",
            table.0,
            r.max_age_ms,
            r.max_change_sets,
            r.hard_max_age_ms
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Prunes every table's change sets past its limits: index rows go at once (in one
    /// transaction per table, with the floor), their segments are queued as garbage to be
    /// deleted after `grace`.
    pub async fn prune(&self, grace: Duration) -> Result<Vec<Pruned>, StoreError> {
        let tables = sqlx::query_scalar!(
            r#"SELECT id AS "id: TableId" FROM source_tables
                WHERE retention_max_age_ms IS NOT NULL OR retention_max_change_sets IS NOT NULL
                   OR retention_hard_max_age_ms IS NOT NULL"#
        )
        .fetch_all(&self.pool)
        .await?;
        let mut pruned = Vec::new();
        for table in tables {
            if let Some(p) = self.prune_table(table, grace).await? {
                pruned.push(p);
            }
        }
        Ok(pruned)
    }

    async fn prune_table(
        &self,
        table: TableId,
        grace: Duration,
    ) -> Result<Option<Pruned>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Locks the table row: publishes and other pruners of this table wait.
        // $2: ages stored before the API bounded them cannot overflow the interval.
        let through: Option<i64> = sqlx::query_scalar!(
            "WITH t AS (SELECT * FROM source_tables WHERE id = $1 FOR UPDATE), \
                  needed AS (SELECT min(committed_ordinal) AS ordinal \
                               FROM subscription_tables WHERE table_id = $1) \
             SELECT max(c.ordinal) FROM change_sets c, t, needed \
              WHERE c.table_id = $1 AND ( \
                 ((t.retention_max_age_ms IS NOT NULL \
                     AND c.published_at < now() - LEAST(t.retention_max_age_ms, $2) \
                                                  * interval '1 millisecond') \
                  OR (t.retention_max_change_sets IS NOT NULL \
                     AND c.ordinal <= t.last_ordinal - t.retention_max_change_sets)) \
                 AND (needed.ordinal IS NULL OR c.ordinal < needed.ordinal) \
                 OR (t.retention_hard_max_age_ms IS NOT NULL \
                     AND c.published_at < now() - LEAST(t.retention_hard_max_age_ms, $2) \
                                                  * interval '1 millisecond'))",
            table.0,
            Retention::MAX_AGE_MS
        )
        .fetch_one(&mut *tx)
        .await?;
        let Some(through) = through else {
            return Ok(None);
        };
        let removed = sqlx::query!(
            "DELETE FROM change_sets WHERE table_id = $1 AND ordinal <= $2 \
             RETURNING ordinal, snapshot_id, event_count, prefix",
            table.0,
            through
        )
        .fetch_all(&mut *tx)
        .await?;
        let events = removed
            .iter()
            .find(|r| r.ordinal == through)
            .map_or(0, |r| r.event_count);
        let change_sets = removed.len() as i64;
        let prefixes: Vec<String> = removed
            .into_iter()
            .map(|r| {
                r.prefix
                    .unwrap_or_else(|| key::legacy_prefix(table, r.snapshot_id))
            })
            .collect();
        queue_garbage(&mut tx, &prefixes, grace).await?;
        sqlx::query!(
            "UPDATE source_tables SET pruned_through_ordinal = $2, pruned_through_events = $3 \
             WHERE id = $1",
            table.0,
            through,
            events
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(Pruned {
            table,
            through,
            change_sets,
        }))
    }

    /// Garbage whose grace period has passed: (id, prefix).
    pub async fn due_garbage(&self, limit: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let due = sqlx::query!(
            "SELECT id, prefix FROM garbage WHERE delete_after <= now() ORDER BY id LIMIT $1",
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(due.into_iter().map(|r| (r.id, r.prefix)).collect())
    }

    /// Forgets garbage that was deleted.
    pub async fn forget_garbage(&self, ids: &[i64]) -> Result<(), StoreError> {
        sqlx::query!("DELETE FROM garbage WHERE id = ANY($1)", ids)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Queues change-store `prefixes` for the janitor to delete once `after` has passed, in
/// the transaction that makes them unreachable, so that a crash cannot orphan them.
pub(super) async fn queue_garbage(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    prefixes: &[String],
    after: Duration,
) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO garbage (prefix, delete_after) \
         SELECT p, now() + make_interval(secs => $2) FROM unnest($1::text[]) AS p",
        prefixes,
        after.as_secs_f64()
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_at_or_after_the_floor_survive() {
        let floor = Floor {
            ordinal: 3,
            events: 10,
        };
        let p = |ordinal, consumed| Position { ordinal, consumed };
        assert!(floor.is_gone(p(0, 0)));
        assert!(floor.is_gone(p(2, 5)));
        assert!(floor.is_gone(p(3, 9)));
        assert!(
            !floor.is_gone(p(3, 10)),
            "right after the last pruned event"
        );
        assert!(!floor.is_gone(p(4, 0)));
        assert_eq!(floor.earliest(), p(4, 0));
        assert!(!Floor::default().is_gone(Position::START));
    }
}
