//! Net changes over ranges of a feed (`?net=true`). The proof is differential: random
//! copy-on-write histories (oracle.rs's, every shape), random ranges between their
//! snapshots, and an oracle that scans the table at the range's two ends and diffs the
//! states by key (as multisets without identifier columns). Each net event must also
//! name the snapshot of its key's last change, which the oracle finds by walking the
//! states between the ends. Then how the API answers misuse.
//!
//! `ICEFEED_NET_SEEDS` picks the seeds (as `ICEFEED_ORACLE_SEEDS` does).

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::diffing::{change, diff, key_of, seeds_in};
use crate::fixtures::{orders, orders_schema};
use crate::oracle::{random_history, register, scan_state};
use crate::subscriptions::orders_with_rewrite;
use crate::support::{Node, Warehouse, fresh_database, head, id64, test_settings};

/// Random ranges per history, besides the whole history.
const RANGES: usize = 6;

/// The cursor after snapshot `i` of a history: the position of the last event of it or
/// of a snapshot before it (`None`: the start of the feed).
fn cursors_after(events: &[Value], snapshots: &[i64]) -> Vec<Option<String>> {
    let index: HashMap<i64, usize> = snapshots.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    let mut last: Vec<Option<String>> = vec![None; snapshots.len()];
    for e in events {
        let i = index[&id64(&e["snapshot_id"]).expect("snapshot_id")];
        last[i] = Some(e["position"].as_str().unwrap().to_string());
    }
    for i in 1..last.len() {
        if last[i].is_none() {
            last[i] = last[i - 1].clone();
        }
    }
    last
}

/// Every page of the net changes from `after` to `until`, `limit` at a time: the events,
/// and the `next` of the last page.
async fn net_events(
    node: &Node,
    id: &str,
    after: Option<&str>,
    until: &str,
    limit: usize,
) -> (Vec<Value>, String) {
    let mut path = format!("/v1/tables/{id}/changes?net=true&until={until}&limit={limit}&wait=60");
    if let Some(after) = after {
        path.push_str(&format!("&after={after}"));
    }
    let mut events = Vec::new();
    loop {
        let (status, page) = node.get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
        let batch = page["events"].as_array().unwrap();
        assert!(batch.len() <= limit);
        events.extend(batch.iter().cloned());
        let next = page["next"].as_str().unwrap().to_string();
        if next == until {
            return (events, next);
        }
        assert_eq!(
            page["more"], true,
            "a page inside the range says more follow"
        );
        path = format!("/v1/tables/{id}/changes?after={next}&limit={limit}");
    }
}

/// The snapshot (index) of the last change in `(a, b]` of each row the range changed:
/// by key, or by whole row (its count) without identifier columns.
fn last_changes(states: &[Vec<Value>], a: usize, b: usize, key: &[&str]) -> HashMap<String, usize> {
    let text = |v: &Value| serde_json::to_string(v).unwrap();
    let mut last = HashMap::new();
    for j in a + 1..=b {
        let (prev, cur) = (&states[j - 1], &states[j]);
        let touched: Vec<String> = if key.is_empty() {
            let mut counts: HashMap<String, i64> = HashMap::new();
            for r in prev {
                *counts.entry(text(r)).or_default() -= 1;
            }
            for r in cur {
                *counts.entry(text(r)).or_default() += 1;
            }
            counts
                .into_iter()
                .filter(|(_, n)| *n != 0)
                .map(|(r, _)| r)
                .collect()
        } else {
            let by_key = |rows: &[Value]| -> HashMap<String, String> {
                rows.iter()
                    .map(|r| (text(&key_of(r, key)), text(r)))
                    .collect()
            };
            let (p, c) = (by_key(prev), by_key(cur));
            p.keys()
                .chain(c.keys())
                .filter(|k| p.get(*k) != c.get(*k))
                .cloned()
                .collect()
        };
        for t in touched {
            last.insert(t, j);
        }
    }
    last
}

