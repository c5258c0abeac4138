//! No input, however hostile, answers 5xx or changes anything: text PostgreSQL cannot
//! store (NUL), numbers `jsonb` cannot hold, bodies that are not the documented objects,
//! wrong media types, oversized bodies, numbers out of range and cursors beyond the feed
//! all answer 4xx problems with stable codes, and leave every table and subscription as
//! it was.

use std::time::{Duration, Instant};

use icefeed::changes::{Position, subscription_cursor};
use icefeed::store::TableId;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings, wait_until};

/// 100 years in milliseconds: the longest duration a request may give.
const MAX_DURATION_MS: i64 = 36_525 * 86_400_000;

/// A node with a fast janitor, `shop.orders` (ids 1..=3, one change set of 3 events)
/// registered on it with the given registration fields, and a pull subscription
/// `reader` of it unless `subscribe` is false.
struct Setup {
    wh: Warehouse,
    table: iceberg::table::Table,
    node: Node,
    _store: tempfile::TempDir,
    id: String,
}

async fn setup(extra: Value, subscribe: bool) -> Setup {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.retention.interval = Duration::from_millis(100);
    settings.retention.grace = Duration::ZERO;
    let node = Node::start(settings).await;
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&t, &[orders(1..=3)]).await;
    let id = node.register(&wh.registration("shop.orders", extra)).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    if subscribe {
        let (status, sub) = node
            .post(
                "/v1/subscriptions",
                &json!({"name": "reader", "tables": [id]}),
            )
            .await;
        assert_eq!(status, 201, "{sub}");
    }
    Setup {
        wh,
        table,
        node,
        _store: store,
        id,
    }
}

/// Asserts a problem document with `status` and `code`, and returns it.
async fn expect_problem(r: reqwest::Response, status: u16, code: &str) -> Value {
    let got = r.status().as_u16();
    let media = r.headers().get("content-type").cloned();
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "expected {status} {code}, got {got}: {text}");
    assert_eq!(
        media.as_ref().and_then(|m| m.to_str().ok()),
        Some("application/problem+json"),
        "{text}"
    );
    let problem: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(problem["code"], code, "{problem}");
    assert_eq!(problem["status"], status, "{problem}");
    assert_eq!(problem["type"], format!("urn:icefeed:problem:{code}"));
    assert!(
        problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{problem}"
    );
    problem
}

/// Sends `body` as it is, with `content_type` (none when `None`).
async fn send(
    node: &Node,
    method: reqwest::Method,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = node.http.request(method, node.url(path)).body(body);
    if let Some(media) = content_type {
        request = request.header("content-type", media);
    }
    request.send().await.unwrap()
}

async fn send_json(
    node: &Node,
    method: reqwest::Method,
    path: &str,
    body: &str,
) -> reqwest::Response {
    send(
        node,
        method,
        path,
        Some("application/json"),
        body.to_string(),
    )
    .await
}

/// What a refused request must not change: every table's and subscription's settings,
/// state and position.
async fn fingerprint(node: &Node) -> Value {
    let (status, tables) = node.get("/v1/tables").await;
    assert_eq!(status, 200, "{tables}");
    let (status, subscriptions) = node.get("/v1/subscriptions").await;
    assert_eq!(status, 200, "{subscriptions}");
    let tables: Vec<Value> = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            json!({"id": t["id"], "table": t["table"], "state": t["state"],
                   "catalog": t["catalog"], "poll_interval_ms": t["poll_interval_ms"],
                   "retention": t["retention"], "change_sets": t["change_sets"]})
        })
        .collect();
    let subscriptions: Vec<Value> = subscriptions["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            // A push subscription's worker moves it between running and backing off.
            let state = match s["kind"].as_str() {
                Some("pull") => s["state"].clone(),
                _ => Value::Null,
            };
            json!({"id": s["id"], "name": s["name"], "state": state,
                   "committed": s["committed"], "start": s["start"], "target": s["target"]})
        })
        .collect();
    json!({"tables": tables, "subscriptions": subscriptions})
}

