//! Server-sent event streams: resuming after `Last-Event-ID`, publish-to-stream latency
//! across nodes, a lost notification connection, shutdown, and `curl -N` against the
//! real binary.

use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::fixtures::{RegisteredOrders, orders, orders_schema, registered_orders};
use crate::nodes::{Process, spawn_node_with, terminate, wait_ready};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings, wait_until};

/// One server-sent event.
#[derive(Debug, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// The change event it carries, checking the SSE fields against it.
    pub fn change(&self) -> Value {
        assert_eq!(self.event.as_deref(), Some("change"), "{self:?}");
        assert!(!self.data.contains('\n'), "one data line per event");
        let event: Value = serde_json::from_str(&self.data).unwrap();
        assert_eq!(
            self.id.as_deref(),
            event["position"].as_str(),
            "id is the position"
        );
        event
    }
}

/// A small SSE client over reqwest that parses the stream itself.
pub struct SseClient {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buffer: Vec<u8>,
    /// The last `retry:` received.
    pub retry: Option<u64>,
    /// Heartbeat comments received.
    pub heartbeats: usize,
}

impl SseClient {
    /// Opens `path` on `node`, as a reconnecting client would with `last_event_id`.
    pub async fn connect(node: &Node, path: &str, last_event_id: Option<&str>) -> Self {
        let mut request = node
            .http
            .get(node.url(path))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        assert_eq!(r.headers()["cache-control"], "no-cache");
        Self {
            body: Box::pin(r.bytes_stream()),
            buffer: Vec::new(),
            retry: None,
            heartbeats: 0,
        }
    }

    /// The next event, past comments and `retry:`; `None` when the stream ends cleanly.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = self.parse(std::str::from_utf8(&block).unwrap()) {
                    return Some(event);
                }
                continue;
            }
            let chunk = self.body.next().await?.expect("the stream fails");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// The next event within `within`.
    pub async fn expect(&mut self, within: Duration) -> SseEvent {
        tokio::time::timeout(within, self.next())
            .await
            .unwrap_or_else(|_| panic!("no event within {within:?}"))
            .expect("the stream ended")
    }

    fn parse(&mut self, block: &str) -> Option<SseEvent> {
        let mut event = SseEvent::default();
        let mut has_data = false;
        for line in block.lines().filter(|l| !l.is_empty()) {
            if let Some(comment) = line.strip_prefix(':') {
                assert_eq!(comment, " keep-alive");
                self.heartbeats += 1;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value).to_string();
            match field {
                "id" => event.id = Some(value),
                "event" => event.event = Some(value),
                "data" if has_data => event.data = format!("{}\n{value}", event.data),
                "data" => (event.data, has_data) = (value, true),
                "retry" => self.retry = Some(value.parse().unwrap()),
                other => panic!("unexpected field {other:?} in {block:?}"),
            }
        }
        has_data.then_some(event)
    }
}

fn order_id(event: &SseEvent) -> i64 {
    event.change()["after"]["id"].as_i64().unwrap()
}

const SOON: Duration = Duration::from_secs(20);

/// Reads `n` events into `received`, remembering the last id.
async fn read(
    client: &mut SseClient,
    n: usize,
    received: &mut Vec<i64>,
    last: &mut Option<String>,
) {
    for _ in 0..n {
        let event = client.expect(SOON).await;
        received.push(order_id(&event));
        *last = event.id;
    }
}

