//! A database outage: a node whose PostgreSQL becomes unreachable answers
//! `503 database_unavailable` with `Retry-After` within its acquire timeout (never a 500
//! after a long wait), `/readyz` fails meanwhile, and it serves again by itself once
//! the database is back. The outage is a TCP proxy between the node and PostgreSQL that
//! drops every connection while it is down. A second test keeps it down for 30 s while
//! the Iceberg table commits and a subscription is read, and checks that nothing is lost
//! or published twice once it is back. A third checks that connections the server
//! closed while they sat idle in the pool are replaced, not handed out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use icefeed::config::DatabaseSettings;
use icefeed::store::Store;

use crate::fixtures::{order_json, orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, id64, test_settings, wait_until};

/// Forwards TCP connections to `upstream`; while down, it cuts the open ones and closes
/// new ones at once.
struct TcpProxy {
    address: String,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (serving, open) = (up.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if !serving.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let upstream = upstream.clone();
                open.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Self {
            address,
            up,
            connections,
            task,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for connection in self.connections.lock().unwrap().drain(..) {
                connection.abort();
            }
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.set_up(false);
    }
}

async fn answer(node: &Node, path: &str) -> (u16, Option<String>, serde_json::Value) {
    let response = node.http.get(node.url(path)).send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (
        status,
        retry_after,
        response.json().await.unwrap_or_default(),
    )
}

/// A fresh database and its URL through a [`TcpProxy`].
async fn database_behind_proxy() -> (url::Url, TcpProxy) {
    let database = fresh_database().await;
    let mut url = url::Url::parse(&database).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = TcpProxy::start(upstream).await;
    let (host, port) = proxy.address.split_once(':').unwrap();
    url.set_host(Some(host)).unwrap();
    url.set_port(Some(port.parse().unwrap())).unwrap();
    (url, proxy)
}

#[tokio::test]
async fn an_unreachable_database_answers_503_and_the_node_recovers_by_itself() {
    let (url, proxy) = database_behind_proxy().await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(url.as_str(), store.path());
    settings.database.acquire_timeout = Duration::from_secs(2);
    let node = Node::start(settings).await;
    assert_eq!(answer(&node, "/v1/tables").await.0, 200);

    proxy.set_up(false);
    let document = serde_json::to_value(icefeed::api::openapi()).unwrap();
    for path in ["/v1/tables", "/v1/subscriptions", "/readyz"] {
        let documented = &document["paths"][path]["get"]["responses"]["503"];
        assert!(documented.is_object(), "{path}: 503 is documented");
        let started = Instant::now();
        let (status, retry_after, problem) = answer(&node, path).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (503, Some("database_unavailable")),
            "{path}: {problem}"
        );
        assert_eq!(retry_after.as_deref(), Some("5"), "{path}");
        if path != "/readyz" {
            assert!(
                documented["headers"]["Retry-After"].is_object(),
                "{path}: {documented}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path} answered after {:?}",
            started.elapsed()
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(!detail.contains(&proxy.address), "no internals: {detail}");
    }
    assert_eq!(answer(&node, "/healthz").await.0, 200, "alive all along");

    // Back: the same node serves again, without a restart.
    proxy.set_up(true);
    wait_until(Duration::from_secs(20), || async {
        (answer(&node, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(answer(&node, "/v1/tables").await.0, 200);
    node.shutdown().await;
}

/// Connections the server closed while they sat idle in the pool (a restart, a failover,
/// an administrator's `pg_terminate_backend`) are not handed out: the pool skips its ping
/// only for a connection used within the last half second, so after a pause every query
/// gets a connection it checked or opened anew.
#[tokio::test]
async fn connections_closed_while_idle_are_replaced_without_an_error() {
    let database = fresh_database().await;
    let store = Store::connect_with(&database, &DatabaseSettings::default())
        .await
        .unwrap();
    let backend_pid = "SELECT pg_backend_pid()";
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut connection = store.pool().acquire().await.unwrap();
        let pid: i32 = sqlx::query_scalar(backend_pid)
            .fetch_one(&mut *connection)
            .await
            .unwrap();
        held.push((connection, pid));
    }
    let pids: Vec<i32> = held.iter().map(|(_, pid)| *pid).collect();
    drop(held);
    // Back in the pool (it pings each on release, in the background).
    wait_until(Duration::from_secs(5), || async {
        (store.pool().num_idle() == pids.len()).then_some(())
    })
    .await;
    let admin = sqlx::PgPool::connect(&database).await.unwrap();
    for pid in &pids {
        let closed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&admin)
            .await
            .unwrap();
        assert!(closed, "backend {pid}");
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut held = Vec::new();
    for _ in 0..pids.len() {
        let mut connection = store.pool().acquire().await.unwrap();
        let pid: i32 = sqlx::query_scalar(backend_pid)
            .fetch_one(&mut *connection)
            .await
            .expect("a query on a connection the pool handed out");
        assert!(!pids.contains(&pid), "a new connection, not backend {pid}");
        held.push(connection);
    }
}

/// The answer to a request that needs the database while it is unreachable: `503
/// database_unavailable` with `Retry-After`, within the acquire timeout and some slack
/// (never a 500, never a hang).
async fn assert_unavailable(request: reqwest::RequestBuilder, what: &str) -> Duration {
    let started = Instant::now();
    let response = request.send().await.unwrap();
    let took = started.elapsed();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let problem: serde_json::Value = response.json().await.unwrap_or_default();
    assert_eq!(
        (status, problem["code"].as_str()),
        (503, Some("database_unavailable")),
        "{what}: {problem}"
    );
    assert_eq!(retry_after.as_deref(), Some("5"), "{what}");
    assert!(
        took < OUTAGE_ACQUIRE_TIMEOUT + Duration::from_secs(3),
        "{what} answered after {took:?}"
    );
    took
}

/// The acquire timeout of the node of the long outage.
const OUTAGE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// Issue 15: PostgreSQL unreachable for 30 s while the Iceberg table keeps committing
/// (through its own SQLite catalog, which the outage does not touch) and a pull
/// subscription is being read. Meanwhile every API read and an ack answer `503
/// database_unavailable` with `Retry-After`, within the acquire timeout. Once the
/// database is back the same node, never restarted, publishes every snapshot of the
/// outage: the feed from the beginning holds each appended row once, in commit order,
/// in the change set of the snapshot that added it; and the subscription kept its
/// committed position (the ack sent during the outage did not count), reads on from it
/// and acks again.
#[tokio::test]
async fn thirty_seconds_without_the_database_during_appends_and_pulls_lose_and_repeat_nothing() {
    let (url, proxy) = database_behind_proxy().await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(url.as_str(), store.path());
    settings.database.acquire_timeout = OUTAGE_ACQUIRE_TIMEOUT;
    let node = Node::start(settings).await;

    // (row id, snapshot that added it), in commit order.
    let mut expected: Vec<(i64, i64)> = Vec::new();
    let mut snapshots: Vec<i64> = Vec::new();
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let mut table = wh.append(&created, &[orders(1..=3)]).await;
    expected.extend((1..=3).map(|row| (row, head(&table))));
    snapshots.push(head(&table));
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "outage-sync", "tables": [id]}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    table = wh.append(&table, &[orders(4..=6)]).await;
    expected.extend((4..=6).map(|row| (row, head(&table))));
    snapshots.push(head(&table));
    node.wait_for_checkpoint(&id, head(&table)).await;

    // The consumer reads everything and acks up to row 4.
    let (status, page) = node
        .get("/v1/subscriptions/outage-sync/events?limit=100")
        .await;
    assert_eq!(status, 200, "{page}");
    let delivered = page["events"].as_array().unwrap().clone();
    let rows: Vec<i64> = delivered
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(rows, [1, 2, 3, 4, 5, 6]);
    let end_of_page = page["next"].as_str().unwrap().to_string();
    let (status, acked) = node
        .post(
            "/v1/subscriptions/outage-sync/ack",
            &json!({"position": delivered[3]["position"]}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["lag"]["events"], 2, "{acked}");
    let committed = acked["committed"].as_str().unwrap().to_string();

    // 30 s without PostgreSQL; the table gets a snapshot about every 3 s.
    let outage = Duration::from_secs(30);
    proxy.set_up(false);
    let down = Instant::now();
    let mut next_row = 7;
    let mut rounds = 0;
    let mut slowest = Duration::ZERO;
    while down.elapsed() < outage {
        let round = Instant::now();
        table = wh.append(&table, &[orders(next_row..=next_row + 2)]).await;
        expected.extend((next_row..=next_row + 2).map(|row| (row, head(&table))));
        snapshots.push(head(&table));
        next_row += 3;
        let get = |path: String| node.http.get(node.url(&path));
        let probes = [
            (get(format!("/v1/tables/{id}")), "GET table"),
            (get("/v1/tables".into()), "GET tables"),
            (get(format!("/v1/tables/{id}/changes")), "GET changes"),
            (
                get(format!("/v1/tables/{id}/changes?after={end_of_page}")),
                "GET changes after",
            ),
            (
                get(format!("/v1/tables/{id}/change-sets")),
                "GET change sets",
            ),
            (
                get("/v1/subscriptions/outage-sync/events?limit=100".into()),
                "GET subscription events",
            ),
            (
                get("/v1/subscriptions/outage-sync/events?wait=20".into()),
                "long poll of subscription events",
            ),
            (
                get("/v1/subscriptions/outage-sync".into()),
                "GET subscription",
            ),
            (
                node.http
                    .post(node.url("/v1/subscriptions/outage-sync/ack"))
                    .json(&json!({"position": end_of_page})),
                "POST ack",
            ),
            (get("/readyz".into()), "GET /readyz"),
        ];
        let took = futures::future::join_all(
            probes
                .into_iter()
                .map(|(request, what)| assert_unavailable(request, what)),
        )
        .await;
        slowest = took.into_iter().fold(slowest, Duration::max);
        let (status, _) = node.get("/healthz").await;
        assert_eq!(status, 200, "alive all along");
        rounds += 1;
        let pause = Duration::from_secs(3).saturating_sub(round.elapsed());
        tokio::time::sleep(pause.min(outage.saturating_sub(down.elapsed()))).await;
    }
    let outage_snapshots = snapshots.len() - 2;
    assert!(
        outage_snapshots >= 8,
        "{outage_snapshots} snapshots in {rounds} rounds"
    );

    // Back: the same node catches up by itself.
    proxy.set_up(true);
    let up = Instant::now();
    wait_until(Duration::from_secs(20), || async {
        (answer(&node, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let ready_after = up.elapsed();
    let caught_up = node.wait_for_checkpoint(&id, head(&table)).await;
    eprintln!(
        "outage of {:?}: {outage_snapshots} snapshots committed, slowest 503 after \
         {slowest:?}; ready {ready_after:?} and caught up {:?} after the database came back",
        up - down,
        up.elapsed()
    );
    assert_eq!(caught_up["state"], "active", "{caught_up}");
    assert_eq!(caught_up["last_error"], Value::Null, "{caught_up}");
    // The lag a failed attempt recorded stays until the poll that published ends.
    let caught_up = wait_until(Duration::from_secs(10), || async {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        (t["lag"]["snapshots"] == 0).then_some(t)
    })
    .await;
    assert_eq!(
        id64(&caught_up["checkpoint"]["snapshot_id"]),
        Some(head(&table)),
        "{caught_up}"
    );
    assert_eq!(
        caught_up["change_sets"],
        snapshots.len(),
        "one change set per snapshot: {caught_up}"
    );

    // The feed from the beginning: each row once, in commit order, in its snapshot.
    let (events, _) = node.all_events(&id, None, 7).await;
    let got: Vec<(i64, i64)> = events
        .iter()
        .map(|e| {
            (
                e["after"]["id"].as_i64().unwrap(),
                id64(&e["snapshot_id"]).unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    for event in &events {
        assert_eq!(event["op"], "insert", "{event}");
        assert_eq!(
            event["after"],
            order_json(event["after"]["id"].as_i64().unwrap())
        );
    }
    let published = node.change_sets(&id).await;
    let in_order: Vec<(i64, i64)> = (1..).zip(snapshots.iter().copied()).collect();
    assert_eq!(published, in_order, "ordinals follow the commits");

    // The subscription: still at the ack before the outage, then reads on and acks.
    let (status, sub) = node.get("/v1/subscriptions/outage-sync").await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(sub["committed"], committed.as_str(), "{sub}");
    let total = expected.len() as i64;
    assert_eq!(sub["lag"]["events"], total - 4, "{sub}");
    let mut rest = Vec::new();
    let next = loop {
        let (status, page) = node
            .get("/v1/subscriptions/outage-sync/events?limit=10")
            .await;
        assert_eq!(status, 200, "{page}");
        rest.extend(page["events"].as_array().unwrap().iter().cloned());
        let next = page["next"].as_str().unwrap().to_string();
        let (status, acked) = node
            .post(
                "/v1/subscriptions/outage-sync/ack",
                &json!({ "position": next }),
            )
            .await;
        assert_eq!(status, 200, "{acked}");
        if page["more"] == false {
            break next;
        }
    };
    let rows: Vec<i64> = rest
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(rows, (5..=total).collect::<Vec<_>>());
    let (_, sub) = node.get("/v1/subscriptions/outage-sync").await;
    assert_eq!(sub["lag"]["events"], 0, "{sub}");
    let (_, page) = node
        .get(&format!(
            "/v1/subscriptions/outage-sync/events?after={next}"
        ))
        .await;
    assert_eq!(page["events"], json!([]), "{page}");
    let (_, page) = node.get("/v1/subscriptions/outage-sync/events").await;
    assert_eq!(page["events"], json!([]), "{page}");
    node.shutdown().await;
}
