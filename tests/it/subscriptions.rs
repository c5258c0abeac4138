//! Subscriptions end to end: committed positions, acks, filters, projections, several
//! tables, Arrow pages read by pyarrow, and every misuse answered with a stable code.

use std::process::Command;

use arrow::compute::concat_batches;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::fixtures::{order_json, orders, orders_named, orders_schema};
use crate::support::{Node, Warehouse, head, id_json, id64};

fn ids(events: &[Value], side: &str) -> Vec<i64> {
    events
        .iter()
        .map(|e| e[side]["id"].as_i64().unwrap())
        .collect()
}

fn events(page: &Value) -> Vec<Value> {
    page["events"].as_array().unwrap().clone()
}

/// A table of orders 1..=5 whose export is published, then one copy-on-write commit
/// that updates 3, deletes 4 and inserts 6.
pub(crate) async fn orders_with_rewrite(node: &Node, wh: &Warehouse) -> (String, i64) {
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=5)]).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let rows = concat_batches(
        &orders(1..=1).schema(),
        &[orders([1, 2, 5]), orders_named([3], "x"), orders([6])],
    )
    .unwrap();
    let t = wh.overwrite_all(&t, &[rows]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    (id, head(&t))
}

async fn subscribe(node: &Node, body: Value) -> Value {
    let (status, sub) = node.post("/v1/subscriptions", &body).await;
    assert_eq!(status, 201, "{sub}");
    sub
}

#[tokio::test]
async fn pages_repeat_until_acked_and_acks_move_forward_only() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let (table, _) = orders_with_rewrite(&node, &wh).await;
    let sub = subscribe(&node, json!({"name": "orders-sync", "tables": [table]})).await;
    assert_eq!(sub["state"], "active");
    assert_eq!(sub["kind"], "pull");
    assert_eq!(
        sub["lag"]["events"], 8,
        "5 exported + update + delete + insert"
    );
    assert_eq!(sub["lag"]["snapshots"], 2);

    // By name or id; without an ack the same page comes back.
    let (_, first) = node
        .get("/v1/subscriptions/orders-sync/events?limit=3")
        .await;
    let (_, again) = node
        .get(&format!(
            "/v1/subscriptions/{}/events?limit=3",
            sub["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(first, again);
    assert_eq!(ids(&events(&first), "after"), vec![1, 2, 3]);
    assert_eq!(first["more"], true);

    // Ack the second event: the next page starts at the third.
    let second = events(&first)[1]["position"].as_str().unwrap().to_string();
    let (status, acked) = node
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": second}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["lag"]["events"], 6);
    let (_, page) = node
        .get("/v1/subscriptions/orders-sync/events?limit=100")
        .await;
    let rest = events(&page);
    assert_eq!(rest.len(), 6);
    assert_eq!(rest[0]["after"]["id"], 3);
    let ops: Vec<&str> = rest.iter().map(|e| e["op"].as_str().unwrap()).collect();
    assert_eq!(&ops[3..], ["update", "delete", "insert"]);
    assert_eq!(page["more"], false);

    // Acking the same position again is a no-op; an earlier one is refused.
    let (status, _) = node
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": second}),
        )
        .await;
    assert_eq!(status, 200);
    let earlier = first["events"][0]["position"].as_str().unwrap();
    let (status, problem) = node
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": earlier}),
        )
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("ack_backwards")),
        "{problem}"
    );

    // A position beyond anything delivered is refused, even if well-formed.
    let next = page["next"].as_str().unwrap();
    let (status, problem) = node
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": advanced(next)}),
        )
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("ack_not_delivered")),
        "{problem}"
    );

    // Ack the end: caught up, and an empty page keeps the cursor.
    let (status, done) = node
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": next}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(done["lag"]["events"], 0);
    assert_eq!(done["lag"]["snapshots"], 0);
    let (_, empty) = node.get("/v1/subscriptions/orders-sync/events").await;
    assert_eq!(empty["events"], json!([]));
    assert_eq!(empty["next"], done["committed"]);

    // Listed; paused subscriptions do not deliver; deleted ones are gone.
    let (_, list) = node.get("/v1/subscriptions").await;
    assert_eq!(list["subscriptions"][0]["name"], "orders-sync");
    let (status, paused) = node
        .patch("/v1/subscriptions/orders-sync", &json!({"paused": true}))
        .await;
    assert_eq!((status, paused["state"].as_str()), (200, Some("paused")));
    let (status, problem) = node.get("/v1/subscriptions/orders-sync/events").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("subscription_not_active"))
    );
    // A table read by a subscription cannot be removed under it.
    let (status, problem) = node.delete_with_body(&format!("/v1/tables/{table}")).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("table_in_use")),
        "{problem}"
    );
    assert_eq!(node.delete("/v1/subscriptions/orders-sync").await, 204);
    let (status, problem) = node.get("/v1/subscriptions/orders-sync").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (404, Some("subscription_not_found"))
    );
    let (status, body) = node.delete_with_body(&format!("/v1/tables/{table}")).await;
    assert_eq!(status, 204, "{body}");
}

