//! How soon a commit is published: on the table's poll interval, not on a scheduler tick,
//! and with a rewrite's map and reduce tasks started as soon as they exist, on any node.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::fixtures::{orders, orders_named, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings};

/// Nothing here happens on a tick (an hour): the coordinator polls the table when it
/// falls due, and the worker, which syncs no table and holds no lease, runs every map and
/// reduce task of each rewrite, told of them through PostgreSQL.
#[tokio::test]
async fn rewrites_publish_on_the_poll_interval_with_their_tasks_run_by_another_node() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let mut t = wh.append(&t, &[orders(1..=20)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&db, store.path());
    settings.node_id = Some("coordinator".into());
    settings.scheduler.tick = Duration::from_secs(3600);
    settings.scheduler.task_workers = 0;
    let coordinator = Node::start(settings).await;
    let mut settings = test_settings(&db, store.path());
    settings.node_id = Some("worker".into());
    settings.scheduler.tick = Duration::from_secs(3600);
    settings.scheduler.max_concurrent_tables = 0;
    let worker = Node::start(settings).await;

    let registration = wh.registration(
        "shop.orders",
        json!({"poll_interval_ms": 200, "identifier_columns": ["id"]}),
    );
    let id = coordinator.register(&registration).await;
    coordinator.wait_for_checkpoint(&id, head(&t)).await;
    for round in 1..=3 {
        let renamed = format!("-round{round}");
        let committed = Instant::now();
        t = wh
            .overwrite_all(&t, &[orders(1..=19), orders_named(20..=20, &renamed)])
            .await;
        coordinator.wait_for_checkpoint(&id, head(&t)).await;
        let took = committed.elapsed();
        eprintln!("rewrite {round}: commit → published in {took:?} (poll interval 200 ms)");
        assert!(took < Duration::from_secs(5), "round {round}: {took:?}");
    }
    let (events, _) = coordinator.all_events(&id, None, 100).await;
    let updates: Vec<&str> = events
        .iter()
        .filter(|e| e["op"] == "update")
        .map(|e| e["after"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(updates, ["n20-round1", "n20-round2", "n20-round3"]);
    coordinator.shutdown().await;
    worker.shutdown().await;
}
