//! A throwaway PostgreSQL database for one benchmark run, and the node settings used on it.

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

    /// Drops it, closing other connections. An autovacuum worker in the database (it
    /// runs as a superuser, whom the benchmark's role may not terminate) makes `FORCE`
    /// fail until it is done: tried again for a while.
    pub async fn drop(self) -> anyhow::Result<()> {
        let mut conn = PgConnection::connect(&self.admin_url).await?;
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let mut attempts = 0;
        while let Err(e) = conn.execute(drop.as_str()).await {
            attempts += 1;
            if attempts == 60 {
                return Err(e).context(format!("dropping database {}", self.name));
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        conn.close().await?;
        Ok(())
    }
}

/// Settings of an in-process benchmark node: random port, fast ticks and polls.
pub fn node_settings(
    database_url: &str,
    change_store: &std::path::Path,
) -> icefeed::config::Settings {
    use icefeed::config::{CatalogSettings, NetworkSettings, SchedulerSettings, Settings};
    use std::time::Duration;
    Settings {
        // Benchmark tables are wherever `--dir` puts them.
        catalog: CatalogSettings {
            local_paths: vec!["/".into()],
            ..CatalogSettings::default()
        },
        // The S3 server and OpenSearch of the benchmarks listen on loopback.
        network: NetworkSettings {
            allowed_hosts: vec!["127.0.0.0/8".into(), "localhost".into()],
        },
        database_url: database_url.to_string(),
        listen: ([127, 0, 0, 1], 0).into(),
        change_store: change_store.display().to_string(),
        scheduler: SchedulerSettings {
            tick: Duration::from_millis(50),
            default_poll_interval: Duration::from_millis(100),
            ..SchedulerSettings::default()
        },
        ..Settings::default()
    }
}

/// An in-process benchmark node (`node_settings`) on a fresh database.
#[allow(dead_code)] // see `with_node`
pub struct BenchNode {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub database_url: String,
}

/// Runs `work` against a node on a fresh database with a scratch change store, then stops
/// the node and drops the database, whatever `work` returned.
#[allow(dead_code)] // the load and s3 benchmarks start theirs with other settings
pub async fn with_node<T>(
    admin_url: &str,
    work: impl AsyncFnOnce(&BenchNode) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let db = Database::create(admin_url).await?;
    let changes = tempfile::Builder::new()
        .prefix("icefeed-bench-changes")
        .tempdir()?;
    let settings = node_settings(&db.url, changes.path());
    let node = icefeed::app::start(settings, tokio_util::sync::CancellationToken::new()).await?;
    let bench = BenchNode {
        base: format!("http://{}", node.addr),
        database_url: db.url.clone(),
    };
    let result = work(&bench).await;
    node.shutdown().await?;
    db.drop().await?;
    result
}