#[tokio::test]
async fn nul_in_paths_and_queries_is_invalid_text() {
    let Setup {
        node,
        id,
        wh: _wh,
        table: _table,
        _store,
    } = setup(json!({}), true).await;
    let before = fingerprint(&node).await;
    let get = reqwest::Method::GET;
    let path_cases = [
        (get.clone(), "/v1/subscriptions/%00".to_string(), "id"),
        (
            get.clone(),
            "/v1/subscriptions/reader%00/events".into(),
            "id",
        ),
        (get.clone(), "/v1/subscriptions/%00x/stream".into(), "id"),
        (
            reqwest::Method::DELETE,
            "/v1/subscriptions/reader%00".into(),
            "id",
        ),
        (get.clone(), "/v1/tables/%00".into(), "id"),
        (get.clone(), "/v1/tables/%00/changes".into(), "id"),
        (reqwest::Method::DELETE, "/v1/tables/%00".into(), "id"),
        (
            get.clone(),
            format!("/v1/tables/{id}/schemas/0%00"),
            "schema_id",
        ),
    ];
    for (method, path, param) in path_cases {
        let p = expect_problem(
            send(&node, method, &path, None, "").await,
            400,
            "invalid_text",
        )
        .await;
        assert_eq!(
            p["field"],
            format!("path parameter {param:?}"),
            "{path}: {p}"
        );
    }
    let query_cases = [
        (format!("/v1/tables/{id}/changes?columns=id%00"), "columns"),
        (format!("/v1/tables/{id}/changes?after=%00"), "after"),
        (format!("/v1/tables/{id}/changes?ops=insert&x%00=1"), "x\0"),
        (format!("/v1/tables/{id}/changes/stream?ops=%00"), "ops"),
        ("/v1/subscriptions/reader/events?after=a%00".into(), "after"),
        ("/v1/subscriptions/reader/stream?after=%00".into(), "after"),
    ];
    for (path, param) in query_cases {
        let p = expect_problem(
            send(&node, get.clone(), &path, None, "").await,
            400,
            "invalid_text",
        )
        .await;
        assert_eq!(
            p["field"],
            format!("query parameter {param:?}"),
            "{path}: {p}"
        );
    }
    // A PATCH whose path holds NUL is refused before its body is looked at.
    let r = send_json(
        &node,
        reqwest::Method::PATCH,
        "/v1/subscriptions/reader%00",
        r#"{"paused": true}"#,
    )
    .await;
    expect_problem(r, 400, "invalid_text").await;
    assert_eq!(fingerprint(&node).await, before, "nothing changed");
    let (status, page) = node.get("/v1/subscriptions/reader/events").await;
    assert_eq!(status, 200, "the node serves on: {page}");
    node.shutdown().await;
}

