//! Authentication: a node with `auth.admin_token` answers only requests with a token
//! whose scopes allow them. The matrix of every operation of the OpenAPI document ×
//! every kind of token, the token lifecycle (shown once, stored hashed, listed, revoked,
//! expired, on two nodes), misuse of the tokens API, and the refusal to serve an open
//! API beyond loopback.

use std::collections::BTreeSet;
use std::time::Duration;

use icefeed::config::{Secret, Settings};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings};

const ADMIN_TOKEN: &str = "icefeed-test-admin-token-0123456789abcdef";

fn secured(database: &str, store: &std::path::Path) -> Settings {
    let mut settings = test_settings(database, store);
    settings.auth.admin_token = Some(Secret::new(ADMIN_TOKEN));
    settings.auth.cache_ttl = Duration::from_secs(1);
    settings
}

/// Creates a token with `scopes` through `admin`; returns its id and secret.
async fn token(admin: &Node, scopes: Value) -> (String, String) {
    let (status, created) = admin
        .post("/v1/tokens", &json!({"name": "test", "scopes": scopes}))
        .await;
    assert_eq!(status, 201, "{created}");
    (
        created["id"].as_str().unwrap().to_string(),
        created["secret"].as_str().unwrap().to_string(),
    )
}

/// The status of `method path` (body `{}` for writes), without reading the body: streams
/// that are allowed stay open otherwise.
async fn status(node: &Node, method: &str, path: &str) -> u16 {
    let url = node.url(path);
    let request = match method {
        "get" => node.http.get(url),
        "post" => node.http.post(url).json(&json!({})),
        "patch" => node.http.patch(url).json(&json!({})),
        "delete" => node.http.delete(url),
        other => panic!("method {other}"),
    };
    request
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Every operation of the document: (operation id, method, path template).
async fn operations(node: &Node) -> Vec<(String, String, String)> {
    let (_, doc) = node.get("/openapi.json").await;
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap().to_string();
            ops.push((id, method.clone(), path.clone()));
        }
    }
    ops
}

