//! The change store failing (issue 15): an S3 change store (SeaweedFS) behind the fault
//! proxy, which refuses every write as a bucket turned read-only does, fails them with
//! 5xx, drops their connections, or refuses the writes of one segment only. Meanwhile
//! the table publishes nothing (no change set with some of its segments missing), the
//! events published before read on, and the table keeps retrying by itself, also a
//! copy-on-write snapshot whose shuffle tasks ran out of attempts; once writes go through
//! again every snapshot is published exactly once, each row once and in commit order.

use std::time::{Duration, Instant};

use iceberg::table::Table;
use icefeed_testkit::writer::{self, AppendOptions};
use serde_json::{Value, json};

use crate::fault_proxy::{Fault, FaultProxy, Writes};
use crate::fixtures::{order_json, orders, orders_schema};
use crate::s3;
use crate::support::{Node, Warehouse, head, id64, wait_until};

/// A node whose change store is a fresh prefix of the S3 test bucket, reached through a
/// fault proxy; the node, the proxy and the prefix.
async fn node_behind_proxy() -> (Node, FaultProxy, String) {
    let proxy = FaultProxy::start(&s3::endpoint()).await;
    let (mut settings, prefix) = s3::node_settings().await;
    settings
        .change_store_options
        .insert("aws_endpoint".into(), proxy.url.clone());
    (Node::start(settings).await, proxy, prefix)
}

/// The rows of a table followed by a node, and what the feed must hold for them.
struct Followed {
    wh: Warehouse,
    table: Table,
    id: String,
    /// (row id, snapshot that added it), in commit order.
    expected: Vec<(i64, i64)>,
    /// The snapshots, in commit order.
    snapshots: Vec<i64>,
    /// The feed as last read, as (row id, snapshot).
    seen: Vec<(i64, i64)>,
}

impl Followed {
    /// `shop.orders` with rows 1..=3 in one snapshot of three files, registered.
    async fn register(node: &Node) -> Self {
        let wh = Warehouse::new().await;
        let table = wh.create("shop.orders", orders_schema(), None).await;
        let mut followed = Self {
            wh,
            table,
            id: String::new(),
            expected: Vec::new(),
            snapshots: Vec::new(),
            seen: Vec::new(),
        };
        followed.append(3).await;
        followed.id = node
            .register(&followed.wh.registration("shop.orders", json!({})))
            .await;
        node.wait_for_checkpoint(&followed.id, followed.head())
            .await;
        followed
    }

    /// Appends the next `rows` rows in one snapshot, one data file each (so one change
    /// set has several segments).
    async fn append(&mut self, rows: i64) {
        let first = self.expected.last().map_or(1, |(row, _)| row + 1);
        let options = AppendOptions {
            max_rows_per_file: Some(1),
            ..Default::default()
        };
        let batch = orders(first..first + rows);
        self.table = writer::append(self.wh.catalog.as_ref(), &self.table, &[batch], &options)
            .await
            .unwrap();
        let snapshot = head(&self.table);
        self.expected
            .extend((first..first + rows).map(|row| (row, snapshot)));
        self.snapshots.push(snapshot);
    }

    fn head(&self) -> i64 {
        head(&self.table)
    }

