//! The feed end to end: registration, the initial export, appends, pages, NDJSON,
//! start positions, and cursors that survive a restart.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixtures::{RegisteredOrders, order_json, orders, orders_schema, registered_orders};
use crate::stream::SseClient;
use crate::support::{Node, Warehouse, fresh_database, head, id_json, id64, test_settings};

fn ids(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect()
}

/// One page as sent: status, the headers that carry its cursor and count, the body.
pub(crate) async fn raw_page(node: &Node, path: &str, accept: &str) -> (u16, [String; 4], Vec<u8>) {
    let r = node
        .http
        .get(node.url(path))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map_or(String::new(), |v| v.to_str().unwrap().to_string())
    };
    let headers = [
        header("content-type"),
        header("icefeed-next-cursor"),
        header("icefeed-more"),
        header("icefeed-count"),
    ];
    (
        r.status().as_u16(),
        headers,
        r.bytes().await.unwrap().to_vec(),
    )
}

#[tokio::test]
async fn pages_prepared_ahead_are_the_pages_a_fresh_read_answers() {
    let RegisteredOrders {
        wh,
        table,
        node,
        id,
        store: _store,
    } = registered_orders(1..=5).await;
    let t = wh.append(&table, &[orders(6..=8)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let answered = "icefeed_delivery_pages_ahead_total{outcome=\"answered\"}";
    for accept in [
        "application/json",
        "application/x-ndjson",
        "application/vnd.apache.arrow.stream",
    ] {
        let before = crate::support::counter(&node, answered).await;
        // Page by page: each page but the first and the last (nothing follows it, so it
        // is not kept) was prepared while the one before was taken, and is answered from
        // memory once; asking for it again reads it anew.
        let mut path = format!("/v1/tables/{id}/changes?limit=2&ops=insert,delete");
        let mut pages = 0;
        loop {
            let prepared = raw_page(&node, &path, accept).await;
            let fresh = raw_page(&node, &path, accept).await;
            let body = String::from_utf8_lossy(&prepared.2);
            assert_eq!(prepared.0, 200, "{accept} {path}: {body}");
            assert_eq!(prepared, fresh, "{accept} {path}");
            pages += 1;
            let [_, next, more, _] = &prepared.1;
            if accept == "application/json" {
                let page: Value = serde_json::from_slice(&prepared.2).unwrap();
                if page["more"] == false {
                    break;
                }
                path = format!(
                    "/v1/tables/{id}/changes?limit=2&ops=insert,delete&after={}",
                    page["next"].as_str().unwrap()
                );
            } else {
                if more == "false" {
                    break;
                }
                path = format!("/v1/tables/{id}/changes?limit=2&ops=insert,delete&after={next}");
            }
        }
        assert_eq!(pages, 4, "{accept}: 8 events in pages of 2");
        let after = crate::support::counter(&node, answered).await;
        assert!(after >= before + 2, "{accept}: {before} -> {after}");
    }
    node.shutdown().await;
}

#[tokio::test]
async fn export_then_appends_flow_page_by_page() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let t = wh.append(&t, &[orders(4..=5)]).await;
    let (node, _store) = Node::start_fresh().await;

    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    let table = node.wait_for_checkpoint(&id, head(&t)).await;
    assert_eq!(table["state"], "active");
    assert_eq!(table["export_pending"], false);
    assert_eq!(table["identifier_columns"], json!(["id"]));
    assert_eq!(table["change_sets"], 1, "the export is one change set");

    // Pages of two: the export holds all five rows, in file order.
    let (_, first) = node.get(&format!("/v1/tables/{id}/changes?limit=2")).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 2);
    assert_eq!(first["more"], true);
    let (events, next) = node.all_events(&id, None, 2).await;
    let mut seen = ids(&events);
    seen.sort();
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    for e in &events {
        let id = e["after"]["id"].as_i64().unwrap();
        assert_eq!(e["op"], "insert");
        assert_eq!(e["table"], "shop.orders");
        assert_eq!(e["key"], json!({ "id": id }));
        assert_eq!(e["after"], order_json(id));
        assert!(e.get("before").is_none());
        assert_eq!(e["snapshot_id"], id_json(head(&t)));
        assert_eq!(e["schema_id"], 0);
        assert!(e["committed_at"].as_str().unwrap().ends_with('Z'));
    }
    let positions: BTreeSet<&str> = events
        .iter()
        .map(|e| e["position"].as_str().unwrap())
        .collect();
    assert_eq!(positions.len(), 5, "positions are unique");

    // Caught up: an empty page keeps the cursor.
    let (_, empty) = node
        .get(&format!("/v1/tables/{id}/changes?after={next}"))
        .await;
    assert_eq!(empty["events"], json!([]));
    assert_eq!(empty["next"], next.as_str());
    assert_eq!(empty["more"], false);

    // A new append becomes its own change set of inserts.
    let t = wh.append(&t, &[orders(6..=8)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (events, last) = node.all_events(&id, Some(&next), 100).await;
    assert_eq!(ids(&events), vec![6, 7, 8]);
    assert!(events.iter().all(|e| e["snapshot_id"] == id_json(head(&t))));

    // Resuming from an event's own position continues right after it.
    let (rest, _) = node
        .all_events(&id, Some(events[0]["position"].as_str().unwrap()), 100)
        .await;
    assert_eq!(ids(&rest), vec![7, 8]);

    // NDJSON carries the same events, one per line, and the cursor in a header.
    let r = node
        .http
        .get(node.url(&format!("/v1/tables/{id}/changes?after={next}")))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    assert_eq!(r.headers()["icefeed-next-cursor"], last.as_str());
    assert_eq!(r.headers()["icefeed-more"], "false");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, events);

    let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(table["lag"]["snapshots"], 0);
    assert_eq!(table["change_sets"], 2);
    node.shutdown().await;
}

#[tokio::test]
async fn start_positions_choose_where_the_feed_begins() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t1 = wh.append(&t, &[orders(1..=1)]).await;
    let s1 = head(&t1);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let t2 = wh.append(&t1, &[orders(2..=2)]).await;
    let s2 = head(&t2);
    let s2_time = t2.metadata().current_snapshot().unwrap().timestamp_ms();
    let t3 = wh.append(&t2, &[orders(3..=3)]).await;
    let s3 = head(&t3);
    let (node, _store) = Node::start_fresh().await;

    let at = chrono::DateTime::from_timestamp_millis(s2_time)
        .unwrap()
        .to_rfc3339();
    let cases = [
        (json!("earliest"), vec![(s1, 1), (s2, 2), (s3, 3)]),
        // A snapshot id as the API writes it, and as a number of a client that kept one.
        (
            json!({ "snapshot_id": id_json(s1) }),
            vec![(s2, 2), (s3, 3)],
        ),
        (json!({ "snapshot_id": s1 }), vec![(s2, 2), (s3, 3)]),
        (json!({ "timestamp": at }), vec![(s2, 2), (s3, 3)]),
        (json!("snapshot"), vec![(s3, 1), (s3, 2), (s3, 3)]),
    ];
    for (start, expected) in cases {
        let id = node
            .register(&wh.registration("shop.orders", json!({ "start": start })))
            .await;
        node.wait_for_checkpoint(&id, s3).await;
        let (events, _) = node.all_events(&id, None, 100).await;
        let mut got: Vec<(i64, i64)> = events
            .iter()
            .map(|e| {
                (
                    id64(&e["snapshot_id"]).unwrap(),
                    e["after"]["id"].as_i64().unwrap(),
                )
            })
            .collect();
        got.sort_by_key(|(_, id)| *id);
        assert_eq!(got, expected, "start {start}");
        assert_eq!(node.delete(&format!("/v1/tables/{id}")).await, 204);
    }

    // `latest` publishes only what is committed after registration.
    let id = node
        .register(&wh.registration("shop.orders", json!({ "start": "latest" })))
        .await;
    let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(table["checkpoint"]["snapshot_id"], id_json(s3));
    let t4 = wh.append(&t3, &[orders(4..=4)]).await;
    node.wait_for_checkpoint(&id, head(&t4)).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(ids(&events), vec![4]);
    node.shutdown().await;
}

