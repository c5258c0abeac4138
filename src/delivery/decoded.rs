//! Segments' rows decoded once and shared by the pages, renderings and pushes that read
//! them: a bounded cache of windows of consecutive events, keyed by segment and window.
//!
//! Every read of a Parquet file sets up each column's decompressor again and decodes the
//! pages that hold its first rows from their start (a page holds some 10–20K rows of a
//! column). Reading a segment a window at a time, whatever the pages asking, pays both
//! once per window instead of once per page of events.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::sync::Arc;

use arrow::array::RecordBatch;
use moka::future::Cache;

use super::error::FeedError;
use super::sizing::span_at;

/// Bytes of decoded rows a node keeps by default.
pub const CACHE_BYTES: u64 = 64 << 20;

/// Window `index` of the segment at `segment` (its key in the change store; segments
/// never change once published, nor do their windows: `sizing::window_events`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct WindowKey {
    segment: String,
    index: usize,
}

/// A segment as the cache cuts it.
#[derive(Clone, Copy, Debug)]
pub struct Windows<'a> {
    /// Its key in the change store.
    pub path: &'a str,
    /// Its events.
    pub total: usize,
    /// Events per window.
    pub span: usize,
}

/// The decoded windows of one node; cheap to clone.
#[derive(Clone)]
pub struct DecodedCache {
    windows: Cache<WindowKey, Arc<[RecordBatch]>>,
}

impl DecodedCache {
    /// A cache of at most `bytes` of decoded rows (0: none kept).
    pub fn new(bytes: u64) -> Self {
        Self {
            windows: Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, batches: &Arc<[RecordBatch]>| {
                    let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
                    bytes.try_into().unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// Whether window `index` of `segment` is kept.
    pub fn contains(&self, segment: &str, index: usize) -> bool {
        self.windows.contains_key(&WindowKey {
            segment: segment.to_string(),
            index,
        })
    }

    /// Events `offset .. offset + count` of `segment`, sliced from the windows they fall
    /// in; `decode(first, len)` reads the events of a window that is not kept.
    pub async fn rows<F, Fut>(
        &self,
        segment: Windows<'_>,
        offset: usize,
        count: usize,
        decode: F,
    ) -> Result<Vec<RecordBatch>, FeedError>
    where
        F: Fn(usize, usize) -> Fut,
        Fut: Future<Output = Result<Vec<RecordBatch>, FeedError>>,
    {
        let end = (offset + count).min(segment.total);
        let mut rows = Vec::new();
        let mut at = offset;
        while at < end {
            let index = at / segment.span;
            let first = index * segment.span;
            let window = self.window(segment, index, &decode).await?;
            let take = (first + segment.span).min(end) - at;
            rows.extend(slice_rows(&window, at - first, take));
            at += take;
        }
        Ok(rows)
    }

    /// Window `index` of `segment`, decoded by `decode(first, len)` unless kept. Readers
    /// of a window being decoded wait for that decoding.
    pub async fn window<F, Fut>(
        &self,
        segment: Windows<'_>,
        index: usize,
        decode: F,
    ) -> Result<Arc<[RecordBatch]>, FeedError>
    where
        F: Fn(usize, usize) -> Fut,
        Fut: Future<Output = Result<Vec<RecordBatch>, FeedError>>,
    {
        let (first, len) = span_at(index, segment.span, segment.total);
        let key = WindowKey {
            segment: segment.path.to_string(),
            index,
        };
        self.windows
            .try_get_with(key, async {
                let batches = decode(first, len).await?;
                // Fewer rows than the index counts: the segment is not what was
                // published, and slicing would hand back a gap.
                if batches.iter().map(RecordBatch::num_rows).sum::<usize>() != len {
                    return Err(FeedError::Corrupt(segment.path.to_string()));
                }
                Ok(Arc::from(batches))
            })
            .await
            .map_err(FeedError::from)
    }
}

/// Rows `offset .. offset + len` of consecutive `batches` (fewer if they hold fewer).
pub fn slice_rows(batches: &[RecordBatch], mut offset: usize, mut len: usize) -> Vec<RecordBatch> {
    let mut rows = Vec::new();
    for batch in batches {
        if len == 0 {
            break;
        }
        if offset >= batch.num_rows() {
            offset -= batch.num_rows();
            continue;
        }
        let take = len.min(batch.num_rows() - offset);
        rows.push(batch.slice(offset, take));
        (offset, len) = (0, len - take);
    }
    rows
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow::array::{Array, Int64Array};

    use super::*;

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        let column = Arc::new(Int64Array::from_iter_values(values));
        RecordBatch::try_from_iter([("v", column as _)]).unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                column.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn rows_are_sliced_across_batches() {
        let batches = [batch(0..4), batch(4..6), batch(6..10)];
        assert_eq!(values(&slice_rows(&batches, 3, 5)), [3, 4, 5, 6, 7]);
        assert_eq!(values(&slice_rows(&batches, 4, 2)), [4, 5]);
        assert_eq!(
            values(&slice_rows(&batches, 0, 10)),
            (0..10).collect::<Vec<_>>()
        );
        // Past the rows held: what there is.
        assert_eq!(values(&slice_rows(&batches, 8, 5)), [8, 9]);
        assert!(slice_rows(&batches, 10, 1).is_empty());
    }

    /// A segment of `total` events numbered from 0, decoded in batches of 1000, counting
    /// its decodes.
    fn segment(
        total: usize,
        decodes: &AtomicUsize,
    ) -> impl Fn(usize, usize) -> std::future::Ready<Result<Vec<RecordBatch>, FeedError>> + '_ {
        move |first, len| {
            assert!(first + len <= total);
            decodes.fetch_add(1, Ordering::SeqCst);
            let batches = (first..first + len)
                .step_by(1000)
                .map(|at| batch(at as i64..(at + 1000).min(first + len) as i64))
                .collect();
            std::future::ready(Ok(batches))
        }
    }

    /// Segment `s` of `total` events, in windows of `span`.
    fn windows(total: usize, span: usize) -> Windows<'static> {
        Windows {
            path: "s",
            total,
            span,
        }
    }

    #[tokio::test]
    async fn reads_are_sliced_from_windows_decoded_once() {
        let cache = DecodedCache::new(CACHE_BYTES);
        let span = 32_768;
        let total = 2 * span + 500;
        let decodes = AtomicUsize::new(0);
        let mut read = Vec::new();
        for offset in (0..total).step_by(3000) {
            let rows = cache
                .rows(windows(total, span), offset, 3000, segment(total, &decodes))
                .await
                .unwrap();
            read.extend(values(&rows));
        }
        assert_eq!(read, (0..total as i64).collect::<Vec<_>>());
        assert_eq!(decodes.into_inner(), 3, "each window decoded once");
    }

    #[tokio::test]
    async fn a_window_shorter_than_the_index_says_is_corrupt_and_not_kept() {
        let cache = DecodedCache::new(CACHE_BYTES);
        let short = |_, len: usize| std::future::ready(Ok(vec![batch(0..len as i64 - 1)]));
        let read = cache.rows(windows(100, 64), 10, 5, short).await;
        assert!(matches!(read, Err(FeedError::Corrupt(s)) if s == "s"));
        let decodes = AtomicUsize::new(0);
        let rows = cache
            .rows(windows(100, 64), 10, 5, segment(100, &decodes))
            .await;
        assert_eq!(values(&rows.unwrap()), [10, 11, 12, 13, 14]);
    }
}