    /// Reads the feed from the beginning and checks that it holds the rows of the first
    /// `published` snapshots and nothing else: snapshot after snapshot in commit order,
    /// each snapshot's rows together, each row once. Within a change set, events follow
    /// the data files of the snapshot's manifest, which is not the order of the row
    /// ids: that order must only never change, so the feed read before must be where
    /// this one begins.
    async fn check_feed(&mut self, node: &Node, published: usize) {
        let got = feed(node, &self.id).await;
        let mut runs: Vec<(i64, Vec<i64>)> = Vec::new();
        for &(row, snapshot) in &got {
            match runs.last_mut() {
                Some((s, rows)) if *s == snapshot => rows.push(row),
                _ => runs.push((snapshot, vec![row])),
            }
        }
        let order: Vec<i64> = runs.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            order,
            self.snapshots[..published],
            "change sets in commit order: {got:?}"
        );
        for (snapshot, mut rows) in runs {
            rows.sort_unstable();
            let added: Vec<i64> = self
                .expected
                .iter()
                .filter(|(_, s)| *s == snapshot)
                .map(|(row, _)| *row)
                .collect();
            assert_eq!(rows, added, "snapshot {snapshot}: each row once: {got:?}");
        }
        assert!(
            got.starts_with(&self.seen),
            "the feed read before is kept as it was: {:?}, now {got:?}",
            self.seen
        );
        self.seen = got;
    }
}

/// Every event of the feed from the beginning, as (row id, snapshot), checking that each
/// is the insert of its row.
async fn feed(node: &Node, id: &str) -> Vec<(i64, i64)> {
    let (events, _) = node.all_events(id, None, 4).await;
    events
        .iter()
        .map(|e| {
            let row = e["after"]["id"].as_i64().unwrap();
            assert_eq!(e["op"], "insert", "{e}");
            assert_eq!(e["after"], order_json(row), "{e}");
            (row, id64(&e["snapshot_id"]).unwrap())
        })
        .collect()
}

/// Checks, for `watch`, that nothing new is published while writes fail: the table
/// stays `active` (retrying by itself: the proxy keeps stopping writes) with its
/// checkpoint on the last snapshot published, the lag counting the `waiting` snapshots,
/// and the feed and the change-set listing exactly what was published before. Returns
/// the table's `last_error`.
async fn holds_back(
    node: &Node,
    proxy: &FaultProxy,
    followed: &mut Followed,
    published: usize,
    watch: Duration,
) -> String {
    let waiting = (followed.snapshots.len() - published) as i64;
    let checkpoint = followed.snapshots[published - 1];
    // The node tried to write the waiting snapshot and said why it could not.
    let stopped = proxy.writes_stopped();
    let table = wait_until(Duration::from_secs(30), || async {
        let (_, t) = node.get(&format!("/v1/tables/{}", followed.id)).await;
        (t["last_error"].is_string() && t["lag"]["snapshots"] == waiting).then_some(t)
    })
    .await;
    let error = table["last_error"].as_str().unwrap().to_string();
    assert_eq!(
        table["last_error_code"], "change_store_unavailable",
        "{table}"
    );
    let polled = polled_at(&table);
    let before = proxy.writes_stopped();
    let started = Instant::now();
    let in_order: Vec<(i64, i64)> = (1..)
        .zip(followed.snapshots[..published].iter().copied())
        .collect();
    while started.elapsed() < watch {
        let (_, t) = node.get(&format!("/v1/tables/{}", followed.id)).await;
        assert_eq!(t["state"], "active", "retrying by itself: {t}");
        assert_eq!(
            id64(&t["checkpoint"]["snapshot_id"]),
            Some(checkpoint),
            "{t}"
        );
        assert_eq!(t["change_sets"], published, "{t}");
        assert!(
            t["last_error"].is_string(),
            "the error stays while it lasts: {t}"
        );
        followed.check_feed(node, published).await;
        assert_eq!(node.change_sets(&followed.id).await, in_order);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        proxy.writes_stopped() > before,
        "the node keeps trying to write ({stopped} writes stopped before the error was \
         seen, {before} when it was, {} after {watch:?})",
        proxy.writes_stopped()
    );
    let (_, t) = node.get(&format!("/v1/tables/{}", followed.id)).await;
    assert!(polled_at(&t) > polled, "polled again since {polled}: {t}");
    let (status, problem) = node
        .post(&format!("/v1/tables/{}/retry", followed.id), &json!({}))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("table_not_in_error")),
        "nothing for an operator to retry: {problem}"
    );
    error
}

