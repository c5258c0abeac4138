//! PostgreSQL: the registry of source tables, leases, checkpoints and the change-set index.

mod change_sets;
mod leases;
mod push;
mod retention;
mod subscriptions;
mod tables;
mod tasks;
mod tokens;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

pub use change_sets::{CHANGES_CHANNEL, ChangeSetRecord, NewChangeSet, NewSegment, SegmentRecord};
pub use leases::Lease;
pub use push::{DeadLetter, NewDeadLetter, PushCommit, PushRecord};
pub use retention::{Floor, Pruned, Retention};
pub use subscriptions::{
    FeedLag, Lag, NewSubscription, SUBSCRIPTIONS_CHANNEL, SubscribedTable, Subscription,
    SubscriptionState,
};
pub use tables::{NewSourceTable, PollOutcome, SourceTable, TableId, TableState, display_name};
pub use tasks::{ClaimedTask, TaskStatus};
pub use tokens::ApiToken;

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Failures of the coordination store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or a statement failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A row that should exist does not.
    #[error("not found")]
    NotFound,
    /// A unique constraint was hit (for example a table registered twice).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The lease this write depended on is no longer held by this node.
    #[error("lease {0} is no longer held by this node")]
    LeaseLost(String),
}

impl StoreError {
    fn from_unique(err: sqlx::Error, what: &str) -> Self {
        match &err {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(what.to_string())
            }
            _ => StoreError::Database(err),
        }
    }
}

/// Handle to the PostgreSQL coordination store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    /// Connects a pool to `url`, failing fast when the server does not answer.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// True when the database answers and every embedded migration is applied.
    pub async fn ready(&self) -> Result<bool, StoreError> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await?;
        Ok(MIGRATOR.iter().all(|m| applied.contains(&m.version)))
    }
}