/// The cursor with its last table's event count raised by one (the format is
/// documented in `changes::subscription_cursor`).
fn advanced(cursor: &str) -> String {
    let mut bytes = URL_SAFE_NO_PAD.decode(cursor).unwrap();
    let n = bytes.len();
    let consumed = i64::from_be_bytes(bytes[n - 8..].try_into().unwrap()) + 1;
    bytes[n - 8..].copy_from_slice(&consumed.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn filters_and_projections_apply_to_subscriptions_and_table_pages() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let (table, rewrite) = orders_with_rewrite(&node, &wh).await;

    let sub = subscribe(
        &node,
        json!({"name": "changes-only", "tables": [table], "ops": ["delete", "update"],
               "columns": ["name", "id"]}),
    )
    .await;
    assert_eq!(sub["ops"], json!(["update", "delete"]));
    let (_, page) = node.get("/v1/subscriptions/changes-only/events").await;
    let got = events(&page);
    assert_eq!(got.len(), 2, "{page}");
    assert_eq!(got[0]["op"], "update");
    assert_eq!(got[0]["key"], json!({"id": 3}));
    assert_eq!(got[0]["before"], json!({"name": "n3", "id": 3}));
    assert_eq!(got[0]["after"], json!({"name": "n3x", "id": 3}));
    assert_eq!(got[1]["op"], "delete");
    assert_eq!(got[1]["before"], json!({"name": "n4", "id": 4}));
    assert!(got.iter().all(|e| e["snapshot_id"] == id_json(rewrite)));

    // The skipped inserts are behind the page's end: acking it leaves nothing.
    let (_, acked) = node
        .post(
            "/v1/subscriptions/changes-only/ack",
            &json!({"position": page["next"]}),
        )
        .await;
    assert_eq!(acked["lag"]["events"], 0, "{acked}");

    // The same on the table feed, with a page size that cuts between the two.
    let (_, page) = node
        .get(&format!(
            "/v1/tables/{table}/changes?ops=update,delete&columns=amount&limit=1"
        ))
        .await;
    let got = events(&page);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["op"], "update");
    assert_eq!(got[0]["before"], json!({"amount": "3.05"}));
    assert_eq!(page["more"], true);
    let (_, page) = node
        .get(&format!(
            "/v1/tables/{table}/changes?ops=update,delete&columns=amount&after={}",
            page["next"].as_str().unwrap()
        ))
        .await;
    assert_eq!(events(&page).len(), 1);
    assert_eq!(events(&page)[0]["op"], "delete");
    let (_, inserts) = node
        .get(&format!("/v1/tables/{table}/changes?ops=insert"))
        .await;
    assert_eq!(ids(&events(&inserts), "after"), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(events(&inserts)[5]["after"], order_json(6));
}

#[tokio::test]
async fn one_subscription_reads_several_tables() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let a = wh.create("shop.orders", orders_schema(), None).await;
    let b = wh.create("shop.returns", orders_schema(), None).await;
    let a = wh.append(&a, &[orders(1..=2)]).await;
    let b = wh.append(&b, &[orders(10..=12)]).await;
    let ta = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    let tb = node
        .register(&wh.registration("shop.returns", json!({})))
        .await;
    node.wait_for_checkpoint(&ta, head(&a)).await;
    node.wait_for_checkpoint(&tb, head(&b)).await;

    let sub = subscribe(&node, json!({"name": "both", "tables": [ta, tb]})).await;
    assert_eq!(sub["tables"].as_array().unwrap().len(), 2);
    assert_eq!(sub["lag"]["events"], 5);
    let (_, page) = node.get("/v1/subscriptions/both/events?limit=4").await;
    assert_eq!(events(&page).len(), 4);
    let (status, _) = node
        .post(
            "/v1/subscriptions/both/ack",
            &json!({"position": page["next"]}),
        )
        .await;
    assert_eq!(status, 200);

    // New events on either table come after the committed position.
    let a = wh.append(&a, &[orders(3..=3)]).await;
    node.wait_for_checkpoint(&ta, head(&a)).await;
    let (_, page) = node.get("/v1/subscriptions/both/events").await;
    let mut got: Vec<(String, i64)> = events(&page)
        .iter()
        .map(|e| {
            (
                e["table"].as_str().unwrap().to_string(),
                e["after"]["id"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let mut all = vec![("shop.orders".to_string(), 3)];
    // The first page took four of the five exported rows; the fifth is still due.
    all.push(if got.iter().any(|(t, _)| t == "shop.returns") {
        got.iter()
            .find(|(t, _)| t == "shop.returns")
            .unwrap()
            .clone()
    } else {
        got.iter()
            .find(|(t, id)| t == "shop.orders" && *id != 3)
            .unwrap()
            .clone()
    });
    all.sort();
    assert_eq!(got, all, "{page}");
    let (_, done) = node
        .post(
            "/v1/subscriptions/both/ack",
            &json!({"position": page["next"]}),
        )
        .await;
    assert_eq!(done["lag"]["events"], 0, "{done}");
    assert!(
        done["tables"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["lag"]["events"] == 0)
    );

    // Starting at `latest` skips everything published so far.
    let late = subscribe(
        &node,
        json!({"name": "late", "tables": [ta, tb], "start": "latest"}),
    )
    .await;
    assert_eq!(late["lag"]["events"], 0);
    let b = wh.append(&b, &[orders(13..=13)]).await;
    node.wait_for_checkpoint(&tb, head(&b)).await;
    let (_, page) = node.get("/v1/subscriptions/late/events").await;
    assert_eq!(ids(&events(&page), "after"), vec![13]);
}

#[tokio::test]
async fn start_positions_by_snapshot_time_and_cursor() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let table = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    let first = head(&t);
    let t = wh.append(&t, &[orders(3..=4)]).await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    let (_, page) = node.get(&format!("/v1/tables/{table}/changes")).await;
    let third_at = events(&page)[2]["committed_at"]
        .as_str()
        .unwrap()
        .to_string();

    let after = |name: &str, start: Value| json!({"name": name, "tables": [table], "start": start});
    let by_snapshot = subscribe(&node, after("s", json!({"snapshot_id": first}))).await;
    assert_eq!(by_snapshot["lag"]["events"], 2);
    let by_time = subscribe(&node, after("t", json!({"timestamp": third_at}))).await;
    assert_eq!(by_time["lag"]["events"], 2);
    let cursor = page["events"][0]["position"].as_str().unwrap();
    let by_cursor = subscribe(&node, after("c", json!({"cursor": cursor}))).await;
    assert_eq!(by_cursor["lag"]["events"], 3);
    let (_, page) = node.get("/v1/subscriptions/c/events").await;
    assert_eq!(ids(&events(&page), "after"), vec![2, 3, 4]);
}

#[tokio::test]
async fn misuse_of_subscriptions_is_answered_with_stable_codes() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let table = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    subscribe(&node, json!({"name": "other", "tables": [table]})).await;
    let (_, other_page) = node.get("/v1/subscriptions/other/events").await;

    let cases = [
        (
            json!({"name": "", "tables": [table]}),
            400,
            "invalid_subscription_name",
        ),
        (
            json!({"name": "a b", "tables": [table]}),
            400,
            "invalid_subscription_name",
        ),
        (json!({"name": "x", "tables": []}), 400, "invalid_tables"),
        (
            json!({"name": "x", "tables": [table, table]}),
            400,
            "invalid_tables",
        ),
        (
            json!({"name": "x", "tables": ["0190a0a0-0000-7000-8000-000000000000"]}),
            404,
            "table_not_found",
        ),
        (
            json!({"name": "x", "tables": [table], "ops": ["upsert"]}),
            400,
            "unknown_operation",
        ),
        (
            json!({"name": "x", "tables": [table], "ops": []}),
            400,
            "unknown_operation",
        ),
        (
            json!({"name": "x", "tables": [table], "columns": ["tip"]}),
            400,
            "unknown_column",
        ),
        (
            json!({"name": "x", "tables": [table], "columns": ["id", "id"]}),
            400,
            "invalid_columns",
        ),
        (
            json!({"name": "x", "tables": [table], "start": {"snapshot_id": 42}}),
            422,
            "snapshot_not_published",
        ),
        (
            json!({"name": "x", "tables": [table], "start": {"cursor": "n*pe"}}),
            400,
            "malformed_cursor",
        ),
        (
            json!({"name": "x", "tables": [table], "start": "someday"}),
            422,
            "invalid_request_body",
        ),
        (
            json!({"name": "x", "tables": [table], "colour": "red"}),
            422,
            "invalid_request_body",
        ),
        (
            json!({"name": "other", "tables": [table]}),
            409,
            "subscription_exists",
        ),
    ];
    for (body, status, code) in cases {
        let (got, problem) = node.post("/v1/subscriptions", &body).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{body} → {problem}"
        );
        assert!(!problem["detail"].as_str().unwrap().is_empty());
    }
    let (_, list) = node.get("/v1/subscriptions").await;
    assert_eq!(
        list["subscriptions"].as_array().unwrap().len(),
        1,
        "nothing half-created"
    );

    let sub = subscribe(&node, json!({"name": "mine", "tables": [table]})).await;
    let foreign = other_page["next"].as_str().unwrap();
    let table_cursor = Value::from(
        node.get(&format!("/v1/tables/{table}/changes")).await.1["next"]
            .as_str()
            .unwrap(),
    );
    let acks = [
        (json!({"position": foreign}), 400, "foreign_cursor"),
        (json!({"position": table_cursor}), 400, "malformed_cursor"),
        (json!({"position": "%%%"}), 400, "malformed_cursor"),
        (json!({}), 422, "invalid_request_body"),
    ];
    for (body, status, code) in acks {
        let (got, problem) = node.post("/v1/subscriptions/mine/ack", &body).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{body} → {problem}"
        );
    }
    for (path, status, code) in [
        (
            "/v1/subscriptions/mine/events?limit=0",
            400,
            "limit_out_of_range",
        ),
        (
            "/v1/subscriptions/mine/events?after=abc",
            400,
            "malformed_cursor",
        ),
        (
            "/v1/subscriptions/mine/events?format=xml",
            400,
            "invalid_query",
        ),
        (
            "/v1/subscriptions/nobody/events",
            404,
            "subscription_not_found",
        ),
        (
            &format!("/v1/tables/{table}/changes?ops=merge"),
            400,
            "unknown_operation",
        ),
        (
            &format!("/v1/tables/{table}/changes?columns=id,tip"),
            400,
            "unknown_column",
        ),
    ] {
        let (got, problem) = node.get(path).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{path} → {problem}"
        );
    }
    let (_, unchanged) = node.get("/v1/subscriptions/mine").await;
    assert_eq!(
        unchanged["committed"], sub["committed"],
        "failed acks change nothing"
    );
}

