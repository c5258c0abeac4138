//! Connecting to Iceberg catalogs: the connection settings users register, how they are
//! shown without secrets, and loading a table's current metadata.
//! Must not reach: `store`, `changes`, `changelog` (a catalog knows nothing of feeds).

mod filesystem;
mod load;
mod local_file;
mod reach;
mod redact;
mod storage;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, ErrorKind, NamespaceIdent, TableIdent};
use iceberg_catalog_glue::GlueCatalogBuilder;
use iceberg_catalog_hms::HmsCatalogBuilder;
use iceberg_catalog_rest::RestCatalogBuilder;
use iceberg_catalog_sql::SqlCatalogBuilder;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::failure::{Failure, FailureCode};

use load::load_from;
pub use load::{CATALOG_RENEWAL, CatalogCache, DEFAULT_CATALOG_TIMEOUT, check_readable, within};
pub use local_file::LocalPaths;
pub use reach::Reach;
pub use redact::{REDACTED, redact};
pub use storage::{StorageFault, TableStorageFactory, describe as storage_cause};

/// The catalog types icefeed can read from.
pub const CATALOG_TYPES: &[&str] = &["sql", "rest", "filesystem", "glue", "hive"];

/// The databases a SQL catalog may be on, by the start of its URL.
const SQL_URI_PREFIXES: [&str; 3] = ["sqlite:", "postgres://", "postgresql://"];

/// How to reach the catalog that holds a table.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum CatalogConfig {
    /// A SQL (JDBC-compatible) catalog: `iceberg_tables` in SQLite or PostgreSQL, as written
    /// by Java's JdbcCatalog, pyiceberg's SqlCatalog and iceberg-rust.
    #[schema(title = "SqlCatalog")]
    Sql {
        /// Database URL, e.g. `sqlite:/data/catalog.db` or `postgres://user:pw@host/db`.
        #[schema(min_length = 1, pattern = "^(sqlite:|postgres://|postgresql://)")]
        uri: String,
        /// Warehouse location.
        warehouse: String,
        /// Catalog name as the writers use it (the `catalog_name` column).
        #[serde(default = "default_catalog_name")]
        name: String,
        /// Extra catalog and file IO properties.
        #[serde(default)]
        #[schema(value_type = CatalogProperties)]
        properties: BTreeMap<String, String>,
    },
    /// An Iceberg REST catalog.
    #[schema(title = "RestCatalog")]
    Rest {
        /// Base URL of the catalog, e.g. `http://localhost:8181`.
        #[schema(min_length = 1, pattern = "^https?://")]
        uri: String,
        /// Warehouse to ask the catalog for.
        #[serde(default)]
        warehouse: Option<String>,
        /// Extra properties (`credential`, `token`, `scope`, file IO settings, …).
        #[serde(default)]
        #[schema(value_type = CatalogProperties)]
        properties: BTreeMap<String, String>,
    },
    /// Tables in a directory without a catalog service: a Hadoop-style warehouse
    /// (`<warehouse>/<namespace>/<table>/metadata/vN.metadata.json`) or one metadata file.
    #[schema(title = "FilesystemCatalog")]
    Filesystem {
        /// Warehouse directory; the table is found below it by its identifier.
        #[serde(default)]
        #[schema(min_length = 1)]
        warehouse: Option<String>,
        /// A fixed metadata file to read instead (the table never advances).
        #[serde(default)]
        #[schema(min_length = 1)]
        metadata_location: Option<String>,
        /// Extra file IO properties.
        #[serde(default)]
        #[schema(value_type = CatalogProperties)]
        properties: BTreeMap<String, String>,
    },
    /// The AWS Glue Data Catalog.
    #[schema(title = "GlueCatalog")]
    Glue {
        /// Warehouse location, e.g. `s3://bucket/warehouse`.
        warehouse: String,
        /// Glue endpoint to use instead of AWS's (a private endpoint or an emulator).
        #[serde(default)]
        uri: Option<String>,
        /// The AWS account id of the catalog, when it is not the caller's.
        #[serde(default)]
        catalog_id: Option<String>,
        /// `region_name`, `profile_name`, `aws_access_key_id`, `aws_secret_access_key`,
        /// `aws_session_token`, and file IO settings (`s3.*`). Without keys, the AWS
        /// default credential chain is used.
        #[serde(default)]
        #[schema(value_type = CatalogProperties)]
        properties: BTreeMap<String, String>,
    },
    /// A Hive Metastore (Thrift).
    #[schema(title = "HiveCatalog")]
    Hive {
        /// Metastore address, `host:port` (e.g. `metastore.internal:9083`).
        #[schema(min_length = 1)]
        uri: String,
        /// Warehouse location.
        warehouse: String,
        /// `thrift_transport` (`buffered`, the default, or `framed`) and file IO settings.
        #[serde(default)]
        #[schema(value_type = CatalogProperties)]
        properties: BTreeMap<String, String>,
    },
}