#[tokio::test]
async fn a_client_resumes_after_last_event_id_and_gets_every_event_once() {
    let RegisteredOrders {
        wh,
        table: mut t,
        node,
        store: _store,
        id,
    } = registered_orders(1..=5).await;
    // Pages of two, so disconnects also fall in the middle of pages and change sets.
    let path = format!("/v1/tables/{id}/changes/stream?limit=2");

    let (mut received, mut last, mut next_row) = (Vec::new(), None::<String>, 6);
    for _ in 0..4 {
        let mut client = SseClient::connect(&node, &path, last.as_deref()).await;
        read(&mut client, 3, &mut received, &mut last).await;
        assert_eq!(client.retry, Some(3000));
        drop(client);
        // Published while the client is away.
        t = wh.append(&t, &[orders(next_row..next_row + 3)]).await;
        next_row += 3;
        node.wait_for_checkpoint(&id, head(&t)).await;
    }
    let mut client = SseClient::connect(&node, &path, last.as_deref()).await;
    read(&mut client, 5, &mut received, &mut last).await;
    // And live, while connected.
    wh.append(&t, &[orders(18..=19)]).await;
    read(&mut client, 2, &mut received, &mut last).await;
    assert_eq!(
        received,
        (1..=19).collect::<Vec<_>>(),
        "each event once, in order"
    );
    let extra = tokio::time::timeout(Duration::from_millis(500), client.next()).await;
    assert!(extra.is_err(), "nothing after the last event: {extra:?}");

    // The header wins over `after` (an EventSource reconnects to its first URL).
    let first = node
        .get(&format!("/v1/tables/{id}/changes?limit=1"))
        .await
        .1["next"]
        .as_str()
        .unwrap()
        .to_string();
    let mut client = SseClient::connect(
        &node,
        &format!("/v1/tables/{id}/changes/stream?after={first}"),
        last.as_deref(),
    )
    .await;
    let extra = tokio::time::timeout(Duration::from_millis(500), client.next()).await;
    assert!(extra.is_err(), "resumed after Last-Event-ID: {extra:?}");
    drop(client);
    let mut client = SseClient::connect(
        &node,
        &format!("/v1/tables/{id}/changes/stream?after={first}"),
        None,
    )
    .await;
    assert_eq!(
        order_id(&client.expect(SOON).await),
        2,
        "after applies alone"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_stream_on_one_node_gets_what_another_node_publishes_within_a_second() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let mut t = wh.append(&t, &[orders(1..=2)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    // Node A serves the stream; its scheduler looks for tables once, before there are any.
    let mut settings = test_settings(&db, store.path());
    settings.node_id = Some("node-a".into());
    settings.scheduler.tick = Duration::from_secs(3600);
    let a = Node::start(settings).await;
    let mut settings = test_settings(&db, store.path());
    settings.node_id = Some("node-b".into());
    let b = Node::start(settings).await;
    let id = b.register(&wh.registration("shop.orders", json!({}))).await;
    b.wait_for_checkpoint(&id, head(&t)).await;

    let mut client = SseClient::connect(&a, &format!("/v1/tables/{id}/changes/stream"), None).await;
    assert_eq!(order_id(&client.expect(SOON).await), 1);
    assert_eq!(order_id(&client.expect(SOON).await), 2);
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    for row in 3..=5 {
        t = wh.append(&t, &[orders(row..=row)]).await;
        let event = client.expect(SOON).await;
        let arrived = chrono::Utc::now();
        assert_eq!(order_id(&event), row);
        // `published_at` is the publish transaction's start: the figure is an upper bound.
        let (published_at, by): (chrono::DateTime<chrono::Utc>, String) = sqlx::query_as(
            "SELECT published_at, published_by FROM change_sets WHERE snapshot_id = $1",
        )
        .bind(head(&t))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(by, "node-b");
        let latency = (arrived - published_at).to_std().unwrap_or_default();
        eprintln!("publish on node B -> event on node A's stream: {latency:?}");
        assert!(latency < Duration::from_secs(5), "{latency:?}");
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn streams_survive_a_lost_notification_connection() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=1)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let node = Node::start(test_settings(&db, store.path())).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let mut client =
        SseClient::connect(&node, &format!("/v1/tables/{id}/changes/stream"), None).await;
    assert_eq!(order_id(&client.expect(SOON).await), 1);

    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let listener = "SELECT pid FROM pg_stat_activity \
                    WHERE datname = current_database() AND query LIKE 'LISTEN %'";
    let before: i32 = sqlx::query_scalar(listener).fetch_one(&pool).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(before)
        .execute(&pool)
        .await
        .unwrap();
    wh.append(&t, &[orders(2..=2)]).await;
    assert_eq!(order_id(&client.expect(SOON).await), 2);
    let after: i32 = wait_until(SOON, || async {
        sqlx::query_scalar(listener)
            .fetch_optional(&pool)
            .await
            .unwrap()
    })
    .await;
    assert_ne!(before, after, "the node listens again on a new connection");
    node.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams_instead_of_waiting_for_them() {
    let RegisteredOrders {
        wh: _wh,
        table: _t,
        node,
        store: _store,
        id,
    } = registered_orders(1..=1).await;
    let path = format!("/v1/tables/{id}/changes/stream");
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut client = SseClient::connect(&node, &path, None).await;
        client.expect(SOON).await;
        clients.push(client);
    }
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(4), node.shutdown())
        .await
        .expect("shutdown is not held up by open streams (grace is 5 s)");
    eprintln!("shutdown with 3 open streams: {:?}", started.elapsed());
    for mut client in clients {
        assert!(client.next().await.is_none(), "the stream ends cleanly");
    }
}

#[tokio::test]
async fn curl_follows_the_binary_s_stream_until_sigterm() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let process = spawn_node_with(
        &db,
        store.path(),
        "node-curl",
        &[("ICEFEED_API__STREAM_HEARTBEAT", "1s")],
    );
    wait_ready(&http, &process).await;
    let node = Node::remote(process.base.clone());
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;

    let mut curl = tokio::process::Command::new("curl")
        .args(["-N", "-s", "-S"])
        .arg(node.url(&format!("/v1/tables/{id}/changes/stream")))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("curl is installed");
    let mut lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    let mut next_line = async || {
        tokio::time::timeout(SOON, lines.next_line())
            .await
            .expect("curl printed nothing")
            .unwrap()
            .expect("curl's output ended")
    };
    assert_eq!(next_line().await, "retry: 3000");
    let mut rows = Vec::new();
    let mut heartbeat = false;
    while rows.len() < 3 || !heartbeat {
        let line = next_line().await;
        if let Some(data) = line.strip_prefix("data: ") {
            let event: Value = serde_json::from_str(data).unwrap();
            rows.push(event["after"]["id"].as_i64().unwrap());
            if rows.len() == 2 {
                wh.append(&t, &[orders(3..=3)]).await;
            }
        }
        heartbeat |= line == ": keep-alive";
    }
    assert_eq!(rows, vec![1, 2, 3]);

    let started = Instant::now();
    let (status, log) = terminate(process);
    let stopped = started.elapsed();
    assert!(status.success(), "{log}");
    assert!(
        stopped < Duration::from_secs(5),
        "SIGTERM waited for the stream: {stopped:?} (grace 10 s)\n{log}"
    );
    let exit = tokio::time::timeout(Duration::from_secs(5), curl.wait())
        .await
        .expect("curl sees the end of the stream")
        .unwrap();
    assert!(exit.success(), "the stream ended cleanly: {exit}");
}

/// `shop.orders` with rows `1..=rows`, followed by a node process of its own (its
/// metrics and its memory are its own), with extra environment `env`.
struct OwnNode {
    _wh: Warehouse,
    _store: tempfile::TempDir,
    http: reqwest::Client,
    process: Process,
    node: Node,
    id: String,
}

async fn orders_on_own_node(rows: i64, name: &str, env: &[(&str, &str)]) -> OwnNode {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=rows)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let process = spawn_node_with(&db, store.path(), name, env);
    wait_ready(&http, &process).await;
    let node = Node::remote(process.base.clone());
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    OwnNode {
        _wh: wh,
        _store: store,
        http,
        process,
        node,
        id,
    }
}

