//! Every problem code the API answers, defined once: its stable string, HTTP status,
//! title and the phrase that documents it. [`super::error::ApiError`] takes a
//! [`ProblemCode`], each operation lists the codes it answers with [`problems!`] (its
//! OpenAPI responses are built from that list), and [`check`] holds the answers of a
//! debug build to those lists.
//!
//! A code's string never changes once released; clients match on it. A string may name
//! two variants when it answers with two statuses (`invalid_request_body` is 400 for a
//! body that is not JSON and 422 for JSON of the wrong shape).
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

pub mod check;
pub mod docs;

use axum::http::StatusCode;

use crate::failure::FailureCode;

/// Defines [`ProblemCode`] from `Variant = (STATUS, "string", "phrase")` lines; the
/// phrase (lower case, no final stop) is the variant's doc and its OpenAPI description.
macro_rules! catalogue {
    ($($variant:ident = ($status:ident, $code:expr, $summary:literal),)*) => {
        /// A stable, machine-readable problem code of the API.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProblemCode {
            $(#[doc = $summary] $variant,)*
        }

        impl ProblemCode {
            /// Every code.
            pub const ALL: &[ProblemCode] = &[$(Self::$variant,)*];

            /// The stable string: the problem's `code`, the end of its `type`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)*
                }
            }

            /// The HTTP status it answers with.
            pub const fn status(self) -> StatusCode {
                match self {
                    $(Self::$variant => StatusCode::$status,)*
                }
            }

            /// What it means, as the OpenAPI document says it (lower case).
            pub const fn summary(self) -> &'static str {
                match self {
                    $(Self::$variant => $summary,)*
                }
            }
        }
    };
}

