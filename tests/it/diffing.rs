//! What the differential tests share: the diff of two table states into the change set
//! icefeed must publish, the comparison of a table's feed with those change sets, and the
//! seed lists of the environment. The oracles (oracle.rs: tables written with the iceberg
//! crate, spark.rs: tables written by Spark) differ in how they write and read tables.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Node;

/// One change, normalized for comparison: `[op, key, before, after]` as JSON text (absent
/// members are null). Order within a change set is not part of the contract.
pub(crate) fn change(op: &str, key: &Value, before: &Value, after: &Value) -> String {
    serde_json::to_string(&json!([op, key, before, after])).unwrap()
}

pub(crate) fn key_of(row: &Value, key_columns: &[&str]) -> Value {
    let mut key = serde_json::Map::new();
    for c in key_columns {
        key.insert(c.to_string(), row[*c].clone());
    }
    Value::Object(key)
}

/// What turning `prev` into `cur` must publish: by key with identifier columns (changed
/// row: update, missing: delete, new: insert), as multisets without (deletes and inserts).
pub(crate) fn diff(prev: &[Value], cur: &[Value], key_columns: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if key_columns.is_empty() {
        let mut counts: BTreeMap<String, (i64, Value)> = BTreeMap::new();
        for (rows, sign) in [(prev, -1), (cur, 1)] {
            for row in rows {
                let entry = counts
                    .entry(serde_json::to_string(row).unwrap())
                    .or_insert((0, row.clone()));
                entry.0 += sign;
            }
        }
        for (count, row) in counts.values() {
            for _ in 0..count.unsigned_abs() {
                if *count < 0 {
                    out.push(change("delete", &Value::Null, row, &Value::Null));
                } else {
                    out.push(change("insert", &Value::Null, &Value::Null, row));
                }
            }
        }
    } else {
        let index = |rows: &[Value]| {
            let mut map = BTreeMap::new();
            for row in rows {
                let key = key_of(row, key_columns);
                let previous = map.insert(serde_json::to_string(&key).unwrap(), (key, row.clone()));
                assert!(previous.is_none(), "duplicate key in one state: {row}");
            }
            map
        };
        let before = index(prev);
        let after = index(cur);
        for (k, (key, old)) in &before {
            match after.get(k) {
                None => out.push(change("delete", key, old, &Value::Null)),
                Some((_, new)) if new != old => out.push(change("update", key, old, new)),
                Some(_) => {}
            }
        }
        for (k, (key, new)) in &after {
            if !before.contains_key(k) {
                out.push(change("insert", key, &Value::Null, new));
            }
        }
    }
    out.sort();
    out
}

/// Waits until icefeed published the last of `snapshots` (id and label, oldest first) of
/// the table registered as `id`, then compares every snapshot's events with `expected`
/// (each snapshot's changes as `change` strings, sorted). `sequence` maps snapshot ids to
/// their sequence numbers. The error names the table (`name`) and every snapshot that
/// differs, or the snapshot icefeed stopped at.
pub(crate) async fn compare_feed(
    node: &Node,
    id: &str,
    name: &str,
    snapshots: &[(i64, String)],
    sequence: &HashMap<i64, i64>,
    expected: &[(i64, Vec<String>)],
) -> Result<(), String> {
    let last = snapshots.last().expect("a history with snapshots").0;
    let label = |snapshot: Option<i64>| {
        snapshots
            .iter()
            .position(|s| Some(s.0) == snapshot)
            .map_or("?".to_string(), |i| {
                format!("#{} {}", i + 1, snapshots[i].1)
            })
    };
    let start = Instant::now();
    loop {
        let (_, t) = node.get(&format!("/v1/tables/{id}")).await;
        if t["state"] == "error" {
            return Err(format!(
                "icefeed put {name} in the error state at snapshot {} ({}): {}",
                t["error_snapshot_id"],
                label(t["error_snapshot_id"].as_i64()),
                t["last_error"]
            ));
        }
        if t["checkpoint"]["snapshot_id"].as_i64() == Some(last) {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "icefeed did not reach snapshot {last} of {name}: {t}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (events, _) = node.all_events(id, None, 500).await;
    let mut got: HashMap<i64, Vec<String>> = HashMap::new();
    for e in &events {
        let snapshot = e["snapshot_id"].as_i64().expect("snapshot_id");
        if e["sequence_number"].as_i64() != sequence.get(&snapshot).copied() {
            return Err(format!(
                "{name}: event of an unknown snapshot or with a wrong sequence number \
                 (expected {:?}): {e}",
                sequence.get(&snapshot)
            ));
        }
        let member = |name: &str| e.get(name).cloned().unwrap_or(Value::Null);
        got.entry(snapshot).or_default().push(change(
            e["op"].as_str().expect("op"),
            &member("key"),
            &member("before"),
            &member("after"),
        ));
    }
    let mut failures = Vec::new();
    for (i, (snapshot, want)) in expected.iter().enumerate() {
        let mut have = got.remove(snapshot).unwrap_or_default();
        have.sort();
        if &have != want {
            let missing: Vec<&String> = want.iter().filter(|c| !have.contains(c)).collect();
            let extra: Vec<&String> = have.iter().filter(|c| !want.contains(c)).collect();
            failures.push(format!(
                "snapshot #{} {} ({}): oracle {} changes, icefeed {}\n  missing: {missing:?}\n  unexpected: {extra:?}",
                i + 1,
                snapshot,
                snapshots[i].1,
                want.len(),
                have.len()
            ));
        }
    }
    if !got.is_empty() {
        return Err(format!(
            "{name}: events of snapshots the history does not have: {:?}",
            got.keys()
        ));
    }
    if !failures.is_empty() {
        return Err(format!(
            "{name}: icefeed's change sets differ from the oracle's:\n{}",
            failures.join("\n")
        ));
    }
    Ok(())
}

/// The seeds the environment variable `var` names, if it is set.
pub(crate) fn seeds_in(var: &str) -> Option<Vec<u64>> {
    let spec = std::env::var(var).ok()?;
    let seeds = parse_seeds(&spec)
        .unwrap_or_else(|| panic!("{var}={spec:?}: use `7`, `1..20`, `1..=20` or `3,5,9`"));
    Some(seeds)
}

/// `7`, `1..20`, `1..=20` or `3,5,9`.
pub(crate) fn parse_seeds(spec: &str) -> Option<Vec<u64>> {
    let spec = spec.trim();
    if let Some((a, b)) = spec.split_once("..=") {
        return Some((a.trim().parse().ok()?..=b.trim().parse().ok()?).collect());
    }
    if let Some((a, b)) = spec.split_once("..") {
        return Some((a.trim().parse().ok()?..b.trim().parse().ok()?).collect());
    }
    spec.split(',')
        .map(|s| s.trim().parse().ok())
        .collect::<Option<Vec<u64>>>()
        .filter(|v| !v.is_empty())
}