/// pyarrow reads an Arrow page; its rows are the JSON page's rows, images flattened
/// into Spark's changelog rows.
#[tokio::test]
async fn pyarrow_reads_arrow_pages_equal_to_json_pages() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let (table, _) = orders_with_rewrite(&node, &wh).await;
    for query in ["", "&columns=id,amount&ops=update,delete"] {
        let (_, json_page) = node
            .get(&format!("/v1/tables/{table}/changes?limit=100{query}"))
            .await;
        let response = node
            .http
            .get(node.url(&format!("/v1/tables/{table}/changes?limit=100{query}")))
            .header("accept", "application/vnd.apache.arrow.stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "application/vnd.apache.arrow.stream"
        );
        assert_eq!(
            response.headers()["icefeed-next-cursor"],
            json_page["next"].as_str().unwrap()
        );
        let bytes = response.bytes().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("page.arrows");
        std::fs::write(&path, &bytes).unwrap();
        let out = Command::new(crate::pyiceberg::python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/read_arrow_page.py"
            ))
            .arg(&path)
            .output()
            .expect("run python (set ICEFEED_TEST_PYTHON, see scripts/python-env.sh)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();

        let mut expected = Vec::new();
        for e in events(&json_page) {
            let mut row = |image: &str, change: &str| {
                let mut row = e[image].clone();
                row["_change_type"] = change.into();
                row["_commit_snapshot_id"] = id64(&e["snapshot_id"]).into();
                let lineage = &e["lineage"][image];
                for (column, member) in [
                    ("_row_id", "row_id"),
                    (
                        "_last_updated_sequence_number",
                        "last_updated_sequence_number",
                    ),
                ] {
                    row[column] = id64(&lineage[member]).map_or(Value::Null, Value::from);
                }
                row["_anomaly"] = e.get("anomaly").cloned().unwrap_or(Value::Null);
                expected.push(row);
            };
            match e["op"].as_str().unwrap() {
                "insert" => row("after", "INSERT"),
                "delete" => row("before", "DELETE"),
                _ => {
                    row("before", "UPDATE_BEFORE");
                    row("after", "UPDATE_AFTER");
                }
            }
        }
        assert!(!expected.is_empty());
        let ordinals: Vec<i64> = rows
            .iter()
            .map(|r| r["_change_ordinal"].as_i64().unwrap())
            .collect();
        assert!(ordinals.windows(2).all(|w| w[0] <= w[1]) && ordinals[0] >= 1);
        let rows: Vec<Value> = rows
            .into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("_change_ordinal");
                r
            })
            .collect();
        assert_eq!(rows, expected, "query {query:?}");
    }
}

