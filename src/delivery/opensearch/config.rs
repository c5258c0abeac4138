//! What a push target is: the settings a user registers (stored and shown as they were
//! given, secrets masked), and their checked form that the push worker uses.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;
use utoipa::ToSchema;

use super::template::{DocumentId, FieldTemplate, IndexTemplate};
use crate::catalog::REDACTED;

/// OpenSearch refuses request bodies over `http.max_content_length`, 100 MiB by default.
const MAX_BATCH_BYTES: usize = 100 << 20;
/// The most documents one `_bulk` request may carry: a batch is read into memory whole.
const MAX_BATCH_DOCUMENTS: usize = 100_000;

/// Where and how a push subscription writes into OpenSearch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenSearchTarget {
    /// Base URLs of the cluster, e.g. `https://search.example:9200`; after a failed
    /// request the next one is tried.
    #[schema(min_items = 1, example = json!(["http://127.0.0.1:9200"]))]
    pub endpoints: Vec<String>,
    /// Index name, or a template of it: `{table}` (`namespace.name`), `{namespace}`,
    /// `{name}`, `{date}` or `{date:%Y.%m.%d}` (a strftime format of the commit time,
    /// UTC). Table names are lowercased. `{{` and `}}` are literal braces.
    #[schema(example = "cdc-{table}-{date:%Y.%m}")]
    pub index: String,
    /// Credentials; never shown back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// TLS options for `https` endpoints.
    #[serde(default, skip_serializing_if = "TlsOptions::is_default")]
    pub tls: TlsOptions,
    /// Document id: a template over the row's columns such as `{region}-{order_id}`.
    /// Default: the identifier columns (one column: its value as text; several: their
    /// texts in key order with `\` and `|` escaped by `\`, joined by `|`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_id: Option<String>,
    /// Custom routing: a column name, or a template like the document id's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<String>,
    /// How much one `_bulk` request carries at most.
    #[serde(default)]
    pub batch: BatchLimits,
    /// Index settings to create a missing index with, e.g. `{"number_of_shards": 1}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub index_settings: Option<Value>,
    /// Mappings to create a missing index with, e.g. `{"properties": {...}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub mappings: Option<Value>,
}

/// Credentials sent with every request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Auth {
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password.
        #[schema(value_type = String, format = Password)]
        password: Secret,
    },
    /// A bearer token (`Authorization: Bearer …`).
    Bearer {
        /// The token.
        #[schema(value_type = String, format = Password)]
        token: Secret,
    },
}

pub use crate::secret::Secret;

/// TLS options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// CA certificates to trust besides the public roots: PEM text, or the path of a PEM
    /// file on the icefeed nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Accept any certificate and host name. For development only.
    #[serde(default)]
    pub insecure: bool,
}

impl TlsOptions {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Limits of one `_bulk` request; a single larger document is sent alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchLimits {
    /// Documents (index and delete actions) per request, 1 to 100000; default 1000.
    #[serde(default = "default_max_documents")]
    #[schema(minimum = 1, maximum = 100_000)]
    pub max_documents: usize,
    /// Bytes of request body, 1 KiB to 100 MiB; default 5 MiB.
    #[serde(default = "default_max_bytes")]
    #[schema(minimum = 1024, maximum = 104_857_600)]
    pub max_bytes: usize,
}

fn default_max_documents() -> usize {
    1000
}

fn default_max_bytes() -> usize {
    5 << 20
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            max_documents: default_max_documents(),
            max_bytes: default_max_bytes(),
        }
    }
}