/// Extra string properties of a catalog connection.
// Only describes them in the OpenAPI document: a named schema keeps SDK generators
// (openapi-python-client) from generating a model nested in a union twice.
#[derive(ToSchema)]
#[schema(value_type = BTreeMap<String, String>)]
pub struct CatalogProperties(pub BTreeMap<String, String>);

fn default_catalog_name() -> String {
    "default".into()
}

/// Failures reaching a catalog or a table in it.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The `type` is not one icefeed knows.
    #[error("unknown catalog type {0:?}; supported types are: {types}", types = CATALOG_TYPES.join(", "))]
    UnknownType(String),
    /// The connection settings are malformed.
    #[error("invalid catalog settings: {0}")]
    Invalid(String),
    /// The catalog did not answer or refused the connection.
    #[error("catalog unreachable: {0}")]
    Unreachable(String),
    /// The catalog (or the table's storage) did not answer within the deadline.
    #[error(
        "the catalog did not answer within {after:?} ({doing}; the deadline is catalog.timeout)"
    )]
    Timeout {
        /// What was asked, e.g. `loading table shop.orders`.
        doing: String,
        /// The deadline (`catalog.timeout`).
        after: Duration,
    },
    /// The catalog answered, but has no such table.
    #[error("table {0} not found in the catalog")]
    TableNotFound(String),
    /// Reading the table's files from their storage failed.
    #[error("cannot read {location}: {cause}")]
    Storage {
        /// What kind of failure.
        fault: StorageFault,
        /// The file that could not be read.
        location: String,
        /// Why, in a few words.
        cause: String,
    },
    /// Reading table metadata failed.
    #[error("reading table metadata failed: {0}")]
    Iceberg(#[from] iceberg::Error),
    /// The settings name a host outside the public internet that
    /// `network.allowed_hosts` does not list.
    #[error(transparent)]
    HostRefused(#[from] crate::network::HostRefused),
    /// The catalog type is not among `catalog.allowed_types`.
    #[error(
        "catalog type {kind:?} is not allowed on this node (catalog.allowed_types: {})",
        allowed.join(", ")
    )]
    TypeNotAllowed {
        /// The type of the settings.
        kind: &'static str,
        /// The types the node allows.
        allowed: Vec<String>,
    },
}

impl CatalogError {
    /// What this is to background work on the table: its kind, and a message that names
    /// it. Whether waiting helps is the caller's call (a task retries what a sync stops).
    pub fn failure(&self) -> Failure {
        let code = match self {
            CatalogError::Storage { fault, .. } => fault.failure_code(),
            CatalogError::Timeout { .. } => FailureCode::CatalogTimeout,
            CatalogError::HostRefused(_) => FailureCode::HostNotAllowed,
            CatalogError::TypeNotAllowed { .. } => FailureCode::CatalogTypeNotAllowed,
            CatalogError::TableNotFound(_) => FailureCode::IcebergTableNotFound,
            _ => FailureCode::CatalogUnavailable,
        };
        let message = match self {
            CatalogError::TableNotFound(_) => format!(
                "{code}: {self} (dropped or renamed?); retry the table once it is back, or \
                 delete the registration"
            ),
            _ if code == FailureCode::CatalogUnavailable => self.to_string(),
            _ => format!("{code}: {self}"),
        };
        Failure::new(code, message)
    }

    /// The storage failure of reading `location`, if `e` is one; else `e` as it is.
    pub fn reading(location: &str, e: iceberg::Error) -> Self {
        match StorageFault::of(&e) {
            Some(fault) => CatalogError::Storage {
                fault,
                location: location.to_string(),
                cause: storage_cause(&e),
            },
            None => CatalogError::Iceberg(e),
        }
    }
}

