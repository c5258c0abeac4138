//! Subscriptions: named consumers with a committed and a delivered position per table.
//! Must not reach: `delivery`, `workers` (PostgreSQL only).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{CHANGES_CHANNEL, SourceTable, Store, StoreError, TableId};
use crate::changes::Position;

/// The channel on which a subscription's id is announced when it may want a push worker:
/// created, paused or resumed, rewound, deleted, or given up by a stopping node.
pub const SUBSCRIPTIONS_CHANNEL: &str = "icefeed_subscriptions";

/// Whether a subscription delivers.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionState {
    /// Delivering.
    Active,
    /// Paused by an operator; resume with `PATCH {"paused": false}`.
    Paused,
    /// Stopped on an error (see `last_error`).
    Failed,
    /// A push subscription whose target keeps failing for now; it is retried later.
    #[serde(rename = "backing_off")]
    #[sqlx(rename = "backing_off")]
    BackingOff,
}

/// A subscription as stored.
#[derive(Clone, Debug)]
pub struct Subscription {
    pub id: Uuid,
    pub name: String,
    pub kind: String,
    pub state: SubscriptionState,
    pub ops: Vec<String>,
    pub columns: Option<Vec<String>>,
    pub start_position: serde_json::Value,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One table of a subscription with its positions.
#[derive(Clone, Debug)]
pub struct SubscribedTable {
    pub slot: i32,
    pub table_id: TableId,
    pub committed: Position,
    pub delivered: Position,
}

struct SlotRow {
    slot: i32,
    table_id: TableId,
    committed_ordinal: i64,
    committed_consumed: i64,
    delivered_ordinal: i64,
    delivered_consumed: i64,
}

impl From<SlotRow> for SubscribedTable {
    fn from(r: SlotRow) -> Self {
        Self {
            slot: r.slot,
            table_id: r.table_id,
            committed: Position {
                ordinal: r.committed_ordinal,
                consumed: r.committed_consumed,
            },
            delivered: Position {
                ordinal: r.delivered_ordinal,
                consumed: r.delivered_consumed,
            },
        }
    }
}

/// What creating a subscription stores.
#[derive(Clone, Debug)]
pub struct NewSubscription {
    pub id: Uuid,
    pub name: String,
    pub kind: &'static str,
    pub ops: Vec<String>,
    pub columns: Option<Vec<String>>,
    pub start_position: serde_json::Value,
    /// (table, canonical start position) per slot.
    pub tables: Vec<(TableId, Position)>,
    /// The push target (secrets included) of an `opensearch` subscription.
    pub target: Option<serde_json::Value>,
}

/// How far a subscription is behind on one or more tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    /// Published events not consumed.
    pub events: i64,
    /// Published change sets not consumed plus snapshots not yet published.
    pub snapshots: i64,
    /// Commit time of the oldest change not consumed.
    pub oldest_committed_at: Option<DateTime<Utc>>,
}