/// When the table was last polled.
fn polled_at(table: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(table["last_polled_at"].as_str().unwrap()).unwrap()
}

/// Once writes go through: every snapshot published exactly once, each row once, in
/// commit order, each change set with one segment per data file in the store.
async fn publishes_everything_once(node: &Node, followed: &mut Followed, prefix: &str) -> Duration {
    let started = Instant::now();
    let table = node
        .wait_for_checkpoint(&followed.id, followed.head())
        .await;
    let took = started.elapsed();
    assert_eq!(table["state"], "active", "{table}");
    assert_eq!(table["last_error"], Value::Null, "{table}");
    assert_eq!(table["last_error_code"], Value::Null, "{table}");
    // The lag a failed attempt recorded stays until the poll that published ends.
    let table = wait_until(Duration::from_secs(10), || async {
        let (_, t) = node.get(&format!("/v1/tables/{}", followed.id)).await;
        (t["lag"]["snapshots"] == 0).then_some(t)
    })
    .await;
    assert_eq!(
        id64(&table["checkpoint"]["snapshot_id"]),
        Some(followed.head()),
        "{table}"
    );
    assert_eq!(table["change_sets"], followed.snapshots.len(), "{table}");
    followed.check_feed(node, followed.snapshots.len()).await;
    let in_order: Vec<(i64, i64)> = (1..).zip(followed.snapshots.iter().copied()).collect();
    assert_eq!(node.change_sets(&followed.id).await, in_order);
    for (ordinal, snapshot) in &in_order {
        let rows = followed
            .expected
            .iter()
            .filter(|(_, s)| s == snapshot)
            .count();
        let below = format!(
            "{prefix}/tables/{}/change-sets/{ordinal}-{snapshot}/",
            followed.id
        );
        let objects = s3::list(s3::BUCKET, &below).await;
        assert_eq!(
            objects.len(),
            rows,
            "one segment per data file: {objects:?}"
        );
    }
    took
}

/// The bucket turns read-only (every write refused with `403 AccessDenied`) while the
/// table commits two snapshots: neither is published, the feed reads on, the table stays
/// `active` and keeps retrying, its `last_error` naming the change store and the
/// snapshot; writable again, both are published once, without an operator.
#[tokio::test]
async fn a_read_only_change_store_holds_publishing_back_and_loses_nothing() {
    let (node, proxy, prefix) = node_behind_proxy().await;
    let mut followed = Followed::register(&node).await;
    followed.append(3).await;
    node.wait_for_checkpoint(&followed.id, followed.head())
        .await;
    followed.check_feed(&node, 2).await;

    proxy.set_writes(Writes::Refuse);
    let refused_at = Instant::now();
    followed.append(3).await;
    let blocked = followed.head();
    followed.append(2).await;
    let error = holds_back(&node, &proxy, &mut followed, 2, Duration::from_secs(5)).await;
    assert!(
        error.contains(&format!("snapshot {blocked}")) && error.contains("change store"),
        "last_error names the snapshot and the change store: {error}"
    );
    // By its kind only: the endpoint, the key and the server's answer are in the log.
    assert!(
        error.contains("change_store_unavailable: the change store refused access")
            && !error.contains(&proxy.url)
            && !error.contains("<?xml")
            && !error.contains(".parquet"),
        "{error}"
    );
    eprintln!(
        "read-only for {:?}; last_error: {error}",
        refused_at.elapsed()
    );

    proxy.set_writes(Writes::Forward);
    let took = publishes_everything_once(&node, &mut followed, &prefix).await;
    eprintln!("writable again: caught up after {took:?}");
    node.shutdown().await;
}