#[tokio::test]
async fn nul_in_json_bodies_is_invalid_text_and_stores_nothing() {
    let Setup {
        wh,
        node,
        id,
        table: _table,
        _store,
    } = setup(json!({}), true).await;
    let before = fingerprint(&node).await;
    let post = reqwest::Method::POST;
    let patch = reqwest::Method::PATCH;
    let with_catalog = |properties: Value| {
        let mut catalog = wh.catalog_json();
        catalog["properties"] = properties;
        catalog
    };
    let mut registration = wh.registration("shop.orders", json!({"branch": "main"}));
    registration["catalog"] = with_catalog(json!({"note": "a\u{0}b"}));
    let mut nul_key = wh.registration("shop.orders", json!({}));
    nul_key["catalog"] = with_catalog(json!({"k\u{0}": "v"}));
    let cases: Vec<(reqwest::Method, String, Value, &str)> = vec![
        (
            post.clone(),
            "/v1/subscriptions".into(),
            json!({"name": "evil\u{0}", "tables": [id]}),
            "name",
        ),
        (
            post.clone(),
            "/v1/subscriptions".into(),
            json!({"name": "cols", "tables": [id], "columns": ["id", "na\u{0}me"]}),
            "columns[1]",
        ),
        (
            post.clone(),
            "/v1/tables".into(),
            wh.registration("shop.orders\u{0}", json!({})),
            "table",
        ),
        (
            post.clone(),
            "/v1/tables".into(),
            registration,
            "catalog.properties.note",
        ),
        (
            post.clone(),
            "/v1/tables".into(),
            nul_key,
            "the key catalog.properties[\"k\\0\"]",
        ),
        (
            patch.clone(),
            format!("/v1/tables/{id}"),
            json!({"catalog": with_catalog(json!({"s3.region": "\u{0}"}))}),
            "catalog.properties[\"s3.region\"]",
        ),
        (
            post.clone(),
            "/v1/subscriptions".into(),
            json!({"name": "push", "tables": [id], "kind": "opensearch",
                   "target": {"endpoints": ["http://127.0.0.1:9"], "index": "orders",
                              "mappings": {"properties": {"a\u{0}": {"type": "keyword"}}}}}),
            "the key target.mappings.properties[\"a\\0\"]",
        ),
        (
            post.clone(),
            "/v1/subscriptions/reader/ack".into(),
            json!({"position": "\u{0}"}),
            "position",
        ),
        (
            post.clone(),
            "/v1/subscriptions/reader/rewind".into(),
            json!({"position": "x\u{0}"}),
            "position",
        ),
    ];
    for (method, path, body, field) in cases {
        let r = send_json(&node, method, &path, &body.to_string()).await;
        let p = expect_problem(r, 400, "invalid_text").await;
        assert_eq!(p["field"], field, "{path} {body}: {p}");
    }
    assert_eq!(
        fingerprint(&node).await,
        before,
        "nothing stored or changed"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn numbers_jsonb_cannot_hold_are_invalid_number() {
    let Setup {
        wh,
        node,
        id,
        table: _table,
        _store,
    } = setup(json!({}), false).await;
    let before = fingerprint(&node).await;
    let target = |number: &str| {
        format!(
            r#"{{"name": "push", "tables": ["{id}"], "kind": "opensearch",
                "target": {{"endpoints": ["http://127.0.0.1:9"], "index": "orders",
                            "mappings": {{"properties": {{"amount": {{"type": "scaled_float",
                                          "scaling_factor": {number}}}}}}}}}}}"#
        )
    };
    let long = format!("1.{}", "0".repeat(20_000));
    for number in [
        "1e999999",
        "-1e400",
        "1e-999999",
        "0e-999999",
        long.as_str(),
    ] {
        let r = send_json(
            &node,
            reqwest::Method::POST,
            "/v1/subscriptions",
            &target(number),
        )
        .await;
        let p = expect_problem(r, 400, "invalid_number").await;
        assert_eq!(
            p["field"], "target.mappings.properties.amount.scaling_factor",
            "{p}"
        );
    }
    // Where the catalog settings are stored as they are given.
    let mut body = wh.registration("shop.orders", json!({}));
    body["catalog"]["properties"] = json!({"x": "PLACEHOLDER"});
    let text = body.to_string().replace("\"PLACEHOLDER\"", "1e-20000");
    let r = send_json(&node, reqwest::Method::POST, "/v1/tables", &text).await;
    let p = expect_problem(r, 400, "invalid_number").await;
    assert_eq!(p["field"], "catalog.properties.x");
    assert_eq!(fingerprint(&node).await, before, "nothing stored");
    // Numbers a double holds are fine.
    let r = send_json(
        &node,
        reqwest::Method::POST,
        "/v1/subscriptions",
        &target("1e300"),
    )
    .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    node.shutdown().await;
}

