//! API tokens: created (the secret shown once), listed and revoked by admins.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use axum::extract::Extension;

use super::AppState;
use super::auth::{Access, STREAM_TOKEN_TTL, Scope, new_token, subscription_id, token_hash};
use super::error::{ApiError, ProblemCode};
use super::extract::{Json, Path};
use crate::api::problem::problems;
use crate::store::{ApiToken, StoreError};

const TAG: &str = "tokens";

/// The longest token name.
const MAX_NAME_CHARS: usize = 200;
/// The most scopes one token may have.
const MAX_SCOPES: usize = 64;

/// Body of `POST /v1/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What the token is for (shown in lists), 1 to 200 characters.
    #[schema(example = "orders-dashboard")]
    pub name: String,
    /// `admin`, `read`, `table:<table id>` or `subscription:<subscription id or name>`.
    #[schema(example = json!(["read"]))]
    pub scopes: Vec<String>,
    /// When the token stops working (RFC 3339); default: never.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A token, without its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl From<ApiToken> for TokenView {
    fn from(t: ApiToken) -> Self {
        Self {
            id: t.id,
            name: t.name,
            scopes: t.scopes,
            created_at: t.created_at,
            expires_at: t.expires_at,
        }
    }
}

/// A new token with its secret: the only time icefeed shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: TokenView,
    /// The bearer token (`Authorization: Bearer <secret>`). Store it now: only its hash
    /// is kept.
    pub secret: String,
}

/// Every token.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// Tokens mean something only where they are checked: `409 auth_disabled` otherwise.
fn require_auth(state: &AppState) -> Result<(), ApiError> {
    if state.auth.enabled() {
        return Ok(());
    }
    Err(ApiError::new(
        ProblemCode::AuthDisabled,
        "authentication is off on this node, so tokens would not be checked: set \
         auth.admin_token (ICEFEED_AUTH__ADMIN_TOKEN) and call with it",
    ))
}

fn invalid(code: ProblemCode, field: &str, detail: String) -> ApiError {
    ApiError::new(code, detail).with("field", field)
}

