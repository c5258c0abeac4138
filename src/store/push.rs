//! Push subscriptions: their targets, progress counters, fenced commits and dead letters.
//! Must not reach: `delivery`, `workers` (PostgreSQL only).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::leases::{Lease, fence};
use super::subscriptions::columns_of;
use super::{Store, StoreError};
use crate::changes::Position;

/// A push subscription's target and progress.
#[derive(Clone, Debug)]
pub struct PushRecord {
    /// The target as registered, secrets included.
    pub target: serde_json::Value,
    pub documents_indexed: i64,
    pub documents_deleted: i64,
    pub documents_skipped: i64,
    pub documents_rejected: i64,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    pub retry_at: Option<DateTime<Utc>>,
    pub last_pushed_at: Option<DateTime<Utc>>,
}

/// An event the index refused, or that could not be made into a document.
#[derive(Clone, Debug)]
pub struct NewDeadLetter {
    pub position: String,
    pub event: serde_json::Value,
    pub index_name: Option<String>,
    pub document_id: Option<String>,
    pub version: i64,
    pub error_type: String,
    pub reason: String,
}

/// A stored dead letter.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub id: i64,
    pub position: String,
    pub event: serde_json::Value,
    pub index_name: Option<String>,
    pub document_id: Option<String>,
    pub version: i64,
    pub error_type: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    /// When a redrive of it was asked for, until the node pushing the subscription sends it.
    pub queued_at: Option<DateTime<Utc>>,
}

/// What one settled batch did.
#[derive(Clone, Debug, Default)]
pub struct PushCommit {
    pub indexed: i64,
    pub deleted: i64,
    pub skipped: i64,
    pub dead: Vec<NewDeadLetter>,
    /// (document id, version) of every change written or already there: older dead
    /// letters of those documents are superseded, and redriving them could only
    /// resurrect stale data once OpenSearch forgot a delete.
    pub settled: Vec<(String, i64)>,
}

impl Store {
    /// The target and progress of push subscription `id`.
    pub async fn push_record(&self, id: Uuid) -> Result<PushRecord, StoreError> {
        sqlx::query_as!(
            PushRecord,
            "SELECT target, documents_indexed, documents_deleted, documents_skipped, \
                    documents_rejected, last_error, last_error_at, retry_at, last_pushed_at \
               FROM push_targets WHERE subscription_id = $1",
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// The node holding push subscription `id`'s lease, and its dead letters waiting.
    pub async fn push_holder_and_dead_letters(
        &self,
        id: Uuid,
    ) -> Result<(Option<String>, i64), StoreError> {
        let row = sqlx::query!(
            r#"SELECT (SELECT owner FROM leases WHERE name = 'subscription:' || $1::uuid::text
                          AND expires_at > now()) AS holder,
                      (SELECT count(*) FROM dead_letters WHERE subscription_id = $1)
                        AS "dead_letters!""#,
            id
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.holder, row.dead_letters))
    }

    /// Push subscriptions that want a worker (active, or backing off) and whose lease
    /// nobody holds.
    pub async fn unclaimed_push_subscriptions(&self) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT s.id FROM subscriptions s \
               LEFT JOIN leases l ON l.name = 'subscription:' || s.id::text \
              WHERE s.kind = 'opensearch' AND s.state IN ('active', 'backing_off') \
                AND (l.name IS NULL OR l.expires_at <= now()) \
              ORDER BY s.created_at"
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Releases the lease of push subscription `id` and announces it, so that another node
    /// (when this one stops) or this one (when it was resumed meanwhile) claims it at once.
    pub async fn release_push_lease(&self, lease: &Lease, id: Uuid) -> Result<(), StoreError> {
        self.release_lease(lease).await?;
        super::subscriptions::announce_subscription(&self.pool, id).await
    }

