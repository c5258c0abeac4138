//! Interop with pyiceberg: a table written by Python in a SQL catalog that icefeed reads
//! through the iceberg crate, including copy-on-write deletes; keys that are not unique
//! stop the table with a clear error.

use std::collections::HashMap;
use std::process::Command;

use serde_json::json;

use crate::support::{Node, id_json, id64, wait_until};

/// The Python with pyiceberg installed (the README's test command sets it up).
pub fn python() -> String {
    std::env::var("ICEFEED_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn pyiceberg(dir: &std::path::Path, args: &[&str]) -> i64 {
    pyiceberg_with(dir, &HashMap::new(), args)
}

/// Runs the pyiceberg writer with `env` (a REST catalog, the table's name; see the
/// script); returns the snapshot id it prints, or 0.
pub fn pyiceberg_with(dir: &std::path::Path, env: &HashMap<String, String>, args: &[&str]) -> i64 {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/pyiceberg_writer.py"
    );
    let out = Command::new(python())
        .arg(script)
        .arg(dir)
        .arg("py")
        .args(args)
        .envs(env)
        .output()
        .expect("run python (set ICEFEED_TEST_PYTHON, see scripts/python-env.sh)");
    assert!(
        out.status.success(),
        "pyiceberg {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The registration body of the pyiceberg table in `dir`, with `extra` fields.
fn registration(dir: &std::path::Path, extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({
        "catalog": {"type": "sql", "uri": format!("sqlite:{}/catalog.db", dir.display()),
                    "warehouse": format!("file://{}/warehouse", dir.display()), "name": "py"},
        "table": "shop.orders", "poll_interval_ms": 100,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn a_pyiceberg_table_flows_through_appends_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    pyiceberg(dir.path(), &["create"]);
    let s1 = pyiceberg(dir.path(), &["append", "1", "3"]);
    let (node, _store) = Node::start_fresh().await;
    let id = node.register(&registration(dir.path(), json!({}))).await;
    node.wait_for_checkpoint(&id, s1).await;

    let s2 = pyiceberg(dir.path(), &["append", "4", "5"]);
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    let rows: Vec<(i64, String, i64)> = events
        .iter()
        .map(|e| {
            (
                e["after"]["id"].as_i64().unwrap(),
                e["after"]["name"].as_str().unwrap().to_string(),
                id64(&e["snapshot_id"]).unwrap(),
            )
        })
        .collect();
    let expected: Vec<(i64, String, i64)> = (1..=5)
        .map(|i| (i, format!("py{i}"), if i <= 3 { s1 } else { s2 }))
        .collect();
    assert_eq!(rows, expected);
    assert!(
        events
            .iter()
            .all(|e| e["key"] == json!({"id": e["after"]["id"]}))
    );

    // A delete rewrites the file that held the row: the other rows are carryover.
    let s3 = pyiceberg(dir.path(), &["delete", "2"]);
    node.wait_for_checkpoint(&id, s3).await;
    let (events, next) = node.all_events(&id, None, 100).await;
    let deletes: Vec<_> = events
        .iter()
        .filter(|e| e["snapshot_id"] == id_json(s3))
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0]["op"], "delete");
    assert_eq!(deletes[0]["key"], json!({"id": 2}));
    assert_eq!(deletes[0]["before"], json!({"id": 2, "name": "py2"}));
    assert!(deletes[0].get("after").is_none());

    // Identifier columns that are not unique stop the table with the key in the message.
    let s4 = pyiceberg(dir.path(), &["append-twice", "6"]);
    node.wait_for_checkpoint(&id, s4).await;
    let s5 = pyiceberg(dir.path(), &["delete", "6"]);
    let table = node.wait_for_state(&id, "error").await;
    assert_eq!(table["error_snapshot_id"], id_json(s5));
    let error = table["last_error"].as_str().unwrap();
    assert!(
        error.contains(&s5.to_string()) && error.contains(r#"{"id":6}"#),
        "{error}"
    );
    assert_eq!(
        table["checkpoint"]["snapshot_id"],
        id_json(s4),
        "nothing published past the error"
    );
    let (after, _) = node.all_events(&id, Some(&next), 100).await;
    assert_eq!(after.len(), 2, "only the two inserts of s4: {after:?}");

    // Retrying polls again, and the same snapshot stops it again: never a silent skip.
    let (status, retried) = node
        .post(&format!("/v1/tables/{id}/retry"), &json!({}))
        .await;
    assert_eq!(
        (status, retried["state"].as_str()),
        (200, Some("active")),
        "{retried}"
    );
    wait_until(std::time::Duration::from_secs(30), || async {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        (t["state"] == "error" && t["last_polled_at"] != table["last_polled_at"]).then_some(())
    })
    .await;
    let (status, _) = node
        .post(&format!("/v1/tables/{s1}/retry"), &json!({}))
        .await;
    assert_eq!(status, 400, "not a table id");
    node.set_paused(&id, true).await;
    let (status, problem) = node
        .post(&format!("/v1/tables/{id}/retry"), &json!({}))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("table_not_in_error")),
        "a paused table is resumed, not retried"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn an_expired_checkpoint_stops_the_table_as_a_gap_instead_of_skipping_history() {
    let dir = tempfile::tempdir().unwrap();
    pyiceberg(dir.path(), &["create"]);
    let s1 = pyiceberg(dir.path(), &["append", "1", "2"]);
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&registration(dir.path(), json!({"start": "latest"})))
        .await;
    let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(table["checkpoint"]["snapshot_id"], id_json(s1));
    node.set_paused(&id, true).await;

    // pyiceberg's expiry also clears the parent of the oldest snapshot it leaves, so
    // nothing links what is left to the checkpoint any more.
    let s2 = pyiceberg(dir.path(), &["append", "3", "4"]);
    pyiceberg(dir.path(), &["delete", "1"]);
    pyiceberg(dir.path(), &["expire", &s1.to_string()]);
    node.set_paused(&id, false).await;
    let table = node.wait_for_state(&id, "error").await;
    assert_eq!(table["last_error_code"], "gap");
    let error = table["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("gap: ")
            && error.contains(&s1.to_string())
            && error.contains(&s2.to_string())
            && error.contains("expired"),
        "{error}"
    );
    let (events, _) = node.all_events(&id, None, 100).await;
    assert!(
        events.is_empty(),
        "nothing is published past a gap in history"
    );
    node.shutdown().await;
}