/// A push target's settings that are not valid; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The JSON does not have the target's shape (unknown or missing fields, wrong types).
    #[error("invalid OpenSearch target: {0}")]
    Malformed(String),
    /// One field's value is wrong.
    #[error("invalid OpenSearch target: `{field}`: {message}")]
    Invalid {
        /// Path of the field, e.g. `endpoints[1]` or `tls.ca_bundle`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// A checked push target: the settings as given, with their parsed parts.
#[derive(Clone, Debug)]
pub struct PushTarget {
    /// The settings as registered.
    pub config: OpenSearchTarget,
    /// Parsed `endpoints`.
    pub endpoints: Vec<Url>,
    /// Parsed `index`.
    pub index: IndexTemplate,
    /// Parsed `document_id`.
    pub document_id: DocumentId,
    /// Parsed `routing`.
    pub routing: Option<FieldTemplate>,
}

impl PushTarget {
    /// Whether a document's id or routing is rendered from its row's values (a
    /// template), so that an update may move the document.
    pub fn renders_rows(&self) -> bool {
        matches!(self.document_id, DocumentId::Template(_)) || self.routing.is_some()
    }

    /// Parses and checks registered settings.
    pub fn from_json(value: &Value) -> Result<Self, ConfigError> {
        let config: OpenSearchTarget = serde_json::from_value(value.clone())
            .map_err(|e| ConfigError::Malformed(e.to_string()))?;
        Self::new(config)
    }

    /// Checks settings; every error names its field and says what to do.
    pub fn new(config: OpenSearchTarget) -> Result<Self, ConfigError> {
        if config.endpoints.is_empty() {
            return Err(invalid(
                "endpoints",
                "give at least one URL, e.g. http://127.0.0.1:9200",
            ));
        }
        let endpoints = config
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, text)| {
                parse_endpoint(text).map_err(|m| invalid(format!("endpoints[{i}]"), m))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let index = IndexTemplate::parse(&config.index).map_err(|m| invalid("index", m))?;
        let document_id = match &config.document_id {
            None => DocumentId::IdentifierColumns,
            Some(text) => DocumentId::Template(
                FieldTemplate::parse(text).map_err(|m| invalid("document_id", m))?,
            ),
        };
        let routing = config
            .routing
            .as_deref()
            .map(FieldTemplate::parse)
            .transpose()
            .map_err(|m| invalid("routing", m))?;
        check_auth(config.auth.as_ref())?;
        check_tls(&config.tls)?;
        check_batch(&config.batch)?;
        for (field, value) in [
            ("index_settings", &config.index_settings),
            ("mappings", &config.mappings),
        ] {
            if value.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(invalid(
                    field,
                    "must be a JSON object, as in the create-index API",
                ));
            }
        }
        Ok(Self {
            config,
            endpoints,
            index,
            document_id,
            routing,
        })
    }
}

impl OpenSearchTarget {
    /// A copy to show in API answers and logs: secrets replaced by `********`.
    pub fn redacted(&self) -> Self {
        let mut shown = self.clone();
        shown.auth = shown.auth.map(|auth| match auth {
            Auth::Basic { username, .. } => Auth::Basic {
                username,
                password: Secret::new(REDACTED),
            },
            Auth::Bearer { .. } => Auth::Bearer {
                token: Secret::new(REDACTED),
            },
        });
        shown
    }
}

