//! Leases: one holder at a time, measured by the database's clock so nodes' clocks don't
//! matter. Every acquisition bumps the epoch; writes that depend on a lease check it
//! (fencing), so a node that paused past its expiry cannot publish.
//! Must not reach: the rest of the crate.

use std::time::Duration;

use sqlx::{Postgres, Transaction};

use super::{Store, StoreError};

/// A lease held by this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// What is leased, e.g. `table:<id>`.
    pub name: String,
    /// The holder.
    pub owner: String,
    /// The fencing token of this acquisition.
    pub epoch: i64,
}

impl Store {
    /// Takes the lease when it is free or expired; `None` when another node holds it.
    pub async fn try_acquire_lease(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let epoch: Option<i64> = sqlx::query_scalar!(
            r#"
            INSERT INTO leases (name, owner, epoch, expires_at)
            VALUES ($1, $2, 1, now() + make_interval(secs => $3))
            ON CONFLICT (name) DO UPDATE
               SET owner = EXCLUDED.owner,
                   epoch = leases.epoch + 1,
                   expires_at = EXCLUDED.expires_at
             WHERE leases.expires_at <= now()
            RETURNING epoch
            "#,
            name,
            owner,
            ttl.as_secs_f64()
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(epoch.map(|epoch| Lease {
            name: name.to_string(),
            owner: owner.to_string(),
            epoch,
        }))
    }

    /// Extends a held lease; `LeaseLost` when it expired or another node took it.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<(), StoreError> {
        let done = sqlx::query!(
            r#"
            UPDATE leases SET expires_at = now() + make_interval(secs => $4)
             WHERE name = $1 AND owner = $2 AND epoch = $3 AND expires_at > now()
            "#,
            lease.name,
            lease.owner,
            lease.epoch,
            ttl.as_secs_f64()
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::LeaseLost(lease.name.clone()))
        }
    }

    /// Gives a lease up so that any node may take it at once.
    pub async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query!(
            "UPDATE leases SET expires_at = now() WHERE name = $1 AND owner = $2 AND epoch = $3",
            lease.name,
            lease.owner,
            lease.epoch
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// Inside a transaction: fails with `LeaseLost` unless `lease` is still held, and locks
/// the lease row so that it cannot change hands before the transaction ends.
pub(super) async fn fence(
    tx: &mut Transaction<'_, Postgres>,
    lease: &Lease,
) -> Result<(), StoreError> {
    let held: Option<i32> = sqlx::query_scalar!(
        r#"
        SELECT 1 AS "held!" FROM leases
         WHERE name = $1 AND owner = $2 AND epoch = $3 AND expires_at > now()
           FOR UPDATE
        "#,
        lease.name,
        lease.owner,
        lease.epoch
    )
    .fetch_optional(&mut **tx)
    .await?;
    match held {
        Some(_) => Ok(()),
        None => Err(StoreError::LeaseLost(lease.name.clone())),
    }
}
