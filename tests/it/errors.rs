//! Bad input gets a problem document with a stable code, and stores nothing.

use icefeed::changes::Position;
use icefeed::store::TableId;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fixtures::{RegisteredOrders, orders, orders_schema, registered_orders};
use crate::support::{Node, Warehouse, head};

async fn expect_problem(r: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(r.status().as_u16(), status, "expected {code}");
    assert_eq!(
        r.headers()["content-type"],
        "application/problem+json",
        "{code}"
    );
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["code"], code, "{problem}");
    assert_eq!(problem["status"], status);
    assert!(
        problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{problem}"
    );
    assert_eq!(problem["type"], format!("urn:icefeed:problem:{code}"));
    problem
}

#[tokio::test]
async fn registration_errors_are_problems_and_store_nothing() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    wh.append(&t, &[orders(1..=2)]).await;
    let (node, _store) = Node::start_fresh().await;
    let post = |body: Value| node.http.post(node.url("/v1/tables")).json(&body).send();

    let p = expect_problem(
        post(json!({"catalog": {"type": "glue-ish"}, "table": "a.b"}))
            .await
            .unwrap(),
        400,
        "unknown_catalog_type",
    )
    .await;
    assert_eq!(
        p["supported"],
        json!(["sql", "rest", "filesystem", "glue", "hive"])
    );
    expect_problem(
        post(json!({"catalog": {"type": "sql"}, "table": "a.b"}))
            .await
            .unwrap(),
        400,
        "invalid_catalog",
    )
    .await;
    // A PostgreSQL URL that does not parse is the caller's mistake, not an unreachable
    // catalog (found by schemathesis).
    let p = expect_problem(
        post(json!({"catalog": {"type": "sql", "uri": "postgres://\u{bf}\\B)'|", "warehouse": "w"}, "table": "a.b"}))
            .await
            .unwrap(),
        400,
        "invalid_catalog",
    )
    .await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("postgres://user@host/db"),
        "{p}"
    );
    expect_problem(
        post(json!({"catalog": {"type": "rest", "uri": "http://127.0.0.1:9"}, "table": "a.b"}))
            .await
            .unwrap(),
        502,
        "catalog_unreachable",
    )
    .await;
    expect_problem(
        post(wh.registration("shop.missing", json!({})))
            .await
            .unwrap(),
        422,
        "iceberg_table_not_found",
    )
    .await;
    expect_problem(
        post(wh.registration("orders", json!({}))).await.unwrap(),
        400,
        "invalid_table_identifier",
    )
    .await;
    let p = expect_problem(
        post(wh.registration("shop.orders", json!({"identifier_columns": ["order_no"]})))
            .await
            .unwrap(),
        422,
        "unknown_identifier_column",
    )
    .await;
    assert!(p["detail"].as_str().unwrap().contains("order_no"));
    expect_problem(
        post(wh.registration("shop.orders", json!({"start": {"snapshot_id": 42}})))
            .await
            .unwrap(),
        422,
        "unknown_snapshot",
    )
    .await;
    expect_problem(
        post(wh.registration("shop.orders", json!({"branch": "audit"})))
            .await
            .unwrap(),
        422,
        "branch_not_found",
    )
    .await;
    expect_problem(
        post(wh.registration("shop.orders", json!({"poll_interval_ms": 5})))
            .await
            .unwrap(),
        400,
        "invalid_poll_interval",
    )
    .await;
    expect_problem(
        post(wh.registration("shop.orders", json!({"tabel_typo": 1})))
            .await
            .unwrap(),
        422,
        "invalid_request_body",
    )
    .await;
    let r = node
        .http
        .post(node.url("/v1/tables"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    expect_problem(r, 400, "invalid_request_body").await;

    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(
        list["tables"],
        json!([]),
        "failed registrations store nothing"
    );

    node.register(&wh.registration("shop.orders", json!({})))
        .await;
    expect_problem(
        post(wh.registration("shop.orders", json!({})))
            .await
            .unwrap(),
        409,
        "table_already_registered",
    )
    .await;
    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(list["tables"].as_array().unwrap().len(), 1);
    node.shutdown().await;
}

#[tokio::test]
async fn read_errors_are_problems() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let t2 = wh.create("shop.other", orders_schema(), None).await;
    wh.append(&t2, &[orders(1..=2)]).await;
    let (node, _store) = Node::start_fresh().await;
    let a = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    let b = node
        .register(&wh.registration("shop.other", json!({})))
        .await;
    node.wait_for_checkpoint(&a, head(&t)).await;
    let get = |path: String| node.http.get(node.url(&path)).send();

    let (_, page) = node.get(&format!("/v1/tables/{a}/changes?limit=1")).await;
    let cursor_of_a = page["next"].as_str().unwrap().to_string();
    let p = expect_problem(
        get(format!("/v1/tables/{b}/changes?after={cursor_of_a}"))
            .await
            .unwrap(),
        400,
        "foreign_cursor",
    )
    .await;
    assert_eq!(p["cursor_table_id"], a.as_str());
    expect_problem(
        get(format!("/v1/tables/{a}/changes?after=not-a-cursor!"))
            .await
            .unwrap(),
        400,
        "malformed_cursor",
    )
    .await;
    // A cursor of a future format version (9) is unsupported; bytes that are no
    // version of ours at all are malformed.
    expect_problem(
        get(format!(
            "/v1/tables/{a}/changes?after=CQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        ))
        .await
        .unwrap(),
        400,
        "unsupported_cursor_version",
    )
    .await;
    expect_problem(
        get(format!("/v1/tables/{a}/changes?after=AAAA"))
            .await
            .unwrap(),
        400,
        "malformed_cursor",
    )
    .await;
    expect_problem(
        get(format!(
            "/v1/tables/{a}/changes?after={}",
            &cursor_of_a[..10]
        ))
        .await
        .unwrap(),
        400,
        "malformed_cursor",
    )
    .await;
    let p = expect_problem(
        get(format!("/v1/tables/{a}/changes?limit=0"))
            .await
            .unwrap(),
        400,
        "limit_out_of_range",
    )
    .await;
    assert_eq!(p["max_limit"], 10_000);
    expect_problem(
        get(format!("/v1/tables/{a}/changes?limit=10001"))
            .await
            .unwrap(),
        400,
        "limit_out_of_range",
    )
    .await;
    expect_problem(
        get(format!("/v1/tables/{a}/changes?limit=ten"))
            .await
            .unwrap(),
        400,
        "invalid_query",
    )
    .await;
    for wait in ["-1", "61"] {
        let p = expect_problem(
            get(format!("/v1/tables/{a}/changes?wait={wait}"))
                .await
                .unwrap(),
            400,
            "wait_out_of_range",
        )
        .await;
        assert_eq!(p["max_wait"], 60);
    }
    expect_problem(
        get(format!("/v1/tables/{a}/changes?wait=soon"))
            .await
            .unwrap(),
        400,
        "invalid_query",
    )
    .await;

    // A stream refuses a bad start before it starts.
    let resume = |table: &str, id: reqwest::header::HeaderValue| {
        node.http
            .get(node.url(&format!("/v1/tables/{table}/changes/stream")))
            .header("last-event-id", id)
            .send()
    };
    let p = expect_problem(
        resume(&b, cursor_of_a.parse().unwrap()).await.unwrap(),
        400,
        "foreign_cursor",
    )
    .await;
    assert_eq!(p["cursor_table_id"], a.as_str());
    expect_problem(
        resume(&a, "not-a-cursor!".parse().unwrap()).await.unwrap(),
        400,
        "malformed_cursor",
    )
    .await;
    expect_problem(
        resume(
            &a,
            reqwest::header::HeaderValue::from_bytes(b"\xffcursor").unwrap(),
        )
        .await
        .unwrap(),
        400,
        "malformed_cursor",
    )
    .await;
    expect_problem(
        get(format!(
            "/v1/tables/{a}/changes/stream?after=CQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        ))
        .await
        .unwrap(),
        400,
        "unsupported_cursor_version",
    )
    .await;
    expect_problem(
        get(format!("/v1/tables/{a}/changes/stream?limit=0"))
            .await
            .unwrap(),
        400,
        "limit_out_of_range",
    )
    .await;
    expect_problem(
        get(format!(
            "/v1/tables/{}/changes/stream",
            uuid::Uuid::new_v4()
        ))
        .await
        .unwrap(),
        404,
        "table_not_found",
    )
    .await;
    expect_problem(
        get("/v1/tables/nope/changes".into()).await.unwrap(),
        400,
        "invalid_table_id",
    )
    .await;
    expect_problem(
        get(format!("/v1/tables/{}", uuid::Uuid::new_v4()))
            .await
            .unwrap(),
        404,
        "table_not_found",
    )
    .await;
    expect_problem(
        get(format!("/v1/tables/{a}/schemas/99")).await.unwrap(),
        404,
        "schema_not_found",
    )
    .await;
    expect_problem(
        get("/v2/nothing".into()).await.unwrap(),
        404,
        "route_not_found",
    )
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn catalog_secrets_are_never_echoed() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    wh.append(&t, &[orders(1..=1)]).await;
    let (node, _store) = Node::start_fresh().await;
    let mut body = wh.registration("shop.orders", json!({}));
    body["catalog"]["properties"] =
        json!({"s3.secret-access-key": "TOPSECRET-1", "token": "TOPSECRET-2"});
    let r = node
        .http
        .post(node.url("/v1/tables"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let created = r.text().await.unwrap();
    let listed = node.get_text("/v1/tables").await;
    for text in [&created, &listed] {
        assert!(!text.contains("TOPSECRET"), "secret echoed: {text}");
        assert!(
            text.contains("********"),
            "secrets are shown masked: {text}"
        );
    }
    node.shutdown().await;
}

/// A change set whose segment was removed from the change store behind icefeed's back
/// answers a problem naming the segment, whether or not its footer was cached; once the
/// file is back, the feed reads on from where it was. (Events a node already decoded or
/// rendered are kept for a while and may still be served: a node decodes a segment in
/// windows of 32768 events, so the read after the files are gone asks for events of the
/// second window, which no page before it reached.)
#[tokio::test]
async fn missing_change_data_is_named_and_recovers_when_restored() {
    let RegisteredOrders {
        wh: _wh,
        table: t,
        node,
        store,
        id,
    } = registered_orders(1..=40_000).await;
    let files = store.path().join("tables").join(&id);
    let moved = store.path().join("moved-away");
    let page = |after: Option<&str>| {
        let mut path = format!("/v1/tables/{id}/changes?limit=10");
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        node.http.get(node.url(&path)).send()
    };
    let missing = |problem: Value| {
        let segment = problem["segment"].as_str().unwrap().to_string();
        assert!(
            segment.starts_with(&format!("tables/{id}/change-sets/"))
                && segment.contains(&format!("-{}/", head(&t))),
            "{problem}"
        );
        assert!(problem["detail"].as_str().unwrap().contains(&segment));
    };

    // Never read: the footer is fetched now.
    std::fs::rename(&files, &moved).unwrap();
    missing(expect_problem(page(None).await.unwrap(), 500, "change_data_missing").await);
    std::fs::rename(&moved, &files).unwrap();
    let r = page(None).await.unwrap();
    assert_eq!(r.status(), 200);
    let first: Value = r.json().await.unwrap();
    assert_eq!(first["events"][0]["after"]["id"], 1, "{first}");

    // Read before: the footer is cached, the data pages of the second window are not
    // there. The cursor is the one a reader of the first 32767 events would hold.
    let table = TableId(Uuid::parse_str(&id).unwrap());
    let ordinal = Position::from_cursor(first["next"].as_str().unwrap(), table)
        .unwrap()
        .ordinal;
    let later = Position {
        ordinal,
        consumed: 32_767,
    }
    .to_cursor(table);
    std::fs::rename(&files, &moved).unwrap();
    missing(
        expect_problem(
            page(Some(&later)).await.unwrap(),
            500,
            "change_data_missing",
        )
        .await,
    );
    std::fs::rename(&moved, &files).unwrap();
    let (status, second) = node
        .get(&format!("/v1/tables/{id}/changes?limit=2&after={later}"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(second["events"][0]["after"]["id"], 32_768, "{second}");
    assert_eq!(second["events"][1]["after"]["id"], 32_769, "{second}");
    node.shutdown().await;
}

/// A followed table dropped from its catalog stops in `error` with a message naming it,
/// instead of being polled in vain; a retry once it is back follows it again.
#[tokio::test]
async fn a_table_dropped_from_its_catalog_stops_the_registration() {
    use iceberg::TableIdent;
    let RegisteredOrders {
        wh,
        table,
        node,
        store: _store,
        id,
    } = registered_orders(1..=2).await;
    let ident = TableIdent::from_strs(["shop", "orders"]).unwrap();
    // Dropped from the catalog only: its files stay, as they would under a rename.
    wh.catalog.drop_table(&ident).await.unwrap();
    let view = node.wait_for_state(&id, "error").await;
    let error = view["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("iceberg_table_not_found: ") && error.contains("shop.orders"),
        "{error}"
    );
    assert_eq!(view["last_error_code"], "iceberg_table_not_found");
    assert_eq!(
        view["checkpoint"]["snapshot_id"],
        crate::support::id_json(head(&table))
    );

    let created = wh.create("shop.orders", orders_schema(), None).await;
    wh.append(&created, &[orders(3..=3)]).await;
    let (status, _) = node
        .post(&format!("/v1/tables/{id}/retry"), &json!({}))
        .await;
    assert_eq!(status, 200);
    // The new table's history does not descend from the checkpoint: named, not skipped.
    let view = node.wait_for_state(&id, "error").await;
    // Its history ends without reaching the checkpoint: a gap only re-registering bridges.
    assert_eq!(view["last_error_code"], "gap", "{view}");
    assert!(
        !view["last_error"]
            .as_str()
            .unwrap()
            .starts_with("iceberg_table_not_found"),
        "{view}"
    );
    node.shutdown().await;
}