impl CatalogConfig {
    /// Parses registered settings, telling an unknown `type` apart from malformed ones.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, CatalogError> {
        let kind = value
            .get("type")
            .and_then(|t| t.as_str())
            .ok_or_else(|| CatalogError::Invalid("`type` is required".into()))?;
        if !CATALOG_TYPES.contains(&kind) {
            return Err(CatalogError::UnknownType(kind.to_string()));
        }
        let config: Self = serde_json::from_value(value.clone())
            .map_err(|e| CatalogError::Invalid(e.to_string()))?;
        if let CatalogConfig::Filesystem {
            warehouse,
            metadata_location,
            ..
        } = &config
            && warehouse.is_some() == metadata_location.is_some()
        {
            return Err(CatalogError::Invalid(
                "a filesystem catalog needs exactly one of `warehouse` and `metadata_location`"
                    .into(),
            ));
        }
        if let CatalogConfig::Filesystem {
            warehouse,
            metadata_location,
            ..
        } = &config
            && [warehouse, metadata_location]
                .into_iter()
                .flatten()
                .any(|location| location.trim().is_empty())
        {
            return Err(CatalogError::Invalid(
                "a filesystem catalog's `warehouse` or `metadata_location` must not be empty"
                    .into(),
            ));
        }
        let uri = match &config {
            CatalogConfig::Sql { uri, .. }
            | CatalogConfig::Rest { uri, .. }
            | CatalogConfig::Hive { uri, .. } => Some(uri),
            _ => None,
        };
        if uri.is_some_and(|uri| uri.trim().is_empty()) {
            return Err(CatalogError::Invalid(format!(
                "a {kind} catalog needs a `uri`, the address of its service"
            )));
        }
        if let CatalogConfig::Sql { uri, .. } = &config
            && !SQL_URI_PREFIXES
                .iter()
                .any(|prefix| uri.starts_with(prefix))
        {
            return Err(CatalogError::Invalid(format!(
                "a SQL catalog's `uri` is a SQLite (`sqlite:/path/catalog.db`) or PostgreSQL \
                 (`postgres://user@host/db`) URL; got {uri:?}"
            )));
        }
        if let CatalogConfig::Sql { uri, .. } = &config
            && uri.starts_with("postgres")
            && let Err(e) = url::Url::parse(uri)
        {
            return Err(CatalogError::Invalid(format!(
                "a PostgreSQL catalog's `uri` must be a URL like `postgres://user@host/db`: {e}"
            )));
        }
        if let CatalogConfig::Rest { uri, .. } = &config
            && !url::Url::parse(uri).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
        {
            return Err(CatalogError::Invalid(format!(
                "a REST catalog's `uri` must be an http(s) URL, e.g. `https://catalog.example/api/catalog`; got {uri:?}"
            )));
        }
        Ok(config)
    }

    /// A stable identity of the catalog without secrets, for duplicate detection.
    pub fn key(&self) -> String {
        let (kind, location) = match self {
            CatalogConfig::Sql {
                uri,
                warehouse,
                name,
                ..
            } => (
                "sql",
                format!("{}|{warehouse}|{name}", redact::redact_url(uri)),
            ),
            CatalogConfig::Rest { uri, warehouse, .. } => (
                "rest",
                format!(
                    "{}|{}",
                    redact::redact_url(uri),
                    warehouse.as_deref().unwrap_or("")
                ),
            ),
            CatalogConfig::Filesystem {
                warehouse,
                metadata_location,
                ..
            } => (
                "filesystem",
                warehouse
                    .clone()
                    .or(metadata_location.clone())
                    .unwrap_or_default(),
            ),
            CatalogConfig::Glue {
                warehouse,
                uri,
                catalog_id,
                ..
            } => (
                "glue",
                format!(
                    "{}|{}|{warehouse}",
                    uri.as_deref().unwrap_or(""),
                    catalog_id.as_deref().unwrap_or("")
                ),
            ),
            CatalogConfig::Hive { uri, warehouse, .. } => ("hive", format!("{uri}|{warehouse}")),
        };
        format!("{kind}:{location}")
    }

    /// Loads the table and checks that its files can be read ([`check_readable`]), as a
    /// registration does, within `timeout` altogether.
    pub async fn load_checked(
        &self,
        ident: &TableIdent,
        timeout: Duration,
        reach: &Reach,
    ) -> Result<Table, CatalogError> {
        let loading = async {
            let table = self.load_table(ident, reach).await?;
            check_readable(&table).await?;
            Ok(table)
        };
        within(
            timeout,
            || format!("loading table {}", display_ident(ident)),
            loading,
        )
        .await
    }

    /// Connects and loads the table's current metadata (without a deadline: see
    /// [`CatalogConfig::load_checked`] and [`CatalogCache`]), within `reach`.
    pub async fn load_table(
        &self,
        ident: &TableIdent,
        reach: &Reach,
    ) -> Result<Table, CatalogError> {
        match self {
            CatalogConfig::Filesystem {
                warehouse,
                metadata_location,
                properties,
            } => {
                reach.check_settings(self).await?;
                let table = filesystem::load(
                    ident,
                    warehouse.as_deref(),
                    metadata_location.as_deref(),
                    properties,
                    &reach.local,
                )
                .await?;
                reach.check_loaded(&table, self).await?;
                Ok(table)
            }
            _ => {
                let catalog = self.connect(reach).await?;
                load_from(catalog.as_ref(), ident, self, reach).await
            }
        }
    }

    /// The `type` of the settings, one of [`CATALOG_TYPES`].
    pub fn kind(&self) -> &'static str {
        match self {
            CatalogConfig::Sql { .. } => "sql",
            CatalogConfig::Rest { .. } => "rest",
            CatalogConfig::Filesystem { .. } => "filesystem",
            CatalogConfig::Glue { .. } => "glue",
            CatalogConfig::Hive { .. } => "hive",
        }
    }

    /// The properties of the settings (catalog and FileIO properties).
    pub fn properties(&self) -> &BTreeMap<String, String> {
        match self {
            CatalogConfig::Sql { properties, .. }
            | CatalogConfig::Rest { properties, .. }
            | CatalogConfig::Filesystem { properties, .. }
            | CatalogConfig::Glue { properties, .. }
            | CatalogConfig::Hive { properties, .. } => properties,
        }
    }

    /// Connects to a catalog service (not used for filesystem tables) whose hosts are
    /// within `reach`; a SQLite catalog file must be where it allows, like every local
    /// file its tables name.
    pub async fn connect(&self, reach: &Reach) -> Result<Arc<dyn Catalog>, CatalogError> {
        reach.check_settings(self).await?;
        if let CatalogConfig::Sql { uri, .. } = self {
            check_sqlite_file(uri, &reach.local).await?;
        }
        let storage = Arc::new(TableStorageFactory::new(reach.local.clone()));
        let catalog: Arc<dyn Catalog> = match self {
            CatalogConfig::Sql {
                uri,
                warehouse,
                name,
                properties,
            } => {
                let mut props = builder_props(
                    properties,
                    &[("uri", Some(uri)), ("warehouse", Some(warehouse))],
                );
                if uri.starts_with("postgres") {
                    props
                        .entry("sql_bind_style".into())
                        .or_insert_with(|| "DollarNumeric".into());
                }
                let catalog = SqlCatalogBuilder::default()
                    .with_storage_factory(storage)
                    .load(name.clone(), props)
                    .await
                    .map_err(builder_error)?;
                Arc::new(catalog)
            }
            CatalogConfig::Rest {
                uri,
                warehouse,
                properties,
            } => {
                let props = builder_props(
                    properties,
                    &[("uri", Some(uri)), ("warehouse", warehouse.as_ref())],
                );
                let catalog = RestCatalogBuilder::default()
                    .with_client(
                        reach
                            .hosts
                            .http_client()
                            .map_err(|e| CatalogError::Unreachable(e.to_string()))?,
                    )
                    .with_storage_factory(storage)
                    .load("rest", props)
                    .await
                    .map_err(builder_error)?;
                Arc::new(catalog)
            }
            CatalogConfig::Glue {
                warehouse,
                uri,
                catalog_id,
                properties,
            } => {
                let props = builder_props(
                    properties,
                    &[
                        ("warehouse", Some(warehouse)),
                        ("uri", uri.as_ref()),
                        ("catalog_id", catalog_id.as_ref()),
                    ],
                );
                let catalog = GlueCatalogBuilder::default()
                    .with_storage_factory(storage)
                    .load("glue", props)
                    .await
                    .map_err(builder_error)?;
                Arc::new(catalog)
            }
            CatalogConfig::Hive {
                uri,
                warehouse,
                properties,
            } => {
                let props = builder_props(
                    properties,
                    &[("uri", Some(uri)), ("warehouse", Some(warehouse))],
                );
                let catalog = HmsCatalogBuilder::default()
                    .with_storage_factory(storage)
                    .load("hive", props)
                    .await
                    .map_err(builder_error)?;
                Arc::new(catalog)
            }
            CatalogConfig::Filesystem { .. } => {
                return Err(CatalogError::Invalid(
                    "a filesystem catalog has no catalog service to connect to".into(),
                ));
            }
        };
        Ok(catalog)
    }
}