/// A range of a feed to check, with what the oracle knows of it.
pub(crate) struct NetRange<'a> {
    /// The feed cursor the range starts after (`None`: the start of the feed).
    pub after: Option<&'a str>,
    /// The feed cursor it ends at.
    pub until: &'a str,
    /// The table's rows at the range's start and after each snapshot in it, all under
    /// the schema of the range's change sets.
    pub states: &'a [Vec<Value>],
    /// The snapshots in it (`states[i + 1]` follows `snapshots[i]`).
    pub snapshots: &'a [i64],
    /// The identifier columns; none: rows are compared whole.
    pub key: &'a [&'a str],
}

/// Reads the net changes of `range` of table `id`, `limit` at a time, and compares them
/// with the diff of its ends and each event's snapshot with its key's last change;
/// then checks that the range is kept (asking again answers at once). Returns how many
/// events it compared.
pub(crate) async fn check_range(
    node: &Node,
    id: &str,
    range: &NetRange<'_>,
    limit: usize,
) -> Result<usize, String> {
    let (got, next) = net_events(node, id, range.after, range.until, limit).await;
    if next != range.until {
        return Err(format!("the last page ends at {next}, not at `until`"));
    }
    let mut have: Vec<String> = got
        .iter()
        .map(|e| {
            let member = |m: &str| e.get(m).cloned().unwrap_or(Value::Null);
            change(
                e["op"].as_str().unwrap(),
                &member("key"),
                &member("before"),
                &member("after"),
            )
        })
        .collect();
    have.sort();
    let states = range.states;
    let want = diff(&states[0], states.last().unwrap(), range.key);
    if have != want {
        let missing: Vec<&String> = want.iter().filter(|c| !have.contains(c)).collect();
        let extra: Vec<&String> = have.iter().filter(|c| !want.contains(c)).collect();
        return Err(format!(
            "net changes differ from the diff of the ends:\n  missing: {missing:?}\n  \
             unexpected: {extra:?}"
        ));
    }
    let last = last_changes(states, 0, states.len() - 1, range.key);
    for e in &got {
        let text = |v: &Value| serde_json::to_string(v).unwrap();
        let touched = if range.key.is_empty() {
            text(if e["op"] == "delete" {
                &e["before"]
            } else {
                &e["after"]
            })
        } else {
            text(&e["key"])
        };
        let j = last[&touched];
        if id64(&e["snapshot_id"]) != Some(range.snapshots[j - 1]) {
            return Err(format!(
                "{e} names another snapshot than its last change's ({})",
                range.snapshots[j - 1]
            ));
        }
    }
    let mut again = format!(
        "/v1/tables/{id}/changes?net=true&until={}&limit=1",
        range.until
    );
    if let Some(after) = range.after {
        again.push_str(&format!("&after={after}"));
    }
    let (status, page) = node.get(&again).await;
    if status != 200 {
        return Err(format!("asked again: {status} {page}"));
    }
    Ok(got.len())
}