catalogue! {
    // What every request passes: extractors, fallbacks, authentication and admission.
    InvalidPath = (BAD_REQUEST, "invalid_path", "a path parameter of the wrong form"),
    InvalidQuery = (BAD_REQUEST, "invalid_query", "a malformed query parameter"),
    InvalidText = (BAD_REQUEST, "invalid_text", "a NUL character in a parameter or in the body, which icefeed cannot store (`field` names where)"),
    InvalidNumber = (BAD_REQUEST, "invalid_number", "a number of the body beyond a double or longer than 100 characters"),
    MalformedBody = (BAD_REQUEST, "invalid_request_body", "a body that is not JSON"),
    InvalidRequestBody = (UNPROCESSABLE_ENTITY, "invalid_request_body", "a body that is not the documented JSON object: a field missing, of the wrong type or unknown"),
    UnsupportedMediaType = (UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "the body is not sent as `application/json`"),
    RequestBodyTooLarge = (PAYLOAD_TOO_LARGE, "request_body_too_large", "the body is larger than `api.max_body_bytes`"),
    TimestampOutOfRange = (BAD_REQUEST, "timestamp_out_of_range", "a timestamp outside the years 0001 to 9999"),
    RouteNotFound = (NOT_FOUND, "route_not_found", "no such endpoint"),
    MethodNotAllowed = (METHOD_NOT_ALLOWED, "method_not_allowed", "the endpoint does not support the method"),
    Unauthenticated = (UNAUTHORIZED, "unauthenticated", "no token"),
    InvalidToken = (UNAUTHORIZED, "invalid_token", "a token that is unknown, revoked or expired"),
    Forbidden = (FORBIDDEN, "forbidden", "the token's scopes do not allow this operation"),
    Overloaded = (SERVICE_UNAVAILABLE, "overloaded", "the node is at its limit of requests; retry after `Retry-After` seconds"),
    TooManyWaitingRequests = (TOO_MANY_REQUESTS, "too_many_waiting_requests", "this client has `limits.max_waiting_per_client` event streams and long polls open on the node; retry after `Retry-After` seconds"),
    DatabaseUnavailable = (SERVICE_UNAVAILABLE, FailureCode::DatabaseUnavailable.as_str(), "the node cannot reach its database right now; retry after `Retry-After` seconds"),
    ChangeStoreUnavailable = (SERVICE_UNAVAILABLE, FailureCode::ChangeStoreUnavailable.as_str(), "the node cannot reach its change store right now; retry after `Retry-After` seconds"),
    InternalError = (INTERNAL_SERVER_ERROR, FailureCode::Internal.as_str(), "the server failed; the answer carries an error id that is also in its log"),
    ChangeDataMissing = (INTERNAL_SERVER_ERROR, "change_data_missing", "a segment of a published change set was removed from the change store outside icefeed (`segment` names it)"),
    ServiceDown = (SERVICE_UNAVAILABLE, "service_down", "a background service is down and about to be started again"),
    MigrationsPending = (SERVICE_UNAVAILABLE, "migrations_pending", "migrations are missing"),
    NotFound = (NOT_FOUND, "not_found", "the resource does not exist"),
    Conflict = (CONFLICT, "conflict", "another registration follows the same table"),

    // Catalogs and their storage.
    UnknownCatalogType = (BAD_REQUEST, "unknown_catalog_type", "an unknown catalog type (`supported` lists the known ones)"),
    InvalidCatalog = (BAD_REQUEST, "invalid_catalog", "invalid catalog settings"),
    CatalogTypeNotAllowed = (FORBIDDEN, FailureCode::CatalogTypeNotAllowed.as_str(), "the catalog type is not in `catalog.allowed_types`"),
    HostNotAllowed = (FORBIDDEN, FailureCode::HostNotAllowed.as_str(), "a host outside the public internet that `network.allowed_hosts` does not list"),
    LocalPathNotAllowed = (FORBIDDEN, FailureCode::LocalPathNotAllowed.as_str(), "a local file outside `catalog.local_paths`"),
    CatalogUnreachable = (BAD_GATEWAY, "catalog_unreachable", "the catalog could not be reached"),
    CatalogError = (BAD_GATEWAY, "catalog_error", "the catalog failed"),
    CatalogTimeout = (GATEWAY_TIMEOUT, FailureCode::CatalogTimeout.as_str(), "the catalog did not answer within `catalog.timeout`"),
    IcebergTableNotFound = (UNPROCESSABLE_ENTITY, FailureCode::IcebergTableNotFound.as_str(), "the catalog has no such table"),
    StorageAccessDenied = (UNPROCESSABLE_ENTITY, FailureCode::StorageAccessDenied.as_str(), "the table's storage refused the credentials"),
    StorageNotFound = (UNPROCESSABLE_ENTITY, FailureCode::StorageNotFound.as_str(), "a file the table's metadata names is gone"),
    StorageSettingsInvalid = (UNPROCESSABLE_ENTITY, FailureCode::StorageSettingsInvalid.as_str(), "invalid storage settings"),
    StorageNotAFile = (UNPROCESSABLE_ENTITY, FailureCode::StorageNotAFile.as_str(), "a path the table's metadata names is not a regular file"),
    StorageFileTooLarge = (UNPROCESSABLE_ENTITY, FailureCode::StorageFileTooLarge.as_str(), "a metadata file larger than icefeed reads"),
    StorageUnreachable = (BAD_GATEWAY, FailureCode::StorageUnreachable.as_str(), "the table's storage could not be reached"),

    // Tables.
    InvalidTableId = (BAD_REQUEST, "invalid_table_id", "not a table id"),
    TableNotFound = (NOT_FOUND, "table_not_found", "no such table"),
    InvalidTableIdentifier = (BAD_REQUEST, "invalid_table_identifier", "an invalid Iceberg table identifier"),
    DuplicateIdentifierColumn = (BAD_REQUEST, "duplicate_identifier_column", "an identifier column named twice"),
    InvalidPollInterval = (BAD_REQUEST, "invalid_poll_interval", "a poll interval out of range"),
    InvalidRetention = (BAD_REQUEST, "invalid_retention", "a retention out of range"),
    BranchNotFound = (UNPROCESSABLE_ENTITY, "branch_not_found", "the table has no such branch"),
    UnknownSnapshot = (UNPROCESSABLE_ENTITY, "unknown_snapshot", "the start snapshot is not in the branch's history"),
    UnknownIdentifierColumn = (UNPROCESSABLE_ENTITY, "unknown_identifier_column", "an identifier column that is not a top-level column of the table"),
    CatalogTableMismatch = (UNPROCESSABLE_ENTITY, "catalog_table_mismatch", "the new catalog settings reach another table"),
    TableAlreadyRegistered = (CONFLICT, "table_already_registered", "the table is registered already"),
    TableInUse = (CONFLICT, "table_in_use", "subscriptions read the table (`subscriptions` names them)"),
    TableNotInError = (CONFLICT, "table_not_in_error", "the table is not in the error state"),
    SchemaNotFound = (NOT_FOUND, "schema_not_found", "no change set of the table was read with the schema"),

    // Pages of feeds and cursors.
    MalformedCursor = (BAD_REQUEST, "malformed_cursor", "a malformed cursor"),
    UnsupportedCursorVersion = (BAD_REQUEST, "unsupported_cursor_version", "a cursor of a version this node does not read"),
    ForeignCursor = (BAD_REQUEST, "foreign_cursor", "a cursor of another table or subscription"),
    CursorAhead = (BAD_REQUEST, "cursor_ahead", "a cursor beyond what the feed published"),
    LimitOutOfRange = (BAD_REQUEST, "limit_out_of_range", "a limit out of range"),
    WaitOutOfRange = (BAD_REQUEST, "wait_out_of_range", "a wait out of range"),
    UnknownOperation = (BAD_REQUEST, "unknown_operation", "an unknown operation in `ops`"),
    UnknownColumn = (BAD_REQUEST, "unknown_column", "an unknown column in `columns` (`columns` lists the table's)"),
    InvalidColumns = (BAD_REQUEST, "invalid_columns", "invalid `columns`"),
    PositionExpired = (GONE, "position_expired", "retention removed the events after the cursor (`earliest` holds the oldest available cursor)"),
    RangeInvalid = (BAD_REQUEST, "range_invalid", "net changes: `until` before `after`, without `net=true`, or with a cursor into net changes"),
    NetRangeExpired = (GONE, "net_range_expired", "net changes: those of the range are no longer kept"),
    NetRangeSpansSchemas = (UNPROCESSABLE_ENTITY, "net_range_spans_schemas", "net changes: the schema changed within the range (`split_at` holds where)"),
    NetChangesFailed = (UNPROCESSABLE_ENTITY, "net_changes_failed", "net changes: the identifier columns are not unique at one end of the range"),
    NetChangesInterrupted = (SERVICE_UNAVAILABLE, "net_changes_failed", "net changes: computing them failed for a passing reason; asking again computes them afresh"),

    // Subscriptions.
    SubscriptionNotFound = (NOT_FOUND, "subscription_not_found", "no such subscription"),
    InvalidSubscriptionName = (BAD_REQUEST, "invalid_subscription_name", "an invalid subscription name"),
    InvalidTables = (BAD_REQUEST, "invalid_tables", "too few or too many tables, or one named twice"),
    CursorStartNeedsOneTable = (BAD_REQUEST, "cursor_start_needs_one_table", "a cursor start for several tables"),
    PositionNotFound = (BAD_REQUEST, "position_not_found", "a cursor past the end of a table's feed"),
    SnapshotNotPublished = (UNPROCESSABLE_ENTITY, "snapshot_not_published", "the start snapshot has no published change set"),
    SubscriptionExists = (CONFLICT, "subscription_exists", "the name is taken"),
    SubscriptionNotActive = (CONFLICT, "subscription_not_active", "the subscription is paused"),
    AckBackwards = (CONFLICT, "ack_backwards", "the position is before the committed one"),
    AckNotDelivered = (CONFLICT, "ack_not_delivered", "the position was never delivered"),
    TargetRequired = (BAD_REQUEST, "target_required", "a push subscription without a target"),
    TargetNotAllowed = (BAD_REQUEST, "target_not_allowed", "a target for a pull subscription"),
    InvalidTarget = (BAD_REQUEST, "invalid_target", "invalid push target settings"),
    DocumentIdRequired = (BAD_REQUEST, "document_id_required", "a table without identifier columns and no `target.document_id`"),
    UnsupportedTableFormat = (BAD_REQUEST, "unsupported_table_format", "a table in Iceberg format v1, which cannot be pushed"),
    PushSubscription = (CONFLICT, "push_subscription", "the subscription pushes into OpenSearch"),
    NotAPushSubscription = (CONFLICT, "not_a_push_subscription", "a pull subscription"),
    InvalidRewind = (BAD_REQUEST, "invalid_rewind", "not exactly one of the fields"),
    RewindForward = (CONFLICT, "rewind_forward", "the position is after the committed one"),
    InvalidRedrive = (BAD_REQUEST, "invalid_redrive", "`ids` together with `after` or `limit`"),

    // Tokens.
    AuthDisabled = (CONFLICT, "auth_disabled", "authentication is off on this node"),
    InvalidName = (UNPROCESSABLE_ENTITY, "invalid_name", "a bad name"),
    InvalidScope = (UNPROCESSABLE_ENTITY, "invalid_scope", "an unknown scope, or too few or too many"),
    ScopeTableNotFound = (UNPROCESSABLE_ENTITY, "table_not_found", "a scope naming no table"),
    ScopeSubscriptionNotFound = (UNPROCESSABLE_ENTITY, "subscription_not_found", "a scope naming no subscription"),
    ExpiryInPast = (UNPROCESSABLE_ENTITY, "expiry_in_past", "an expiry in the past"),
    InvalidStreamPath = (UNPROCESSABLE_ENTITY, "invalid_stream_path", "`path` is no stream"),
    TokenNotFound = (NOT_FOUND, "not_found", "no such token"),
}

