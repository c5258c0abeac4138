//! A throwaway PostgreSQL database for one benchmark run.

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};

/// A database created for the run; drop it with [`Database::drop`].
pub struct Database {
    admin_url: String,
    name: String,
    /// Its connection URL.
    pub url: String,
}

impl Database {
    /// Creates a database on the server of `admin_url`.
    pub async fn create(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!("icefeed_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(admin_url)
            .await
            .context("connecting to PostgreSQL (set ICEFEED_BENCH_DATABASE_URL)")?;
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await?;
        conn.close().await?;
        let mut url = url::Url::parse(admin_url)?;
        url.set_path(&name);
        Ok(Self {
            admin_url: admin_url.to_string(),
            name,
            url: url.to_string(),
        })
    }

    /// Drops it, closing other connections.
    pub async fn drop(self) -> anyhow::Result<()> {
        let mut conn = PgConnection::connect(&self.admin_url).await?;
        conn.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str())
            .await?;
        conn.close().await?;
        Ok(())
    }
}