/// What a catalog builder is loaded with: the registered properties, and the connection
/// fields under the names the builders read.
fn builder_props(
    properties: &BTreeMap<String, String>,
    fields: &[(&str, Option<&String>)],
) -> HashMap<String, String> {
    let fields = fields
        .iter()
        .filter_map(|(key, value)| Some((key.to_string(), (*value)?.clone())));
    properties.clone().into_iter().chain(fields).collect()
}

/// Refuses a SQLite catalog URI whose file is outside `local`, or that asks SQLite to
/// create the file (`mode=rwc`) or to hold it in memory only.
async fn check_sqlite_file(uri: &str, local: &LocalPaths) -> Result<(), CatalogError> {
    let Some(rest) = uri.strip_prefix("sqlite:") else {
        return Ok(());
    };
    let (file, query) = rest.split_once('?').unwrap_or((rest, ""));
    if query
        .split('&')
        .any(|pair| matches!(pair, "mode=rwc" | "mode=memory"))
    {
        return Err(CatalogError::Invalid(format!(
            "{uri}: a SQLite catalog is opened as it is: mode=rwc and mode=memory are refused"
        )));
    }
    // `sqlite://path` and `sqlite:///abs` name the same files as `sqlite:path`.
    let file = match file.strip_prefix("//") {
        Some(path) => path.to_string(),
        None => file.to_string(),
    };
    if file.is_empty() || file == ":memory:" {
        return Err(CatalogError::Invalid(format!(
            "{uri}: a SQLite catalog must name its database file"
        )));
    }
    let (path, local) = (std::path::PathBuf::from(&file), local.clone());
    // A missing file is the caller's mistake (404 from the storage), not an unreachable
    // catalog; SQLite would only say it cannot open it.
    local_file::blocking(move || {
        local.check(&path)?;
        std::fs::metadata(&path).map(|_| ()).map_err(|e| {
            iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()).with_source(e)
        })
    })
    .await
    .map_err(|e| CatalogError::reading(&file, e))
}

