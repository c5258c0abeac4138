//! The command line against a running node: the `icefeed` binary itself, over HTTP.

use std::process::{Output, Stdio};
use std::time::Duration;

use icefeed::config::Secret;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, head, test_settings};

const ICEFEED: &str = env!("CARGO_BIN_EXE_icefeed");

/// Runs `icefeed <args> --url <node>`.
async fn icefeed(node: &Node, args: &[&str]) -> Output {
    tokio::process::Command::new(ICEFEED)
        .args(args)
        .args(["--url", &node.base])
        .env_remove("ICEFEED_TOKEN")
        .output()
        .await
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn event_ids(ndjson: &str) -> Vec<i64> {
    ndjson
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["after"]["id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn tables_subscriptions_and_a_live_tail_from_the_command_line() {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&created, &[orders(1..=2)]).await;
    let (node, _store) = Node::start_fresh().await;

    let catalog = wh.registration("shop.orders", json!({}))["catalog"].to_string();
    let added = stdout(
        &icefeed(
            &node,
            &[
                "tables",
                "add",
                "--catalog",
                &catalog,
                "--table",
                "shop.orders",
                "-o",
                "json",
            ],
        )
        .await,
    );
    let id = serde_json::from_str::<Value>(&added).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    node.wait_for_checkpoint(&id, head(&t)).await;

    let listed = stdout(&icefeed(&node, &["tables", "list"]).await);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("STATE"),
        "{listed}"
    );
    assert!(
        lines[1].contains(&id) && lines[1].contains("shop.orders") && lines[1].contains("active"),
        "{listed}"
    );

    // What is there, as NDJSON; then pause and resume.
    let all = stdout(
        &icefeed(
            &node,
            &[
                "tail",
                &id,
                "--from",
                "earliest",
                "--no-follow",
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(event_ids(&all), vec![1, 2]);
    let paused = stdout(&icefeed(&node, &["tables", "pause", &id]).await);
    assert!(paused.contains("paused"), "{paused}");
    stdout(&icefeed(&node, &["tables", "resume", &id]).await);

    // Following: new events are printed as they are published.
    let (_, page) = node.get(&format!("/v1/tables/{id}/changes")).await;
    let cursor = page["next"].as_str().unwrap().to_string();
    let mut follow = tokio::process::Command::new(ICEFEED)
        .args(["tail", &id, "--from", &cursor, "--url", &node.base])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut printed = BufReader::new(follow.stdout.take().unwrap()).lines();
    wh.append(&t, &[orders(3..=4)]).await;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while got.len() < 2 {
            got.push(printed.next_line().await.unwrap().unwrap());
        }
    })
    .await
    .unwrap_or_else(|_| panic!("tail printed {got:?}"));
    assert!(
        got[0].starts_with("insert") && got[0].contains(r#"{"id":3}"#),
        "{got:?}"
    );
    assert!(got[1].contains(r#"{"id":4}"#), "{got:?}");
    follow.kill().await.unwrap();

    // A subscription, tailed by name, and misuse answered with what to do.
    let sub = stdout(
        &icefeed(
            &node,
            &["subscriptions", "add", "--name", "cli-sub", "--tables", &id],
        )
        .await,
    );
    assert!(sub.contains("cli-sub"), "{sub}");
    let events = stdout(&icefeed(&node, &["tail", "cli-sub", "--no-follow", "-o", "json"]).await);
    assert_eq!(event_ids(&events), vec![1, 2, 3, 4]);
    let filtered = icefeed(&node, &["tail", "cli-sub", "--ops", "insert"]).await;
    assert_eq!(filtered.status.code(), Some(2));
    assert!(
        stderr(&filtered).contains("--ops and --columns"),
        "{}",
        stderr(&filtered)
    );
    let unknown = icefeed(&node, &["tail", "no-such-feed"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("neither a table id nor a subscription"));
    let missing = icefeed(
        &node,
        &["tables", "get", "01a23e66-216d-77a1-bb51-75e89b2ee9c4"],
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("HTTP 404"),
        "{}",
        stderr(&missing)
    );

    stdout(&icefeed(&node, &["subscriptions", "rm", "cli-sub"]).await);
    stdout(&icefeed(&node, &["tables", "rm", &id]).await);
    let empty = stdout(&icefeed(&node, &["tables", "list", "-o", "json"]).await);
    assert_eq!(
        serde_json::from_str::<Value>(&empty).unwrap()["tables"],
        json!([])
    );
    node.shutdown().await;
}

#[tokio::test]
async fn tokens_from_the_command_line_and_a_clear_answer_without_one() {
    const ADMIN: &str = "icefeed-cli-admin-token-0123456789abcdef";
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.auth.admin_token = Some(Secret::new(ADMIN));
    let node = Node::start(settings).await;

    let refused = icefeed(&node, &["tables", "list"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("--token or ICEFEED_TOKEN"),
        "{}",
        stderr(&refused)
    );

    let created = stdout(
        &icefeed(
            &node,
            &[
                "tokens", "create", "--name", "reader", "--scopes", "read", "--token", ADMIN,
            ],
        )
        .await,
    );
    let secret = created
        .lines()
        .find_map(|l| l.strip_prefix("secret (shown only now): "))
        .unwrap_or_else(|| panic!("{created}"))
        .to_string();
    let listed = stdout(&icefeed(&node, &["tables", "list", "--token", &secret]).await);
    assert!(listed.starts_with("ID "), "{listed}");
    let tokens = stdout(&icefeed(&node, &["tokens", "list", "--token", ADMIN]).await);
    assert!(
        tokens.contains("reader") && tokens.contains("read"),
        "{tokens}"
    );
    node.shutdown().await;
}
