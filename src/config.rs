//! Settings: built-in defaults, then an optional TOML file, then `ICEFEED_*` environment
//! variables (nested keys joined by `__`, e.g. `ICEFEED_SCHEDULER__LEASE_TTL=30s`).
//! Must not reach: `store`, `workers`, `api` (settings are read before any of them starts).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

mod api;
mod limits;

pub use crate::secret::Secret;
pub use api::{ApiSettings, CorsOrigins};
pub use limits::LimitSettings;

/// Every setting of an `icefeed` node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// PostgreSQL connection URL (registry, leases, checkpoints, change-set index).
    pub database_url: String,
    /// The connection pool to it.
    pub database: DatabaseSettings,
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Where change sets are kept: a local directory or an `s3://`, `gs://`, `az://` URL.
    pub change_store: String,
    /// Options passed to the object store (credentials, region, endpoint).
    #[serde(deserialize_with = "option_strings")]
    pub change_store_options: std::collections::BTreeMap<String, String>,
    /// This node's name in leases; defaults to host name and process id.
    pub node_id: Option<String>,
    /// Background work.
    pub scheduler: SchedulerSettings,
    /// HTTP API limits.
    pub api: ApiSettings,
    /// How much a node takes on before it sheds requests.
    pub limits: LimitSettings,
    /// Pruning change sets past their tables' retention.
    pub retention: RetentionSettings,
    /// The push worker (OpenSearch subscriptions).
    pub push: PushSettings,
    /// Deadlines of catalog calls.
    pub catalog: CatalogSettings,
    /// Who may use the API.
    pub auth: AuthSettings,
    /// Which hosts tables' settings may make the node connect to.
    pub network: NetworkSettings,
}

/// The PostgreSQL connection pool of one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// Connections the node keeps open at most.
    pub max_connections: u32,
    /// How long a request or a worker waits for a connection (a free one, or a new one
    /// while the server is unreachable) before it fails: requests then answer
    /// `503 database_unavailable` with `Retry-After`.
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
    /// Statements running longer are cancelled by the server.
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(60),
        }
    }
}

/// The hosts beyond the public internet that catalogs, storage endpoints and push
/// targets may be on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSettings {
    /// Host names, IP addresses and networks (CIDR) outside the public internet that a
    /// table's catalog settings (the catalog service, storage endpoints, OAuth servers,
    /// what a REST catalog's answers add) and push targets may name. None by default:
    /// loopback, private, link-local (cloud metadata), carrier-grade NAT, unique-local
    /// and other non-public addresses are refused, so that no client can make the node
    /// reach its own network. In the environment a list separated by commas
    /// (`ICEFEED_NETWORK__ALLOWED_HOSTS=10.0.0.0/8,catalog.internal`). A name is allowed
    /// whatever it resolves to; public addresses always are.
    #[serde(deserialize_with = "comma_list")]
    pub allowed_hosts: Vec<String>,
}

impl NetworkSettings {
    /// The policy these settings describe.
    pub fn host_policy(&self) -> Result<crate::network::HostPolicy, ConfigError> {
        crate::network::HostPolicy::allowing(&self.allowed_hosts).map_err(ConfigError::Invalid)
    }
}

/// Authentication of API requests with bearer tokens.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// A token with the `admin` scope, from the configuration (at least 32 characters,
    /// e.g. `openssl rand -hex 32`). When set, every API request but `/healthz`,
    /// `/readyz`, `/metrics` and `/openapi.json` needs a bearer token: this one, or one
    /// created with `POST /v1/tokens`. When unset, the API is open to whoever reaches it,
    /// so the node listens only on a loopback address unless `allow_unauthenticated`.
    #[serde(serialize_with = "masked")]
    pub admin_token: Option<Secret>,
    /// Serve without authentication on an address other than loopback.
    pub allow_unauthenticated: bool,
    /// How long a node keeps a verified token before asking the database again: a
    /// revoked token stops working on other nodes within this time (at once on the node
    /// that revoked it).
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            admin_token: None,
            allow_unauthenticated: false,
            cache_ttl: Duration::from_secs(10),
        }
    }
}

/// Serializes a secret setting masked, so that printed settings never show it.
fn masked<S: serde::Serializer>(secret: &Option<Secret>, serializer: S) -> Result<S::Ok, S::Error> {
    secret
        .as_ref()
        .map(|_| crate::catalog::REDACTED)
        .serialize(serializer)
}