/// Consumers reading the same events share one rendering of them: four streams and four
/// pagers of 17,000 events (three chunks), all at once, each get every event once and in
/// order, the same events whichever way they read, and the node renders each event once.
#[tokio::test]
async fn consumers_of_the_same_events_share_one_rendering() {
    const ROWS: i64 = 17_000;
    const RENDERED: &str = "icefeed_delivery_events_rendered_total";
    // A node of its own: other tests' nodes in this process render too.
    let OwnNode {
        _wh,
        _store,
        http,
        process,
        node,
        id,
    } = orders_on_own_node(ROWS, "node-shared-rendering", &[]).await;
    let before = metric(&http, &process.base, RENDERED).await;
    let (shared, id) = (&node, &id);
    let stream = |_| async {
        let path = format!("/v1/tables/{id}/changes/stream");
        let mut client = SseClient::connect(shared, &path, None).await;
        let mut events = Vec::new();
        for _ in 0..ROWS {
            events.push(client.expect(SOON).await.change());
        }
        events
    };
    let pages = |i: i64| async move {
        // Pages of different sizes, so their reads start and end inside chunks.
        let limit = 3000 + 977 * i;
        let (mut events, mut after) = (Vec::new(), String::new());
        while (events.len() as i64) < ROWS {
            let (status, page) = shared
                .get(&format!("/v1/tables/{id}/changes?limit={limit}{after}"))
                .await;
            assert_eq!(status, 200, "{page}");
            events.extend(page["events"].as_array().unwrap().iter().cloned());
            after = format!("&after={}", page["next"].as_str().unwrap());
        }
        events
    };
    let (streamed, paged) = tokio::join!(
        futures::future::join_all((0..4).map(stream)),
        futures::future::join_all((0..4).map(pages))
    );
    let expected = &streamed[0];
    let ids: Vec<i64> = expected
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=ROWS).collect::<Vec<_>>());
    for events in streamed.iter().chain(&paged) {
        assert!(events == expected, "every consumer reads the same events");
    }
    let after = metric(&http, &process.base, RENDERED).await;
    assert_eq!(after - before, ROWS as f64, "each event rendered once");
    let (status, log) = terminate(process);
    assert!(status.success(), "{log}");
}

