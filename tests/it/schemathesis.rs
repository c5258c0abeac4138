//! schemathesis (pinned, from PyPI) against the committed OpenAPI document and a live
//! node with auth on, a registered table and a subscription: every check it has, on
//! bounded examples with a fixed seed, must pass — no 5xx, every answer as documented
//! (status, media type, schema, headers), authentication enforced.
//!
//! One check is left out: `positive_data_acceptance`, which expects every request the
//! schema admits to succeed. The API refuses some of those on purpose, with documented
//! 4xx problems, for rules a JSON schema does not hold: an opaque cursor the node never
//! handed out, a NUL character PostgreSQL cannot store, an expiry in the past, "exactly
//! one of" two optional fields.
//!
//! The node serves SQL and filesystem catalogs only: a made-up Glue, Hive or REST
//! catalog is unreachable here, which `502 catalog_unreachable` rightly says.

use std::time::Duration;

use icefeed::config::Secret;
use serde_json::json;

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings};

const ADMIN_TOKEN: &str = "icefeed-schemathesis-admin-token-0123456789";

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let command = std::env::var("ICEFEED_TEST_SCHEMATHESIS")
        .expect("ICEFEED_TEST_SCHEMATHESIS is set by scripts/test.sh");
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&created, &[orders(1..=3)]).await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.auth.admin_token = Some(Secret::new(ADMIN_TOKEN));
    // Catalog services that are not here (Glue, Hive, REST catalogs on made-up hosts)
    // rightly answer 502/504: outages have tests of their own. Fuzzed registrations of
    // those types answer a documented 403 instead.
    settings.catalog.allowed_types = vec!["sql".into(), "filesystem".into()];
    let node = Node::start(settings).await;
    let admin = node.with_token(ADMIN_TOKEN);
    let id = admin
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    admin.wait_for_checkpoint(&id, head(&t)).await;
    let (status, _) = admin
        .post(
            "/v1/subscriptions",
            &json!({"name": "orders-sync", "tables": [id]}),
        )
        .await;
    assert_eq!(status, 201);

    // A fixed seed, so that CI runs the same cases; ICEFEED_SCHEMATHESIS_SEED explores.
    let seed = std::env::var("ICEFEED_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into());
    let scratch = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(command)
        .arg("run")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/icefeed.json"))
        .args(["--url", &node.base])
        .args(["--header", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ])
        .args(["--max-examples", "10", "--seed", &seed, "--workers", "1"])
        // Streams never end by themselves.
        .args(["--exclude-path-regex", "stream$"])
        .args(["--request-timeout", "10"])
        .env("NO_COLOR", "1")
        // Its cache (`.schemathesis/`) goes with the test, not into the checkout.
        .current_dir(scratch.path())
        .kill_on_drop(true)
        .output();
    // Awaited, not blocked on: the node serves from this test's runtime.
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("schemathesis finished within 5 minutes")
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.shutdown().await;
}
