//! RFC 9457 problem details: every error answer has a stable `code`, a human `detail`,
//! and never internals: a 5xx carries only an error id that is also in the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::catalog::{CATALOG_TYPE_NOT_ALLOWED, CatalogError, StorageFault};
use crate::changes::{ChangeStoreError, CursorError};
use crate::delivery::FeedError;
use crate::failure::FailureCode;
use crate::network::{HOST_NOT_ALLOWED, HostRefused};
use crate::store::StoreError;

/// Seconds a `503` answer asks the client to wait before trying again.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the problem type: `urn:icefeed:problem:<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong in this occurrence, and what to do about it.
    pub detail: String,
    /// A stable, machine-readable error code.
    pub code: String,
    /// Further members specific to the code.
    #[serde(flatten)]
    #[schema(value_type = std::collections::HashMap<String, serde_json::Value>)]
    pub extensions: Map<String, Value>,
}

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: String,
    extensions: Map<String, Value>,
}

impl ApiError {
    /// An error with a status, a stable code and a message a person can act on.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    /// 400 with `code`.
    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// Adds a member to the problem document.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_string(), value.into());
        self
    }

    /// An internal failure: logged in full with an error id; the answer carries only the id.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        let id = uuid::Uuid::new_v4();
        tracing::error!(error_id = %id, error = %error, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the server failed to complete the request; reference {id} in its log"),
        )
        .with("error_id", id.to_string())
    }

    /// 503: the database cannot be used right now. The cause goes to the log only.
    pub fn database_unavailable(error: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %error, "database unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            FailureCode::DatabaseUnavailable.as_str(),
            "the node cannot reach its database right now; retry after the time in Retry-After",
        )
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The problem document, for errors sent inside a response (a stream's `error` event).
    pub fn into_problem(self) -> Problem {
        Problem {
            type_uri: format!("urn:icefeed:problem:{}", self.code),
            title: self
                .status
                .canonical_reason()
                .unwrap_or("Error")
                .to_string(),
            status: self.status.as_u16(),
            detail: self.detail,
            code: self.code.to_string(),
            extensions: self.extensions,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, axum::Json(self.into_problem())).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        // Every 503 and 429 is a passing condition: say when to come back.
        if matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::new(StatusCode::NOT_FOUND, "not_found", "not found"),
            StoreError::Conflict(what) => Self::new(StatusCode::CONFLICT, "conflict", what),
            unavailable if unavailable.is_unavailable() => Self::database_unavailable(&unavailable),
            other => Self::internal(&other),
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        let detail = e.to_string();
        match e {
            CatalogError::UnknownType(_) => Self::bad_request("unknown_catalog_type", detail)
                .with("supported", crate::catalog::CATALOG_TYPES.to_vec()),
            CatalogError::Invalid(_) => Self::bad_request("invalid_catalog", detail),
            CatalogError::Unreachable(_) => {
                Self::new(StatusCode::BAD_GATEWAY, "catalog_unreachable", detail)
            }
            CatalogError::Timeout { .. } => {
                let code = FailureCode::CatalogTimeout.as_str();
                Self::new(StatusCode::GATEWAY_TIMEOUT, code, detail)
            }
            CatalogError::TableNotFound(_) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                FailureCode::IcebergTableNotFound.as_str(),
                detail,
            ),
            // Settings the caller can fix, or files that are gone: 422; a store that
            // does not answer: 502, like a catalog that does not.
            CatalogError::Storage {
                fault, location, ..
            } => {
                let status = match fault {
                    StorageFault::AccessDenied
                    | StorageFault::NotFound
                    | StorageFault::Invalid
                    | StorageFault::NotAFile
                    | StorageFault::TooLarge => StatusCode::UNPROCESSABLE_ENTITY,
                    StorageFault::Unreachable => StatusCode::BAD_GATEWAY,
                    // The operator's setting, not the caller's: nothing to fix in the request.
                    StorageFault::NotAllowed => StatusCode::FORBIDDEN,
                };
                Self::new(status, fault.code(), detail).with("location", location)
            }
            CatalogError::Iceberg(_) => Self::new(StatusCode::BAD_GATEWAY, "catalog_error", detail),
            // Like a local path outside `catalog.local_paths`: the operator's setting.
            CatalogError::HostRefused(refused) => refused.into(),
            CatalogError::TypeNotAllowed { allowed, .. } => {
                Self::new(StatusCode::FORBIDDEN, CATALOG_TYPE_NOT_ALLOWED, detail)
                    .with("allowed", allowed)
            }
        }
    }
}

impl From<HostRefused> for ApiError {
    fn from(refused: HostRefused) -> Self {
        // Like a local path outside `catalog.local_paths`: the operator's setting, nothing
        // to fix in the request.
        Self::new(StatusCode::FORBIDDEN, HOST_NOT_ALLOWED, refused.to_string())
            .with("field", refused.what)
    }
}

impl From<CursorError> for ApiError {
    fn from(e: CursorError) -> Self {
        let detail = match e {
            CursorError::ForeignSubscription(_) => {
                format!("{e}; pass a cursor this subscription's events returned")
            }
            _ => format!(
                "{e}; pass a cursor this feed returned, or omit it to start where the feed starts"
            ),
        };
        match e {
            CursorError::Malformed(_) => Self::bad_request("malformed_cursor", detail),
            CursorError::UnsupportedVersion(_) => {
                Self::bad_request("unsupported_cursor_version", detail)
            }
            CursorError::Foreign(owner) => Self::bad_request("foreign_cursor", detail)
                .with("cursor_table_id", owner.to_string()),
            CursorError::ForeignSubscription(owner) => Self::bad_request("foreign_cursor", detail)
                .with("cursor_subscription_id", owner.to_string()),
        }
    }
}

impl From<FeedError> for ApiError {
    fn from(e: FeedError) -> Self {
        match e {
            FeedError::Segment(ChangeStoreError::Missing(key)) => {
                let detail = format!(
                    "segment {key} of a published change set is missing from the change \
                     store (removed outside icefeed); restore it there, or delete and \
                     re-register the table to rebuild its feed"
                );
                tracing::error!(segment = %key, "{detail}");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "change_data_missing",
                    detail,
                )
                .with("segment", key)
            }
            FeedError::Store(store) => store.into(),
            FeedError::Segment(ChangeStoreError::ObjectStore { .. }) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                FailureCode::ChangeStoreUnavailable.as_str(),
                "the node cannot read its change store right now; retry after the time in \
                 Retry-After",
            ),
            other => Self::internal(&other),
        }
    }
}
