//! Server-sent event streams over any feed. Pages are fetched one at a time and only when
//! the client has taken the previous one (the HTTP body pulls from the stream), so a slow
//! client holds at most one page in memory. Once caught up, the stream sleeps until its
//! [`ChangeWaiter`] reports a publish — it never polls the database in a loop — and sends
//! a comment as a heartbeat when idle.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::time::Instant;

use super::notify::{ChangeWaiter, Stopped};
use crate::telemetry::metric::{EVENTS_STREAMED, OPEN_STREAMS};

/// The comment sent when a stream has been idle for the heartbeat interval.
pub const HEARTBEAT: &[u8] = b": keep-alive\n\n";

/// Timing of a stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamTiming {
    /// Sent as `retry:` first: how long a client waits before reconnecting.
    pub retry: Duration,
    /// Idle time after which a heartbeat comment is sent.
    pub heartbeat: Duration,
}

/// A page of a stream: events already framed as server-sent events.
#[derive(Debug)]
pub struct StreamPage<S> {
    /// The framed events.
    pub body: Vec<u8>,
    /// Number of events in `body`.
    pub count: usize,
    /// Whether more events can be read right now.
    pub more: bool,
    /// Where the next page starts.
    pub next: S,
}

/// An endless SSE body: `retry:`, then the pages `next_page` returns from `start` on.
///
/// `waiter` must have been subscribed before the first page is read. The stream ends
/// when the node stops, and after yielding the first error of `next_page`.
pub fn event_stream<S, E, F, Fut>(
    start: S,
    waiter: ChangeWaiter,
    timing: StreamTiming,
    next_page: F,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Send + 'static,
    E: Send + 'static,
    F: FnMut(S) -> Fut + Send + 'static,
    Fut: Future<Output = Result<StreamPage<S>, E>> + Send,
{
    let retry = Bytes::from(format!("retry: {}\n\n", timing.retry.as_millis()));
    let machine = Machine {
        next_page,
        waiter,
        timing,
        position: Some(start),
        fetch_now: true,
        last_sent: Instant::now(),
        _open: OpenStream::new(),
    };
    let pages = futures::stream::unfold(machine, |mut m| async move {
        let item = m.step().await?;
        Some((item, m))
    });
    futures::StreamExt::chain(futures::stream::once(async { Ok(retry) }), pages)
}

struct Machine<S, F> {
    next_page: F,
    waiter: ChangeWaiter,
    timing: StreamTiming,
    /// Where the next page starts; `None` once the stream has ended.
    position: Option<S>,
    /// Read without waiting: the last page said more events are available.
    fetch_now: bool,
    last_sent: Instant,
    _open: OpenStream,
}

impl<S, F> Machine<S, F> {
    /// The next chunk to send, or `None` at the end.
    async fn step<E, Fut>(&mut self) -> Option<Result<Bytes, E>>
    where
        F: FnMut(S) -> Fut,
        Fut: Future<Output = Result<StreamPage<S>, E>>,
    {
        loop {
            let position = self.position.take()?;
            if self.waiter.is_stopped() {
                return None;
            }
            if !self.fetch_now {
                let idle_until = self.last_sent + self.timing.heartbeat;
                match tokio::time::timeout_at(idle_until, self.waiter.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(Stopped)) => return None,
                    Err(_) => {
                        self.position = Some(position);
                        self.last_sent = Instant::now();
                        return Some(Ok(Bytes::from_static(HEARTBEAT)));
                    }
                }
            }
            let page = match (self.next_page)(position).await {
                Ok(page) => page,
                Err(e) => return Some(Err(e)),
            };
            self.position = Some(page.next);
            self.fetch_now = page.more;
            if page.count > 0 {
                metrics::counter!(EVENTS_STREAMED.name).increment(page.count as u64);
                self.last_sent = Instant::now();
                return Some(Ok(Bytes::from(page.body)));
            }
        }
    }
}

/// Counts a stream in [`OPEN_STREAMS`] while it lives.
struct OpenStream;

impl OpenStream {
    fn new() -> Self {
        metrics::gauge!(OPEN_STREAMS.name).increment(1.0);
        Self
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!(OPEN_STREAMS.name).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::StreamExt;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::delivery::notify::ChangeNotifier;
    use crate::store::TableId;

    /// A feed of numbered events, `published` of them so far, read two per page.
    fn pages(
        published: Arc<Mutex<usize>>,
        reads: Arc<Mutex<usize>>,
    ) -> impl FnMut(usize) -> futures::future::Ready<Result<StreamPage<usize>, ()>> {
        move |after| {
            *reads.lock().unwrap() += 1;
            let end = (*published.lock().unwrap()).min(after + 2);
            let body = (after..end)
                .map(|i| format!("data: {i}\n\n"))
                .collect::<String>();
            futures::future::ready(Ok(StreamPage {
                body: body.into_bytes(),
                count: end - after,
                more: end < *published.lock().unwrap(),
                next: end,
            }))
        }
    }

    async fn next_text(s: &mut (impl Stream<Item = Result<Bytes, ()>> + Unpin)) -> String {
        let chunk = tokio::time::timeout(Duration::from_secs(5), s.next()).await;
        String::from_utf8(chunk.unwrap().unwrap().unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn pages_follow_publishes_with_heartbeats_between() {
        let stop = CancellationToken::new();
        let notifier = ChangeNotifier::new(stop.clone());
        let table = TableId::new();
        let (published, reads) = (Arc::new(Mutex::new(3)), Arc::new(Mutex::new(0)));
        let timing = StreamTiming {
            retry: Duration::from_millis(1500),
            heartbeat: Duration::from_millis(300),
        };
        let waiter = notifier.subscribe(table);
        let stream = event_stream(0, waiter, timing, pages(published.clone(), reads.clone()));
        let mut stream = Box::pin(stream);

        assert_eq!(next_text(&mut stream).await, "retry: 1500\n\n");
        assert_eq!(next_text(&mut stream).await, "data: 0\n\ndata: 1\n\n");
        assert_eq!(
            *reads.lock().unwrap(),
            1,
            "a page is read only when asked for"
        );
        assert_eq!(next_text(&mut stream).await, "data: 2\n\n");

        // Caught up: nothing is read until a publish, only heartbeats go out.
        let idle = Instant::now();
        assert_eq!(next_text(&mut stream).await, ": keep-alive\n\n");
        assert!(idle.elapsed() >= timing.heartbeat - Duration::from_millis(20));
        assert_eq!(*reads.lock().unwrap(), 2);

        *published.lock().unwrap() = 4;
        notifier.notify(table);
        assert_eq!(next_text(&mut stream).await, "data: 3\n\n");

        stop.cancel();
        assert!(
            stream.next().await.is_none(),
            "the stream ends when the node stops"
        );
    }

    #[tokio::test]
    async fn the_stream_ends_after_an_error() {
        let notifier = ChangeNotifier::new(CancellationToken::new());
        let timing = StreamTiming {
            retry: Duration::from_secs(1),
            heartbeat: Duration::from_secs(1),
        };
        let waiter = notifier.subscribe(TableId::new());
        let stream = event_stream(0, waiter, timing, |_: usize| {
            futures::future::ready(Err::<StreamPage<usize>, _>("broken"))
        });
        let items: Vec<_> = stream.collect().await;
        assert_eq!(items.len(), 2);
        assert_eq!(items[1], Err("broken"));
    }
}