#[tokio::test]
async fn bodies_that_are_not_objects_change_nothing() {
    let Setup {
        node,
        id,
        wh: _wh,
        table: _table,
        _store,
    } = setup(json!({"retention": {"max_change_sets": 100}}), true).await;
    let before = fingerprint(&node).await;
    let patch = reqwest::Method::PATCH;
    let post = reqwest::Method::POST;
    let table = format!("/v1/tables/{id}");
    let mut cases: Vec<(reqwest::Method, String, String, Option<&str>)> = Vec::new();
    // `[true]` used to pause the table: serde reads a sequence as a struct's fields.
    for body in [
        "[true]",
        "[]",
        "true",
        "null",
        "\"paused\"",
        "1",
        "[true, 100]",
    ] {
        cases.push((patch.clone(), table.clone(), body.into(), None));
        cases.push((
            patch.clone(),
            "/v1/subscriptions/reader".into(),
            body.into(),
            None,
        ));
        cases.push((post.clone(), "/v1/subscriptions".into(), body.into(), None));
        cases.push((post.clone(), "/v1/tables".into(), body.into(), None));
        cases.push((
            post.clone(),
            "/v1/subscriptions/reader/ack".into(),
            body.into(),
            None,
        ));
        cases.push((
            post.clone(),
            "/v1/subscriptions/reader/rewind".into(),
            body.into(),
            None,
        ));
    }
    // Nested structs are objects too: `[1]` would have set max_age_ms to 1 ms.
    cases.push((
        patch.clone(),
        table.clone(),
        r#"{"retention": [1]}"#.into(),
        Some("retention"),
    ));
    cases.push((
        patch.clone(),
        table.clone(),
        r#"{"retention": {"max_age_ms": "1"}}"#.into(),
        Some("retention.max_age_ms"),
    ));
    cases.push((
        post.clone(),
        "/v1/subscriptions".into(),
        format!(
            r#"{{"name": "push", "tables": ["{id}"], "kind": "opensearch",
                 "target": {{"endpoints": ["http://127.0.0.1:9"], "index": "o", "batch": [1, 1024]}}}}"#
        ),
        Some("target.batch"),
    ));
    cases.push((
        post.clone(),
        "/v1/subscriptions".into(),
        format!(r#"{{"name": "x", "tables": ["{id}"], "ops": "insert"}}"#),
        Some("ops"),
    ));
    for (method, path, body, field) in cases {
        let r = send_json(&node, method.clone(), &path, &body).await;
        let p = expect_problem(r, 422, "invalid_request_body").await;
        if let Some(field) = field {
            assert_eq!(p["field"], field, "{method} {path} {body}: {p}");
        }
    }
    // Not JSON at all.
    for body in ["", "{", "{\"paused\": tru}", "\u{feff}{}"] {
        let r = send_json(&node, patch.clone(), &table, body).await;
        expect_problem(r, 400, "invalid_request_body").await;
    }
    let after = fingerprint(&node).await;
    assert_eq!(after, before, "nothing changed");
    assert_eq!(
        after["tables"][0]["state"], "active",
        "the table is not paused"
    );
    assert_eq!(after["subscriptions"][0]["state"], "active");
    // The documented objects still work.
    let (status, t) = node.patch(&table, &json!({"paused": true})).await;
    assert_eq!((status, t["state"].as_str()), (200, Some("paused")), "{t}");
    node.shutdown().await;
}