/// The cursors after each state of a history of `snapshots` (the first: the start of
/// the feed, `None`), from the feed's events.
pub(crate) fn state_cursors(events: &[Value], snapshots: &[i64]) -> Vec<Option<String>> {
    let mut cursors = vec![None];
    cursors.extend(cursors_after(events, snapshots));
    cursors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn net_changes_over_random_ranges_match_the_diff_of_their_ends() {
    let seeds = seeds_in("ICEFEED_NET_SEEDS").unwrap_or_else(|| (1..=8).collect());
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    // Small reduce tasks: a range's result spans several segments, ordered apart.
    settings.scheduler.shuffle_buckets = 4;
    settings.scheduler.reduce_target_bytes = 2048;
    let node = Node::start(settings).await;
    let wh = Warehouse::new().await;
    let mut checked = (0, 0);
    for seed in seeds {
        let model = random_history(&wh, seed).await;
        let snapshots: Vec<i64> = model.snapshots.iter().map(|s| s.0).collect();
        // State 0 is the empty table before the first snapshot; state i + 1 follows
        // snapshot i.
        let mut states = vec![Vec::new()];
        for s in &snapshots {
            states.push(scan_state(&model.table, *s).await);
        }
        let key: Vec<&str> = if model.identifier { vec!["id"] } else { vec![] };
        let id = register(&node, &wh, &model).await;
        node.wait_for_checkpoint(&id, *snapshots.last().unwrap())
            .await;
        let (events, _) = node.all_events(&id, None, 500).await;
        let cursors = state_cursors(&events, &snapshots);

        let mut rng = StdRng::seed_from_u64(seed);
        let n = states.len() - 1;
        let mut ranges = vec![(0, n)];
        for _ in 0..RANGES {
            let a = rng.random_range(0..n);
            ranges.push((a, rng.random_range(a + 1..=n)));
        }
        for (a, b) in ranges {
            let Some(until) = cursors[b].as_deref() else {
                continue; // Nothing published up to b: no cursor names its end.
            };
            let range = NetRange {
                after: cursors[a].as_deref(),
                until,
                states: &states[a..=b],
                snapshots: &snapshots[a..b],
                key: &key,
            };
            let limit = rng.random_range(1..=9);
            match check_range(&node, &id, &range, limit).await {
                Ok(events) => checked = (checked.0 + 1, checked.1 + events),
                Err(e) => panic!("seed {seed}, range from state {a} to {b} of {n}: {e}"),
            }
        }
    }
    eprintln!(
        "net changes: {} ranges, {} events compared",
        checked.0, checked.1
    );
    node.shutdown().await;
}

#[tokio::test]
async fn net_changes_answer_misuse_and_hold_their_range_while_computed() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let t = wh.append(&t, &[orders(4..=5)]).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let node = Node::start(test_settings(&db, store.path())).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (events, end) = node.all_events(&id, None, 100).await;
    let base = format!("/v1/tables/{id}/changes");

    // Not yet computed: an empty page whose cursor holds the range (up to the head when
    // it was asked for, even if the feed moves on), as a long poll that timed out.
    let (status, first) = node.get(&format!("{base}?net=true")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["events"], json!([]));
    assert_eq!(first["more"], true);
    let holding = first["next"].as_str().unwrap().to_string();
    assert_ne!(holding, end, "a cursor into the range, not the feed's");
    let t = wh.append(&t, &[orders(6..=6)]).await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (status, page) = node.get(&format!("{base}?after={holding}&wait=60")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 5);
    assert_eq!(page["next"], end.as_str());
    assert_eq!(page["more"], true, "order 6 came after the range");

    // An empty range answers at once, ending where it was asked to.
    let (status, page) = node
        .get(&format!("{base}?net=true&after={end}&until={end}"))
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"], json!([]));
    assert_eq!(page["next"], end.as_str());
    assert_eq!(page["more"], true);
    let (status, page) = node.get(&format!("{base}?net=true&after=now")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"], json!([]));
    assert_eq!(page["more"], false);

    let problem = |status: u16, page: &Value, code: &str| {
        assert_eq!(page["code"], code, "{page}");
        assert_eq!(page["status"], status, "{page}");
    };
    let first = events[0]["position"].as_str().unwrap();
    // `until` without `net`, before `after`, or a net cursor.
    let (status, page) = node.get(&format!("{base}?until={end}")).await;
    assert_eq!(status, 400);
    problem(400, &page, "range_invalid");
    let (status, page) = node
        .get(&format!("{base}?net=true&after={end}&until={first}"))
        .await;
    assert_eq!(status, 400);
    problem(400, &page, "range_invalid");
    let (_, page) = node
        .get(&format!("{base}?net=true&until={end}&limit=2&wait=60"))
        .await;
    let inside = page["next"].as_str().unwrap().to_string();
    assert_ne!(
        inside, end,
        "two of five events leave a cursor into the range"
    );
    let (status, page) = node.get(&format!("{base}?net=true&until={inside}")).await;
    assert_eq!(status, 400);
    problem(400, &page, "range_invalid");
    let (status, page) = node
        .get(&format!("{base}?after={inside}&until={end}"))
        .await;
    assert_eq!(status, 400);
    problem(400, &page, "range_invalid");
    // A net cursor continues its range without `net`; each event's position too.
    let (status, page) = node.get(&format!("{base}?after={inside}")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 3);
    assert_eq!(page["next"], end.as_str());
    let position = page["events"][0]["position"].as_str().unwrap();
    let (_, rest) = node.get(&format!("{base}?after={position}")).await;
    assert_eq!(rest["events"].as_array().unwrap().len(), 2);
    // A cursor of another table's range is refused.
    let other = wh.create("shop.other", orders_schema(), None).await;
    let other = wh.append(&other, &[orders(1..=1)]).await;
    let other_id = node
        .register(&wh.registration("shop.other", json!({})))
        .await;
    node.wait_for_checkpoint(&other_id, head(&other)).await;
    let (status, page) = node
        .get(&format!("/v1/tables/{other_id}/changes?after={inside}"))
        .await;
    assert_eq!(status, 400);
    problem(400, &page, "foreign_cursor");

    // A range no longer kept: 410, saying how to get it again.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db)
        .await
        .unwrap();
    sqlx::query("DELETE FROM net_ranges")
        .execute(&mut conn)
        .await
        .unwrap();
    let (status, page) = node.get(&format!("{base}?after={inside}")).await;
    assert_eq!(status, 410);
    problem(410, &page, "net_range_expired");
    node.shutdown().await;
}

/// A subscription over two tables reads each table's net changes in turn; acknowledging
/// a cursor inside the second range commits the first table's end only, and
/// acknowledging the last page's `next` commits both.
#[tokio::test]
async fn subscriptions_read_net_changes_table_after_table_and_ack_their_ends() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    // Update 3, delete 4, insert 6: net of the whole feed, inserts of 1, 2, 3 (updated), 5, 6.
    let (a_id, _) = orders_with_rewrite(&node, &wh).await;
    let b = wh.create("shop.b", orders_schema(), None).await;
    let b = wh.append(&b, &[orders(1..=2)]).await;
    let b_id = node.register(&wh.registration("shop.b", json!({}))).await;
    node.wait_for_checkpoint(&b_id, head(&b)).await;
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "net", "tables": [a_id, b_id]}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    assert_eq!(sub["lag"]["events"], 10, "8 events of a, 2 of b");

    // Not computed yet: an empty page, more to come.
    let (status, first) = node.get("/v1/subscriptions/net/events?net=true").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["events"], json!([]));
    assert_eq!(first["more"], true);

    let mut events = Vec::new();
    let mut path = "/v1/subscriptions/net/events?net=true&limit=4&wait=60".to_string();
    let mut cursors = Vec::new();
    loop {
        let (status, page) = node.get(&path).await;
        assert_eq!(status, 200, "{page}");
        events.extend(page["events"].as_array().unwrap().iter().cloned());
        let next = page["next"].as_str().unwrap().to_string();
        cursors.push(next.clone());
        if page["more"] == false {
            break;
        }
        path = format!("/v1/subscriptions/net/events?after={next}&limit=4&wait=60");
    }
    let by_table = |name: &str| -> Vec<(String, i64, String)> {
        let mut rows: Vec<(String, i64, String)> = events
            .iter()
            .filter(|e| e["table"] == name)
            .map(|e| {
                (
                    e["op"].as_str().unwrap().to_string(),
                    e["after"]["id"].as_i64().unwrap(),
                    e["after"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        rows.sort();
        rows
    };
    let insert = |id: i64, name: &str| ("insert".to_string(), id, name.to_string());
    assert_eq!(
        by_table("shop.orders"),
        vec![
            insert(1, "n1"),
            insert(2, "n2"),
            insert(3, "n3x"),
            insert(5, "n5"),
            insert(6, "n6")
        ]
    );
    assert_eq!(by_table("shop.b"), vec![insert(1, "n1"), insert(2, "n2")]);
    assert_eq!(events.len(), 7);
    // An Arrow page holds one table: a's five inserts, then b's two.
    let mut rows = Vec::new();
    let mut path =
        "/v1/subscriptions/net/events?net=true&format=arrow&limit=100&wait=60".to_string();
    loop {
        let r = node.http.get(node.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let more = r.headers()["icefeed-more"] == "true";
        let next = r.headers()["icefeed-next-cursor"]
            .to_str()
            .unwrap()
            .to_string();
        let body = r.bytes().await.unwrap();
        let reader =
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap();
        rows.push(reader.map(|b| b.unwrap().num_rows()).sum::<usize>());
        if !more {
            break;
        }
        path = format!("/v1/subscriptions/net/events?after={next}&format=arrow&limit=100");
    }
    assert_eq!(rows, vec![5, 2]);

    // Table a's events come first: a cursor inside a's range commits nothing, one
    // inside b's range commits a's end.
    assert_eq!(
        cursors.len(),
        3,
        "inside a, inside b (being computed), the end"
    );
    let (status, acked) = node
        .post(
            "/v1/subscriptions/net/ack",
            &json!({"position": cursors[0]}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["lag"]["events"], 10);
    let inside_b = &cursors[1];
    let (status, acked) = node
        .post("/v1/subscriptions/net/ack", &json!({"position": inside_b}))
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(
        acked["lag"]["events"], 2,
        "b's events are not committed yet"
    );
    let (status, acked) = node
        .post(
            "/v1/subscriptions/net/ack",
            &json!({"position": cursors.last().unwrap()}),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["lag"]["events"], 0);
    node.shutdown().await;
}

/// Net changes over a feed whose schema changed answer `422 net_range_spans_schemas`
/// with `split_at`, the start of the first change set of another schema; the range up to
/// it holds events of the first schema only.
pub(crate) async fn check_split_at_schema_changes(node: &Node, id: &str) -> Result<(), String> {
    let base = format!("/v1/tables/{id}/changes?net=true");
    let (status, page) = node.get(&base).await;
    if status != 422 || page["code"] != "net_range_spans_schemas" {
        return Err(format!("net changes across schemas: {status} {page}"));
    }
    let split = page["split_at"].as_str().ok_or("no split_at")?.to_string();
    let (events, _) = node.all_events(id, None, 500).await;
    let first_schema = &events[0]["schema_id"];
    let (status, net) = node
        .get(&format!("{base}&until={split}&wait=60&limit=10000"))
        .await;
    if status != 200 || net["next"] != split.as_str() {
        return Err(format!("net changes up to split_at: {status} {net}"));
    }
    match net["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| &e["schema_id"] != first_schema)
    {
        Some(e) => Err(format!("an event of another schema before split_at: {e}")),
        None => Ok(()),
    }
}

/// Identifier columns that are not unique at one end of a range (appends of one key
/// twice publish fine, as inserts) fail the range's computation with the reason, and the
/// failed range is dropped, so asking again computes it afresh.
#[tokio::test]
async fn a_range_whose_keys_are_not_unique_fails_with_the_reason() {
    let wh = Warehouse::new().await;
    let (node, _store) = Node::start_fresh().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let t = wh.append(&t, &[orders(2..=3)]).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    for _ in 0..2 {
        let (status, page) = node
            .get(&format!("/v1/tables/{id}/changes?net=true&wait=60"))
            .await;
        assert_eq!(status, 422, "{page}");
        assert_eq!(page["code"], "net_changes_failed");
        assert_eq!(page["failure_code"], "identifier_columns_invalid");
        assert!(
            page["detail"].as_str().unwrap().contains("not unique"),
            "{page}"
        );
    }
    node.shutdown().await;
}

/// A range nobody reads for `retention.net_idle` is dropped with its segments: its
/// cursors answer 410, and asking for the range again computes it anew.
#[tokio::test]
async fn ranges_nobody_reads_are_dropped_with_their_segments() {
    let wh = Warehouse::new().await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.retention.interval = std::time::Duration::from_millis(100);
    settings.retention.net_idle = std::time::Duration::from_secs(1);
    let node = Node::start(settings).await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=5)]).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (status, page) = node
        .get(&format!("/v1/tables/{id}/changes?net=true&limit=2&wait=60"))
        .await;
    assert_eq!(status, 200, "{page}");
    let inside = page["next"].as_str().unwrap().to_string();
    let net_dir = || {
        walkdir(store.path())
            .into_iter()
            .filter(|p| p.contains("/net/") || p.contains("/net-"))
            .collect::<Vec<_>>()
    };
    assert!(!net_dir().is_empty(), "the result is in the change store");
    // Reading the range would keep it: only the change store is watched.
    crate::support::wait_until(std::time::Duration::from_secs(30), || async {
        net_dir().is_empty().then_some(())
    })
    .await;
    let (status, page) = node
        .get(&format!("/v1/tables/{id}/changes?after={inside}"))
        .await;
    assert_eq!(status, 410, "{page}");
    assert_eq!(page["code"], "net_range_expired");
    let (status, page) = node
        .get(&format!("/v1/tables/{id}/changes?net=true&wait=60"))
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 5);
    node.shutdown().await;
}

/// Every file below `dir`, as paths.
fn walkdir(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}