/// The change store failing: first only the second segment of a snapshot is refused
/// (the first lands, yet no change set is published with it); then every write answers
/// `500 InternalError`; then every write's connection is dropped. Each time nothing new
/// is published while the failure lasts, what was published reads on, and once the
/// store works again every snapshot is published exactly once.
#[tokio::test]
async fn a_failing_change_store_publishes_no_partial_change_set_and_loses_nothing() {
    let (node, proxy, prefix) = node_behind_proxy().await;
    let mut followed = Followed::register(&node).await;
    followed.check_feed(&node, 1).await;
    let id = followed.id.clone();

    // One segment refused: the others of its change set land, and wait.
    proxy.script("000001.parquet", vec![Fault::Status(403); 10_000]);
    let ordinal = node.change_sets(&id).await.len() + 1;
    followed.append(3).await;
    let partial = followed.head();
    let below = format!("{prefix}/tables/{id}/change-sets/{ordinal}-{partial}");
    let landed = format!("{below}/000000.parquet");
    wait_until(Duration::from_secs(30), || async {
        let objects = s3::list(s3::BUCKET, &below).await;
        objects.contains(&landed).then_some(())
    })
    .await;
    wait_until(Duration::from_secs(30), || async {
        (proxy.pending() < 10_000 - 3).then_some(())
    })
    .await;
    // Reading segments named 000001.parquet would be refused too: only the table.
    let table = wait_until(Duration::from_secs(30), || async {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        t["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("snapshot {partial}")))
            .then_some(t)
    })
    .await;
    assert_eq!(table["state"], "active", "{table}");
    assert_eq!(table["change_sets"], 1, "{table}");
    assert_eq!(
        id64(&table["checkpoint"]["snapshot_id"]),
        Some(followed.snapshots[0]),
        "{table}"
    );
    proxy.script("", []);
    publishes_everything_once(&node, &mut followed, &prefix).await;

    // Every write failing with 500, then every write's connection dropped, for a few
    // seconds each (`object_store` retries those itself, backing off).
    for writes in [Writes::Fail(500), Writes::Drop] {
        let published = followed.snapshots.len();
        proxy.set_writes(writes);
        let started = Instant::now();
        followed.append(3).await;
        let stopped = proxy.writes_stopped();
        wait_until(Duration::from_secs(30), || async {
            (proxy.writes_stopped() > stopped + 1).then_some(())
        })
        .await;
        while started.elapsed() < Duration::from_secs(6) {
            let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
            assert_eq!(t["state"], "active", "{writes:?}: {t}");
            assert_eq!(t["change_sets"], published, "{writes:?}: {t}");
            // What was published reads on.
            followed.check_feed(&node, published).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        eprintln!(
            "{writes:?} for {:?}: {} writes stopped; table: state {}, last_error {}",
            started.elapsed(),
            proxy.writes_stopped() - stopped,
            t["state"],
            t["last_error"]
        );
        proxy.set_writes(Writes::Forward);
        let took = publishes_everything_once(&node, &mut followed, &prefix).await;
        eprintln!("{writes:?} over: caught up after {took:?}");
    }
    node.shutdown().await;
}

/// A copy-on-write commit while the bucket is read-only: its shuffle cannot write its
/// files. Like an append (above), the table stays `active` and keeps trying with backoff
/// (a task that fails for a passing reason waits before its next attempt, and a snapshot
/// whose tasks ran out of attempts that way is planned again), its `last_error` naming
/// the snapshot and the change store. Nothing is published meanwhile and the feed reads
/// on; writable again, the rewrite is published once, without an operator.
#[tokio::test]
async fn a_rewrite_while_the_change_store_is_read_only_waits_and_publishes_once_writable() {
    use crate::fixtures::orders_named;

    let (node, proxy, _prefix) = node_behind_proxy().await;
    let mut followed = Followed::register(&node).await;
    followed.check_feed(&node, 1).await;
    let id = followed.id.clone();

    proxy.set_writes(Writes::Refuse);
    let rewritten = followed
        .wh
        .overwrite_all(&followed.table, &[orders_named(1..=3, "-new")])
        .await;
    let snapshot = head(&rewritten);
    let failing = wait_until(Duration::from_secs(30), || async {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        t["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("snapshot {snapshot}")))
            .then_some(t)
    })
    .await;
    let error = failing["last_error"].as_str().unwrap();
    assert!(
        error.contains("change store"),
        "names the change store: {error}"
    );
    // Held back, not stopped: nothing published, tried again and again, reads on.
    let tried = proxy.writes_stopped();
    for _ in 0..20 {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        assert_eq!(t["state"], "active", "{t}");
        assert_eq!(t["change_sets"], 1, "{t}");
        assert_eq!(
            id64(&t["checkpoint"]["snapshot_id"]),
            Some(followed.snapshots[0]),
            "{t}"
        );
        followed.check_feed(&node, 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        proxy.writes_stopped() > tried,
        "still trying after 6 s: {} refused writes, {tried} before",
        proxy.writes_stopped()
    );

    proxy.set_writes(Writes::Forward);
    let table = node.wait_for_checkpoint(&id, snapshot).await;
    // The publish that reaches the head the last poll saw leaves no lag behind.
    assert_eq!(table["lag"]["snapshots"], 0, "{table}");
    assert_eq!(table["state"], "active", "{table}");
    assert_eq!(table["last_error"], Value::Null, "{table}");
    assert_eq!(table["change_sets"], 2, "{table}");
    let (events, _) = node.all_events(&id, None, 4).await;
    let (export, rewrite) = events.split_at(3);
    for (event, row) in export.iter().zip(&followed.seen) {
        assert_eq!(event["op"], "insert", "{event}");
        assert_eq!(event["after"]["id"], row.0, "the export as before: {event}");
    }
    let mut updates: Vec<(i64, &Value, &Value)> = rewrite
        .iter()
        .map(|e| {
            assert_eq!(e["op"], "update", "{e}");
            assert_eq!(id64(&e["snapshot_id"]), Some(snapshot), "{e}");
            (e["key"]["id"].as_i64().unwrap(), &e["before"], &e["after"])
        })
        .collect();
    updates.sort_by_key(|(row, _, _)| *row);
    let rows: Vec<i64> = updates.iter().map(|(row, _, _)| *row).collect();
    assert_eq!(rows, [1, 2, 3], "each row updated once: {events:?}");
    for (row, before, after) in updates {
        let mut new = order_json(row);
        new["name"] = json!(format!("n{row}-new"));
        assert_eq!((before, after), (&order_json(row), &new));
    }
    node.shutdown().await;
}

/// Reads and readiness ask the change store: while it refuses the node, a page answers
/// `503 change_store_unavailable` (not a 500, and not `change_data_missing`) and
/// `/readyz` does too; both serve again once it answers.
#[tokio::test]
async fn reads_and_readiness_answer_503_while_the_change_store_refuses_the_node() {
    let (node, proxy, _prefix) = node_behind_proxy().await;
    let followed = Followed::register(&node).await;
    assert_eq!(node.get("/readyz").await.0, 200);
    proxy.script(icefeed::changes::store::PROBE_KEY, [Fault::Status(403)]);
    let (status, problem) = node.get("/readyz").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (503, Some("change_store_unavailable")),
        "{problem}"
    );
    assert_eq!(proxy.pending(), 0, "the probe went to the store");
    assert_eq!(node.get("/readyz").await.0, 200);

    let page = format!("/v1/tables/{}/changes", followed.id);
    proxy.script(".parquet", [Fault::Status(403); 20]);
    let answer = node.http.get(node.url(&page)).send().await.unwrap();
    assert_eq!(answer.status(), 503);
    assert!(answer.headers().contains_key("retry-after"));
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(problem["code"], "change_store_unavailable", "{problem}");
    proxy.script(".parquet", []);
    let (status, events) = node.get(&page).await;
    assert_eq!(status, 200, "{events}");
    assert_eq!(events["events"].as_array().unwrap().len(), 3);
    node.shutdown().await;
}
