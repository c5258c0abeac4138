//! Whether a cursor lies within a table's published feed, answered from memory for
//! positions inside change sets the node has seen: every page request checks its
//! cursor, and the database round trip took a third of an Arrow page's time.
//!
//! A published change set's event count never changes (retention only removes whole
//! change sets from the front, whose positions stay not beyond), so a position at or
//! before the count of its change set is within the feed for good. Anything else is
//! asked of the database each time.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use chrono::{DateTime, Utc};
use moka::future::Cache;

use crate::changes::Position;
use crate::store::{SourceTable, Store, StoreError, TableId};

/// Change sets whose counts a node keeps at most.
const MAX_ENTRIES: u64 = 1 << 16;

/// A change set of one registration of a table (a table registered anew under the same
/// id, as after restoring the database, starts over).
type ChangeSetOf = (TableId, DateTime<Utc>, i64);

/// Event counts of published change sets; cheap to clone.
#[derive(Clone)]
pub struct PublishedCounts {
    counts: Cache<ChangeSetOf, i64>,
}

impl Default for PublishedCounts {
    fn default() -> Self {
        Self {
            counts: Cache::new(MAX_ENTRIES),
        }
    }
}

impl PublishedCounts {
    /// [`Store::is_beyond_feed`], without asking the database when `p` lies within a
    /// change set whose count is known.
    pub async fn is_beyond(
        &self,
        store: &Store,
        table: &SourceTable,
        p: Position,
    ) -> Result<bool, StoreError> {
        let key = (table.id, table.created_at, p.ordinal);
        if let Some(count) = self.counts.get(&key).await
            && p.consumed <= count
        {
            return Ok(false);
        }
        let (beyond, count) = store.is_beyond_feed(table.id, p).await?;
        if let Some(count) = count {
            self.counts.insert(key, count).await;
        }
        Ok(beyond)
    }
}