#[tokio::test]
async fn cursors_survive_a_restart_and_the_change_store_is_shared() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=10)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();

    let node = Node::start(test_settings(&db, store.path())).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (_, page) = node.get(&format!("/v1/tables/{id}/changes?limit=4")).await;
    let cursor = page["next"].as_str().unwrap().to_string();
    let first: Vec<i64> = ids(page["events"].as_array().unwrap());
    node.shutdown().await;

    let node = Node::start(test_settings(&db, store.path())).await;
    let (rest, _) = node.all_events(&id, Some(&cursor), 3).await;
    let mut all = first;
    all.extend(ids(&rest));
    all.sort();
    assert_eq!(all, (1..=10).collect::<Vec<_>>());
    node.shutdown().await;
}

#[tokio::test]
async fn pause_resume_delete_and_operations_endpoints() {
    let RegisteredOrders {
        wh,
        table: t,
        node,
        store,
        id,
    } = registered_orders(1..=2).await;

    node.set_paused(&id, true).await;
    let t2 = wh.append(&t, &[orders(3..=3)]).await;
    // Paused: nothing is published, yet the lag counts the commits that wait.
    let table = crate::support::wait_until(std::time::Duration::from_secs(10), || async {
        let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
        (table["lag"]["snapshots"] == 1).then_some(table)
    })
    .await;
    assert_eq!(table["state"], "paused");
    assert_eq!(table["head_snapshot_id"], id_json(head(&t2)), "{table}");
    assert!(table["lag"]["seconds"].as_f64().unwrap() > 0.0, "{table}");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(
        table["checkpoint"]["snapshot_id"],
        id_json(head(&t)),
        "a paused table publishes nothing"
    );
    node.set_paused(&id, false).await;
    node.wait_for_checkpoint(&id, head(&t2)).await;

    let (status, health) = node.get("/healthz").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (status, _) = node.get("/readyz").await;
    assert_eq!(status, 200);
    let metrics = node.get_text("/metrics").await;
    assert!(
        metrics.contains("icefeed_scheduler_rows_published_total"),
        "{metrics}"
    );
    // Requests by route template, never by concrete path.
    let table_reads = metrics.lines().find(|l| {
        l.starts_with("icefeed_http_requests_total{")
            && l.contains(r#"method="GET""#)
            && l.contains(r#"route="/v1/tables/{id}""#)
            && l.contains(r#"status="200""#)
    });
    assert!(table_reads.is_some(), "{metrics}");
    assert!(!metrics.contains(&format!("route=\"/v1/tables/{id}\"")));
    assert!(metrics.contains("# HELP icefeed_http_request_duration_seconds"));
    // Every metric the node exposes is described.
    for line in metrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|t| t.split(' ').next())
        {
            assert!(
                metrics.contains(&format!("# HELP {name} ")),
                "{name} has no HELP line"
            );
        }
    }

    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(list["tables"].as_array().unwrap().len(), 1);
    assert_eq!(node.delete(&format!("/v1/tables/{id}")).await, 204);
    let (status, problem) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (404, Some("table_not_found"))
    );
    let segments = store.path().join("tables").join(&id);
    crate::support::wait_until(std::time::Duration::from_secs(10), || async {
        (count_files(&segments) == 0).then_some(())
    })
    .await;
    node.shutdown().await;
}

