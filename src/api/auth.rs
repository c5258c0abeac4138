//! Who may call what: bearer tokens with scopes, checked by one middleware from the
//! route's method and path before any handler runs, so a new endpoint is admin-only
//! until it is listed here.
//!
//! Scopes: `admin` (everything), `read` (every table, feed and subscription: pull,
//! stream and acknowledge), `table:<id>` (that table and its feed) and
//! `subscription:<id>` (that subscription: pull, stream, acknowledge). Tokens are the
//! configured admin token or ones created through `/v1/tokens`, stored as SHA-256 hashes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::AppState;
use super::error::ApiError;
use crate::config::AuthSettings;
use crate::store::{Store, TableId};

/// What a token lets its holder do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Admin,
    Read,
    Table(TableId),
    Subscription(Uuid),
}

impl Scope {
    /// Parses `admin`, `read`, `table:<uuid>` or `subscription:<uuid>`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            None if text == "admin" => Some(Self::Admin),
            None if text == "read" => Some(Self::Read),
            Some(("table", id)) => Uuid::parse_str(id).ok().map(|id| Self::Table(TableId(id))),
            Some(("subscription", id)) => Uuid::parse_str(id).ok().map(Self::Subscription),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Admin => f.write_str("admin"),
            Self::Read => f.write_str("read"),
            Self::Table(id) => write!(f, "table:{id}"),
            Self::Subscription(id) => write!(f, "subscription:{id}"),
        }
    }
}

/// The caller of a request, as the middleware found it; handlers that list things
/// filter by it.
#[derive(Clone, Debug)]
pub enum Access {
    /// Authentication is off on this node.
    Open,
    /// A token with these scopes.
    Token(Arc<Vec<Scope>>),
}

impl Access {
    fn has(&self, wanted: impl Fn(&Scope) -> bool) -> bool {
        match self {
            Self::Open => true,
            Self::Token(scopes) => scopes.iter().any(|s| *s == Scope::Admin || wanted(s)),
        }
    }

    /// May manage tables, subscriptions and tokens.
    pub fn is_admin(&self) -> bool {
        self.has(|_| false)
    }

    /// May read every table and subscription.
    pub fn reads_all(&self) -> bool {
        self.has(|s| *s == Scope::Read)
    }

    /// May read this table and its feed.
    pub fn reads_table(&self, id: TableId) -> bool {
        self.has(|s| *s == Scope::Read || *s == Scope::Table(id))
    }

    /// May pull, stream and acknowledge this subscription.
    pub fn consumes(&self, id: Uuid) -> bool {
        self.has(|s| *s == Scope::Read || *s == Scope::Subscription(id))
    }
}

/// What a route needs.
enum Need {
    /// Nothing: health, readiness, metrics.
    Nothing,
    /// A valid token; the handler narrows what it shows (lists).
    AnyToken,
    Admin,
    /// Read access to the table in the path's `id`.
    Table,
    /// Consumer access to the subscription in the path's `id`.
    Subscription,
}

/// The rule of each route; anything not listed needs `admin`.
fn need(method: &Method, route: &str) -> Need {
    let read = method == Method::GET || method == Method::HEAD;
    match route {
        "/healthz" | "/readyz" | "/metrics" | "/openapi.json" => Need::Nothing,
        "/v1/tables" | "/v1/subscriptions" if read => Need::AnyToken,
        "/v1/tables/{id}"
        | "/v1/tables/{id}/changes"
        | "/v1/tables/{id}/changes/stream"
        | "/v1/tables/{id}/schemas/{schema_id}"
            if read =>
        {
            Need::Table
        }
        "/v1/subscriptions/{id}"
        | "/v1/subscriptions/{id}/events"
        | "/v1/subscriptions/{id}/stream"
        | "/v1/subscriptions/{id}/dead-letters"
            if read =>
        {
            Need::Subscription
        }
        "/v1/subscriptions/{id}/ack" if method == Method::POST => Need::Subscription,
        _ => Need::Admin,
    }
}

