//! RFC 9457 problem details: every error answer has a stable `code`, a human `detail`,
//! and never internals: a 5xx carries only an error id that is also in the log.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub use super::problem::ProblemCode;
use crate::catalog::{CatalogError, StorageFault};
use crate::changes::{ChangeStoreError, CursorError};
use crate::delivery::FeedError;
use crate::network::HostRefused;
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
    code: ProblemCode,
    detail: String,
    extensions: Map<String, Value>,
}

impl ApiError {
    /// 410 `position_expired`: the events after the position were pruned by retention.
    /// `earliest` is the cursor of the earliest position still available.
    pub fn position_expired(earliest: String) -> Self {
        Self::new(
            ProblemCode::PositionExpired,
            "the events after this position were removed by the table's retention; continue \
             from `earliest` (the oldest retained position) or start over",
        )
        .with("earliest", earliest)
    }

    /// An error with a code of the catalogue (its status and title come with it) and a
    /// message a person can act on.
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            extensions: Map::new(),
        }
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
            ProblemCode::InternalError,
            format!("the server failed to complete the request; reference {id} in its log"),
        )
        .with("error_id", id.to_string())
    }

    /// 503: the database cannot be used right now. The cause goes to the log only.
    pub fn database_unavailable(error: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %error, "database unavailable");
        Self::new(
            ProblemCode::DatabaseUnavailable,
            "the node cannot reach its database right now; retry after the time in Retry-After",
        )
    }

    /// The code.
    pub fn code(&self) -> ProblemCode {
        self.code
    }

    /// The problem document, for errors sent inside a response (a stream's `error` event).
    pub fn into_problem(self) -> Problem {
        Problem {
            type_uri: self.code.type_uri(),
            title: self.code.title().to_string(),
            status: self.code.status().as_u16(),
            detail: self.detail,
            code: self.code.as_str().to_string(),
            extensions: self.extensions,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code;
        let status = code.status();
        let mut response = (status, axum::Json(self.into_problem())).into_response();
        // For the check that operations answer only the codes they document.
        response.extensions_mut().insert(code);
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
            StoreError::NotFound => Self::new(ProblemCode::NotFound, "not found"),
            StoreError::Conflict(what) => Self::new(ProblemCode::Conflict, what),
            unavailable if unavailable.is_unavailable() => Self::database_unavailable(&unavailable),
            other => Self::internal(&other),
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        let detail = e.to_string();
        match e {
            CatalogError::UnknownType(_) => Self::new(ProblemCode::UnknownCatalogType, detail)
                .with("supported", crate::catalog::CATALOG_TYPES.to_vec()),
            CatalogError::Invalid(_) => Self::new(ProblemCode::InvalidCatalog, detail),
            CatalogError::Unreachable(_) => Self::new(ProblemCode::CatalogUnreachable, detail),
            CatalogError::Timeout { .. } => Self::new(ProblemCode::CatalogTimeout, detail),
            CatalogError::TableNotFound(_) => Self::new(ProblemCode::IcebergTableNotFound, detail),
            // Settings the caller can fix, or files that are gone: 422; a store that
            // does not answer: 502, like a catalog that does not; a local path outside
            // `catalog.local_paths`: 403, the operator's setting, nothing to fix in the
            // request.
            CatalogError::Storage {
                fault, location, ..
            } => Self::new(storage_code(fault), detail).with("location", location),
            CatalogError::Iceberg(_) => Self::new(ProblemCode::CatalogError, detail),
            // Like a local path outside `catalog.local_paths`: the operator's setting.
            CatalogError::HostRefused(refused) => refused.into(),
            CatalogError::TypeNotAllowed { allowed, .. } => {
                Self::new(ProblemCode::CatalogTypeNotAllowed, detail).with("allowed", allowed)
            }
        }
    }
}

/// The problem code of a storage fault.
fn storage_code(fault: StorageFault) -> ProblemCode {
    match fault {
        StorageFault::AccessDenied => ProblemCode::StorageAccessDenied,
        StorageFault::NotFound => ProblemCode::StorageNotFound,
        StorageFault::Invalid => ProblemCode::StorageSettingsInvalid,
        StorageFault::NotAFile => ProblemCode::StorageNotAFile,
        StorageFault::TooLarge => ProblemCode::StorageFileTooLarge,
        StorageFault::Unreachable => ProblemCode::StorageUnreachable,
        StorageFault::NotAllowed => ProblemCode::LocalPathNotAllowed,
    }
}

impl From<HostRefused> for ApiError {
    fn from(refused: HostRefused) -> Self {
        // Like a local path outside `catalog.local_paths`: the operator's setting, nothing
        // to fix in the request.
        Self::new(ProblemCode::HostNotAllowed, refused.to_string()).with("field", refused.what)
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
            CursorError::Malformed(_) => Self::new(ProblemCode::MalformedCursor, detail),
            CursorError::UnsupportedVersion(_) => {
                Self::new(ProblemCode::UnsupportedCursorVersion, detail)
            }
            CursorError::Foreign(owner) => Self::new(ProblemCode::ForeignCursor, detail)
                .with("cursor_table_id", owner.to_string()),
            CursorError::ForeignSubscription(owner) => {
                Self::new(ProblemCode::ForeignCursor, detail)
                    .with("cursor_subscription_id", owner.to_string())
            }
        }
    }
}

impl From<FeedError> for ApiError {
    /// A table feed's failure. Readers of several tables (subscriptions) answer
    /// [`FeedError::Expired`] themselves, with a cursor of theirs.
    fn from(e: FeedError) -> Self {
        match e {
            FeedError::Expired { table, earliest } => {
                Self::position_expired(earliest.to_cursor(table))
            }
            FeedError::Segment(ChangeStoreError::Missing(key)) => {
                let detail = format!(
                    "segment {key} of a published change set is missing from the change \
                     store (removed outside icefeed); restore it there, or delete and \
                     re-register the table to rebuild its feed"
                );
                tracing::error!(segment = %key, "{detail}");
                Self::new(ProblemCode::ChangeDataMissing, detail).with("segment", key)
            }
            FeedError::Store(store) => store.into(),
            FeedError::Segment(ChangeStoreError::ObjectStore { .. }) => Self::new(
                ProblemCode::ChangeStoreUnavailable,
                "the node cannot read its change store right now; retry after the time in \
                 Retry-After",
            ),
            other => Self::internal(&other),
        }
    }
}