impl ProblemCode {
    /// The problem's `title`: the reason phrase of its status.
    pub fn title(self) -> &'static str {
        self.status().canonical_reason().unwrap_or("Error")
    }

    /// The problem's `type`.
    pub fn type_uri(self) -> String {
        format!("urn:icefeed:problem:{}", self.as_str())
    }

    /// A failure of the server rather than an answer to the request (500): any
    /// operation may answer it, so operations do not list it.
    pub fn is_server_fault(self) -> bool {
        self.status() == StatusCode::INTERNAL_SERVER_ERROR
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

use ProblemCode::*;

/// What any operation with a path parameter may answer.
pub const PATH: &[ProblemCode] = &[InvalidPath, InvalidText];
/// What any operation with query parameters may answer.
pub const QUERY: &[ProblemCode] = &[InvalidQuery, InvalidText];
/// What any operation with a JSON body may answer.
pub const JSON_BODY: &[ProblemCode] = &[
    MalformedBody,
    InvalidText,
    InvalidNumber,
    RequestBodyTooLarge,
    UnsupportedMediaType,
    InvalidRequestBody,
];
/// What any operation on `/v1/tables/{id}` may answer about the id.
pub const TABLE: &[ProblemCode] = &[InvalidTableId, InvalidPath, InvalidText, TableNotFound];
/// What any operation on `/v1/subscriptions/{id}` may answer about the id.
pub const SUBSCRIPTION: &[ProblemCode] = &[InvalidPath, InvalidText, SubscriptionNotFound];
/// What loading a table through catalog settings may answer.
pub const CATALOG: &[ProblemCode] = &[
    UnknownCatalogType,
    InvalidCatalog,
    InvalidTableIdentifier,
    CatalogTypeNotAllowed,
    LocalPathNotAllowed,
    HostNotAllowed,
    IcebergTableNotFound,
    StorageAccessDenied,
    StorageNotFound,
    StorageSettingsInvalid,
    StorageNotAFile,
    StorageFileTooLarge,
    CatalogUnreachable,
    CatalogError,
    StorageUnreachable,
    CatalogTimeout,
];
/// What reading after a cursor may answer.
pub const CURSOR: &[ProblemCode] = &[
    MalformedCursor,
    UnsupportedCursorVersion,
    ForeignCursor,
    CursorAhead,
];
/// What reading the net changes of a range may answer.
pub const NET: &[ProblemCode] = &[
    RangeInvalid,
    NetRangeExpired,
    NetRangeSpansSchemas,
    NetChangesFailed,
    NetChangesInterrupted,
];
/// What the push subscriptions' operations answer for a pull subscription.
pub const PUSH_ONLY: &[ProblemCode] = &[NotAPushSubscription];

/// The problem responses of one operation, for its `#[utoipa::path(responses(...))]`:
/// `problems!(Name = [GROUP, &[ProblemCode::A, ...], ...]);` defines `Name`, whose
/// responses are the listed codes grouped by status. A handler that answers a code its
/// operation does not list fails the integration tests (see [`check`]).
macro_rules! problems {
    ($(#[$doc:meta])* $name:ident = [$($codes:expr),* $(,)?];) => {
        $(#[$doc])*
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
            > {
                #[allow(unused_imports)]
                use $crate::api::problem::{ProblemCode::*, *};
                $crate::api::problem::docs::responses(&[$($codes),*])
            }
        }
    };
}
pub(crate) use problems;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_string_names_one_code_per_status() {
        let mut seen = HashMap::new();
        for code in ProblemCode::ALL {
            let string = code.as_str();
            assert!(
                string.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{code:?}"
            );
            assert!(!code.summary().is_empty(), "{code:?}");
            let first = code.summary().chars().next().unwrap();
            assert!(!first.is_ascii_uppercase(), "{code:?}: lower case");
            if let Some(other) = seen.insert((string, code.status()), *code) {
                // Two variants of one answer would be told apart by nothing on the wire.
                assert!(
                    matches!((other, code), (NotFound, TokenNotFound)),
                    "{other:?} and {code:?} are both {string} {}",
                    code.status()
                );
            }
        }
    }

    #[test]
    fn codes_of_failures_keep_their_names() {
        for (problem, failure) in [
            (DatabaseUnavailable, FailureCode::DatabaseUnavailable),
            (ChangeStoreUnavailable, FailureCode::ChangeStoreUnavailable),
            (CatalogTimeout, FailureCode::CatalogTimeout),
            (IcebergTableNotFound, FailureCode::IcebergTableNotFound),
            (HostNotAllowed, FailureCode::HostNotAllowed),
            (CatalogTypeNotAllowed, FailureCode::CatalogTypeNotAllowed),
            (LocalPathNotAllowed, FailureCode::LocalPathNotAllowed),
        ] {
            assert_eq!(problem.as_str(), failure.as_str());
        }
        assert_eq!(BranchNotFound.title(), "Unprocessable Entity");
        assert_eq!(
            TableNotFound.type_uri(),
            "urn:icefeed:problem:table_not_found"
        );
    }
}
