//! Pushing changes into OpenSearch: push targets (settings, index names, document ids),
//! `_bulk` bodies with external versions, reading bulk answers, and a client that sends
//! a batch until every item is applied, already applied, or rejected for good.
//!
//! Independent of subscriptions: the caller turns events into [`BulkItem`]s (index, id
//! from [`DocumentId`], routing, version = the change's sequence number, document) and
//! decides what to do with the outcomes.

mod bulk;
mod client;
mod config;
mod response;
mod retry;
mod template;

pub use bulk::{BulkAction, BulkItem, EncodeError, encode, split};
pub use client::{ItemOutcome, OpenSearchClient, RequestError, SendError};
pub use config::{
    Auth, BatchLimits, ConfigError, OpenSearchTarget, PushTarget, Secret, TlsOptions,
};
pub use response::{
    BulkOutcome, ItemStatus, OpenSearchError, ResponseError, is_retryable_status, parse_bulk,
};
pub use retry::{RetryPolicy, retry, sleep_or_cancel};
pub use template::{DocumentId, FieldTemplate, IndexTemplate, MAX_ID_BYTES, RenderError};