impl Lag {
    /// Adds the lag on another table.
    pub fn add(&mut self, other: &Lag) {
        self.events += other.events;
        self.snapshots += other.snapshots;
        self.oldest_committed_at = match (self.oldest_committed_at, other.oldest_committed_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Age in seconds of the oldest change not consumed (0 when caught up).
    pub fn seconds(&self) -> f64 {
        self.oldest_committed_at.map_or(0.0, |t| {
            (Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0
        })
    }
}

/// How far a table's feed is ahead of a position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedLag {
    /// Published events after the position.
    pub events: i64,
    /// Published change sets with events after the position.
    pub change_sets: i64,
    /// Commit time of the oldest change set not consumed.
    pub oldest_committed_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Creates a subscription; `Conflict` when the name is taken.
    pub async fn insert_subscription(
        &self,
        s: &NewSubscription,
    ) -> Result<Subscription, StoreError> {
        let mut tx = self.pool.begin().await?;
        let subscription = sqlx::query_as!(
            Subscription,
            r#"INSERT INTO subscriptions (id, name, kind, state, ops, columns, start_position)
               VALUES ($1, $2, $3, 'active', $4, $5, $6)
               RETURNING id, name, kind, state AS "state: SubscriptionState", ops, columns,
                         start_position, last_error, created_at, updated_at"#,
            s.id,
            s.name,
            s.kind,
            &s.ops,
            s.columns.as_deref(),
            s.start_position
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| StoreError::from_unique(e, "a subscription with this name exists"))?;
        let tables: Vec<Uuid> = s.tables.iter().map(|(t, _)| t.0).collect();
        let ordinals: Vec<i64> = s.tables.iter().map(|(_, p)| p.ordinal).collect();
        let consumed: Vec<i64> = s.tables.iter().map(|(_, p)| p.consumed).collect();
        sqlx::query!(
            "INSERT INTO subscription_tables (subscription_id, slot, table_id, \
               committed_ordinal, committed_consumed, delivered_ordinal, delivered_consumed) \
             SELECT $1, n::int - 1, t, o, c, o, c \
               FROM unnest($2::uuid[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS u(t, o, c, n)",
            s.id,
            &tables,
            &ordinals,
            &consumed
        )
        .execute(&mut *tx)
        .await?;
        if let Some(target) = &s.target {
            sqlx::query!(
                "INSERT INTO push_targets (subscription_id, target) VALUES ($1, $2)",
                s.id,
                target
            )
            .execute(&mut *tx)
            .await?;
            announce_subscription(&mut *tx, s.id).await?;
        }
        tx.commit().await?;
        Ok(subscription)
    }

    /// All subscriptions, oldest first.
    pub async fn list_subscriptions(&self) -> Result<Vec<Subscription>, StoreError> {
        Ok(sqlx::query_as!(
            Subscription,
            r#"SELECT id, name, kind, state AS "state: SubscriptionState", ops, columns,
                      start_position, last_error, created_at, updated_at
                 FROM subscriptions ORDER BY created_at, id"#
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// How far subscription `id` is behind on all its tables, as the store has it now.
    pub async fn subscription_total_lag(&self, id: Uuid) -> Result<Lag, StoreError> {
        let mut total = Lag::default();
        for slot in self.subscribed_tables(id).await? {
            let table = self.get_table(slot.table_id).await?;
            total.add(&self.subscription_lag(&table, slot.committed).await?.1);
        }
        Ok(total)
    }

    /// A subscription by id or by name.
    pub async fn find_subscription(&self, id_or_name: &str) -> Result<Subscription, StoreError> {
        let id = Uuid::parse_str(id_or_name).ok();
        sqlx::query_as!(
            Subscription,
            r#"SELECT id, name, kind, state AS "state: SubscriptionState", ops, columns,
                      start_position, last_error, created_at, updated_at
                 FROM subscriptions WHERE ($1::uuid IS NOT NULL AND id = $1)
                   OR ($1::uuid IS NULL AND name = $2)"#,
            id,
            id_or_name
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// The tables of a subscription in slot order.
    pub async fn subscribed_tables(&self, id: Uuid) -> Result<Vec<SubscribedTable>, StoreError> {
        let rows = sqlx::query_as!(
            SlotRow,
            r#"SELECT slot, table_id AS "table_id: TableId", committed_ordinal, committed_consumed,
                      delivered_ordinal, delivered_consumed
                 FROM subscription_tables WHERE subscription_id = $1 ORDER BY slot"#,
            id
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Names of the subscriptions reading a table.
    pub async fn subscriptions_of_table(&self, table: TableId) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT s.name FROM subscriptions s JOIN subscription_tables t \
               ON t.subscription_id = s.id WHERE t.table_id = $1 ORDER BY s.name",
            table.0
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Pauses or resumes a subscription.
    pub async fn set_subscription_paused(
        &self,
        id: Uuid,
        paused: bool,
    ) -> Result<Subscription, StoreError> {
        let mut tx = self.pool.begin().await?;
        let subscription = sqlx::query_as!(
            Subscription,
            r#"UPDATE subscriptions SET state = CASE WHEN $2 THEN 'paused' ELSE 'active' END,
                      last_error = CASE WHEN $2 THEN last_error ELSE NULL END, updated_at = now()
                WHERE id = $1
            RETURNING id, name, kind, state AS "state: SubscriptionState", ops, columns,
                      start_position, last_error, created_at, updated_at"#,
            id,
            paused
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        wake_subscription(&mut tx, id).await?;
        tx.commit().await?;
        Ok(subscription)
    }

    /// Removes a subscription; false when it did not exist.
    pub async fn delete_subscription(&self, id: Uuid) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Before the delete, while its tables are still listed.
        wake_subscription(&mut tx, id).await?;
        let done = sqlx::query!("DELETE FROM subscriptions WHERE id = $1", id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Raises the delivered positions (never lowers them); positions are canonical.
    pub async fn record_delivered(
        &self,
        id: Uuid,
        positions: &[Position],
    ) -> Result<(), StoreError> {
        let (ordinals, consumed) = columns_of(positions);
        sqlx::query!(
            "UPDATE subscription_tables t \
                SET delivered_ordinal = u.o, delivered_consumed = u.c \
               FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(o, c, n) \
              WHERE t.subscription_id = $1 AND t.slot = u.n - 1 \
                AND (u.o, u.c) > (t.delivered_ordinal, t.delivered_consumed)",
            id,
            &ordinals,
            &consumed
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Commits positions; the caller has checked they lie between committed and delivered.
    pub async fn record_committed(
        &self,
        id: Uuid,
        positions: &[Position],
    ) -> Result<(), StoreError> {
        let (ordinals, consumed) = columns_of(positions);
        sqlx::query!(
            "UPDATE subscription_tables t \
                SET committed_ordinal = u.o, committed_consumed = u.c \
               FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(o, c, n) \
              WHERE t.subscription_id = $1 AND t.slot = u.n - 1 \
                AND (u.o, u.c) > (t.committed_ordinal, t.committed_consumed)",
            id,
            &ordinals,
            &consumed
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The canonical form of a position in a table's feed: the point just before the
    /// next event not consumed, so equal points compare equal. (3, all of 3's events)
    /// and (4, 0) are both (4, 0) when change set 4 has events. A position inside the
    /// pruned prefix stays as it is. `None` for a position the feed never had (past the
    /// end of its change set, or past the published end).
    pub async fn canonical_position(
        &self,
        table: TableId,
        p: Position,
    ) -> Result<Option<Position>, StoreError> {
        let row = sqlx::query!(
            "SELECT t.last_ordinal, t.pruned_through_ordinal, t.pruned_through_events, \
                    (SELECT event_count FROM change_sets WHERE table_id = $1 AND ordinal = $2) \
                      AS count, \
                    (SELECT min(ordinal) FROM change_sets WHERE table_id = $1 \
                       AND event_count > 0 \
                       AND (ordinal > $2 OR (ordinal = $2 AND event_count > $3))) AS next \
               FROM source_tables t WHERE t.id = $1",
            table.0,
            p.ordinal,
            p.consumed
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        let (last, floor_ordinal, floor_events, count, next) = (
            row.last_ordinal,
            row.pruned_through_ordinal,
            row.pruned_through_events,
            row.count,
            row.next,
        );
        if beyond(p, last, (floor_ordinal, floor_events), count) {
            return Ok(None);
        }
        let pruned =
            p.ordinal < floor_ordinal || (p.ordinal == floor_ordinal && p.consumed < floor_events);
        if count.is_none() && pruned {
            // Pruned: kept as it is, so that reading after it answers `410`, never a
            // silent step over the pruned events to the next retained change set.
            return Ok(Some(p));
        }
        let before = |ordinal| Position {
            ordinal,
            consumed: 0,
        };
        Ok(Some(match next {
            Some(o) if o == p.ordinal => p,
            Some(o) => before(o),
            None => before(last + 1),
        }))
    }

    /// Whether `p` lies beyond `table`'s feed: past the end of its change set, or inside
    /// one not published yet. The start of the next change set (where a caught-up
    /// reader stands) is not beyond, nor is a position in the pruned prefix (it is gone,
    /// which [`Floor::is_gone`](super::Floor::is_gone) tells). Also the events of change
    /// set `p.ordinal`, if it is published and not pruned.
    pub async fn is_beyond_feed(
        &self,
        table: TableId,
        p: Position,
    ) -> Result<(bool, Option<i64>), StoreError> {
        let row = sqlx::query!(
            "SELECT t.last_ordinal, t.pruned_through_ordinal, t.pruned_through_events, \
                    (SELECT event_count FROM change_sets WHERE table_id = $1 AND ordinal = $2) \
                      AS count \
               FROM source_tables t WHERE t.id = $1",
            table.0,
            p.ordinal
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        let floor = (row.pruned_through_ordinal, row.pruned_through_events);
        Ok((beyond(p, row.last_ordinal, floor, row.count), row.count))
    }

    /// The ordinal of the change set published for `snapshot_id` (the newest, for a
    /// snapshot published again after a rollback), if any.
    pub async fn ordinal_of_snapshot(
        &self,
        table: TableId,
        snapshot_id: i64,
    ) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT max(ordinal) FROM change_sets WHERE table_id = $1 AND snapshot_id = $2",
            table.0,
            snapshot_id
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The first change set committed at or after `at`, if any.
    pub async fn first_ordinal_since(
        &self,
        table: TableId,
        at: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT min(ordinal) FROM change_sets WHERE table_id = $1 AND committed_at >= $2",
            table.0,
            at
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The first retained change set's ordinal (or the next to be published).
    pub async fn first_retained_ordinal(&self, table: TableId) -> Result<i64, StoreError> {
        // `!`: no row for the table is an error, as it was before the macros.
        Ok(sqlx::query_scalar!(
            r#"SELECT coalesce((SELECT min(ordinal) FROM change_sets WHERE table_id = $1),
                               (SELECT last_ordinal + 1 FROM source_tables WHERE id = $1))
                        AS "ordinal!""#,
            table.0
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// How far `table`'s published feed is ahead of canonical position `p`.
    pub async fn feed_lag(&self, table: TableId, p: Position) -> Result<FeedLag, StoreError> {
        let row = sqlx::query!(
            r#"SELECT coalesce(sum(event_count), 0)::bigint - $3 AS "events!",
                      count(*) AS "change_sets!", min(committed_at) AS oldest
                 FROM change_sets WHERE table_id = $1 AND ordinal >= $2 AND event_count > 0"#,
            table.0,
            p.ordinal,
            p.consumed
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(FeedLag {
            events: row.events.max(0),
            change_sets: row.change_sets,
            oldest_committed_at: row.oldest,
        })
    }

    /// How far a subscription committed at `committed` is behind on `table` (as just read
    /// from the store): its feed after the position, plus snapshots not yet published.
    /// Also returns the committed position in canonical form.
    pub async fn subscription_lag(
        &self,
        table: &SourceTable,
        committed: Position,
    ) -> Result<(Position, Lag), StoreError> {
        let committed = self
            .canonical_position(table.id, committed)
            .await?
            .unwrap_or(committed);
        let feed = self.feed_lag(table.id, committed).await?;
        let lag = Lag {
            events: feed.events,
            snapshots: feed.change_sets + table.snapshots_behind,
            oldest_committed_at: feed.oldest_committed_at.or(table
                .oldest_pending_committed_at
                .filter(|_| table.snapshots_behind > 0)),
        };
        Ok((committed, lag))
    }

    /// Slots of `tables` that have events after their position in `positions`, ordered by
    /// when the change set holding their next event was published.
    pub async fn slots_by_next_publication(
        &self,
        tables: &[TableId],
        positions: &[Position],
    ) -> Result<Vec<usize>, StoreError> {
        let tables: Vec<Uuid> = tables.iter().map(|t| t.0).collect();
        let (ordinals, consumed) = columns_of(positions);
        let slots: Vec<i64> = sqlx::query_scalar!(
            r#"SELECT u.n - 1 AS "slot!" FROM unnest($1::uuid[], $2::bigint[], $3::bigint[])
                    WITH ORDINALITY AS u(t, o, c, n)
               CROSS JOIN LATERAL (
                 SELECT published_at FROM change_sets
                  WHERE table_id = u.t AND event_count > 0
                    AND (ordinal > u.o OR (ordinal = u.o AND event_count > u.c))
                  ORDER BY ordinal LIMIT 1) next
              ORDER BY next.published_at, u.n"#,
            &tables,
            &ordinals,
            &consumed
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(slots.into_iter().map(|s| s as usize).collect())
    }
}

/// Wakes whoever waits on the tables of subscription `id` when the transaction commits,
/// so that a push worker idle on them sees a pause, resume, rewind or deletion at once,
/// and announces it to every node's push claim loop.
pub(super) async fn wake_subscription(
    tx: &mut sqlx::PgConnection,
    id: Uuid,
) -> Result<(), StoreError> {
    sqlx::query!(
        r#"SELECT pg_notify($1, table_id::text) AS "notified: ()"
             FROM subscription_tables WHERE subscription_id = $2"#,
        CHANGES_CHANNEL,
        id
    )
    .execute(&mut *tx)
    .await?;
    announce_subscription(tx, id).await
}

/// Tells every node's push claim loop (at commit, if inside a transaction) that subscription
/// `id` may want a worker now, so that it is claimed at once rather than on the next round.
pub(super) async fn announce_subscription(
    executor: impl sqlx::PgExecutor<'_>,
    id: Uuid,
) -> Result<(), StoreError> {
    super::notify(executor, SUBSCRIPTIONS_CHANNEL, &id.to_string()).await
}

/// The ordinals and event counts of `positions`, as the arrays a statement unnests.
pub(super) fn columns_of(positions: &[Position]) -> (Vec<i64>, Vec<i64>) {
    positions.iter().map(|p| (p.ordinal, p.consumed)).unzip()
}

/// Whether `p` lies beyond a feed whose last change set is `last`, pruned through
/// `floor` (ordinal, its event count), where change set `p.ordinal` has `count` events
/// (`None`: no index row, pruned or not published).
fn beyond(p: Position, last: i64, floor: (i64, i64), count: Option<i64>) -> bool {
    let (floor_ordinal, floor_events) = floor;
    match count {
        Some(count) => p.consumed > count,
        // Pruned: its index row is gone, the floor remembers how many events it had.
        None if p.ordinal < floor_ordinal => false,
        None if p.ordinal == floor_ordinal => p.consumed > floor_events,
        // Before the first change set, or the start of the next one to be published.
        None => p.consumed > 0 || p.ordinal > last.saturating_add(1),
    }
}