    /// Records a settled batch and moves the committed positions from `expected` to
    /// `next`, if `lease` is still held and nobody moved them meanwhile (a rewind).
    /// Returns false, writing nothing, when they were moved.
    pub async fn commit_push(
        &self,
        lease: &Lease,
        id: Uuid,
        expected: &[Position],
        next: &[Position],
        batch: &PushCommit,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        let committed = sqlx::query!(
            "SELECT committed_ordinal, committed_consumed FROM subscription_tables \
              WHERE subscription_id = $1 ORDER BY slot FOR UPDATE",
            id
        )
        .fetch_all(&mut *tx)
        .await?;
        let unchanged = committed.len() == expected.len()
            && committed.iter().zip(expected).all(|(c, e)| {
                (c.committed_ordinal, c.committed_consumed) == (e.ordinal, e.consumed)
            });
        if !unchanged {
            return Ok(false);
        }
        let (ordinals, consumed) = columns_of(next);
        sqlx::query!(
            "UPDATE subscription_tables t SET committed_ordinal = u.o, committed_consumed = u.c, \
                    delivered_ordinal = greatest(t.delivered_ordinal, u.o), \
                    delivered_consumed = CASE WHEN u.o > t.delivered_ordinal THEN u.c \
                      WHEN u.o = t.delivered_ordinal THEN greatest(u.c, t.delivered_consumed) \
                      ELSE t.delivered_consumed END \
               FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(o, c, n) \
              WHERE t.subscription_id = $1 AND t.slot = u.n - 1",
            id,
            &ordinals,
            &consumed
        )
        .execute(&mut *tx)
        .await?;
        // Inserted first: a later change in the same batch supersedes them too.
        insert_dead_letters(&mut tx, id, &batch.dead).await?;
        if !batch.settled.is_empty() {
            let documents: Vec<&str> = batch.settled.iter().map(|(d, _)| d.as_str()).collect();
            let versions: Vec<i64> = batch.settled.iter().map(|(_, v)| *v).collect();
            // `as` skips the macros' type check, which takes `&[String]` for a text[].
            sqlx::query!(
                "DELETE FROM dead_letters d USING unnest($2::text[], $3::bigint[]) AS u(doc, v) \
                  WHERE d.subscription_id = $1 AND d.document_id = u.doc AND d.version < u.v",
                id,
                &documents as &[&str],
                &versions
            )
            .execute(&mut *tx)
            .await?;
        }
        let rejected = batch.dead.len() as i64;
        sqlx::query!(
            "UPDATE push_targets SET documents_indexed = documents_indexed + $2, \
                    documents_deleted = documents_deleted + $3, \
                    documents_skipped = documents_skipped + $4, \
                    documents_rejected = documents_rejected + $5, last_pushed_at = now() \
              WHERE subscription_id = $1",
            id,
            batch.indexed,
            batch.deleted,
            batch.skipped,
            rejected
        )
        .execute(&mut *tx)
        .await?;
        // Back to running after a backoff.
        sqlx::query!(
            "UPDATE subscriptions SET state = 'active', updated_at = now() \
              WHERE id = $1 AND state = 'backing_off'",
            id
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE push_targets SET retry_at = NULL WHERE subscription_id = $1",
            id
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Records a failure that the worker will retry at `retry_at`.
    pub async fn push_backing_off(
        &self,
        lease: &Lease,
        id: Uuid,
        error: &str,
        retry_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.push_trouble(lease, id, "backing_off", error, Some(retry_at))
            .await
    }

    /// Stops a push subscription for good: `failed` with `reason` until resumed.
    pub async fn push_failed(
        &self,
        lease: &Lease,
        id: Uuid,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.push_trouble(lease, id, "failed", reason, None).await
    }

    /// Moves a running push subscription to `state` and records `error`; the
    /// subscription's own `last_error` says why it stopped, so only `failed` sets it.
    async fn push_trouble(
        &self,
        lease: &Lease,
        id: Uuid,
        state: &str,
        error: &str,
        retry_at: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query!(
            "UPDATE subscriptions SET state = $2, updated_at = now(), \
                    last_error = CASE WHEN $2 = 'failed' THEN $3 ELSE last_error END \
              WHERE id = $1 AND state IN ('active', 'backing_off')",
            id,
            state,
            error
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE push_targets SET last_error = $2, last_error_at = now(), retry_at = $3 \
              WHERE subscription_id = $1",
            id,
            error,
            retry_at
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Sets the committed positions (a rewind) and wakes whoever waits on the tables, so
    /// that a push worker idle on them starts over at once.
    pub async fn rewind_subscription(
        &self,
        id: Uuid,
        positions: &[Position],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let (ordinals, consumed) = columns_of(positions);
        sqlx::query!(
            "UPDATE subscription_tables t SET committed_ordinal = u.o, committed_consumed = u.c \
               FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(o, c, n) \
              WHERE t.subscription_id = $1 AND t.slot = u.n - 1",
            id,
            &ordinals,
            &consumed
        )
        .execute(&mut *tx)
        .await?;
        super::subscriptions::wake_subscription(&mut tx, id).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Dead letters of `id` after dead letter `after`, oldest first.
    pub async fn dead_letters(
        &self,
        id: Uuid,
        after: i64,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(sqlx::query_as!(
            DeadLetter,
            "SELECT id, position, event, index_name, document_id, version, error_type, reason, \
                    created_at, queued_at \
               FROM dead_letters \
              WHERE subscription_id = $1 AND id > $2 ORDER BY id LIMIT $3",
            id,
            after,
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Queues dead letters of `id` for a redrive by the node pushing it, and wakes that
    /// node; how many were queued.
    pub async fn queue_redrive(&self, id: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let queued = sqlx::query!(
            "UPDATE dead_letters SET queued_at = coalesce(queued_at, now()) \
              WHERE subscription_id = $1 AND id = ANY($2)",
            id,
            ids
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        super::subscriptions::announce_subscription(&mut *tx, id).await?;
        tx.commit().await?;
        Ok(queued)
    }

    /// The oldest dead letters of `id` queued for a redrive.
    pub async fn queued_redrives(
        &self,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(sqlx::query_as!(
            DeadLetter,
            "SELECT id, position, event, index_name, document_id, version, error_type, reason, \
                    created_at, queued_at \
               FROM dead_letters \
              WHERE subscription_id = $1 AND queued_at IS NOT NULL ORDER BY id LIMIT $2",
            id,
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// After a redrive, under the subscription's lease: forgets the dead letters that
    /// went through and records the new reasons of those refused again.
    pub async fn settle_redrive(
        &self,
        lease: &Lease,
        id: Uuid,
        resolved: &[i64],
        again: &[(i64, String, String)],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query!(
            "DELETE FROM dead_letters WHERE subscription_id = $1 AND id = ANY($2)",
            id,
            resolved
        )
        .execute(&mut *tx)
        .await?;
        let ids: Vec<i64> = again.iter().map(|(i, _, _)| *i).collect();
        let types: Vec<&str> = again.iter().map(|(_, t, _)| t.as_str()).collect();
        let reasons: Vec<&str> = again.iter().map(|(_, _, r)| r.as_str()).collect();
        // `as` skips the macros' type check, which takes `&[String]` for a text[].
        sqlx::query!(
            "UPDATE dead_letters d SET error_type = u.t, reason = u.r, created_at = now(), \
                    queued_at = NULL \
               FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(i, t, r) \
              WHERE d.subscription_id = $1 AND d.id = u.i",
            id,
            &ids,
            &types as &[&str],
            &reasons as &[&str]
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn insert_dead_letters(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: Uuid,
    dead: &[NewDeadLetter],
) -> Result<(), StoreError> {
    if dead.is_empty() {
        return Ok(());
    }
    let positions: Vec<&str> = dead.iter().map(|d| d.position.as_str()).collect();
    let events: Vec<&serde_json::Value> = dead.iter().map(|d| &d.event).collect();
    let indexes: Vec<Option<&str>> = dead.iter().map(|d| d.index_name.as_deref()).collect();
    let documents: Vec<Option<&str>> = dead.iter().map(|d| d.document_id.as_deref()).collect();
    let versions: Vec<i64> = dead.iter().map(|d| d.version).collect();
    let types: Vec<&str> = dead.iter().map(|d| d.error_type.as_str()).collect();
    let reasons: Vec<&str> = dead.iter().map(|d| d.reason.as_str()).collect();
    // `as` skips the macros' type check, which takes arrays of owned, non-null
    // elements only (`&[String]`, `&[i64]`).
    sqlx::query!(
        "INSERT INTO dead_letters (subscription_id, position, event, index_name, document_id, \
                                   version, error_type, reason) \
         SELECT $1, * FROM unnest($2::text[], $3::jsonb[], $4::text[], $5::text[], \
                                  $6::bigint[], $7::text[], $8::text[])",
        id,
        &positions as &[&str],
        &events as &[&serde_json::Value],
        &indexes as &[Option<&str>],
        &documents as &[Option<&str>],
        &versions,
        &types as &[&str],
        &reasons as &[&str]
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}
