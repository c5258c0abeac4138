//! PostgreSQL: the registry of source tables, leases, checkpoints and the change-set index.
//! Must not reach: `catalog`, `changelog`, `workers` (PostgreSQL only).

mod change_sets;
mod leases;
mod net_ranges;
mod push;
mod retention;
mod subscriptions;
mod tables;
mod task_signals;
mod tasks;
mod tokens;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

use crate::config::DatabaseSettings;

pub use crate::ids::{TableId, TaskKind};
pub use change_sets::{
    CHANGES_CHANNEL, ChangeSetRecord, NewChangeSet, NewSegment, SegmentRecord, StoredSegment,
};
pub use leases::Lease;
pub use net_ranges::{ChangeSetHead, NetRange, NetSegment, NetState};
pub use push::{DeadLetter, NewDeadLetter, PushCommit, PushRecord};
pub use retention::{Floor, Pruned, Retention};
pub use subscriptions::{
    FeedLag, Lag, NewSubscription, SUBSCRIPTIONS_CHANNEL, SubscribedTable, Subscription,
    SubscriptionState,
};
pub use tables::{NewSourceTable, PollOutcome, SourceTable, TableState, display_name};
pub use task_signals::{TASKS_CHANNEL, TaskEvent, TaskSignals, signalled_within};
pub use tasks::{ClaimedTask, TaskFailure, TaskProgress, TaskScope, TaskStatus};
pub use tokens::ApiToken;

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Sends `payload` on PostgreSQL channel `channel` when the statement (or the transaction
/// it runs in) commits: how nodes tell each other of publishes, subscriptions and tasks.
async fn notify(
    executor: impl sqlx::PgExecutor<'_>,
    channel: &str,
    payload: &str,
) -> Result<(), StoreError> {
    sqlx::query!(
        r#"SELECT pg_notify($1, $2) AS "notified: ()""#,
        channel,
        payload
    )
    .execute(executor)
    .await?;
    Ok(())
}

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
    /// Whether the database could not be used at all (unreachable, shutting down, out
    /// of connections, too slow), rather than refusing this statement: worth a retry
    /// after a while, by the client or the next tick.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(e) => match e {
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_) => true,
                // Connection exceptions (08), too many connections (53300), the server
                // shutting down or starting (57P01–57P03), a statement timeout (57014).
                sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                    code.starts_with("08")
                        || matches!(&*code, "53300" | "57P01" | "57P02" | "57P03" | "57014")
                }),
                _ => false,
            },
            _ => false,
        }
    }

    fn from_unique(err: sqlx::Error, what: &str) -> Self {
        match &err {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(what.to_string())
            }
            _ => StoreError::Database(err),
        }
    }
}

/// A pooled connection used this recently is handed out without a ping first, as
/// HikariCP's alive-bypass window: under load a query then costs one round trip to the
/// server, not two (sqlx pings every connection it hands out by default). One idle longer,
/// which a restart, a failover or a proxy may have cut meanwhile, is pinged and replaced
/// if it does not answer.
const USED_RECENTLY: Duration = Duration::from_millis(500);

/// Handle to the PostgreSQL coordination store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// This node's signals of tasks created and settled (see `task_signals`).
    tasks: TaskSignals,
}

impl Store {
    /// Connects a pool to `url` with the default pool settings.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, &DatabaseSettings::default()).await
    }

    /// Connects a pool to `url`, failing fast when the server does not answer.
    pub async fn connect_with(url: &str, settings: &DatabaseSettings) -> Result<Self, StoreError> {
        let statement_timeout = settings.statement_timeout.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)?
            .options([("statement_timeout", statement_timeout.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|connection, meta| {
                Box::pin(async move {
                    if meta.idle_for >= USED_RECENTLY {
                        // An error closes the connection; the pool takes or opens another.
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await?;
        Ok(Self {
            pool,
            tasks: TaskSignals::default(),
        })
    }

    /// Wraps an existing pool (unit tests make their own).
    #[cfg(test)]
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            tasks: TaskSignals::default(),
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// This node's signals of tasks created and settled on any node.
    pub fn task_signals(&self) -> &TaskSignals {
        &self.tasks
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// True when the database answers and every embedded migration is applied.
    pub async fn ready(&self) -> Result<bool, StoreError> {
        let applied: Vec<i64> =
            sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await?;
        Ok(MIGRATOR.iter().all(|m| applied.contains(&m.version)))
    }
}
