//! No input freezes a node: named pipes and devices where metadata files should be are
//! refused at once, a catalog that never answers meets the deadline (`catalog.timeout`),
//! and `/healthz` answers within a second all the while. The tests run on two worker
//! threads, as a small production node does, so that a blocking call on a worker shows.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::response::{IntoResponse, Response};
use iceberg::{Catalog, TableIdent};
use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, id_json, test_settings, wait_until};

/// Runs `work` while probing `/healthz`, each probe answered within a second.
async fn responsive_while<T>(node: &Node, work: impl Future<Output = T>) -> T {
    let done = AtomicBool::new(false);
    let work = async {
        let out = work.await;
        done.store(true, Ordering::SeqCst);
        out
    };
    let probe = async {
        while !done.load(Ordering::SeqCst) {
            let answer = node
                .http
                .get(node.url("/healthz"))
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            assert!(
                answer.as_ref().is_ok_and(|r| r.status().is_success()),
                "/healthz did not answer within 1 s: {answer:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (out, ()) = tokio::join!(work, probe);
    out
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// POSTs a registration; returns the status, the problem and how long the answer took.
async fn register(node: &Node, body: &Value) -> (u16, Value, Duration) {
    let started = Instant::now();
    let (status, answer) = node.post("/v1/tables", body).await;
    (status, answer, started.elapsed())
}

fn fixed_metadata(location: &Path) -> Value {
    json!({"catalog": {"type": "filesystem", "metadata_location": location.display().to_string()},
           "table": "shop.orders"})
}

/// The newest metadata file of `shop.orders` in a [`Warehouse`].
fn newest_metadata(wh: &Warehouse) -> PathBuf {
    let (_, warehouse) = icefeed_testkit::writer::catalog_paths(wh.dir.path()).unwrap();
    let dir = warehouse.join("shop/orders/metadata");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .collect();
    names.sort();
    names.pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipes_devices_and_huge_files_are_refused_at_once() {
    // The device is allowed as a path (catalog.local_paths), so that what is refused is
    // its being no file.
    let store = tempfile::tempdir().unwrap();
    let mut settings =
        crate::support::test_settings(&crate::support::fresh_database().await, store.path());
    settings.catalog.local_paths.push("/dev/zero".into());
    let node = Node::start(settings).await;
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("v1.metadata.json");
    mkfifo(&pipe);
    // A symlink to the pipe is the pipe.
    let link = dir.path().join("v2.metadata.json");
    std::os::unix::fs::symlink(&pipe, &link).unwrap();
    // Sparse: 300 MiB long, no disk used.
    let huge = dir.path().join("v3.metadata.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();

    let cases = [
        (pipe.clone(), "storage_not_a_file", "named pipe"),
        (link, "storage_not_a_file", "named pipe"),
        (
            PathBuf::from("/dev/zero"),
            "storage_not_a_file",
            "character device",
        ),
        (dir.path().to_path_buf(), "storage_not_a_file", "directory"),
        (huge, "storage_file_too_large", "bytes"),
    ];
    for (location, code, cause) in cases {
        let (status, problem, took) =
            responsive_while(&node, register(&node, &fixed_metadata(&location))).await;
        assert_eq!(status, 422, "{}: {problem}", location.display());
        assert_eq!(problem["code"], code, "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(cause), "{detail}");
        assert!(
            problem["location"]
                .as_str()
                .is_some_and(|l| l.contains(&*location.to_string_lossy())),
            "{problem}"
        );
        assert!(took < Duration::from_secs(2), "{location:?} took {took:?}");
    }

    // A Hadoop warehouse whose version hint is a pipe: the hint is passed over, and the
    // listing finds the newest version, which is a pipe too.
    let hadoop = tempfile::tempdir().unwrap();
    let metadata = hadoop.path().join("shop/orders/metadata");
    std::fs::create_dir_all(&metadata).unwrap();
    mkfifo(&metadata.join("version-hint.text"));
    mkfifo(&metadata.join("v1.metadata.json"));
    let body = json!({"catalog": {"type": "filesystem", "warehouse": hadoop.path().display().to_string()},
                      "table": "shop.orders"});
    let (status, problem, took) = responsive_while(&node, register(&node, &body)).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["code"], "storage_not_a_file", "{problem}");
    assert!(took < Duration::from_secs(2), "took {took:?}");

    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(
        list["tables"],
        json!([]),
        "failed registrations store nothing"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_file_turned_pipe_fails_its_table_and_others_flow() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let other = wh.create("shop.other", orders_schema(), None).await;
    let other = wh.append(&other, &[orders(1..=2)]).await;
    let (node, _store) = Node::start_fresh().await;
    let (_, warehouse) = icefeed_testkit::writer::catalog_paths(wh.dir.path()).unwrap();
    let piped = node
        .register(&json!({
            "catalog": {"type": "filesystem", "warehouse": warehouse.display().to_string()},
            "table": "shop.orders", "poll_interval_ms": 100,
        }))
        .await;
    let flowing = node
        .register(&wh.registration("shop.other", json!({})))
        .await;
    node.wait_for_checkpoint(&piped, head(&t)).await;
    node.wait_for_checkpoint(&flowing, head(&other)).await;

    // The newest metadata file of shop.orders becomes a named pipe nobody writes.
    let newest = newest_metadata(&wh);
    std::fs::remove_file(&newest).unwrap();
    mkfifo(&newest);

    responsive_while(&node, async {
        // Meanwhile a registration of the pipe itself is refused.
        let (status, problem, _) = register(&node, &fixed_metadata(&newest)).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["code"], "storage_not_a_file", "{problem}");

        let failing = wait_until(Duration::from_secs(20), || async {
            let (_, v) = node.get(&format!("/v1/tables/{piped}")).await;
            v["last_error"]
                .as_str()
                .is_some_and(|e| e.starts_with("storage_not_a_file"))
                .then_some(v)
        })
        .await;
        let error = failing["last_error"].as_str().unwrap();
        assert!(error.contains("named pipe"), "{error}");
        assert!(error.contains(&*newest.to_string_lossy()), "{error}");
        // Retried with backoff, not stopped: the file may be put back.
        assert_eq!(failing["state"], "active", "{failing}");

        // The other table keeps flowing.
        let other = wh.append(&other, &[orders(3..=4)]).await;
        node.wait_for_checkpoint(&flowing, head(&other)).await;
        let other = wh.append(&other, &[orders(5..=6)]).await;
        node.wait_for_checkpoint(&flowing, head(&other)).await;
    })
    .await;

    let (_, v) = node.get(&format!("/v1/tables/{piped}")).await;
    assert_eq!(v["checkpoint"]["snapshot_id"], id_json(head(&t)), "{v}");
    node.shutdown().await;
}

/// Holds every connection it accepts and never answers.
async fn silent_listener() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

async fn node_with_catalog_timeout(timeout: Duration) -> (Node, tempfile::TempDir) {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.catalog.timeout = timeout;
    (Node::start(settings).await, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_catalog_that_never_answers_meets_the_deadline() {
    let timeout = Duration::from_secs(1);
    let (node, _store) = node_with_catalog_timeout(timeout).await;
    let uri = silent_listener().await;
    let body = json!({"catalog": {"type": "rest", "uri": uri}, "table": "shop.orders"});

    let (status, problem, took) = responsive_while(&node, register(&node, &body)).await;
    assert_eq!(status, 504, "{problem}");
    assert_eq!(problem["code"], "catalog_timeout", "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("1s") && detail.contains("shop.orders"),
        "{detail}"
    );
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(3),
        "answered after {took:?}"
    );

    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(
        list["tables"],
        json!([]),
        "a timed-out registration stores nothing"
    );
    node.shutdown().await;
}

/// A REST catalog over a [`Warehouse`]'s SQL catalog that stops answering (it holds
/// every request) while `hang` is set.
#[derive(Clone)]
struct FakeRest {
    catalog: Arc<dyn Catalog>,
    hang: Arc<AtomicBool>,
}

impl FakeRest {
    async fn held(&self) {
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    async fn serve(self) -> String {
        use axum::routing::get;
        async fn config(State(rest): State<FakeRest>) -> Response {
            rest.held().await;
            axum::Json(json!({"defaults": {}, "overrides": {}})).into_response()
        }
        async fn table(
            State(rest): State<FakeRest>,
            UrlPath((namespace, name)): UrlPath<(String, String)>,
        ) -> Response {
            rest.held().await;
            let ident = TableIdent::from_strs([namespace, name]).unwrap();
            match rest.catalog.load_table(&ident).await {
                Ok(t) => axum::Json(json!({
                    "metadata-location": t.metadata_location(),
                    "metadata": t.metadata(),
                }))
                .into_response(),
                Err(_) => (
                    axum::http::StatusCode::NOT_FOUND,
                    axum::Json(json!({"error": {"message": "no such table",
                                                 "type": "NoSuchTableException", "code": 404}})),
                )
                    .into_response(),
            }
        }
        let app = axum::Router::new()
            .route("/v1/config", get(config))
            .route("/v1/namespaces/{namespace}/tables/{table}", get(table))
            .with_state(self);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_that_stops_answering_is_retried_and_others_flow() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let other = wh.create("shop.other", orders_schema(), None).await;
    let other = wh.append(&other, &[orders(1..=2)]).await;
    let rest = FakeRest {
        catalog: wh.catalog.clone(),
        hang: Arc::new(AtomicBool::new(false)),
    };
    let uri = rest.clone().serve().await;
    let (node, _store) = node_with_catalog_timeout(Duration::from_secs(1)).await;
    let hanging = node
        .register(&json!({"catalog": {"type": "rest", "uri": uri},
                          "table": "shop.orders", "poll_interval_ms": 100}))
        .await;
    let flowing = node
        .register(&wh.registration("shop.other", json!({})))
        .await;
    node.wait_for_checkpoint(&hanging, head(&t)).await;
    node.wait_for_checkpoint(&flowing, head(&other)).await;

    rest.hang.store(true, Ordering::SeqCst);
    let t = responsive_while(&node, async {
        let failing = wait_until(Duration::from_secs(20), || async {
            let (_, v) = node.get(&format!("/v1/tables/{hanging}")).await;
            v["last_error"]
                .as_str()
                .is_some_and(|e| e.starts_with("catalog_timeout"))
                .then_some(v)
        })
        .await;
        assert_eq!(failing["state"], "active", "{failing}");
        let t = wh.append(&t, &[orders(4..=5)]).await;
        let other = wh.append(&other, &[orders(3..=4)]).await;
        node.wait_for_checkpoint(&flowing, head(&other)).await;
        t
    })
    .await;

    // The catalog answers again: the table catches up and its error clears.
    rest.hang.store(false, Ordering::SeqCst);
    let view = node.wait_for_checkpoint(&hanging, head(&t)).await;
    assert!(view["last_error"].is_null(), "{view}");
    node.shutdown().await;
}