/// Checks and normalizes the scopes: subscriptions named by name are stored by id, and
/// the tables and subscriptions must exist.
async fn resolve_scopes(state: &AppState, scopes: &[String]) -> Result<Vec<String>, ApiError> {
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return Err(invalid(
            ProblemCode::InvalidScope,
            "scopes",
            format!(
                "a token needs 1 to {MAX_SCOPES} scopes; got {}",
                scopes.len()
            ),
        ));
    }
    let mut resolved = Vec::with_capacity(scopes.len());
    for text in scopes {
        let scope = match text.split_once(':') {
            Some(("subscription", id_or_name)) if !id_or_name.is_empty() => {
                let id = subscription_id(state, id_or_name).await?.ok_or_else(|| {
                    invalid(
                        ProblemCode::ScopeSubscriptionNotFound,
                        "scopes",
                        format!("scope {text:?}: no subscription {id_or_name:?}"),
                    )
                })?;
                Scope::Subscription(id)
            }
            _ => Scope::parse(text).ok_or_else(|| {
                invalid(
                    ProblemCode::InvalidScope,
                    "scopes",
                    format!(
                        "unknown scope {text:?}: use admin, read, table:<table id> or \
                         subscription:<subscription id or name>"
                    ),
                )
            })?,
        };
        if let Scope::Table(id) = scope {
            match state.store.get_table(id).await {
                Ok(_) => {}
                Err(StoreError::NotFound) => {
                    return Err(invalid(
                        ProblemCode::ScopeTableNotFound,
                        "scopes",
                        format!("scope {text:?}: no table {id}"),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let scope = scope.to_string();
        if !resolved.contains(&scope) {
            resolved.push(scope);
        }
    }
    Ok(resolved)
}

problems! {
    /// What `createToken` answers besides success.
    CreateTokenProblems = [
        JSON_BODY,
        &[
            TimestampOutOfRange,
            AuthDisabled,
            InvalidName,
            InvalidScope,
            ScopeTableNotFound,
            ScopeSubscriptionNotFound,
            ExpiryInPast,
        ],
    ];
}

/// Create a token; its secret is in this answer only.
#[utoipa::path(
    post, path = "/v1/tokens", tag = TAG, operation_id = "createToken",
    request_body = CreateToken,
    responses(
        (status = 201, description = "The token and its secret", body = CreatedToken),
        CreateTokenProblems,
    )
)]
pub async fn create_token(
    State(state): State<AppState>,
    Json(request): Json<CreateToken>,
) -> Result<impl IntoResponse, ApiError> {
    require_auth(&state)?;
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(invalid(
            ProblemCode::InvalidName,
            "name",
            format!("name must have 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    if let Some(at) = &request.expires_at {
        super::limits::check_timestamp("expires_at", at)?;
        if *at <= Utc::now() {
            return Err(invalid(
                ProblemCode::ExpiryInPast,
                "expires_at",
                format!("expires_at {} is not in the future", at.to_rfc3339()),
            ));
        }
    }
    let scopes = resolve_scopes(&state, &request.scopes).await?;
    let secret = new_token();
    let token = state
        .store
        .create_token(name, &scopes, &token_hash(&secret), request.expires_at)
        .await?;
    tracing::info!(token = %token.id, name = %token.name, scopes = ?token.scopes, "token created");
    Ok((
        StatusCode::CREATED,
        axum::Json(CreatedToken {
            token: token.into(),
            secret,
        }),
    ))
}

problems! {
    /// What `listTokens` answers besides success.
    ListTokensProblems = [&[AuthDisabled]];
}

/// List tokens (never their secrets).
#[utoipa::path(
    get, path = "/v1/tokens", tag = TAG, operation_id = "listTokens",
    responses(
        (status = 200, description = "Every token, expired ones included", body = TokenList),
        ListTokensProblems,
    )
)]
pub async fn list_tokens(State(state): State<AppState>) -> Result<axum::Json<TokenList>, ApiError> {
    require_auth(&state)?;
    let tokens = state.store.list_tokens().await?;
    Ok(axum::Json(TokenList {
        tokens: tokens.into_iter().map(Into::into).collect(),
    }))
}

problems! {
    /// What `revokeToken` answers besides success.
    RevokeTokenProblems = [PATH, &[TokenNotFound, AuthDisabled]];
}

/// Revoke a token: at once on this node, within `auth.cache_ttl` on the others.
#[utoipa::path(
    delete, path = "/v1/tokens/{id}", tag = TAG, operation_id = "revokeToken",
    params(("id" = String, Path, description = "Token id")),
    responses(
        (status = 204, description = "Revoked"),
        RevokeTokenProblems,
    )
)]
pub async fn revoke_token(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_auth(&state)?;
    let not_found = || ApiError::new(ProblemCode::TokenNotFound, format!("no token {id}"));
    let uuid = Uuid::parse_str(&id).map_err(|_| not_found())?;
    match state.store.delete_token(uuid).await {
        Ok(hash) => {
            state.auth.forget(&hash);
            tracing::info!(token = %uuid, "token revoked");
            Ok(StatusCode::NO_CONTENT)
        }
        Err(StoreError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// Body of `POST /v1/tokens/stream`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateStreamToken {
    /// The stream to open: `/v1/tables/{id}/changes/stream` or
    /// `/v1/subscriptions/{id}/stream`, without its query.
    #[schema(example = "/v1/subscriptions/orders-sync/stream")]
    pub path: String,
}

/// A grant to open one stream with `?access_token=`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamToken {
    /// Pass it as `access_token` in the stream's query.
    pub token: String,
    /// Until when the stream may be opened (reconnections need a new token after it).
    pub expires_at: DateTime<Utc>,
    /// The stream's path with the token, for `new EventSource(url)`.
    pub url: String,
}

problems! {
    /// What `createStreamToken` answers besides success.
    CreateStreamTokenProblems = [JSON_BODY, &[AuthDisabled, InvalidStreamPath]];
}

/// Get a short-lived token that opens one stream, for clients that cannot send headers.
#[utoipa::path(
    post, path = "/v1/tokens/stream", tag = TAG, operation_id = "createStreamToken",
    request_body = CreateStreamToken,
    responses(
        (status = 201, description = "The stream token, valid for 5 minutes", body = StreamToken),
        CreateStreamTokenProblems,
    )
)]
pub async fn create_stream_token(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    Json(request): Json<CreateStreamToken>,
) -> Result<impl IntoResponse, ApiError> {
    require_auth(&state)?;
    let not_a_stream = || {
        invalid(
            ProblemCode::InvalidStreamPath,
            "path",
            format!(
                "{:?} is not a stream: use /v1/tables/{{id}}/changes/stream or \
                 /v1/subscriptions/{{id}}/stream",
                request.path
            ),
        )
    };
    let parts: Vec<&str> = request.path.split('/').collect();
    let allowed = match parts.as_slice() {
        ["", "v1", "tables", id, "changes", "stream"] => {
            let id = Uuid::parse_str(id).map_err(|_| not_a_stream())?;
            access.reads_table(crate::store::TableId(id))
        }
        ["", "v1", "subscriptions", id, "stream"] if !id.is_empty() => {
            match subscription_id(&state, id).await? {
                Some(id) => access.consumes(id),
                None => access.reads_all(),
            }
        }
        _ => return Err(not_a_stream()),
    };
    if !allowed {
        return Err(ApiError::new(
            ProblemCode::Forbidden,
            format!("this token's scopes do not allow opening {}", request.path),
        ));
    }
    let expires_at = Utc::now() + STREAM_TOKEN_TTL;
    let token = state
        .auth
        .stream_token(&request.path, expires_at.timestamp())
        .expect("authentication is on");
    let url = format!("{}?access_token={token}", request.path);
    Ok((
        StatusCode::CREATED,
        axum::Json(StreamToken {
            token,
            expires_at,
            url,
        }),
    ))
}
