//! Events rendered as JSON once and shared by every consumer that reads them: a bounded
//! cache of chunks of segments, keyed by segment, chunk and rendering. A hundred streams
//! of one table cost one decode and one rendering of each chunk, plus a copy each.
//!
//! Everything of an event but its position is the same for every consumer (a
//! subscription's cursor names the subscription), so a chunk holds each event's JSON
//! after its position, and each page writes its own positions in front.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::sync::Arc;

use moka::future::Cache;

use super::error::FeedError;
use crate::change::Op;
use crate::changes::ChangeStoreError;
use crate::changes::json::JsonOptions;
use crate::store::TableId;

/// Bytes of rendered events a node keeps by default.
pub const CACHE_BYTES: u64 = 64 << 20;

/// Which chunk, rendered how.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ChunkKey {
    pub table: TableId,
    /// The segment's key in the change store.
    pub segment: String,
    /// Events `index * sizing::chunk_events(segment) ..` of the segment.
    pub index: usize,
    pub options: JsonOptions,
    /// The selected columns; `None`: all.
    pub columns: Option<Vec<String>>,
}

/// Consecutive events of a segment, each rendered from just after its position to the
/// end of its JSON object: `","op":…,"schema_id":…}`.
#[derive(Debug, Default)]
pub struct RenderedChunk {
    tails: Vec<u8>,
    ends: Vec<u32>,
    ops: Vec<Op>,
}

impl RenderedChunk {
    /// An empty chunk that will hold `events` events.
    pub fn with_capacity(events: usize) -> Self {
        Self {
            tails: Vec::new(),
            ends: Vec::with_capacity(events),
            ops: Vec::with_capacity(events),
        }
    }

    /// Adds an event: `render` appends its tail.
    pub fn push(&mut self, op: Op, render: impl FnOnce(&mut Vec<u8>)) {
        render(&mut self.tails);
        if self.ends.is_empty() {
            // Events of a change set are about alike: room for the others as large as
            // the first, and an eighth more, instead of growing by copies.
            let rest = self.ends.capacity().saturating_sub(1);
            self.tails.reserve(rest * self.tails.len() / 8 * 9);
        }
        self.ends.push(self.tails.len() as u32);
        self.ops.push(op);
    }

    /// Bytes of the tails of `events`.
    pub fn tail_bytes(&self, events: &[usize]) -> usize {
        events.iter().map(|&i| self.tail(i).len()).sum()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn op(&self, event: usize) -> Op {
        self.ops[event]
    }

    /// The rendered tail of event `event`.
    pub fn tail(&self, event: usize) -> &[u8] {
        let start = event.checked_sub(1).map_or(0, |i| self.ends[i] as usize);
        &self.tails[start..self.ends[event] as usize]
    }

    /// Memory it holds, roughly.
    fn bytes(&self) -> usize {
        self.tails.capacity() + self.ends.capacity() * 4 + self.ops.capacity()
    }
}

/// The shared chunks of one node; cheap to clone.
#[derive(Clone)]
pub struct RenderedCache {
    chunks: Cache<ChunkKey, Arc<RenderedChunk>>,
}

impl RenderedCache {
    /// A cache of at most `bytes` of rendered events (0: none kept).
    pub fn new(bytes: u64) -> Self {
        Self {
            chunks: Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, chunk: &Arc<RenderedChunk>| {
                    chunk.bytes().try_into().unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// Whether the chunk at `key` is kept.
    pub fn contains(&self, key: &ChunkKey) -> bool {
        self.chunks.contains_key(key)
    }

    /// The chunk at `key`, rendered by `render` unless it is kept. Readers asking for a
    /// chunk being rendered wait for that rendering instead of making their own.
    pub async fn get(
        &self,
        key: ChunkKey,
        render: impl Future<Output = Result<RenderedChunk, FeedError>>,
    ) -> Result<Arc<RenderedChunk>, FeedError> {
        self.chunks
            .try_get_with(key, async { render.await.map(Arc::new) })
            .await
            .map_err(FeedError::from)
    }
}

impl From<Arc<FeedError>> for FeedError {
    /// A failure of a rendering that several readers waited for: the reader alone with it
    /// gets it whole, others a copy that keeps what decides their answer.
    fn from(e: Arc<FeedError>) -> Self {
        Arc::try_unwrap(e).unwrap_or_else(|e| match &*e {
            FeedError::Segment(ChangeStoreError::Missing(key)) => {
                FeedError::Segment(ChangeStoreError::Missing(key.clone()))
            }
            FeedError::Segment(ChangeStoreError::ObjectStore { kind, error_id }) => {
                FeedError::Segment(ChangeStoreError::ObjectStore {
                    kind,
                    error_id: *error_id,
                })
            }
            FeedError::Corrupt(segment) => FeedError::Corrupt(segment.clone()),
            other => FeedError::Shared(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_hands_back_each_event_it_was_given() {
        let mut chunk = RenderedChunk::default();
        chunk.push(Op::Insert, |out| {
            out.extend_from_slice(b"\",\"op\":\"insert\"}")
        });
        chunk.push(Op::Delete, |_| {});
        chunk.push(Op::Update, |out| out.extend_from_slice(b"x"));
        assert_eq!(chunk.len(), 3);
        assert_eq!(chunk.tail(0), b"\",\"op\":\"insert\"}");
        assert_eq!((chunk.op(1), chunk.tail(1)), (Op::Delete, &b""[..]));
        assert_eq!((chunk.op(2), chunk.tail(2)), (Op::Update, &b"x"[..]));
    }

    #[tokio::test]
    async fn readers_of_a_chunk_being_rendered_share_its_rendering() {
        let cache = RenderedCache::new(CACHE_BYTES);
        let key = ChunkKey {
            table: TableId(uuid::Uuid::nil()),
            segment: "s".into(),
            index: 0,
            options: JsonOptions::default(),
            columns: None,
        };
        let renders = std::sync::atomic::AtomicUsize::new(0);
        let render = || async {
            renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::task::yield_now().await;
            let mut chunk = RenderedChunk::default();
            chunk.push(Op::Insert, |out| out.push(b'}'));
            Ok(chunk)
        };
        let (a, b) = tokio::join!(cache.get(key.clone(), render()), cache.get(key, render()));
        assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
        assert_eq!(renders.into_inner(), 1);
    }

    #[tokio::test]
    async fn a_failed_rendering_is_not_kept() {
        let cache = RenderedCache::new(CACHE_BYTES);
        let key = ChunkKey {
            table: TableId(uuid::Uuid::nil()),
            segment: "gone".into(),
            index: 3,
            options: JsonOptions::default(),
            columns: Some(vec!["id".into()]),
        };
        let missing = cache
            .get(key.clone(), async {
                Err(FeedError::Segment(ChangeStoreError::Missing("gone".into())))
            })
            .await;
        assert!(matches!(
            missing,
            Err(FeedError::Segment(ChangeStoreError::Missing(k))) if k == "gone"
        ));
        let again = cache.get(key, async { Ok(RenderedChunk::default()) }).await;
        assert!(again.unwrap().is_empty());
    }
}