fn parse_endpoint(text: &str) -> Result<Url, String> {
    let url = Url::parse(text)
        .map_err(|e| format!("{text:?} is not a URL ({e}); write e.g. https://host:9200"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "scheme {:?} is not supported; use http or https",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("credentials in the URL are not accepted; put them in `auth`".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a query or fragment has no meaning here; give the base URL only".into());
    }
    Ok(url)
}

fn check_auth(auth: Option<&Auth>) -> Result<(), ConfigError> {
    match auth {
        Some(Auth::Basic { username, .. }) if username.is_empty() || username.contains(':') => {
            Err(invalid(
                "auth.username",
                "must be non-empty and without `:` (basic authentication cannot carry it)",
            ))
        }
        Some(Auth::Bearer { token }) if token.expose().is_empty() => {
            Err(invalid("auth.token", "must be non-empty"))
        }
        _ => Ok(()),
    }
}

fn check_tls(tls: &TlsOptions) -> Result<(), ConfigError> {
    match tls.ca_bundle.as_deref() {
        Some("") => Err(invalid(
            "tls.ca_bundle",
            "is empty; give PEM text or a file path, or leave it out",
        )),
        // Building a client parses the certificates. A path is read only when connecting:
        // the file is on the pushing node, not necessarily on this one.
        Some(pem) if is_pem(pem) => tls
            .apply(reqwest::Client::builder())?
            .build()
            .map(drop)
            .map_err(|e| {
                invalid(
                    "tls.ca_bundle",
                    format!("holds no usable certificate: {}", error_chain(&e)),
                )
            }),
        _ => Ok(()),
    }
}

impl TlsOptions {
    /// Adds the options to an HTTP client; reads a CA bundle given as a path.
    pub(super) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, ConfigError> {
        builder = builder.danger_accept_invalid_certs(self.insecure);
        let Some(bundle) = &self.ca_bundle else {
            return Ok(builder);
        };
        let pem = if is_pem(bundle) {
            bundle.as_bytes().to_vec()
        } else {
            std::fs::read(bundle)
                .map_err(|e| invalid("tls.ca_bundle", format!("cannot read {bundle}: {e}")))?
        };
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| invalid("tls.ca_bundle", format!("is not valid PEM: {e}")))?;
        if certs.is_empty() {
            return Err(invalid("tls.ca_bundle", "holds no certificate"));
        }
        Ok(certs
            .into_iter()
            .fold(builder, |b, cert| b.add_root_certificate(cert)))
    }
}

/// Whether a CA bundle is given inline rather than as a path.
fn is_pem(text: &str) -> bool {
    text.trim_start().starts_with("-----BEGIN")
}

/// An error with its causes: reqwest's own messages are often just "builder error".
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn check_batch(batch: &BatchLimits) -> Result<(), ConfigError> {
    if !(1..=MAX_BATCH_DOCUMENTS).contains(&batch.max_documents) {
        return Err(invalid(
            "batch.max_documents",
            format!("must be between 1 and {MAX_BATCH_DOCUMENTS}"),
        ));
    }
    if !(1024..=MAX_BATCH_BYTES).contains(&batch.max_bytes) {
        return Err(invalid(
            "batch.max_bytes",
            format!(
                "must be between 1024 and {MAX_BATCH_BYTES} (OpenSearch's default request limit)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::opensearch::OpenSearchClient;
    use serde_json::json;

    fn target(extra: Value) -> Result<PushTarget, ConfigError> {
        let mut value = json!({"endpoints": ["http://127.0.0.1:9200"], "index": "orders"});
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        PushTarget::from_json(&value)
    }

    #[test]
    fn defaults_fill_a_minimal_target() {
        let t = target(json!({})).unwrap();
        assert_eq!(
            t.config.batch,
            BatchLimits {
                max_documents: 1000,
                max_bytes: 5 * 1024 * 1024
            }
        );
        assert_eq!(t.document_id, DocumentId::IdentifierColumns);
        assert!(t.routing.is_none() && t.config.auth.is_none() && !t.config.tls.insecure);
        assert_eq!(t.endpoints[0].as_str(), "http://127.0.0.1:9200/");
        // Stored form round-trips and leaves defaults out.
        let stored = serde_json::to_value(&t.config).unwrap();
        assert_eq!(
            stored,
            json!({"endpoints": ["http://127.0.0.1:9200"], "index": "orders",
                                  "batch": {"max_documents": 1000, "max_bytes": 5242880}})
        );
    }

    #[test]
    fn a_full_target_parses() {
        let t = target(json!({
            "endpoints": ["https://a:9200", "https://b:9200/prefix"],
            "index": "cdc-{table}-{date:%Y.%m}",
            "auth": {"type": "basic", "username": "u", "password": "p"},
            "tls": {"insecure": true},
            "document_id": "{region}:{id}",
            "routing": "region",
            "batch": {"max_documents": 10, "max_bytes": 65536},
            "index_settings": {"number_of_replicas": 0},
            "mappings": {"properties": {"id": {"type": "long"}}}
        }))
        .unwrap();
        assert_eq!(t.endpoints.len(), 2);
        assert!(matches!(t.document_id, DocumentId::Template(_)));
        assert_eq!(t.routing.unwrap().to_string(), "{region}");
    }

    /// A self-signed CA certificate (no key: nothing can be signed with it).
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBizCCATGgAwIBAgIUGpt7i6Rt8V9+Kb5SK6TJ6ut/5/0wCgYIKoZIzj0EAwIw\nGjEYMBYGA1UEAwwPaWNlZmVlZC10ZXN0LWNhMCAXDTI2MTEyOTE1NDE0NVoYDzIx\nMjYxMTA1MTU0MTQ1WjAaMRgwFgYDVQQDDA9pY2VmZWVkLXRlc3QtY2EwWTATBgcq\nhkjOPQIBBggqhkjOPQMBBwNCAARnwYdG81yFvH1LiW8qA3m/GNTtrc0vAA0dYKz9\nzIM4U6CcsTghlOBLYRHKSAVCVkK6wPyzESvMy9g72D2a/Y9Qo1MwUTAdBgNVHQ4E\nFgQUMXPXwxG2rA6g8dN+d9TZ9Cv3M3IwHwYDVR0jBBgwFoAUMXPXwxG2rA6g8dN+\nd9TZ9Cv3M3IwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA/OF0\ns72vgzEJ34pipV/0C90EmqiNCR7M7hdsYNjhJ3ACIA/tb1g2D3ZpvqfE3wDRk8pp\nOHNxBll9ka3bzaM/p9yo\n-----END CERTIFICATE-----\n";

    #[test]
    fn ca_bundles_are_pem_text_or_a_path() {
        let t = target(json!({"tls": {"ca_bundle": CA}})).unwrap();
        assert!(OpenSearchClient::new(&t, &crate::network::HostPolicy::unrestricted()).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, CA).unwrap();
        let t = target(json!({"tls": {"ca_bundle": path}})).unwrap();
        assert!(OpenSearchClient::new(&t, &crate::network::HostPolicy::unrestricted()).is_ok());
        // A missing file is an error when connecting, from the node that connects.
        let t = target(json!({"tls": {"ca_bundle": dir.path().join("none.pem")}})).unwrap();
        let err = OpenSearchClient::new(&t, &crate::network::HostPolicy::unrestricted())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`tls.ca_bundle`: cannot read"), "{err}");
    }

    #[test]
    fn errors_name_the_field_and_say_what_to_do() {
        let cases = [
            (
                json!({"endpoints": []}),
                "`endpoints`: give at least one URL",
            ),
            (
                json!({"endpoints": ["http://x", "x:9200"]}),
                "`endpoints[1]`: scheme \"x\"",
            ),
            (
                json!({"endpoints": ["nope"]}),
                "`endpoints[0]`: \"nope\" is not a URL",
            ),
            (
                json!({"endpoints": ["https://u:p@x"]}),
                "put them in `auth`",
            ),
            (
                json!({"index": "{tabel}"}),
                "`index`: unknown placeholder {tabel}",
            ),
            (
                json!({"index": "Orders"}),
                "`index`: names like \"Orders\" are invalid",
            ),
            (
                json!({"document_id": "{a"}),
                "`document_id`: placeholder {a is not closed",
            ),
            (json!({"routing": ""}), "`routing`: it is empty"),
            (
                json!({"auth": {"type": "basic", "username": "", "password": "p"}}),
                "`auth.username`",
            ),
            (
                json!({"auth": {"type": "bearer", "token": ""}}),
                "`auth.token`: must be non-empty",
            ),
            (
                json!({"tls": {"ca_bundle": "-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----\n"}}),
                "`tls.ca_bundle`",
            ),
            (
                json!({"batch": {"max_documents": 0}}),
                "`batch.max_documents`: must be between 1 and 100000",
            ),
            (
                json!({"batch": {"max_documents": 100_001}}),
                "`batch.max_documents`: must be between 1 and 100000",
            ),
            (
                json!({"batch": {"max_bytes": 10}}),
                "`batch.max_bytes`: must be between",
            ),
            (
                json!({"mappings": [1]}),
                "`mappings`: must be a JSON object",
            ),
            (json!({"indexx": "a"}), "unknown field `indexx`"),
            (
                json!({"auth": {"type": "oauth"}}),
                "unknown variant `oauth`",
            ),
        ];
        for (extra, want) in cases {
            let err = target(extra.clone()).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
        let err = PushTarget::from_json(&json!({"index": "x"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `endpoints`"), "{err}");
    }

    #[test]
    fn secrets_are_redacted_for_answers_and_never_debug_printed() {
        for auth in [
            json!({"type": "basic", "username": "svc", "password": "hunter2"}),
            json!({"type": "bearer", "token": "hunter2"}),
        ] {
            let t = target(json!({"auth": auth})).unwrap();
            let stored = serde_json::to_string(&t.config).unwrap();
            assert!(
                stored.contains("hunter2"),
                "the stored form keeps the secret"
            );
            let shown = serde_json::to_string(&t.config.redacted()).unwrap();
            assert!(
                !shown.contains("hunter2") && shown.contains(REDACTED),
                "{shown}"
            );
            assert!(!format!("{t:?}").contains("hunter2"), "Debug leaks");
        }
        let shown = target(json!({"auth": {"type": "basic", "username": "svc", "password": "x"}}))
            .unwrap()
            .config
            .redacted();
        assert_eq!(
            serde_json::to_value(&shown.auth).unwrap(),
            json!({"type": "basic", "username": "svc", "password": REDACTED})
        );
    }
}
