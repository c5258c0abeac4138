//! Retention: change sets past a table's limits are pruned (never those a subscription
//! still needs, unless a hard limit says so), their segments deleted after the grace,
//! and positions before the pruned prefix answer 410 with the earliest position.

use std::ops::RangeInclusive;
use std::time::Duration;

use iceberg::table::Table;
use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, counter, fresh_database, head, test_settings, wait_until};

async fn retention_node() -> (Node, tempfile::TempDir) {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.retention.interval = Duration::from_millis(100);
    settings.retention.grace = Duration::ZERO;
    (Node::start(settings).await, store)
}

async fn wait_pruned_through(node: &Node, table: &str, ordinal: i64) -> Value {
    wait_until(Duration::from_secs(20), || async {
        let (_, t) = node.get(&format!("/v1/tables/{table}")).await;
        (t["pruned_through"].as_i64() == Some(ordinal)).then_some(t)
    })
    .await
}

/// `shop.orders` holding orders `ids`, registered on `node` with `options` and exported:
/// the table's id, and the table.
async fn exported_orders(
    wh: &Warehouse,
    node: &Node,
    ids: RangeInclusive<i64>,
    options: Value,
) -> (String, Table) {
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(ids)]).await;
    let table = node
        .register(&wh.registration("shop.orders", options))
        .await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    (table, t)
}

/// Change sets of `table` that still have segment files in the change store.
fn change_sets_with_segments(store: &std::path::Path, table: &str) -> usize {
    let dir = store.join("tables").join(table).join("change-sets");
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|d| {
            std::fs::read_dir(d.as_ref().unwrap().path())
                .unwrap()
                .next()
                .is_some()
        })
        .count()
}

#[tokio::test]
async fn old_change_sets_are_pruned_and_old_positions_are_gone() {
    let wh = Warehouse::new().await;
    let (node, store) = retention_node().await;
    let (table, mut t) = exported_orders(
        &wh,
        &node,
        1..=2,
        json!({"retention": {"max_change_sets": 2}}),
    )
    .await;
    let (_, first) = node
        .get(&format!("/v1/tables/{table}/changes?limit=1"))
        .await;
    let early = first["next"].as_str().unwrap().to_string();
    // A subscription that read nothing holds every change set back...
    let (status, _) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "slow", "tables": [table]}),
        )
        .await;
    assert_eq!(status, 201);
    for n in 0..3 {
        t = wh.append(&t, &[orders(10 + n..=10 + n)]).await;
        node.wait_for_checkpoint(&table, head(&t)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, view) = node.get(&format!("/v1/tables/{table}")).await;
    assert_eq!(
        view["pruned_through"], 0,
        "the subscription still needs them"
    );
    assert_eq!(view["retention"], json!({"max_change_sets": 2}));

    // ...until it is gone: then all but the newest two of four change sets go.
    assert_eq!(node.delete("/v1/subscriptions/slow").await, 204);
    wait_pruned_through(&node, &table, 2).await;
    wait_until(Duration::from_secs(10), || async {
        (change_sets_with_segments(store.path(), &table) == 2).then_some(())
    })
    .await;

    let (status, problem) = node
        .get(&format!("/v1/tables/{table}/changes?after={early}"))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (410, Some("position_expired")),
        "{problem}"
    );
    let earliest = problem["earliest"].as_str().unwrap();
    let (status, page) = node
        .get(&format!("/v1/tables/{table}/changes?after={earliest}"))
        .await;
    assert_eq!(status, 200);
    let ids: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![11, 12]);
    // Without a cursor the feed starts at its oldest retained event.
    let (_, from_start) = node.get(&format!("/v1/tables/{table}/changes")).await;
    assert_eq!(from_start["events"], page["events"]);
    // So does a new subscription at `earliest`.
    let (_, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "fresh", "tables": [table]}),
        )
        .await;
    assert_eq!(sub["lag"]["events"], 2, "{sub}");
}

