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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::changes::Position;
use crate::store::{SourceTable, Store, StoreError, TableId};

/// Change sets whose counts a node keeps; emptied when full.
const MAX_ENTRIES: usize = 1 << 16;

/// A change set of one registration of a table (a table registered anew under the same
/// id, as after restoring the database, starts over).
type ChangeSetOf = (TableId, DateTime<Utc>, i64);

/// Event counts of published change sets; cheap to clone.
#[derive(Clone, Default)]
pub struct PublishedCounts {
    counts: Arc<Mutex<HashMap<ChangeSetOf, i64>>>,
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
        let known = self
            .counts
            .lock()
            .expect("published counts")
            .get(&key)
            .copied();
        if known.is_some_and(|count| p.consumed <= count) {
            return Ok(false);
        }
        let (beyond, count) = store.is_beyond_feed(table.id, p).await?;
        if let Some(count) = count {
            let mut counts = self.counts.lock().expect("published counts");
            if counts.len() >= MAX_ENTRIES {
                counts.clear();
            }
            counts.insert(key, count);
        }
        Ok(beyond)
    }
}
