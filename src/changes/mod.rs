//! Change sets and net ranges in the object store: segments, positions (cursors) and the
//! JSON event form.
//! Must not reach: `store`, `changelog`, `workers` (PostgreSQL and planning are theirs).

pub mod deleted_rows;
pub mod json;
pub mod key;
pub mod position;
pub mod segment;
pub mod server_copy;
pub mod store;
pub mod subscription_cursor;
pub mod writer;

pub use key::{ChangeSetKey, NetRangeKey, ShuffleKey};
pub use position::{Cursor, CursorError, NetPosition, Position};
pub use segment::{ReadSchema, SegmentFile, SegmentReader};
pub use store::{ChangeStore, ChangeStoreError, StoredSegment};
