//! What a table's catalog settings may make the node touch: local files
//! (`catalog.local_paths`) and hosts (`network.allowed_hosts`). Both are checked before
//! the node connects or reads, and again on every load, since a REST catalog's answers
//! add storage endpoints of their own.
//! Must not reach: `catalog::storage` (it decides what may be touched and touches nothing).

use std::collections::HashMap;

use iceberg::table::Table;
use url::Url;

use super::local_file::LocalPaths;
use super::{CatalogConfig, CatalogError};
use crate::network::{HostPolicy, without_credentials};

/// The catalog types, local directories and hosts a node may reach for its tables.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    /// Catalog types that may be used (`catalog.allowed_types`); empty: every type.
    pub types: Vec<String>,
    /// Local directories whose files may be read.
    pub local: LocalPaths,
    /// Hosts beyond the public internet that may be connected to.
    pub hosts: HostPolicy,
}

impl Reach {
    /// Checks a catalog's settings: its type, and the hosts they name: its service and
    /// every URL among its properties (storage endpoints, OAuth servers).
    pub async fn check_settings(&self, config: &CatalogConfig) -> Result<(), CatalogError> {
        let kind = config.kind();
        if !self.types.is_empty() && !self.types.iter().any(|t| t == kind) {
            return Err(CatalogError::TypeNotAllowed {
                kind,
                allowed: self.types.clone(),
            });
        }
        match config {
            CatalogConfig::Rest { uri, .. } => self.hosts.check_url("catalog uri", uri).await?,
            CatalogConfig::Glue { uri: Some(uri), .. } => {
                self.hosts.check_url("catalog uri", uri).await?
            }
            CatalogConfig::Hive { uri, .. } => {
                let address = uri.strip_prefix("thrift://").unwrap_or(uri);
                let (host, port) = address.rsplit_once(':').unwrap_or((address, "9083"));
                let port = port.parse().unwrap_or(9083);
                self.hosts
                    .check_host("catalog uri", uri, host, port)
                    .await?
            }
            CatalogConfig::Sql { uri, .. } if uri.starts_with("postgres") => {
                self.check_postgres(uri).await?
            }
            _ => {}
        }
        self.check_properties(config.properties().iter()).await
    }

    /// Checks a table loaded with `config`, which [`Reach::check_settings`] passed: the
    /// URLs its FileIO properties add to the settings' (a REST catalog's answer brings
    /// its own) and an Azure location's host, which names the endpoint.
    pub async fn check_loaded(
        &self,
        table: &Table,
        config: &CatalogConfig,
    ) -> Result<(), CatalogError> {
        let props: &HashMap<String, String> = table.file_io().config().props();
        let given = config.properties();
        let added = props.iter().filter(|(k, v)| given.get(*k) != Some(*v));
        self.check_properties(added).await?;
        let location = table.metadata().location();
        if ["abfs://", "abfss://", "wasb://", "wasbs://"]
            .iter()
            .any(|scheme| location.starts_with(scheme))
        {
            self.hosts.check_url("table location", location).await?;
        }
        Ok(())
    }

    async fn check_properties<'a>(
        &self,
        properties: impl Iterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), CatalogError> {
        for (key, value) in properties {
            if value.starts_with("http://") || value.starts_with("https://") {
                self.hosts.check_url(key, value).await?;
            }
        }
        Ok(())
    }

    /// A PostgreSQL URL names its server in the authority or in `host` / `hostaddr`
    /// parameters; a `host` that is a directory is a Unix socket, a local path.
    async fn check_postgres(&self, uri: &str) -> Result<(), CatalogError> {
        // Unparsed, its host could not be checked: refused (settings validation says why).
        let url = Url::parse(uri).map_err(|e| {
            CatalogError::Invalid(format!("catalog uri is not a PostgreSQL URL: {e}"))
        })?;
        let port = url.port().unwrap_or(5432);
        let shown = without_credentials(&url);
        if let Some(host) = url.host_str().filter(|h| !h.is_empty()) {
            self.hosts
                .check_host("catalog uri", &shown, host, port)
                .await?;
        }
        for (key, value) in url.query_pairs() {
            if !matches!(key.as_ref(), "host" | "hostaddr") {
                continue;
            }
            if value.starts_with('/') {
                let (local, dir) = (self.local.clone(), std::path::PathBuf::from(value.as_ref()));
                super::local_file::blocking(move || local.check(&dir))
                    .await
                    .map_err(|e| CatalogError::reading(&value, e))?;
            } else {
                self.hosts
                    .check_host("catalog uri", &shown, &value, port)
                    .await?;
            }
        }
        Ok(())
    }
}