#[tokio::test]
async fn wrong_media_types_and_oversized_bodies_are_refused() {
    let Setup {
        node,
        id,
        wh: _wh,
        table: _table,
        _store,
    } = setup(json!({}), true).await;
    let before = fingerprint(&node).await;
    let table = format!("/v1/tables/{id}");
    let paused = r#"{"paused": true}"#;
    for media in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        Some("json"),
    ] {
        for path in [table.as_str(), "/v1/subscriptions/reader"] {
            let r = send(&node, reqwest::Method::PATCH, path, media, paused).await;
            expect_problem(r, 415, "unsupported_media_type").await;
        }
    }
    // Over the default limit of 1 MiB: refused whole, even when the start is valid.
    let padding = "x".repeat(1 << 20);
    let big = format!(r#"{{"paused": true, "pad": "{padding}"}}"#);
    let r = send_json(&node, reqwest::Method::PATCH, &table, &big).await;
    let p = expect_problem(r, 413, "request_body_too_large").await;
    assert_eq!(p["max_bytes"], 1 << 20);
    let big = format!(r#"{{"name": "big", "tables": ["{id}"], "columns": ["{padding}"]}}"#);
    let r = send_json(&node, reqwest::Method::POST, "/v1/subscriptions", &big).await;
    expect_problem(r, 413, "request_body_too_large").await;
    assert_eq!(fingerprint(&node).await, before, "nothing changed");
    // Media types with parameters and `+json` are JSON.
    let r = send(
        &node,
        reqwest::Method::PATCH,
        &table,
        Some("application/merge-patch+json"),
        paused,
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = send(
        &node,
        reqwest::Method::PATCH,
        &table,
        Some("Application/JSON; charset=utf-8"),
        r#"{"paused": false}"#,
    )
    .await;
    assert_eq!(r.status(), 200);
    node.shutdown().await;

    // The limit is `api.max_body_bytes`.
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.api.max_body_bytes = 4096;
    let node = Node::start(settings).await;
    let body = json!({"name": "n", "tables": [Uuid::new_v4()], "columns": ["c".repeat(5000)]});
    let r = send_json(
        &node,
        reqwest::Method::POST,
        "/v1/subscriptions",
        &body.to_string(),
    )
    .await;
    let p = expect_problem(r, 413, "request_body_too_large").await;
    assert_eq!(p["max_bytes"], 4096);
    let body = json!({"name": "n", "tables": [Uuid::new_v4()]});
    let r = send_json(
        &node,
        reqwest::Method::POST,
        "/v1/subscriptions",
        &body.to_string(),
    )
    .await;
    expect_problem(r, 404, "table_not_found").await;
    node.shutdown().await;
}

#[tokio::test]
async fn numeric_fields_are_range_checked() {
    let Setup {
        wh,
        mut table,
        node,
        id,
        _store,
    } = setup(json!({}), true).await;
    let before = fingerprint(&node).await;
    let path = format!("/v1/tables/{id}");
    let max = i64::MAX;
    let cases = [
        (
            json!({"retention": {"max_age_ms": max}}),
            "invalid_retention",
            "retention.max_age_ms",
            1,
            json!(MAX_DURATION_MS),
        ),
        (
            json!({"retention": {"hard_max_age_ms": MAX_DURATION_MS + 1}}),
            "invalid_retention",
            "retention.hard_max_age_ms",
            1,
            json!(MAX_DURATION_MS),
        ),
        (
            json!({"retention": {"max_age_ms": 0}}),
            "invalid_retention",
            "retention.max_age_ms",
            1,
            json!(MAX_DURATION_MS),
        ),
        (
            json!({"retention": {"max_change_sets": 1i64 << 53}}),
            "invalid_retention",
            "retention.max_change_sets",
            1,
            json!((1i64 << 53) - 1),
        ),
        (
            json!({"retention": {"max_change_sets": -1}}),
            "invalid_retention",
            "retention.max_change_sets",
            1,
            json!((1i64 << 53) - 1),
        ),
        (
            json!({"poll_interval_ms": u64::MAX}),
            "invalid_poll_interval",
            "poll_interval_ms",
            100,
            json!(86_400_000),
        ),
        (
            json!({"poll_interval_ms": 99}),
            "invalid_poll_interval",
            "poll_interval_ms",
            100,
            json!(86_400_000),
        ),
        // The whole PATCH is refused: the valid part does not apply either.
        (
            json!({"paused": true, "retention": {"max_age_ms": max}}),
            "invalid_retention",
            "retention.max_age_ms",
            1,
            json!(MAX_DURATION_MS),
        ),
    ];
    for (body, code, field, minimum, maximum) in cases {
        let (status, p) = node.patch(&path, &body).await;
        assert_eq!(
            (status, p["code"].as_str()),
            (400, Some(code)),
            "{body}: {p}"
        );
        assert_eq!(p["field"], field, "{p}");
        assert_eq!(p["minimum"], minimum, "{p}");
        assert_eq!(p["maximum"], maximum, "{p}");
    }
    // Registration checks the same, before it reaches the catalog.
    for extra in [
        json!({"retention": {"max_age_ms": max}}),
        json!({"poll_interval_ms": u64::MAX}),
        json!({"start": {"timestamp": "-5000-01-01T00:00:00Z"}}),
    ] {
        let (status, p) = node
            .post("/v1/tables", &wh.registration("shop.other", extra.clone()))
            .await;
        assert_eq!(status, 400, "{extra}: {p}");
        assert!(p["field"].is_string(), "{p}");
    }
    // Page sizes and waits.
    let get = |path: String| {
        let node = &node;
        async move { node.http.get(node.url(&path)).send().await.unwrap() }
    };
    for (query, code, field) in [
        ("limit=0", "limit_out_of_range", "limit"),
        ("limit=10001", "limit_out_of_range", "limit"),
        ("wait=9223372036854775807", "wait_out_of_range", "wait"),
        ("wait=-9223372036854775808", "wait_out_of_range", "wait"),
    ] {
        for path in [
            format!("/v1/tables/{id}/changes?{query}"),
            format!("/v1/subscriptions/reader/events?{query}"),
        ] {
            let p = expect_problem(get(path.clone()).await, 400, code).await;
            assert_eq!(p["field"], field, "{path}: {p}");
            assert!(p["maximum"].is_number(), "{p}");
        }
    }
    for query in [
        "limit=4294967296",
        "limit=-1",
        "wait=9223372036854775808",
        "wait=1e3",
    ] {
        expect_problem(
            get(format!("/v1/tables/{id}/changes?{query}")).await,
            400,
            "invalid_query",
        )
        .await;
    }
    expect_problem(
        get(format!("/v1/tables/{id}/changes/stream?limit=0")).await,
        400,
        "limit_out_of_range",
    )
    .await;
    expect_problem(
        get("/v1/subscriptions/reader/stream?limit=10001".into()).await,
        400,
        "limit_out_of_range",
    )
    .await;
    // Timestamps PostgreSQL cannot hold (it refuses years before 4713 BC).
    for (body, field) in [
        (
            json!({"name": "early", "tables": [id], "start": {"timestamp": "-5000-01-01T00:00:00Z"}}),
            "start.timestamp",
        ),
        (
            json!({"name": "late", "tables": [id], "start": {"timestamp": "+200000-01-01T00:00:00Z"}}),
            "start.timestamp",
        ),
    ] {
        let (status, p) = node.post("/v1/subscriptions", &body).await;
        assert_eq!(
            (status, p["code"].as_str()),
            (400, Some("timestamp_out_of_range")),
            "{p}"
        );
        assert_eq!(p["field"], field);
    }
    let (status, p) = node
        .post(
            "/v1/subscriptions/reader/rewind",
            &json!({"timestamp": "-5000-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        (status, p["code"].as_str()),
        (400, Some("timestamp_out_of_range")),
        "{p}"
    );
    assert_eq!(p["field"], "timestamp");
    assert_eq!(fingerprint(&node).await, before, "nothing changed");

    // The largest age is accepted, and the janitor prunes with it (an age PostgreSQL's
    // intervals could not hold failed every pass, for every table).
    let (status, t) = node
        .patch(&path, &json!({"retention": {"max_age_ms": MAX_DURATION_MS, "hard_max_age_ms": MAX_DURATION_MS}}))
        .await;
    assert_eq!(status, 200, "{t}");
    let (status, t) = node
        .patch(
            &path,
            &json!({"retention": {"max_age_ms": MAX_DURATION_MS, "max_change_sets": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{t}");
    node.delete("/v1/subscriptions/reader").await;
    table = wh.append(&table, &[orders(4..=4)]).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    wait_until(Duration::from_secs(20), || async {
        let (_, t) = node.get(&path).await;
        (t["pruned_through"] == 1).then_some(())
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn push_limits_are_range_checked() {
    let Setup {
        node,
        id,
        wh: _wh,
        table: _table,
        _store,
    } = setup(json!({}), false).await;
    let target = |batch: Value| {
        json!({"name": "push", "tables": [id], "kind": "opensearch",
               "target": {"endpoints": ["http://127.0.0.1:9"], "index": "orders", "batch": batch}})
    };
    for (batch, field) in [
        (json!({"max_documents": 0}), "target.batch.max_documents"),
        (
            json!({"max_documents": 1_000_000_000_000u64}),
            "target.batch.max_documents",
        ),
        (json!({"max_bytes": 1u64 << 40}), "target.batch.max_bytes"),
        (json!({"max_bytes": 10}), "target.batch.max_bytes"),
    ] {
        let (status, p) = node.post("/v1/subscriptions", &target(batch.clone())).await;
        assert_eq!(
            (status, p["code"].as_str()),
            (400, Some("invalid_target")),
            "{batch}: {p}"
        );
        assert_eq!(p["field"], field);
    }
    let (status, p) = node
        .post("/v1/subscriptions", &target(json!({"max_documents": -1})))
        .await;
    assert_eq!(
        (status, p["code"].as_str()),
        (422, Some("invalid_request_body")),
        "{p}"
    );
    let (_, list) = node.get("/v1/subscriptions").await;
    assert_eq!(list["subscriptions"], json!([]), "nothing created");

    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &target(json!({"max_documents": 100_000})),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    let get = |path: &str| node.http.get(node.url(path)).send();
    for query in ["limit=0", "limit=1001"] {
        let p = expect_problem(
            get(&format!("/v1/subscriptions/push/dead-letters?{query}"))
                .await
                .unwrap(),
            400,
            "limit_out_of_range",
        )
        .await;
        assert_eq!(
            (
                p["field"].as_str(),
                p["minimum"].as_i64(),
                p["maximum"].as_i64()
            ),
            (Some("limit"), Some(1), Some(1000))
        );
    }
    expect_problem(
        get("/v1/subscriptions/push/dead-letters?after=99999999999999999999")
            .await
            .unwrap(),
        400,
        "invalid_query",
    )
    .await;
    for (body, field) in [
        (json!({"limit": 5000}), "limit"),
        (json!({"limit": 0}), "limit"),
        (json!({"ids": (1..=1001).collect::<Vec<i64>>()}), "ids"),
    ] {
        let (status, p) = node
            .post("/v1/subscriptions/push/dead-letters/redrive", &body)
            .await;
        assert_eq!(
            (status, p["code"].as_str()),
            (400, Some("limit_out_of_range")),
            "{p}"
        );
        assert_eq!(p["field"], field);
    }
    node.shutdown().await;
}

/// A forged subscription cursor standing at `positions`.
fn sub_cursor(sub: &Value, positions: &[(i64, i64)]) -> String {
    let id = Uuid::parse_str(sub["id"].as_str().unwrap()).unwrap();
    let positions: Vec<Position> = positions
        .iter()
        .map(|&(ordinal, consumed)| Position { ordinal, consumed })
        .collect();
    subscription_cursor::encode(id, &positions)
}

#[tokio::test]
async fn cursors_beyond_the_feed_are_cursor_ahead() {
    // Change set 1 (the export) holds ids 1..=3; retention keeps only the newest.
    let Setup {
        wh,
        table: t,
        node,
        id,
        _store,
    } = setup(json!({"retention": {"max_change_sets": 1}}), false).await;
    let t = wh.append(&t, &[orders(4..=5)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    wait_until(Duration::from_secs(20), || async {
        let (_, v) = node.get(&format!("/v1/tables/{id}")).await;
        (v["pruned_through"] == 1).then_some(())
    })
    .await;
    let table_id = TableId(Uuid::parse_str(&id).unwrap());
    let cursor = |ordinal, consumed| Position { ordinal, consumed }.to_cursor(table_id);
    let page = |after: String| {
        let node = &node;
        let id = &id;
        async move {
            node.http
                .get(node.url(&format!("/v1/tables/{id}/changes?after={after}")))
                .send()
                .await
                .unwrap()
        }
    };

    // Past the end of change set 2 (2 events), inside change set 3 (not published), far
    // beyond, and events of change set 0 (there is none).
    for (ordinal, consumed) in [
        (2, 3),
        (3, 1),
        (4, 0),
        (99, 0),
        (i64::MAX, i64::MAX),
        (1, 4),
    ] {
        let p = expect_problem(page(cursor(ordinal, consumed)).await, 400, "cursor_ahead").await;
        assert_eq!(p["table_id"], id.as_str(), "{p}");
        let r = node
            .http
            .get(node.url(&format!("/v1/tables/{id}/changes/stream")))
            .header("last-event-id", cursor(ordinal, consumed))
            .send()
            .await
            .unwrap();
        expect_problem(r, 400, "cursor_ahead").await;
    }
    // Before the retained history: gone, not ahead.
    for (ordinal, consumed) in [(0, 0), (1, 2)] {
        expect_problem(
            page(cursor(ordinal, consumed)).await,
            410,
            "position_expired",
        )
        .await;
    }
    // Every position the feed hands out reads on: the end of the pruned change set (the
    // earliest retained position's twin), the start and the end of the last change set,
    // the start of the next one (where a caught-up reader stands).
    for (ordinal, consumed) in [(1, 3), (2, 0), (2, 2), (3, 0)] {
        let r = page(cursor(ordinal, consumed)).await;
        assert_eq!(r.status(), 200, "({ordinal}, {consumed})");
        let body: Value = r.json().await.unwrap();
        let expected = if (ordinal, consumed) == (2, 0) || (ordinal, consumed) == (1, 3) {
            2
        } else {
            0
        };
        assert_eq!(body["events"].as_array().unwrap().len(), expected, "{body}");
    }
    // A change set's positions known to lie within the feed do not vouch for positions
    // past its end.
    expect_problem(page(cursor(2, 3)).await, 400, "cursor_ahead").await;
    let (_, all) = node.get(&format!("/v1/tables/{id}/changes")).await;
    let head_cursor = all["next"].as_str().unwrap().to_string();
    assert_eq!(all["more"], false);

    // A long poll at the head waits and is woken by the next change set.
    let waiting = {
        let http = node.http.clone();
        let url = node.url(&format!(
            "/v1/tables/{id}/changes?after={head_cursor}&wait=30"
        ));
        tokio::spawn(async move { http.get(url).send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let t = wh.append(&t, &[orders(6..=6)]).await;
    let r = waiting.await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["events"][0]["after"]["id"], 6, "{body}");
    assert!(started.elapsed() < Duration::from_secs(20));
    node.wait_for_checkpoint(&id, head(&t)).await;
    // What was ahead a moment ago is the head now; further is still ahead.
    let r = page(cursor(3, 1)).await;
    assert_eq!(r.status(), 200);
    expect_problem(page(cursor(3, 2)).await, 400, "cursor_ahead").await;

    // Subscriptions check each table's position of their cursors.
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "reader", "tables": [id]}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    let before = fingerprint(&node).await;
    for forged in [sub_cursor(&sub, &[(3, 2)]), sub_cursor(&sub, &[(7, 0)])] {
        let r = node
            .http
            .get(node.url(&format!(
                "/v1/subscriptions/reader/events?after={forged}&wait=1"
            )))
            .send()
            .await
            .unwrap();
        expect_problem(r, 400, "cursor_ahead").await;
        let r = node
            .http
            .get(node.url("/v1/subscriptions/reader/stream"))
            .header("last-event-id", forged.as_str())
            .send()
            .await
            .unwrap();
        expect_problem(r, 400, "cursor_ahead").await;
    }
    assert_eq!(
        fingerprint(&node).await,
        before,
        "nothing delivered or committed"
    );
    for caught_up in [sub_cursor(&sub, &[(3, 1)]), sub_cursor(&sub, &[(4, 0)])] {
        let started = Instant::now();
        let r = node
            .http
            .get(node.url(&format!(
                "/v1/subscriptions/reader/events?after={caught_up}&wait=1"
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["events"], json!([]), "{body}");
        assert!(started.elapsed() >= Duration::from_millis(900), "it waited");
    }
    node.shutdown().await;
}

/// Ages stored before the API bounded them (`i64::MAX` ms overflows PostgreSQL's
/// intervals) no longer fail every pruning pass, for every table.
#[tokio::test]
async fn stored_out_of_range_ages_do_not_stop_the_janitor() {
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&db, store.path());
    settings.retention.interval = Duration::from_millis(100);
    settings.retention.grace = Duration::ZERO;
    let node = Node::start(settings).await;
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({"retention": {"max_change_sets": 1}})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE source_tables SET retention_max_age_ms = $1, retention_hard_max_age_ms = $1",
    )
    .bind(i64::MAX)
    .execute(&mut conn)
    .await
    .unwrap();
    let t = wh.append(&t, &[orders(4..=4)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    wait_until(Duration::from_secs(20), || async {
        let (_, v) = node.get(&format!("/v1/tables/{id}")).await;
        (v["pruned_through"] == 1).then_some(())
    })
    .await;
    node.shutdown().await;
}
