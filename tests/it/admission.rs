//! Admission: past `limits.*` a node answers at once — `429 too_many_waiting_requests`
//! for a client with too many streams and long polls open, `503 overloaded` at the
//! node's limits — with `Retry-After`, and takes the request again once a place is free.

use std::time::Duration;

use icefeed::config::LimitSettings;
use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings, wait_until};

async fn limited_node(limits: LimitSettings) -> (Node, Warehouse, String, tempfile::TempDir) {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=500)]).await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.limits = limits;
    // Streams write often, so a closed one is noticed (and its place given back) soon.
    settings.api.stream_heartbeat = Duration::from_millis(100);
    let node = Node::start(settings).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    (node, wh, id, store)
}

/// Sends a GET of `path` as `client` (its bearer token; the node has auth off).
async fn get_as(node: &Node, client: &str, path: &str) -> reqwest::Response {
    node.http
        .get(node.url(path))
        .bearer_auth(client)
        .send()
        .await
        .unwrap()
}

async fn refused(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["retry-after"].to_str().unwrap(),
        "5",
        "{code}"
    );
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], code, "{problem}");
    problem
}

#[tokio::test]
async fn streams_and_long_polls_are_limited_per_client_and_per_node() {
    let (node, _wh, id, _store) = limited_node(LimitSettings {
        max_concurrent_requests: 64,
        max_waiting_requests: 3,
        max_waiting_per_client: 2,
    })
    .await;
    let stream = format!("/v1/tables/{id}/changes/stream?after=now");
    let long_poll = format!("/v1/tables/{id}/changes?after=now&wait=30");

    let a1 = get_as(&node, "client-a", &stream).await;
    let a2 = get_as(&node, "client-a", &stream).await;
    assert_eq!((a1.status().as_u16(), a2.status().as_u16()), (200, 200));
    let problem = refused(
        get_as(&node, "client-a", &stream).await,
        429,
        "too_many_waiting_requests",
    )
    .await;
    assert_eq!(problem["limit"], 2);
    refused(
        get_as(&node, "client-a", &long_poll).await,
        429,
        "too_many_waiting_requests",
    )
    .await;
    // A page that does not wait is an ordinary request.
    let page = get_as(
        &node,
        "client-a",
        &format!("/v1/tables/{id}/changes?limit=1"),
    )
    .await;
    assert_eq!(page.status(), 200);

    // Another client has room until the node is full.
    let b1 = get_as(&node, "client-b", &stream).await;
    assert_eq!(b1.status(), 200);
    refused(
        get_as(&node, "client-c", &long_poll).await,
        503,
        "overloaded",
    )
    .await;
    assert_eq!(get_as(&node, "client-c", "/v1/tables").await.status(), 200);
    assert_eq!(get_as(&node, "client-c", "/readyz").await.status(), 200);

    // A closed stream gives its place back.
    drop(a1);
    let c1 = wait_until(Duration::from_secs(10), || async {
        let r = get_as(&node, "client-c", &stream).await;
        (r.status() == 200).then_some(r)
    })
    .await;
    refused(get_as(&node, "client-c", &stream).await, 503, "overloaded").await;

    let metrics = node.get_text("/metrics").await;
    for described in [
        "icefeed_http_requests_shed_total",
        "icefeed_http_waiting_requests",
    ] {
        assert!(
            metrics.contains(&format!("# HELP {described} ")),
            "{described}"
        );
    }
    for reason in ["client_limit", "overloaded"] {
        assert!(
            metrics.contains(&format!(
                "icefeed_http_requests_shed_total{{reason=\"{reason}\"}}"
            )),
            "{reason}"
        );
    }
    drop((a2, b1, c1));
    node.shutdown().await;
}

#[tokio::test]
async fn ordinary_requests_past_the_limit_are_shed_at_once() {
    let (node, _wh, id, _store) = limited_node(LimitSettings {
        max_concurrent_requests: 2,
        ..LimitSettings::default()
    })
    .await;
    let path = format!("/v1/tables/{id}/changes?limit=500");
    let answers = futures::future::join_all((0..40).map(|_| async {
        let r = node.http.get(node.url(&path)).send().await.unwrap();
        let status = r.status().as_u16();
        let retry_after = r.headers().get("retry-after").cloned();
        let body: Value = r.json().await.unwrap();
        (status, retry_after, body)
    }))
    .await;
    let mut served = 0;
    let mut shed = 0;
    for (status, retry_after, body) in &answers {
        match status {
            200 => {
                assert_eq!(body["events"].as_array().unwrap().len(), 500);
                served += 1;
            }
            503 => {
                assert_eq!(body["code"], "overloaded", "{body}");
                assert!(retry_after.is_some());
                shed += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(served >= 2 && shed >= 1, "{served} served, {shed} shed");
    // Once the burst is over, the node serves again.
    assert_eq!(node.get(&path).await.0, 200);
    node.shutdown().await;
}
