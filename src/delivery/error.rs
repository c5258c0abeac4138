//! What assembling a page can fail with.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use crate::changes::{ChangeStoreError, Position};
use crate::store::{StoreError, TableId};

/// Failures while assembling a page.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The index could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A segment could not be read.
    #[error(transparent)]
    Segment(#[from] ChangeStoreError),
    /// A change set's schema is missing or unreadable.
    #[error("schema {0} of the change set is unavailable: {1}")]
    Schema(i32, String),
    /// A segment holds something other than what icefeed writes.
    #[error("segment {0} is corrupt")]
    Corrupt(String),
    /// Rows could not be encoded as JSON.
    #[error("encoding events: {0}")]
    Encode(#[from] crate::changes::json::JsonError),
    /// Rows could not be assembled or encoded as Arrow.
    #[error("encoding Arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Change set `0` was pruned by retention while net changes naming it were kept.
    #[error("change set {0} was pruned by retention")]
    Pruned(i64),
    /// Retention pruned the events right after the position read from; the table's feed
    /// starts at `earliest` now.
    #[error("the events after the position were pruned by retention")]
    Expired { table: TableId, earliest: Position },
    /// A failure of a shared rendering, as another reader met it.
    #[error("{0}")]
    Shared(String),
}
