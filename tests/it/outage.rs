//! A database outage: a node whose PostgreSQL becomes unreachable answers
//! `503 database_unavailable` with `Retry-After` within its acquire timeout (never a 500
//! after a long wait), `/readyz` fails meanwhile, and it serves again by itself once
//! the database is back. The outage is a TCP proxy between the node and PostgreSQL that
//! drops every connection while it is down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::support::{Node, fresh_database, test_settings, wait_until};

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

#[tokio::test]
async fn an_unreachable_database_answers_503_and_the_node_recovers_by_itself() {
    let database = fresh_database().await;
    let mut url = url::Url::parse(&database).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = TcpProxy::start(upstream).await;
    let (host, port) = proxy.address.split_once(':').unwrap();
    url.set_host(Some(host)).unwrap();
    url.set_port(Some(port.parse().unwrap())).unwrap();
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