/// The prefix of tokens icefeed makes, so that secret scanners can recognize them.
const TOKEN_PREFIX: &str = "icf_";

/// A fresh token: the prefix and 256 random bits, URL-safe.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The hash a token is stored and looked up by.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Verifies tokens, keeping verified ones for `auth.cache_ttl`.
#[derive(Clone)]
pub struct Authenticator {
    store: Store,
    admin_hash: Option<[u8; 32]>,
    ttl: Duration,
    cache: Arc<Mutex<HashMap<[u8; 32], Verified>>>,
}

/// A token's scopes and when they were read from the database.
type Verified = (Arc<Vec<Scope>>, Instant);

/// Verified tokens kept at most; the cache is emptied when it would grow past this.
const CACHE_CAPACITY: usize = 10_000;

impl Authenticator {
    /// An authenticator of the configured admin token and the stored tokens.
    pub fn new(store: Store, settings: &AuthSettings) -> Self {
        Self {
            store,
            admin_hash: settings
                .admin_token
                .as_ref()
                .map(|t| token_hash(t.expose())),
            ttl: settings.cache_ttl,
            cache: Arc::default(),
        }
    }

    /// Whether requests need tokens.
    pub fn enabled(&self) -> bool {
        self.admin_hash.is_some()
    }

    /// The scopes of `token`, or `None` when it is unknown, revoked or expired.
    async fn scopes(&self, token: &str) -> Result<Option<Arc<Vec<Scope>>>, ApiError> {
        let hash = token_hash(token);
        // Comparing hashes keeps the comparison's time independent of the secret.
        if Some(hash) == self.admin_hash {
            return Ok(Some(Arc::new(vec![Scope::Admin])));
        }
        if let Some((scopes, at)) = self.cache.lock().unwrap().get(&hash)
            && at.elapsed() < self.ttl
        {
            return Ok(Some(scopes.clone()));
        }
        let Some(stored) = self.store.token_by_secret(&hash).await? else {
            self.forget(&hash);
            return Ok(None);
        };
        let scopes: Arc<Vec<Scope>> = Arc::new(
            stored
                .scopes
                .iter()
                .filter_map(|s| Scope::parse(s))
                .collect(),
        );
        let mut cache = self.cache.lock().unwrap();
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(hash, (scopes.clone(), Instant::now()));
        Ok(Some(scopes))
    }

    /// Drops a revoked token from this node's cache.
    pub fn forget(&self, hash: &[u8]) {
        self.cache
            .lock()
            .unwrap()
            .retain(|k, _| k.as_slice() != hash);
    }
}

fn unauthenticated(code: &'static str, detail: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, code, detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"icefeed\""),
    );
    response
}

fn forbidden(method: &Method, route: &str, needs: &str) -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("this token's scopes do not allow {method} {route}: it needs {needs}"),
    )
    .with("required_scope", needs)
    .into_response()
}

