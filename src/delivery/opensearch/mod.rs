//! Pushing changes into OpenSearch: push targets (settings, index names, document ids),
//! `_bulk` bodies with external versions, reading bulk answers, and a client that sends
//! a batch until every item is applied, already applied, or rejected for good.
//!
//! Independent of subscriptions. A push worker would:
//! 1. check the registered settings with [`PushTarget::from_json`], store
//!    `target.config` and show `target.config.redacted()`;
//! 2. per event, compute the index ([`IndexTemplate::render`]), the document id
//!    ([`DocumentId::render`]: the `after` row of an insert or update, the `before` row
//!    of a delete) and the routing ([`FieldTemplate::render`]); a [`RenderError`] means
//!    the event cannot be sent and belongs in the dead letters as it is;
//! 3. build [`BulkItem`]s with version = the change's sequence number, create each index
//!    once with [`OpenSearchClient::ensure_index`] (inside [`retry`]), cut the items
//!    with [`split`] and send each run with [`OpenSearchClient::send_batch`];
//! 4. dead-letter the [`ItemOutcome::Rejected`] items and commit the position once every
//!    batch is settled. [`SendError::Refused`] means the target is misconfigured (stop
//!    and report); [`SendError::GaveUp`] means send the same batch again later: items
//!    already written come back as already applied.
//!
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

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
