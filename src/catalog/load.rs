//! Loading a table's current metadata: the deadline of every catalog call, the cache of
//! connected catalogs, and what a failed load means (no such table, storage, the
//! catalog unreachable).
//! Must not reach: `store`, `changes`, `changelog` (a catalog knows nothing of feeds).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};

use super::{CatalogConfig, CatalogError, Reach, StorageFault, display_ident, redact};

/// How long a catalog call may take by default (`catalog.timeout`).
pub const DEFAULT_CATALOG_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `work` with a deadline: past `timeout` it is dropped (its connections with it)
/// and the answer is [`CatalogError::Timeout`]. The catalog clients set none of their
/// own (the REST client waits for an answer forever, the Hive client too).
pub async fn within<T>(
    timeout: Duration,
    doing: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, CatalogError>>,
) -> Result<T, CatalogError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => Err(CatalogError::Timeout {
            doing: doing(),
            after: timeout,
        }),
    }
}

/// Connected catalogs by their settings, shared by a node's polls: connecting a SQL
/// catalog opens a connection pool and runs DDL, which a poll should not repeat.
///
/// A connection is renewed after [`CATALOG_RENEWAL`] and after any failure other than a
/// missing table: the REST catalog client never refreshes its OAuth token (it expires,
/// typically after an hour), and a catalog may have moved or restarted. Every load
/// (connecting included) has the cache's deadline.
#[derive(Clone)]
pub struct CatalogCache {
    connected: Arc<std::sync::Mutex<HashMap<String, Connected>>>,
    timeout: Duration,
    reach: Reach,
}

#[derive(Clone)]
struct Connected {
    catalog: Arc<dyn Catalog>,
    at: std::time::Instant,
}

/// How long a catalog connection (and the token it holds) is used before a new one.
pub const CATALOG_RENEWAL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl CatalogCache {
    /// A cache whose loads each have `timeout` (`catalog.timeout`) and stay within
    /// `reach` (`catalog.local_paths`, `network.allowed_hosts`).
    pub fn new(timeout: Duration, reach: Reach) -> Self {
        Self {
            connected: Default::default(),
            timeout,
            reach,
        }
    }

    /// Loads the table's current metadata, reusing a connection to its catalog, within
    /// the cache's deadline.
    pub async fn load_table(
        &self,
        config: &CatalogConfig,
        ident: &TableIdent,
    ) -> Result<Table, CatalogError> {
        let doing = || format!("loading table {}", display_ident(ident));
        if let CatalogConfig::Filesystem { .. } = config {
            return within(self.timeout, doing, config.load_table(ident, &self.reach)).await;
        }
        let key = serde_json::to_string(config).expect("catalog settings serialize");
        let loaded = within(
            self.timeout,
            doing,
            self.load_connected(config, ident, &key),
        )
        .await;
        if loaded
            .as_ref()
            .is_err_and(|e| !matches!(e, CatalogError::TableNotFound(_)))
        {
            self.connected.lock().expect("catalog cache").remove(&key);
        }
        loaded
    }

    async fn load_connected(
        &self,
        config: &CatalogConfig,
        ident: &TableIdent,
        key: &str,
    ) -> Result<Table, CatalogError> {
        let cached = self
            .connected
            .lock()
            .expect("catalog cache")
            .get(key)
            .filter(|c| c.at.elapsed() < CATALOG_RENEWAL)
            .cloned();
        let catalog = match cached {
            Some(connected) => connected.catalog,
            None => {
                let catalog = config.connect(&self.reach).await?;
                let connected = Connected {
                    catalog: catalog.clone(),
                    at: std::time::Instant::now(),
                };
                self.connected
                    .lock()
                    .expect("catalog cache")
                    .insert(key.to_string(), connected);
                catalog
            }
        };
        load_from(catalog.as_ref(), ident, config, &self.reach).await
    }
}

/// Loads the table from a catalog connected with `config`; what the catalog's answer
/// adds to its storage settings must be within `reach`.
pub(super) async fn load_from(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    config: &CatalogConfig,
    reach: &Reach,
) -> Result<Table, CatalogError> {
    let table = catalog.load_table(ident).await.map_err(|e| {
        if is_not_found(&e) {
            CatalogError::TableNotFound(display_ident(ident))
        } else if StorageFault::of(&e).is_some() {
            // Catalogs that read the metadata file themselves (SQL, Glue, Hive) fail
            // here when its storage does.
            CatalogError::reading(&format!("the metadata of {}", display_ident(ident)), e)
        } else if is_connection_error(&e) {
            CatalogError::Unreachable(redact::redact_text(&e.to_string()))
        } else {
            CatalogError::Iceberg(e)
        }
    })?;
    reach.check_loaded(&table, config).await?;
    Ok(table)
}

/// Checks that the table's files can be read with the credentials it was loaded with:
/// its current metadata file and the manifest list of its current snapshot. A catalog
/// that serves metadata over its API (REST) loads fine even where the files cannot be
/// read, and a registration should not succeed only to fail at the first poll.
pub async fn check_readable(table: &Table) -> Result<(), CatalogError> {
    let file_io = table.file_io();
    if let Some(location) = table.metadata_location() {
        file_io
            .new_input(location)?
            .metadata()
            .await
            .map_err(|e| CatalogError::reading(location, e))?;
    }
    if let Some(snapshot) = table.metadata().current_snapshot() {
        let list = snapshot.manifest_list();
        file_io
            .new_input(list)?
            .metadata()
            .await
            .map_err(|e| CatalogError::reading(list, e))?;
    }
    Ok(())
}

/// The catalog has no such table or namespace. The Glue and Hive catalogs report it only
/// in the text of the service's error (`EntityNotFoundException`, `NoSuchObjectException`).
fn is_not_found(e: &iceberg::Error) -> bool {
    if matches!(
        e.kind(),
        ErrorKind::TableNotFound | ErrorKind::NamespaceNotFound
    ) {
        return true;
    }
    let text = format!("{e:?}");
    ["EntityNotFoundException", "NoSuchObjectException"]
        .iter()
        .any(|w| text.contains(w))
}

/// Connection failures show up as `Unexpected` errors whose text names the transport.
fn is_connection_error(e: &iceberg::Error) -> bool {
    let text = format!("{e:?}").to_lowercase();
    [
        "connect",
        "connection",
        "timed out",
        "dns",
        "unable to open database",
    ]
    .iter()
    .any(|w| text.contains(w))
}
