//! API tokens: scopes and the SHA-256 of each secret (never the secret itself).
//! Must not reach: the rest of the crate.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Store, StoreError};

/// A token as stored.
#[derive(Clone, Debug)]
pub struct ApiToken {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Stores a new token by the hash of its secret.
    pub async fn create_token(
        &self,
        name: &str,
        scopes: &[String],
        secret_sha256: &[u8],
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<ApiToken, StoreError> {
        Ok(sqlx::query_as!(
            ApiToken,
            "INSERT INTO api_tokens (id, name, scopes, secret_sha256, expires_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id, name, scopes, created_at, expires_at",
            Uuid::now_v7(),
            name,
            scopes,
            secret_sha256,
            expires_at
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The unexpired token whose secret has this hash.
    pub async fn token_by_secret(
        &self,
        secret_sha256: &[u8],
    ) -> Result<Option<ApiToken>, StoreError> {
        Ok(sqlx::query_as!(
            ApiToken,
            "SELECT id, name, scopes, created_at, expires_at FROM api_tokens \
              WHERE secret_sha256 = $1 AND (expires_at IS NULL OR expires_at > now())",
            secret_sha256
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every token, oldest first, expired ones included.
    pub async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError> {
        Ok(sqlx::query_as!(
            ApiToken,
            "SELECT id, name, scopes, created_at, expires_at FROM api_tokens \
              ORDER BY created_at, id"
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes a token; returns the hash of its secret (to drop it from caches).
    pub async fn delete_token(&self, id: Uuid) -> Result<Vec<u8>, StoreError> {
        sqlx::query_scalar!(
            "DELETE FROM api_tokens WHERE id = $1 RETURNING secret_sha256",
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }
}