/// How long icefeed waits for catalogs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogSettings {
    /// The deadline of loading a table: connecting to its catalog, the catalog's answer,
    /// reading the current metadata file (and, at registration and on a catalog `PATCH`,
    /// the checks that its files can be read). Past it, a registration answers
    /// `504 catalog_timeout` and a poll is retried with backoff.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Directories of this node's disk whose files tables may be read from: the SQLite
    /// files of SQL catalogs, filesystem warehouses and metadata files, and every local
    /// file their metadata names. None by default, so that no client can make the node
    /// read its disk; the quickstart allows its demo directory. In the environment a
    /// list separated by `:` (`ICEFEED_CATALOG__LOCAL_PATHS=/data/lake:/srv/tables`).
    #[serde(deserialize_with = "path_list")]
    pub local_paths: Vec<std::path::PathBuf>,
    /// The catalog types tables may be registered with (`sql`, `rest`, `filesystem`,
    /// `glue`, `hive`); other registrations answer `403 catalog_type_not_allowed`, and a
    /// table already registered with a type taken off the list stops. Every type by
    /// default: each is already confined by `local_paths` and `network.allowed_hosts`.
    /// In the environment a list separated by commas (`ICEFEED_CATALOG__ALLOWED_TYPES=rest,glue`).
    #[serde(deserialize_with = "comma_list")]
    pub allowed_types: Vec<String>,
}

impl Default for CatalogSettings {
    fn default() -> Self {
        Self {
            timeout: crate::catalog::DEFAULT_CATALOG_TIMEOUT,
            local_paths: Vec::new(),
            allowed_types: crate::catalog::CATALOG_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
        }
    }
}

/// How the push worker claims subscriptions and retries OpenSearch.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushSettings {
    /// How often a node looks for push subscriptions no node is pushing.
    #[serde(with = "humantime_serde")]
    pub claim_interval: Duration,
    /// How long an idle worker waits for a publish before re-reading its subscription's
    /// state (a pause or deletion made elsewhere).
    #[serde(with = "humantime_serde")]
    pub idle_recheck: Duration,
    /// Wait after OpenSearch kept failing through every retry (`backing_off`).
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// First wait before retrying a failed request (full jitter, doubling).
    #[serde(with = "humantime_serde")]
    pub retry_initial: Duration,
    /// Longest wait between retries.
    #[serde(with = "humantime_serde")]
    pub retry_max: Duration,
    /// Retries of one request before backing off.
    pub max_retries: u32,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            claim_interval: Duration::from_secs(2),
            idle_recheck: Duration::from_secs(30),
            backoff: Duration::from_secs(30),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(30),
            max_retries: 10,
        }
    }
}

/// How the janitor prunes change sets (the limits themselves are set per table).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// How often each node looks for change sets past retention.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long the segments of a pruned change set stay in the change store, so that
    /// reads that found them just before they were pruned can finish.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// How long the net changes of a range are kept after a consumer last read them.
    #[serde(with = "humantime_serde")]
    pub net_idle: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            grace: Duration::from_secs(60),
            net_idle: Duration::from_secs(3600),
        }
    }
}

/// How the background scheduler polls tables and holds leases.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerSettings {
    /// How often a node looks for tables due for a poll.
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
    /// How long a lease lasts without a heartbeat; a dead node's work moves after this.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// Tables one node processes at the same time.
    pub max_concurrent_tables: usize,
    /// Data files one table copies or reads at the same time.
    pub file_concurrency: usize,
    /// Default poll interval of a table registered without one.
    #[serde(with = "humantime_serde")]
    pub default_poll_interval: Duration,
    /// Buckets the surviving rows of a rewrite are hashed into by key (at least; a large
    /// rewrite gets enough that one bucket would hold about `reduce_target_bytes`).
    pub shuffle_buckets: u32,
    /// Buckets are coalesced into reduce tasks of up to this many bytes of shuffle files.
    pub reduce_target_bytes: u64,
    /// Memory one map task may use. A partition group whose decoded rows would not fit is
    /// streamed and spilled to the change store in parts that do (see the README).
    pub map_memory_bytes: u64,
    /// Rewrites whose removed and added files hold fewer stored bytes than this are
    /// computed in memory by the node that plans them (about ten times this much, and
    /// only if that fits `map_memory_bytes`), without the shuffle's tasks; 0 shuffles
    /// every rewrite.
    pub shuffle_from_bytes: u64,
    /// Map and reduce tasks one node runs at the same time.
    pub task_workers: usize,
    /// Attempts before a failing task stops its table.
    pub max_task_attempts: i32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: "postgres://icefeed:icefeed@127.0.0.1:5432/icefeed".into(),
            database: DatabaseSettings::default(),
            listen: ([127, 0, 0, 1], 8080).into(),
            change_store: ".icefeed/changes".into(),
            change_store_options: Default::default(),
            node_id: None,
            scheduler: SchedulerSettings::default(),
            api: ApiSettings::default(),
            limits: LimitSettings::default(),
            retention: RetentionSettings::default(),
            push: PushSettings::default(),
            catalog: CatalogSettings::default(),
            auth: AuthSettings::default(),
            network: NetworkSettings::default(),
        }
    }
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(500),
            lease_ttl: Duration::from_secs(30),
            max_concurrent_tables: 4,
            file_concurrency: 4,
            default_poll_interval: Duration::from_secs(10),
            shuffle_buckets: 64,
            reduce_target_bytes: 64 << 20,
            map_memory_bytes: 256 << 20,
            shuffle_from_bytes: 8 << 20,
            task_workers: 2,
            max_task_attempts: 3,
        }
    }
}