#[tokio::test]
async fn a_hard_limit_prunes_under_a_subscription_which_then_gets_410() {
    let wh = Warehouse::new().await;
    let (node, _store) = retention_node().await;
    let (table, mut t) = exported_orders(&wh, &node, 1..=2, json!({})).await;
    let (status, _) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "stuck", "tables": [table]}),
        )
        .await;
    assert_eq!(status, 201);
    t = wh.append(&t, &[orders(3..=3)]).await;
    node.wait_for_checkpoint(&table, head(&t)).await;

    // Bad limits are refused and change nothing.
    for bad in [
        json!({"max_age_ms": 0}),
        json!({"max_change_sets": -1}),
        json!({"ttl": 5}),
    ] {
        let (status, problem) = node
            .patch(&format!("/v1/tables/{table}"), &json!({"retention": bad}))
            .await;
        assert!(status == 400 || status == 422, "{bad} → {problem}");
        assert!(
            ["invalid_retention", "invalid_request_body"]
                .contains(&problem["code"].as_str().unwrap()),
            "{problem}"
        );
    }
    // A cursor inside the first change set (of two events), handed out before the prune.
    let (_, first) = node.get("/v1/subscriptions/stuck/events?limit=1").await;
    let inside = first["events"][0]["position"].as_str().unwrap().to_string();
    let (status, view) = node
        .patch(
            &format!("/v1/tables/{table}"),
            &json!({"retention": {"hard_max_age_ms": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{view}");
    wait_pruned_through(&node, &table, 2).await;
    // It is still a position of this feed once its change set is gone: acking it is
    // accepted, and what follows it is gone, not silently skipped to the next change set.
    let (status, acked) = node
        .post("/v1/subscriptions/stuck/ack", &json!({"position": inside}))
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["committed"], inside.as_str(), "{acked}");
    let (status, problem) = node.get("/v1/subscriptions/stuck/events").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (410, Some("position_expired")),
        "{problem}"
    );
    let earliest = problem["earliest"].as_str().unwrap();
    let (status, page) = node
        .get(&format!("/v1/subscriptions/stuck/events?after={earliest}"))
        .await;
    assert_eq!(
        (status, page["events"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    // Acking the earliest position moves the subscription past the gap.
    let (status, acked) = node
        .post(
            "/v1/subscriptions/stuck/ack",
            &json!({"position": earliest}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    let (status, _) = node.get("/v1/subscriptions/stuck/events").await;
    assert_eq!(status, 200);
}

/// Every file under `store` (the local change store), relative to it.
fn stored_objects(store: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(store, store, &mut out);
    out
}

/// Shuffle files of published snapshots and everything of a deleted table are queued on
/// the garbage list in the transactions that make them unreachable, so a node that stops
/// before deleting them orphans nothing: another node's janitor deletes them.
#[tokio::test]
async fn garbage_outlives_the_node_that_made_it() {
    let wh = Warehouse::new().await;
    let (database, store) = (fresh_database().await, tempfile::tempdir().unwrap());
    let mut settings = test_settings(&database, store.path());
    // This node's janitor never runs: it "dies" before deleting anything.
    settings.retention.interval = Duration::from_secs(3600);
    let node = Node::start(settings.clone()).await;
    let (table, mut t) = exported_orders(&wh, &node, 1..=3, json!({"start": "earliest"})).await;
    // A copy-on-write rewrite goes through the shuffle.
    t = wh.overwrite_all(&t, &[orders(1..=2)]).await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    let before = stored_objects(store.path());
    assert!(
        before.iter().any(|o| o.starts_with("shuffle/")),
        "the rewrite's shuffle files are still there: {before:?}"
    );
    assert_eq!(node.delete(&format!("/v1/tables/{table}")).await, 204);
    node.shutdown().await;
    assert!(
        stored_objects(store.path()).len() >= before.len(),
        "nothing deleted while the node ran"
    );

    settings.retention.interval = Duration::from_millis(100);
    let janitor = Node::start(settings).await;
    let left = wait_until(Duration::from_secs(20), || async {
        let left = stored_objects(store.path());
        left.is_empty().then_some(left)
    })
    .await;
    assert!(left.is_empty());
    janitor.shutdown().await;
}

#[tokio::test]
async fn a_page_prepared_ahead_is_not_answered_once_its_start_is_pruned() {
    let wh = Warehouse::new().await;
    let (node, _store) = retention_node().await;
    let (table, mut t) = exported_orders(
        &wh,
        &node,
        1..=3,
        json!({"retention": {"max_change_sets": 1}}),
    )
    .await;
    // The first page leaves more, so the node prepares the one after it in memory.
    let prepared = "icefeed_delivery_pages_ahead_total{outcome=\"prepared\"}";
    let before = counter(&node, prepared).await;
    let (_, first) = node
        .get(&format!("/v1/tables/{table}/changes?limit=1"))
        .await;
    let early = first["next"].as_str().unwrap().to_string();
    wait_until(Duration::from_secs(10), || async {
        (counter(&node, prepared).await > before).then_some(())
    })
    .await;

    // A second change set prunes the first, and its segments go at once (no grace).
    t = wh.append(&t, &[orders(10..=10)]).await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    wait_pruned_through(&node, &table, 1).await;
    let (status, problem) = node
        .get(&format!("/v1/tables/{table}/changes?limit=1&after={early}"))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (410, Some("position_expired")),
        "{problem}"
    );
}