/// The value of a counter or gauge on a node's `/metrics`.
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_stalled_client_holds_back_its_stream_and_does_not_hold_up_sigterm() {
    const ROWS: i64 = 200_000;
    let OwnNode {
        _wh,
        _store,
        http,
        process,
        node,
        id,
    } = orders_on_own_node(
        ROWS,
        "node-stalled",
        &[("ICEFEED_API__SHUTDOWN_GRACE", "2s")],
    )
    .await;

    // A client that never reads the body: the server stops reading pages for it.
    let stalled = http
        .get(node.url(&format!("/v1/tables/{id}/changes/stream?limit=1000")))
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    let streamed = "icefeed_delivery_events_streamed_total";
    // Wait until the server stops handing events to the socket.
    let (mut sent, started) = (-1.0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = metric(&http, &process.base, streamed).await;
        if now > 0.0 && now == sent {
            break;
        }
        assert!(started.elapsed() < SOON, "still streaming: {now}");
        sent = now;
    }
    let pid = process.child_id();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .map(str::to_string)
        });
    eprintln!("stalled client: {sent} of {ROWS} events handed to the socket; server {rss:?}");
    assert!(
        sent < (ROWS / 2) as f64,
        "{sent} events read for a client that reads nothing"
    );
    assert_eq!(
        metric(&http, &process.base, "icefeed_delivery_open_streams").await,
        1.0
    );

    let started = Instant::now();
    let (status, log) = terminate(process);
    let stopped = started.elapsed();
    eprintln!("SIGTERM with a stalled stream: exited after {stopped:?}");
    assert!(status.success(), "{log}");
    assert!(
        stopped < Duration::from_secs(8),
        "SIGTERM waited {stopped:?} for a stalled stream (grace 2 s)\n{log}"
    );
    drop(stalled);
}