/// Object store options as strings: environment variables such as
/// `ICEFEED_CHANGE_STORE_OPTIONS__AWS_ALLOW_HTTP=true` arrive as booleans and numbers.
fn option_strings<'de, D>(
    deserializer: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Flag(bool),
        Integer(i64),
        Float(f64),
    }
    let options = std::collections::BTreeMap::<String, Scalar>::deserialize(deserializer)?;
    Ok(options
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                Scalar::Text(text) => text,
                Scalar::Flag(flag) => flag.to_string(),
                Scalar::Integer(number) => number.to_string(),
                Scalar::Float(number) => number.to_string(),
            };
            (key, value)
        })
        .collect())
}

/// A list of paths, or one string of them separated by `:` as `PATH` is.
fn path_list<'de, D>(deserializer: D) -> Result<Vec<std::path::PathBuf>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Paths {
        List(Vec<std::path::PathBuf>),
        Joined(String),
    }
    Ok(match Paths::deserialize(deserializer)? {
        Paths::List(paths) => paths,
        Paths::Joined(joined) => std::env::split_paths(&joined)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
    })
}

/// A list, or one string of items separated by commas.
fn comma_list<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Items {
        List(Vec<String>),
        Joined(String),
    }
    Ok(match Items::deserialize(deserializer)? {
        Items::List(items) => items,
        Items::Joined(joined) => joined
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// Settings that cannot work, found at start rather than at first use.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or an environment variable did not parse.
    #[error("invalid configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
    /// A value parsed but is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The shortest `auth.admin_token` accepted.
const MIN_ADMIN_TOKEN_CHARS: usize = 32;

/// Top-level settings; other `ICEFEED_*` variables (used by scripts and tests) are ignored.
const SETTINGS: &[&str] = &[
    "database_url",
    "database",
    "listen",
    "change_store",
    "change_store_options",
    "node_id",
    "scheduler",
    "api",
    "limits",
    "retention",
    "push",
    "catalog",
    "auth",
    "network",
];

fn is_setting(key: &str) -> bool {
    let top = key
        .split("__")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    SETTINGS.contains(&top.as_str())
}

impl Settings {
    /// Loads defaults, then `file` (if any), then `ICEFEED_*` variables, and validates.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let settings: Settings = figment
            .merge(
                Env::prefixed("ICEFEED_")
                    .filter(|key| is_setting(key.as_str()))
                    .split("__"),
            )
            .extract()
            .map_err(Box::new)?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.scheduler;
        if s.lease_ttl < Duration::from_secs(2) {
            return Err(ConfigError::Invalid(
                "scheduler.lease_ttl must be at least 2s".into(),
            ));
        }
        if s.shuffle_buckets == 0 || s.max_task_attempts < 1 || s.map_memory_bytes == 0 {
            return Err(ConfigError::Invalid(
                "scheduler.shuffle_buckets, scheduler.max_task_attempts and \
                 scheduler.map_memory_bytes must be at least 1"
                    .into(),
            ));
        }
        if s.max_concurrent_tables == 0 || s.file_concurrency == 0 || s.task_workers == 0 {
            return Err(ConfigError::Invalid(
                "scheduler concurrency settings must be at least 1".into(),
            ));
        }
        if self.api.default_limit == 0 || self.api.default_limit > self.api.max_limit {
            return Err(ConfigError::Invalid(
                "api.default_limit must be between 1 and api.max_limit".into(),
            ));
        }
        if self.api.max_arrow_limit < self.api.max_limit {
            return Err(ConfigError::Invalid(
                "api.max_arrow_limit must be at least api.max_limit".into(),
            ));
        }
        let db = &self.database;
        if db.max_connections < 2 || db.acquire_timeout.is_zero() || db.statement_timeout.is_zero()
        {
            return Err(ConfigError::Invalid(
                "database.max_connections must be at least 2, and database.acquire_timeout and \
                 database.statement_timeout positive"
                    .into(),
            ));
        }
        if self.catalog.allowed_types.is_empty()
            || self
                .catalog
                .allowed_types
                .iter()
                .any(|t| !crate::catalog::CATALOG_TYPES.contains(&t.as_str()))
        {
            return Err(ConfigError::Invalid(format!(
                "catalog.allowed_types must list one or more of: {}",
                crate::catalog::CATALOG_TYPES.join(", ")
            )));
        }
        if self.catalog.timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "catalog.timeout must be positive".into(),
            ));
        }
        if self.api.max_body_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "api.max_body_bytes must be at least 1024".into(),
            ));
        }
        if self.api.stream_heartbeat.is_zero() || self.api.lag_report_interval.is_zero() {
            return Err(ConfigError::Invalid(
                "api.stream_heartbeat and api.lag_report_interval must be positive".into(),
            ));
        }
        self.network.host_policy()?;
        self.api.cors_origins()?;
        self.limits.validate()?;
        if let Some(token) = &self.auth.admin_token
            && token.expose().chars().count() < MIN_ADMIN_TOKEN_CHARS
        {
            return Err(ConfigError::Invalid(format!(
                "auth.admin_token must be at least {MIN_ADMIN_TOKEN_CHARS} characters \
                 (for example the output of `openssl rand -hex 32`)"
            )));
        }
        Ok(())
    }

    /// Refuses to serve an unauthenticated API beyond this machine unless told to: with
    /// no `auth.admin_token`, `listen` must be a loopback address or
    /// `auth.allow_unauthenticated` true.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        if self.auth.admin_token.is_none()
            && !self.listen.ip().is_loopback()
            && !self.auth.allow_unauthenticated
        {
            return Err(ConfigError::Invalid(format!(
                "refusing to listen on {} without authentication: anyone who reaches the \
                 port could register catalogs, delete tables and read every feed. Set \
                 auth.admin_token (ICEFEED_AUTH__ADMIN_TOKEN, at least \
                 {MIN_ADMIN_TOKEN_CHARS} characters), listen on a loopback address, or set \
                 auth.allow_unauthenticated = true (ICEFEED_AUTH__ALLOW_UNAUTHENTICATED) if \
                 something in front of icefeed authenticates its clients",
                self.listen
            )));
        }
        Ok(())
    }

    /// The name this node uses in leases.
    pub fn node_name(&self) -> String {
        self.node_id.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "node".into());
            format!(
                "{host}-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..6]
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_store_options_take_flags_and_numbers_as_strings() {
        // What `ICEFEED_CHANGE_STORE_OPTIONS__AWS_ALLOW_HTTP=true` parses into.
        let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::string(
                "[change_store_options]\naws_allow_http = true\nretries = 3\naws_region = \"x\"",
            ))
            .extract()
            .unwrap();
        let options = settings.change_store_options;
        assert_eq!(options["aws_allow_http"], "true");
        assert_eq!(options["retries"], "3");
        assert_eq!(options["aws_region"], "x");
    }

    #[test]
    fn an_open_api_listens_only_on_loopback_unless_allowed() {
        let mut settings = Settings::default();
        assert!(settings.check_exposure().is_ok(), "the default is loopback");
        settings.listen = ([0, 0, 0, 0], 8080).into();
        let refused = settings.check_exposure().unwrap_err().to_string();
        assert!(
            refused.contains("0.0.0.0:8080") && refused.contains("auth.admin_token"),
            "{refused}"
        );
        settings.auth.allow_unauthenticated = true;
        assert!(settings.check_exposure().is_ok());
        settings.auth.allow_unauthenticated = false;
        settings.auth.admin_token = Some(Secret::new("x".repeat(32)));
        assert!(settings.check_exposure().is_ok());
        assert!(settings.validate().is_ok());
    }

    #[test]
    fn the_admin_token_is_long_and_never_shown() {
        let mut settings = Settings::default();
        settings.auth.admin_token = Some(Secret::new("short-token"));
        let refused = settings.validate().unwrap_err().to_string();
        assert!(refused.contains("at least 32 characters"), "{refused}");
        assert!(!refused.contains("short-token"));
        assert!(!format!("{settings:?}").contains("short-token"));
        assert!(
            !serde_json::to_string(&settings)
                .unwrap()
                .contains("short-token")
        );
    }

    #[test]
    fn local_paths_are_a_list_or_one_string_separated_by_colons() {
        let parse = |toml: &str| -> Vec<std::path::PathBuf> {
            let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::string(toml))
                .extract()
                .unwrap();
            settings.catalog.local_paths
        };
        assert!(Settings::default().catalog.local_paths.is_empty());
        let both = vec![std::path::PathBuf::from("/a"), "/b c".into()];
        assert_eq!(parse("[catalog]\nlocal_paths = [\"/a\", \"/b c\"]"), both);
        assert_eq!(parse("[catalog]\nlocal_paths = \"/a:/b c\""), both);
    }

    #[test]
    fn allowed_catalog_types_are_every_type_by_default_and_must_be_known() {
        let parse = |toml: &str| -> Settings {
            Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::string(toml))
                .extract()
                .unwrap()
        };
        let defaults = Settings::default();
        assert_eq!(
            defaults.catalog.allowed_types,
            crate::catalog::CATALOG_TYPES
        );
        assert!(defaults.validate().is_ok());
        let some = parse("[catalog]\nallowed_types = \"rest, glue\"");
        assert_eq!(some.catalog.allowed_types, ["rest", "glue"]);
        assert!(some.validate().is_ok());
        for bad in ["allowed_types = []", "allowed_types = [\"rest\", \"jdbc\"]"] {
            let refused = parse(&format!("[catalog]\n{bad}")).validate().unwrap_err();
            assert!(
                refused.to_string().contains("catalog.allowed_types"),
                "{bad}: {refused}"
            );
        }
    }

    #[test]
    fn every_section_is_read_from_the_environment() {
        let defaults = serde_json::to_value(Settings::default()).unwrap();
        for key in defaults.as_object().unwrap().keys() {
            assert!(
                is_setting(&key.to_ascii_uppercase()),
                "{key} is not in SETTINGS"
            );
        }
    }

    #[test]
    fn allowed_hosts_are_a_list_or_one_string_separated_by_commas() {
        let parse = |toml: &str| -> Result<Settings, ConfigError> {
            let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::string(toml))
                .extract()
                .unwrap();
            settings.validate().map(|()| settings)
        };
        let both = vec!["10.0.0.0/8".to_string(), "catalog.internal".into()];
        let list = parse("[network]\nallowed_hosts = [\"10.0.0.0/8\", \"catalog.internal\"]");
        assert_eq!(list.unwrap().network.allowed_hosts, both);
        let joined = parse("[network]\nallowed_hosts = \"10.0.0.0/8, catalog.internal\"");
        assert_eq!(joined.unwrap().network.allowed_hosts, both);
        let bad = parse("[network]\nallowed_hosts = \"10.0.0.0/40\"").unwrap_err();
        assert!(bad.to_string().contains("network.allowed_hosts"), "{bad}");
    }

    #[test]
    fn the_catalog_timeout_is_a_duration_and_must_be_positive() {
        let parse = |toml: &str| -> Settings {
            Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::string(toml))
                .extract()
                .unwrap()
        };
        assert_eq!(Settings::default().catalog.timeout, Duration::from_secs(30));
        let settings = parse("[catalog]\ntimeout = \"2s\"");
        assert_eq!(settings.catalog.timeout, Duration::from_secs(2));
        assert!(settings.validate().is_ok());
        let zero = parse("[catalog]\ntimeout = \"0s\"");
        assert!(
            zero.validate()
                .unwrap_err()
                .to_string()
                .contains("catalog.timeout")
        );
    }

    #[test]
    fn arrow_pages_may_be_larger_but_never_smaller_than_json_pages() {
        let api = Settings::default().api;
        assert_eq!((api.max_limit, api.max_arrow_limit), (10_000, 100_000));
        let mut settings = Settings::default();
        settings.api.max_limit = 200_000;
        let refused = settings.validate().unwrap_err().to_string();
        assert!(refused.contains("api.max_arrow_limit"), "{refused}");
        settings.api.max_arrow_limit = 200_000;
        assert!(settings.validate().is_ok());
    }
}
