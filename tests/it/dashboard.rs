//! The dashboard in a real headless Chromium (Debian's, driven by playwright-core from
//! tests/node/dashboard.mjs), against a node with auth on: it asks for a token, lists the
//! tables with their states and errors, and tails a table's events as they are
//! published. Screenshots land in `$CARGO_TARGET_TMPDIR/dashboard`.

use std::process::Stdio;
use std::time::Duration;

use icefeed::config::Secret;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::fixtures::{orders, orders_named, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings, wait_until};

const ADMIN_TOKEN: &str = "icefeed-dashboard-admin-token-0123456789";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by scripts/test.sh"))
}

#[tokio::test]
async fn the_dashboard_lists_tables_with_their_errors_and_tails_new_events() {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let mut orders_table = wh.append(&created, &[orders(1..=2)]).await;
    let created = wh.create("shop.returns", orders_schema(), None).await;
    let returns = wh.append(&created, &[orders(1..=1)]).await;
    let database = fresh_database().await;
    let store = tempfile::tempdir().unwrap();

    // Both registered while every catalog type is allowed: one through the SQL catalog,
    // one by its metadata file.
    let node = Node::start(test_settings(&database, store.path())).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&orders_table)).await;
    node.register(&json!({
        "catalog": {"type": "filesystem", "metadata_location": returns.metadata_location().unwrap()},
        "table": "shop.returns",
    }))
    .await;
    node.shutdown().await;

    // Served with auth on, and with filesystem catalogs no longer allowed: shop.returns
    // stops with an error the page must show.
    let mut settings = test_settings(&database, store.path());
    settings.auth.admin_token = Some(Secret::new(ADMIN_TOKEN));
    settings.catalog.allowed_types = vec!["sql".into()];
    let node = Node::start(settings).await;
    let admin = node.with_token(ADMIN_TOKEN);
    wait_until(Duration::from_secs(20), || async {
        let (_, tables) = admin.get("/v1/tables").await;
        let states: Vec<&str> = tables["tables"]
            .as_array()?
            .iter()
            .map(|t| t["state"].as_str().unwrap())
            .collect();
        (states == ["active", "error"]).then_some(())
    })
    .await;

    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    let mut browser = tokio::process::Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/node/dashboard.mjs"
        ))
        .arg(&node.base)
        .arg(ADMIN_TOKEN)
        .arg(&shots)
        .env("ICEFEED_TEST_CHROMIUM", env("ICEFEED_TEST_CHROMIUM"))
        .env(
            "ICEFEED_TEST_NODE_MODULES",
            env("ICEFEED_TEST_NODE_MODULES"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut said = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut output = Vec::new();
    let finished = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = said.next_line().await.unwrap() {
            if line == "TAILING" {
                // Committed while the page tails the table: two inserts, then an update.
                orders_table = wh.append(&orders_table, &[orders(3..=4)]).await;
                wh.overwrite_all(
                    &orders_table,
                    &[orders_named(1..=1, "-renamed"), orders(2..=4)],
                )
                .await;
                let stdin = browser.stdin.as_mut().unwrap();
                stdin.write_all(b"appended\n").await.unwrap();
                stdin.flush().await.unwrap();
            }
            output.push(line);
        }
        browser.wait().await.unwrap()
    })
    .await
    .unwrap_or_else(|_| panic!("the browser did not finish: {output:?}"));
    assert!(
        finished.success() && output.last().map(String::as_str) == Some("OK"),
        "{output:#?} (screenshots in {})",
        shots.display()
    );
    node.shutdown().await;
}