fn op_and_id(event: &Value) -> (String, i64) {
    let id = event["after"]["id"]
        .as_i64()
        .or(event["before"]["id"].as_i64());
    (event["op"].as_str().unwrap().to_string(), id.unwrap())
}

/// A subscription's stream starts after the committed position, resumes after
/// `Last-Event-ID` exactly once, follows new change sets, and its ids can be acked.
#[tokio::test]
async fn subscription_streams_resume_and_their_ids_are_acknowledged() {
    use crate::stream::SseClient;
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let (table, _) = orders_with_rewrite(&node, &wh).await;
    subscribe(
        &node,
        json!({"name": "live", "tables": [table], "ops": ["insert", "delete"]}),
    )
    .await;
    let (_, first) = node.get("/v1/subscriptions/live/events?limit=2").await;
    let (status, _) = node
        .post(
            "/v1/subscriptions/live/ack",
            &json!({"position": first["next"]}),
        )
        .await;
    assert_eq!(status, 200);

    let within = std::time::Duration::from_secs(20);
    let mut client = SseClient::connect(&node, "/v1/subscriptions/live/stream?limit=2", None).await;
    let mut seen = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let event = client.expect(within).await;
        seen.push(op_and_id(&event.change()));
        last = event.id;
    }
    drop(client);
    // Resume: the rest, then a change set published while streaming.
    let mut client =
        SseClient::connect(&node, "/v1/subscriptions/live/stream", last.as_deref()).await;
    for _ in 0..2 {
        let event = client.expect(within).await.change();
        seen.push(op_and_id(&event));
    }
    let t = wh
        .append(
            &wh.catalog
                .load_table(&iceberg::TableIdent::from_strs(["shop", "orders"]).unwrap())
                .await
                .unwrap(),
            &[orders(7..=7)],
        )
        .await;
    let live = client.expect(within).await;
    let change = live.change();
    assert_eq!(change["after"]["id"], 7);
    assert_eq!(change["snapshot_id"], id_json(head(&t)));
    let expected: Vec<(String, i64)> = [
        ("insert", 3),
        ("insert", 4),
        ("insert", 5),
        ("delete", 4),
        ("insert", 6),
    ]
    .into_iter()
    .map(|(op, id)| (op.to_string(), id))
    .collect();
    assert_eq!(seen, expected, "the update was filtered out; nothing twice");

    // The stream's ids are subscription cursors the subscription accepts as acks.
    let (status, acked) = node
        .post("/v1/subscriptions/live/ack", &json!({"position": live.id}))
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["lag"]["events"], 0);
}

