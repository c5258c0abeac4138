//! Who may call what: bearer tokens with scopes, checked by one middleware from the
//! route's method and path before any handler runs, so a new endpoint is admin-only
//! until it is listed here.
//!
//! Scopes: `admin` (everything), `read` (every table, feed and subscription: pull,
//! stream and acknowledge), `table:<id>` (that table and its feed) and
//! `subscription:<id>` (that subscription: pull, stream, acknowledge). Tokens are the
//! configured admin token or ones created through `/v1/tokens`, stored as SHA-256 hashes.
//!
//! Browsers' `EventSource` cannot send headers, so a stream may instead be opened with
//! `?access_token=` and a stream token: a short-lived grant for one stream path, signed
//! with a key derived from the admin token, so that every node verifies it without a
//! database and it is worth nothing elsewhere or later.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, ProblemCode};
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
        // The handler checks that the caller may open the stream it asks a token for.
        "/v1/tokens/stream" if method == Method::POST => Need::AnyToken,
        "/v1/tables/{id}"
        | "/v1/tables/{id}/changes"
        | "/v1/tables/{id}/changes/stream"
        | "/v1/tables/{id}/schemas/{schema_id}"
        | "/v1/tables/{id}/change-sets"
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
    format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
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
    /// Signs stream tokens: derived from the admin token, so all nodes share it.
    stream_key: Option<[u8; 32]>,
    ttl: Duration,
    cache: Arc<Mutex<HashMap<[u8; 32], Verified>>>,
}

/// A token's scopes and when they were read from the database.
type Verified = (Arc<Vec<Scope>>, Instant);

/// The prefix of stream tokens.
const STREAM_TOKEN_PREFIX: &str = "ics_";

/// How long a stream token may be used to open its stream.
pub const STREAM_TOKEN_TTL: Duration = Duration::from_secs(300);

fn sign(key: &[u8], payload: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(payload.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// The routes a stream token may open.
const STREAM_ROUTES: [&str; 2] = [
    "/v1/tables/{id}/changes/stream",
    "/v1/subscriptions/{id}/stream",
];

/// The `access_token` query parameter, if any.
fn query_token(request: &Request) -> Option<String> {
    let query = request.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "access_token")
        .map(|(_, value)| value.into_owned())
}

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
            stream_key: settings
                .admin_token
                .as_ref()
                .map(|t| token_hash(&format!("icefeed stream tokens\0{}", t.expose()))),
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

    /// A stream token for `path`, valid until `expires` (Unix seconds); `None` when
    /// authentication is off.
    pub fn stream_token(&self, path: &str, expires: i64) -> Option<String> {
        let key = self.stream_key.as_ref()?;
        let payload = format!("{expires}\n{path}");
        Some(format!(
            "{STREAM_TOKEN_PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(sign(key, &payload))
        ))
    }

    /// Whether `token` is a stream token for exactly `path` that has not expired.
    fn stream_token_allows(&self, token: &str, path: &str) -> bool {
        let Some(key) = &self.stream_key else {
            return false;
        };
        let Some((payload, mac)) = token
            .strip_prefix(STREAM_TOKEN_PREFIX)
            .and_then(|t| t.split_once('.'))
        else {
            return false;
        };
        let (Ok(payload), Ok(mac)) = (URL_SAFE_NO_PAD.decode(payload), URL_SAFE_NO_PAD.decode(mac))
        else {
            return false;
        };
        let mut check = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        check.update(&payload);
        // `verify_slice` compares in constant time.
        if check.verify_slice(&mac).is_err() {
            return false;
        }
        let Some((expires, granted)) = std::str::from_utf8(&payload)
            .ok()
            .and_then(|p| p.split_once('\n'))
        else {
            return false;
        };
        granted == path
            && expires
                .parse::<i64>()
                .is_ok_and(|e| e > chrono::Utc::now().timestamp())
    }

    /// Drops a revoked token from this node's cache.
    pub fn forget(&self, hash: &[u8]) {
        self.cache
            .lock()
            .unwrap()
            .retain(|k, _| k.as_slice() != hash);
    }
}

fn unauthenticated(code: ProblemCode, detail: &str) -> Response {
    let mut response = ApiError::new(code, detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"icefeed\""),
    );
    response
}

fn forbidden(method: &Method, route: &str, needs: &str) -> Response {
    ApiError::new(
        ProblemCode::Forbidden,
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
    } else if STREAM_ROUTES.contains(&route.as_str())
        && !request.headers().contains_key(header::AUTHORIZATION)
        && let Some(token) = query_token(&request)
    {
        if !state.auth.stream_token_allows(&token, request.uri().path()) {
            return unauthenticated(
                ProblemCode::InvalidToken,
                "the stream token is not for this stream or has expired: get a new one \
                 with POST /v1/tokens/stream",
            );
        }
        // The grant is for this stream alone, and was checked when it was made.
        request
            .extensions_mut()
            .insert(Access::Token(Arc::new(Vec::new())));
        return next.run(request).await;
    } else {
        let header = request.headers().get(header::AUTHORIZATION);
        let Some(token) = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
        else {
            return unauthenticated(
                if header.is_some() {
                    ProblemCode::InvalidToken
                } else {
                    ProblemCode::Unauthenticated
                },
                "this endpoint needs a token: send `Authorization: Bearer <token>` \
                 (the node's auth.admin_token, or one made with POST /v1/tokens)",
            );
        };
        match state.auth.scopes(token).await {
            Ok(Some(scopes)) => Access::Token(scopes),
            Ok(None) => {
                return unauthenticated(
                    ProblemCode::InvalidToken,
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
        Need::Subscription if access.reads_all() => true,
        Need::Subscription => match subscription_id(&state, id().unwrap_or_default()).await {
            Ok(found) => found.is_some_and(|id| access.consumes(id)),
            Err(error) => return error.into_response(),
        },
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
pub(super) async fn subscription_id(
    state: &AppState,
    id_or_name: &str,
) -> Result<Option<Uuid>, ApiError> {
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

    // A lazy pool needs a runtime, though no query is sent.
    #[tokio::test]
    async fn stream_tokens_open_their_stream_only_until_they_expire() {
        let settings = AuthSettings {
            admin_token: Some(crate::secret::Secret::new("a".repeat(32))),
            ..AuthSettings::default()
        };
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://unused@127.0.0.1/unused")
            .unwrap();
        let auth = Authenticator::new(Store::from_pool(pool.clone()), &settings);
        let path = "/v1/tables/0193/changes/stream";
        let later = chrono::Utc::now().timestamp() + 60;
        let token = auth.stream_token(path, later).unwrap();
        assert!(auth.stream_token_allows(&token, path));
        assert!(!auth.stream_token_allows(&token, "/v1/tables/0194/changes/stream"));
        let expired = auth.stream_token(path, later - 120).unwrap();
        assert!(!auth.stream_token_allows(&expired, path));
        // Another admin token, another key: tokens of one deployment fail in another.
        let other = AuthSettings {
            admin_token: Some(crate::secret::Secret::new("b".repeat(32))),
            ..AuthSettings::default()
        };
        let elsewhere = Authenticator::new(Store::from_pool(pool), &other);
        assert!(!elsewhere.stream_token_allows(&token, path));
        // A forged payload with the old signature.
        let (_, mac) = token.split_once('.').unwrap();
        let forged = format!(
            "{STREAM_TOKEN_PREFIX}{}.{mac}",
            URL_SAFE_NO_PAD.encode(format!("{}\n{path}", later + 9999))
        );
        assert!(!auth.stream_token_allows(&forged, path));
        assert!(!auth.stream_token_allows("ics_garbage", path));
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