#[tokio::test]
async fn every_operation_needs_a_token_whose_scopes_allow_it() {
    let store = tempfile::tempdir().unwrap();
    let running = Node::start(secured(&fresh_database().await, store.path())).await;
    let anonymous = Node::remote(running.base.clone());
    let admin = running.with_token(ADMIN_TOKEN);

    let wh = Warehouse::new().await;
    let mut ids = Vec::new();
    for name in ["shop.orders", "shop.returns"] {
        let created = wh.create(name, orders_schema(), None).await;
        let table = wh.append(&created, &[orders(1..=3)]).await;
        let id = admin.register(&wh.registration(name, json!({}))).await;
        admin.wait_for_checkpoint(&id, head(&table)).await;
        ids.push(id);
    }
    let (mine, other) = (&ids[0], &ids[1]);
    let (status_code, sub) = admin
        .post(
            "/v1/subscriptions",
            &json!({"name": "orders-sync", "tables": [mine]}),
        )
        .await;
    assert_eq!(status_code, 201, "{sub}");
    let sub_id = sub["id"].as_str().unwrap().to_string();

    let read = running.with_token(&token(&admin, json!(["read"])).await.1);
    let table_reader = running.with_token(&token(&admin, json!([format!("table:{mine}")])).await.1);
    // By name: stored by the subscription's id.
    let consumer = running.with_token(&token(&admin, json!(["subscription:orders-sync"])).await.1);
    let bogus = running.with_token("icf_not-a-token");

    // What each operation needs, written out here rather than derived from the server.
    let open = BTreeSet::from(["healthz", "readyz", "metrics"]);
    let table_reads = BTreeSet::from([
        "getTable",
        "getChanges",
        "streamChanges",
        "getSchema",
        "listChangeSets",
    ]);
    let consumes = BTreeSet::from([
        "getSubscription",
        "getSubscriptionEvents",
        "ackSubscription",
        "streamSubscription",
        "listDeadLetters",
    ]);
    // Any valid token; the answer depends on what it may see.
    let lists = BTreeSet::from(["listTables", "listSubscriptions", "createStreamToken"]);
    let allowed = |s: u16| s != 401 && s != 403;

    let ops = operations(&running).await;
    assert!(ops.len() >= 25, "{ops:?}");
    for (op, method, template) in &ops {
        let path = |table: &str| {
            template.replace("{schema_id}", "0").replace(
                "{id}",
                if template.starts_with("/v1/subscriptions") {
                    &sub_id
                } else if template.starts_with("/v1/tokens") {
                    "00000000-0000-0000-0000-000000000000"
                } else {
                    table
                },
            )
        };
        let at = path(mine);
        let what = format!("{op} ({method} {at})");
        if open.contains(op.as_str()) {
            assert!(allowed(status(&anonymous, method, &at).await), "{what}");
            continue;
        }
        assert_eq!(
            status(&anonymous, method, &at).await,
            401,
            "{what}: no token"
        );
        assert_eq!(
            status(&bogus, method, &at).await,
            401,
            "{what}: unknown token"
        );
        let op = op.as_str();
        let is_table_read = table_reads.contains(op);
        let is_consume = consumes.contains(op);
        let is_list = lists.contains(op);
        let expect = |ok: bool| if ok { "allowed" } else { "forbidden" };
        for (who, client, ok) in [
            ("read", &read, is_table_read || is_consume || is_list),
            ("table", &table_reader, is_table_read || is_list),
            ("subscription", &consumer, is_consume || is_list),
        ] {
            let got = status(client, method, &at).await;
            assert_eq!(
                allowed(got),
                ok,
                "{what} with a {who} token answered {got}, expected {}",
                expect(ok)
            );
            if !ok {
                assert_eq!(got, 403, "{what} with a {who} token");
            }
        }
        if is_table_read {
            let elsewhere = path(other);
            assert_eq!(
                status(&table_reader, method, &elsewhere).await,
                403,
                "{op} on another table with a table token"
            );
        }
        // Admin may do everything; the writes are not sent (they would delete things).
        if method == "get" {
            assert!(allowed(status(&admin, method, &at).await), "{what}: admin");
        }
    }

    // A forbidden answer names what is missing.
    let (code, problem) = read.post("/v1/tables", &json!({})).await;
    assert_eq!((code, problem["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(problem["required_scope"], "admin", "{problem}");
    let (code, problem) = anonymous.get("/v1/tables").await;
    assert_eq!(
        (code, problem["code"].as_str()),
        (401, Some("unauthenticated"))
    );

    // Lists show what the token may see.
    let names = |list: &Value, key: &str| -> Vec<String> {
        list[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, all) = read.get("/v1/tables").await;
    assert_eq!(names(&all, "tables").len(), 2);
    let (_, narrowed) = table_reader.get("/v1/tables").await;
    assert_eq!(names(&narrowed, "tables"), vec![mine.to_string()]);
    let (_, subs) = table_reader.get("/v1/subscriptions").await;
    assert_eq!(names(&subs, "subscriptions"), Vec::<String>::new());
    let (_, subs) = consumer.get("/v1/subscriptions").await;
    assert_eq!(names(&subs, "subscriptions"), vec![sub_id.to_string()]);
    let (_, tables) = consumer.get("/v1/tables").await;
    assert_eq!(names(&tables, "tables"), Vec::<String>::new());

    // The consumer pulls and acknowledges its subscription.
    let (code, page) = consumer
        .get("/v1/subscriptions/orders-sync/events?limit=10")
        .await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 3);
    let (code, acked) = consumer
        .post(
            "/v1/subscriptions/orders-sync/ack",
            &json!({"position": page["next"]}),
        )
        .await;
    assert_eq!(code, 200, "{acked}");

    // A browser's EventSource cannot send headers: a stream token opens one stream.
    let stream = format!("/v1/tables/{mine}/changes/stream");
    let (code, grant) = table_reader
        .post("/v1/tokens/stream", &json!({"path": stream}))
        .await;
    assert_eq!(code, 201, "{grant}");
    let opened = anonymous
        .http
        .get(anonymous.url(grant["url"].as_str().unwrap()))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    assert!(
        opened.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    drop(opened);
    let token = grant["token"].as_str().unwrap();
    let elsewhere = format!("/v1/tables/{other}/changes/stream?access_token={token}");
    assert_eq!(status(&anonymous, "get", &elsewhere).await, 401);
    // It is no API token.
    assert_eq!(
        status(&running.with_token(token), "get", "/v1/tables").await,
        401
    );
    // Only for streams the caller may open.
    let (code, _) = table_reader
        .post(
            "/v1/tokens/stream",
            &json!({"path": format!("/v1/tables/{other}/changes/stream")}),
        )
        .await;
    assert_eq!(code, 403);
    let (code, problem) = consumer
        .post("/v1/tokens/stream", &json!({"path": "/v1/tables"}))
        .await;
    assert_eq!(
        (code, problem["code"].as_str()),
        (422, Some("invalid_stream_path"))
    );
    let (code, grant) = consumer
        .post(
            "/v1/tokens/stream",
            &json!({"path": "/v1/subscriptions/orders-sync/stream"}),
        )
        .await;
    assert_eq!(code, 201, "{grant}");
    assert_eq!(
        status(&anonymous, "get", grant["url"].as_str().unwrap()).await,
        200
    );

    // Admin writes work with the configured token.
    assert_eq!(admin.delete(&format!("/v1/tables/{other}")).await, 204);
    running.shutdown().await;
}

#[tokio::test]
async fn tokens_are_shown_once_stored_hashed_listed_and_revoked_on_every_node() {
    let database = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let first = Node::start(secured(&database, store.path())).await;
    let second = Node::start(secured(&database, store.path())).await;
    let admin = first.with_token(ADMIN_TOKEN);

    let in_a_day = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let (status_code, created) = admin
        .post(
            "/v1/tokens",
            &json!({"name": "dashboard", "scopes": ["read", "read"], "expires_at": in_a_day}),
        )
        .await;
    assert_eq!(status_code, 201, "{created}");
    assert_eq!(created["scopes"], json!(["read"]), "duplicates dropped");
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    assert!(secret.starts_with("icf_"), "{secret}");

    // Listed without the secret; the database holds only its hash.
    let (_, list) = admin.get("/v1/tokens").await;
    assert_eq!(list["tokens"][0]["name"], "dashboard");
    assert!(!list.to_string().contains(&secret), "{list}");
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&database)
        .await
        .unwrap();
    let row: String = sqlx::query_scalar("SELECT row_to_json(t)::text FROM api_tokens t")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert!(!row.contains(&secret[4..20]), "{row}");

    // Both nodes accept it; the second now has it cached.
    for node in [&first, &second] {
        let (code, _) = node.with_token(&secret).get("/v1/tables").await;
        assert_eq!(code, 200);
    }
    assert_eq!(admin.delete(&format!("/v1/tokens/{id}")).await, 204);
    let (code, problem) = first.with_token(&secret).get("/v1/tables").await;
    assert_eq!(
        (code, problem["code"].as_str()),
        (401, Some("invalid_token"))
    );
    // The other node within `auth.cache_ttl` (1 s here).
    crate::support::wait_until(Duration::from_secs(5), || async {
        let (code, _) = second.with_token(&secret).get("/v1/tables").await;
        (code == 401).then_some(())
    })
    .await;
    assert_eq!(admin.delete(&format!("/v1/tokens/{id}")).await, 404);

    // An expiring token stops working by itself.
    let soon = (chrono::Utc::now() + chrono::Duration::milliseconds(1500)).to_rfc3339();
    let (_, created) = admin
        .post(
            "/v1/tokens",
            &json!({"name": "brief", "scopes": ["admin"], "expires_at": soon}),
        )
        .await;
    let brief = first.with_token(created["secret"].as_str().unwrap());
    assert_eq!(brief.get("/v1/tokens").await.0, 200);
    crate::support::wait_until(Duration::from_secs(6), || async {
        (brief.get("/v1/tokens").await.0 == 401).then_some(())
    })
    .await;
    second.shutdown().await;
    first.shutdown().await;
}

#[tokio::test]
async fn misuse_of_the_tokens_api_is_refused_and_stores_nothing() {
    let store = tempfile::tempdir().unwrap();
    let node = Node::start(secured(&fresh_database().await, store.path())).await;
    let admin = node.with_token(ADMIN_TOKEN);
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let table = uuid::Uuid::now_v7();
    for (body, status_code, code) in [
        (json!({"name": "x", "scopes": []}), 422, "invalid_scope"),
        (
            json!({"name": "x", "scopes": ["write"]}),
            422,
            "invalid_scope",
        ),
        (
            json!({"name": "x", "scopes": ["table:nope"]}),
            422,
            "invalid_scope",
        ),
        (
            json!({"name": "x", "scopes": [format!("table:{table}")]}),
            422,
            "table_not_found",
        ),
        (
            json!({"name": "x", "scopes": ["subscription:nope"]}),
            422,
            "subscription_not_found",
        ),
        (
            json!({"name": " ", "scopes": ["read"]}),
            422,
            "invalid_name",
        ),
        (
            json!({"name": "x", "scopes": ["read"], "expires_at": past}),
            422,
            "expiry_in_past",
        ),
        (
            json!({"name": "x", "scopes": ["read"], "secret": "mine"}),
            422,
            "invalid_request_body",
        ),
        (json!(["read"]), 422, "invalid_request_body"),
    ] {
        let (got, problem) = admin.post("/v1/tokens", &body).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status_code, Some(code)),
            "{body}: {problem}"
        );
    }
    let (_, list) = admin.get("/v1/tokens").await;
    assert_eq!(list["tokens"], json!([]), "nothing was stored");
    node.shutdown().await;

    // Without auth the tokens API says how to turn it on.
    let (open, _store) = Node::start_fresh().await;
    let (got, problem) = open
        .post("/v1/tokens", &json!({"name": "x", "scopes": ["read"]}))
        .await;
    assert_eq!(
        (got, problem["code"].as_str()),
        (409, Some("auth_disabled"))
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("auth.admin_token")
    );
    open.shutdown().await;
}

#[tokio::test]
async fn an_open_api_is_refused_beyond_loopback() {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.listen = "0.0.0.0:0".parse().unwrap();
    let refused = icefeed::app::start(settings, CancellationToken::new())
        .await
        .err()
        .expect("an open API on every interface is refused");
    let message = format!("{refused:#}");
    assert!(
        message.contains("refusing to listen on 0.0.0.0:0 without authentication")
            && message.contains("ICEFEED_AUTH__ADMIN_TOKEN"),
        "{message}"
    );
}