/// `wait` turns a subscription pull into a long poll that answers on publish.
#[tokio::test]
async fn subscription_long_polls_answer_when_events_arrive() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=1)]).await;
    let table = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    subscribe(
        &node,
        json!({"name": "poll", "tables": [table], "start": "latest"}),
    )
    .await;

    let started = std::time::Instant::now();
    let (_, empty) = node.get("/v1/subscriptions/poll/events?wait=1").await;
    assert_eq!(empty["events"], json!([]));
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));

    let waiting = {
        let node = Node::remote(node.base.clone());
        tokio::spawn(async move { node.get("/v1/subscriptions/poll/events?wait=30").await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let t = wh.append(&t, &[orders(2..=2)]).await;
    node.wait_for_checkpoint(&table, head(&t)).await;
    let (status, page) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(ids(&events(&page), "after"), vec![2]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let (status, problem) = node.get("/v1/subscriptions/poll/events?wait=3600").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("wait_out_of_range"))
    );
}

/// The value of `name` for the subscription with id `sub` in a scrape, if reported.
fn subscription_gauge(metrics: &str, name: &str, sub: &str) -> Option<f64> {
    let label = format!("subscription_id=\"{sub}\"");
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (labels, value) = rest.split_once("} ")?;
        labels
            .split(',')
            .any(|l| l == label)
            .then(|| value.trim().parse().ok())?
    })
}