fn count_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| {
                    if e.path().is_dir() {
                        count_files(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn long_polls_answer_on_publish_or_with_the_same_cursor_when_the_wait_ends() {
    let RegisteredOrders {
        wh,
        table: t,
        node,
        store: _store,
        id,
    } = registered_orders(1..=2).await;
    let (events, next) = node.all_events(&id, None, 100).await;
    assert_eq!(ids(&events), vec![1, 2]);

    // Events available now: no waiting.
    let started = Instant::now();
    let (_, page) = node.get(&format!("/v1/tables/{id}/changes?wait=30")).await;
    assert_eq!(ids(page["events"].as_array().unwrap()), vec![1, 2]);
    assert!(started.elapsed() < Duration::from_secs(5));

    // Nothing is published: an empty page with the same cursor once the wait ends.
    let started = Instant::now();
    let (status, page) = node
        .get(&format!("/v1/tables/{id}/changes?after={next}&wait=1"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(page, json!({"events": [], "next": next, "more": false}));
    assert!(started.elapsed() >= Duration::from_secs(1));
    let r = node
        .http
        .get(node.url(&format!("/v1/tables/{id}/changes?after={next}&wait=1")))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["icefeed-next-cursor"], next.as_str());
    assert_eq!(r.text().await.unwrap(), "");

    // A publish during the wait answers at once, for JSON and NDJSON alike.
    let started = Instant::now();
    let ndjson = node
        .http
        .get(node.url(&format!("/v1/tables/{id}/changes?after={next}&wait=60")))
        .header("accept", "application/x-ndjson")
        .send();
    let path = format!("/v1/tables/{id}/changes?after={next}&wait=60");
    let json = node.get(&path);
    let publish = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        wh.append(&t, &[orders(3..=4)]).await
    };
    let (ndjson, (_, page), _) = tokio::join!(ndjson, json, publish);
    let elapsed = started.elapsed();
    eprintln!("long poll answered {elapsed:?} after it started (publish after 300 ms)");
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    assert_eq!(ids(page["events"].as_array().unwrap()), vec![3, 4]);
    let lines: Vec<Value> = ndjson
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(&lines, page["events"].as_array().unwrap());
    node.shutdown().await;
}

#[tokio::test]
async fn after_now_starts_a_page_or_a_stream_at_the_head() {
    let RegisteredOrders {
        wh,
        table: t,
        node,
        store: _store,
        id,
    } = registered_orders(1..=3).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(ids(&events), vec![1, 2, 3]);

    // At the head: an empty page, and a cursor to go on from there.
    let (status, page) = node
        .get(&format!("/v1/tables/{id}/changes?after=now"))
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"], json!([]));
    assert_eq!(page["more"], false);
    let mut stream = SseClient::connect(
        &node,
        &format!("/v1/tables/{id}/changes/stream?after=now"),
        None,
    )
    .await;

    // What is published after it is all a reader starting there gets.
    let t = wh.append(&t, &[orders(4..=5)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (_, page) = node
        .get(&format!(
            "/v1/tables/{id}/changes?after={}",
            page["next"].as_str().unwrap()
        ))
        .await;
    assert_eq!(ids(page["events"].as_array().unwrap()), vec![4, 5]);
    let first = stream.expect(Duration::from_secs(10)).await;
    let event: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(event["after"]["id"], 4, "{event}");
    node.shutdown().await;
}

#[tokio::test]
async fn change_sets_are_listed_newest_first_with_the_cursor_that_reads_from_them() {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let t1 = wh.append(&created, &[orders(1..=2)]).await;
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    // Exported before the next commits, which then get change sets of their own.
    node.wait_for_checkpoint(&id, head(&t1)).await;
    let t2 = wh.append(&t1, &[orders(3..=3)]).await;
    let t3 = wh.append(&t2, &[orders(4..=6)]).await;
    node.wait_for_checkpoint(&id, head(&t3)).await;

    let (status, page) = node.get(&format!("/v1/tables/{id}/change-sets")).await;
    assert_eq!(status, 200, "{page}");
    let sets = page["change_sets"].as_array().unwrap();
    let summary: Vec<(Value, Value, &str, i64)> = sets
        .iter()
        .map(|c| {
            (
                c["ordinal"].clone(),
                c["snapshot_id"].clone(),
                c["kind"].as_str().unwrap(),
                c["event_count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!("3"), id_json(head(&t3)), "snapshot", 3),
            (json!("2"), id_json(head(&t2)), "snapshot", 1),
            (json!("1"), id_json(head(&t1)), "export", 2),
        ]
    );
    assert_eq!(page["next"], Value::Null, "one page holds them all");

    // A change set's position reads from its first event on.
    let position = sets[1]["position"].as_str().unwrap();
    let (_, from) = node
        .get(&format!("/v1/tables/{id}/changes?after={position}"))
        .await;
    assert_eq!(ids(from["events"].as_array().unwrap()), vec![3, 4, 5, 6]);

    // Pages of one, older ones after `next`.
    let (_, first) = node
        .get(&format!("/v1/tables/{id}/change-sets?limit=1"))
        .await;
    assert_eq!(first["change_sets"][0]["ordinal"], "3");
    let (_, second) = node
        .get(&format!(
            "/v1/tables/{id}/change-sets?limit=1&before={}",
            first["next"].as_str().unwrap()
        ))
        .await;
    assert_eq!(second["change_sets"][0]["ordinal"], "2");

    let (status, problem) = node
        .get(&format!("/v1/tables/{id}/change-sets?limit=0"))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("limit_out_of_range"))
    );
    node.shutdown().await;
}

#[tokio::test]
async fn arrow_pages_hold_up_to_ten_times_the_events_of_json_pages() {
    const ARROW: &str = "application/vnd.apache.arrow.stream";
    let RegisteredOrders {
        node,
        id,
        wh: _wh,
        table: _table,
        store: _store,
    } = registered_orders(1..=25_000).await;
    // Past `api.max_limit`: one Arrow page holds every event, in order.
    let path = format!("/v1/tables/{id}/changes?limit=25000");
    let (status, [_, _, more, count], body) = raw_page(&node, &path, ARROW).await;
    assert_eq!(
        (status, more.as_str(), count.as_str()),
        (200, "false", "25000")
    );
    assert_eq!(
        crate::wide_rows::page_ids(ARROW, &body),
        (1..=25_000).collect::<Vec<_>>()
    );
    // So does a subscription's Arrow page.
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "bulk", "tables": [id]}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    let path = "/v1/subscriptions/bulk/events?limit=25000&format=arrow";
    let (status, [_, _, _, count], body) = raw_page(&node, path, ARROW).await;
    assert_eq!((status, count.as_str()), (200, "25000"));
    assert_eq!(crate::wide_rows::page_ids(ARROW, &body).len(), 25_000);

    // JSON and NDJSON pages, and streams (their events are JSON), keep the lower bound,
    // and each refusal names the bound that applies.
    let refused = [
        (
            format!("/v1/tables/{id}/changes?limit=25000"),
            "application/json",
            10_000,
        ),
        (
            format!("/v1/tables/{id}/changes?limit=25000"),
            "application/x-ndjson",
            10_000,
        ),
        (
            format!("/v1/tables/{id}/changes/stream?limit=25000"),
            ARROW,
            10_000,
        ),
        (
            "/v1/subscriptions/bulk/events?limit=25000".to_string(),
            "application/json",
            10_000,
        ),
        (
            format!("/v1/tables/{id}/changes?limit=100001"),
            ARROW,
            100_000,
        ),
        (
            "/v1/subscriptions/bulk/events?limit=100001".to_string(),
            ARROW,
            100_000,
        ),
    ];
    for (path, accept, max) in refused {
        // The status first: an accepted stream would not end.
        let r = node.http.get(node.url(&path)).header("accept", accept);
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 400, "{path} {accept}");
        let problem: Value = r.json().await.unwrap();
        assert_eq!(problem["code"], "limit_out_of_range", "{path} {accept}");
        assert_eq!(problem["max_limit"], max, "{path} {accept}");
    }
    node.shutdown().await;
}
