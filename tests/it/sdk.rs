//! An SDK generated from the committed OpenAPI document (openapi-python-client, at test
//! time) subscribes to a table, pulls, acks, and sees problem documents as typed errors.

use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::pyiceberg::python;
use crate::support::{Node, Warehouse, head};

const DOCUMENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/icefeed.json");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_client.py");

/// Runs tests/python/sdk_client.py against the node at `base` and returns what the SDK saw.
async fn run_sdk(base: &str, table: &str) -> Value {
    let out = tokio::process::Command::new(python())
        .args([SCRIPT, DOCUMENT, base, table])
        .output()
        .await
        .expect("run python (set ICEFEED_TEST_PYTHON, see scripts/python-env.sh)");
    assert!(
        out.status.success(),
        "the generated SDK failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sdk_client.py prints one JSON object")
}

#[tokio::test]
async fn a_generated_python_sdk_subscribes_pulls_and_acks() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=5)]).await;
    let table = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&table, head(&t)).await;

    let seen = run_sdk(&node.base, &table).await;

    let created = &seen["created"];
    assert_eq!(created["http_status"], 201, "{seen}");
    assert_eq!(created["name"], "sdk-orders");
    assert_eq!(created["state"], "active");
    assert_eq!(created["start"], "earliest");
    assert_eq!(created["lag_events"], 5);
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["location"], format!("/v1/subscriptions/{id}"));

    let page = &seen["page"];
    assert_eq!(page["ids"], json!([1, 2, 3, 4, 5]), "{seen}");
    assert_eq!(page["ops"], json!(vec!["insert"; 5]));
    assert_eq!(page["committed_at_is_datetime"], true);
    assert_eq!(page["more"], false);

    // Acking `next` committed the whole page (the committed cursor is the canonical
    // form of the same position), and the server agrees with what the SDK read.
    assert_eq!(seen["acked"]["lag_events"], 0, "{seen}");
    assert_eq!(seen["after_ack"], json!({"count": 0, "more": false}));
    let committed = &seen["acked"]["committed"];
    assert_eq!(
        seen["got"],
        json!({"committed": committed, "lag_events": 0, "lag_snapshots": 0})
    );
    let (status, sub) = node.get(&format!("/v1/subscriptions/{id}")).await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(&sub["committed"], committed);
    assert_eq!(sub["lag"]["events"], 0);

    let backwards = &seen["ack_backwards"];
    assert_eq!(
        (
            &backwards["http_status"],
            &backwards["status"],
            &backwards["code"]
        ),
        (&json!(409), &json!(409), &json!("ack_backwards")),
        "{seen}"
    );
    assert_eq!(&backwards["extensions"]["committed"], committed);
    let missing = &seen["not_found"];
    assert_eq!(
        (&missing["http_status"], &missing["code"]),
        (&json!(404), &json!("subscription_not_found")),
        "{seen}"
    );
    node.shutdown().await;
}