#[tokio::test]
async fn pull_subscriptions_report_their_lag_as_gauges() {
    let crate::fixtures::RegisteredOrders {
        node,
        id,
        store: _store,
        ..
    } = crate::fixtures::registered_orders(1..=3).await;
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "lagging", "tables": [id]}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    let sub_id = sub["id"].as_str().unwrap().to_string();
    let gauge = |wanted: f64| {
        let (node, sub_id) = (&node, &sub_id);
        async move {
            crate::support::wait_until(std::time::Duration::from_secs(10), || async move {
                let metrics = node.get_text("/metrics").await;
                let events =
                    subscription_gauge(&metrics, "icefeed_subscription_lag_events", sub_id);
                (events == Some(wanted)
                    && metrics.contains(r#"subscription="lagging""#)
                    && subscription_gauge(&metrics, "icefeed_subscription_lag_seconds", sub_id)
                        .is_some())
                .then_some(())
            })
            .await
        }
    };
    gauge(3.0).await;
    let (status, page) = node.get("/v1/subscriptions/lagging/events").await;
    assert_eq!(status, 200, "{page}");
    let (status, acked) = node
        .post(
            "/v1/subscriptions/lagging/ack",
            &json!({"position": page["next"]}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    gauge(0.0).await;
    node.shutdown().await;
}