/// The middleware: finds the caller, checks the route's rule and hands the caller to
/// the handler as an [`Access`] extension.
pub async fn authorize(
    State(state): State<AppState>,
    route: MatchedPath,
    params: RawPathParams,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let need = need(&method, route.as_str());
    let access = if !state.auth.enabled() || matches!(need, Need::Nothing) {
        Access::Open
    } else {
        let header = request.headers().get(header::AUTHORIZATION);
        let Some(token) = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
        else {
            return unauthenticated(
                if header.is_some() {
                    "invalid_token"
                } else {
                    "unauthenticated"
                },
                "this endpoint needs a token: send `Authorization: Bearer <token>` \
                 (the node's auth.admin_token, or one made with POST /v1/tokens)",
            );
        };
        match state.auth.scopes(token).await {
            Ok(Some(scopes)) => Access::Token(scopes),
            Ok(None) => {
                return unauthenticated(
                    "invalid_token",
                    "the token is not known here: it was revoked, has expired or was \
                     mistyped",
                );
            }
            Err(error) => return error.into_response(),
        }
    };
    let id = || params.iter().find(|(k, _)| *k == "id").map(|(_, v)| v);
    let allowed = match need {
        Need::Nothing | Need::AnyToken => true,
        Need::Admin => access.is_admin(),
        Need::Table => match id().and_then(|v| Uuid::parse_str(v).ok()) {
            Some(table) => access.reads_table(TableId(table)),
            // Not a table id: the handler answers it as a bad path; nothing to show.
            None => access.reads_all(),
        },
        Need::Subscription => {
            if access.reads_all() {
                true
            } else {
                match id() {
                    Some(id_or_name) => match subscription_id(&state, id_or_name).await {
                        Ok(Some(id)) => access.consumes(id),
                        Ok(None) => false,
                        Err(error) => return error.into_response(),
                    },
                    None => false,
                }
            }
        }
    };
    if !allowed {
        let needs = match need {
            Need::Table => "read or table:<id>",
            Need::Subscription => "read or subscription:<id>",
            _ => "admin",
        };
        return forbidden(&method, route.as_str(), needs);
    }
    request.extensions_mut().insert(access);
    next.run(request).await
}

/// The id of the subscription `id_or_name` names, if any.
async fn subscription_id(state: &AppState, id_or_name: &str) -> Result<Option<Uuid>, ApiError> {
    match state.store.find_subscription(id_or_name).await {
        Ok(subscription) => Ok(Some(subscription.id)),
        Err(crate::store::StoreError::NotFound) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_print_alike() {
        let table = Uuid::now_v7();
        for text in [
            "admin".to_string(),
            "read".to_string(),
            format!("table:{table}"),
            format!("subscription:{table}"),
        ] {
            assert_eq!(Scope::parse(&text).unwrap().to_string(), text);
        }
        for bad in [
            "", "Admin", "write", "table:", "table:x", "read:all", "admin:",
        ] {
            assert_eq!(Scope::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn what_each_scope_allows() {
        let (t1, t2, s1) = (TableId::new(), TableId::new(), Uuid::now_v7());
        let token = |scopes: Vec<Scope>| Access::Token(Arc::new(scopes));
        let table = token(vec![Scope::Table(t1)]);
        assert!(table.reads_table(t1) && !table.reads_table(t2));
        assert!(!table.is_admin() && !table.reads_all() && !table.consumes(s1));
        let sub = token(vec![Scope::Subscription(s1)]);
        assert!(sub.consumes(s1) && !sub.consumes(Uuid::now_v7()) && !sub.reads_table(t1));
        let read = token(vec![Scope::Read]);
        assert!(read.reads_table(t2) && read.consumes(s1) && !read.is_admin());
        let admin = token(vec![Scope::Admin]);
        assert!(admin.is_admin() && admin.reads_table(t1) && admin.consumes(s1));
        assert!(Access::Open.is_admin());
    }

    #[test]
    fn routes_not_listed_need_admin() {
        assert!(matches!(need(&Method::GET, "/v1/tokens"), Need::Admin));
        assert!(matches!(need(&Method::POST, "/v1/tables"), Need::Admin));
        assert!(matches!(
            need(&Method::DELETE, "/v1/tables/{id}"),
            Need::Admin
        ));
        assert!(matches!(need(&Method::GET, "/v1/tables/{id}"), Need::Table));
        assert!(matches!(
            need(&Method::POST, "/v1/subscriptions/{id}/ack"),
            Need::Subscription
        ));
        assert!(matches!(
            need(&Method::POST, "/v1/subscriptions/{id}/rewind"),
            Need::Admin
        ));
        assert!(matches!(need(&Method::GET, "/new/endpoint"), Need::Admin));
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 43);
        assert_eq!(token_hash(&a), token_hash(&a));
        assert_ne!(token_hash(&a), token_hash(&b));
    }
}