/// A catalog client that could not be built: settings it refuses (a missing warehouse
/// or address) are the caller's to fix; anything else is the service not answering.
fn builder_error(e: iceberg::Error) -> CatalogError {
    let text = redact::redact_text(&e.to_string());
    match e.kind() {
        ErrorKind::DataInvalid => CatalogError::Invalid(text),
        _ => CatalogError::Unreachable(text),
    }
}

/// Parses `a.b.table` into a table identifier (the last part is the table name).
pub fn parse_ident(text: &str) -> Result<TableIdent, CatalogError> {
    let parts: Vec<String> = text.split('.').map(str::to_string).collect();
    if parts.len() < 2 || parts.iter().any(|p| p.trim().is_empty()) {
        return Err(CatalogError::Invalid(format!(
            "table identifier {text:?} must be `namespace.table` (nested namespaces: `a.b.table`)"
        )));
    }
    let (name, namespace) = parts.split_last().expect("two parts at least");
    let namespace = NamespaceIdent::from_vec(namespace.to_vec())
        .map_err(|e| CatalogError::Invalid(e.to_string()))?;
    Ok(TableIdent::new(namespace, name.clone()))
}

/// `a.b.table` for a table identifier.
pub fn display_ident(ident: &TableIdent) -> String {
    let mut parts = ident.namespace().clone().inner();
    parts.push(ident.name().to_string());
    parts.join(".")
}
