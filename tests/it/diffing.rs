//! What the differential tests share: the diff of two table states into the change set
//! icefeed must publish, the comparison of a table's feed with those change sets, and the
//! seed lists of the environment. The oracles (oracle.rs: tables written with the iceberg
//! crate, spark.rs: tables written by Spark) differ in how they write and read tables.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Node, id64};

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
    if key_columns.is_empty() {
        return diff_multisets(prev, cur);
    }
    let by_key = |rows| {
        pair_rows(rows, |row| {
            serde_json::to_string(&key_of(row, key_columns)).unwrap()
        })
    };
    diff_paired(&by_key(prev), &by_key(cur), |row| key_of(row, key_columns))
}

/// Deletes and inserts of whole rows: what `cur` has fewer or more times than `prev`.
fn diff_multisets(prev: &[Value], cur: &[Value]) -> Vec<String> {
    let mut counts: BTreeMap<String, (i64, Value)> = BTreeMap::new();
    for (rows, sign) in [(prev, -1), (cur, 1)] {
        for row in rows {
            let entry = counts
                .entry(serde_json::to_string(row).unwrap())
                .or_insert((0, row.clone()));
            entry.0 += sign;
        }
    }
    let mut out = Vec::new();
    for (count, row) in counts.values() {
        for _ in 0..count.unsigned_abs() {
            if *count < 0 {
                out.push(change("delete", &Value::Null, row, &Value::Null));
            } else {
                out.push(change("insert", &Value::Null, &Value::Null, row));
            }
        }
    }
    out.sort();
    out
}

/// A state's rows by what pairs them with the other state's rows: a text unique in the
/// state (their key, or their row id).
pub(crate) type Paired = BTreeMap<String, Value>;

/// `rows` by `pair`; two rows that pair alike are a broken oracle.
pub(crate) fn pair_rows(rows: &[Value], pair: impl Fn(&Value) -> String) -> Paired {
    let mut map = BTreeMap::new();
    for row in rows {
        let previous = map.insert(pair(row), row.clone());
        assert!(
            previous.is_none(),
            "two rows of one state pair alike: {row}"
        );
    }
    map
}

/// What turning the paired rows `before` into `after` must publish (sorted): a row whose
/// values changed is an update, a missing one a delete, a new one an insert; `key` is the
/// `key` member of a row's events (null: none).
pub(crate) fn diff_paired(
    before: &Paired,
    after: &Paired,
    key: impl Fn(&Value) -> Value,
) -> Vec<String> {
    let mut out = Vec::new();
    for (pair, old) in before {
        match after.get(pair) {
            None => out.push(change("delete", &key(old), old, &Value::Null)),
            Some(new) if new != old => out.push(change("update", &key(old), old, new)),
            Some(_) => {}
        }
    }
    for (pair, new) in after {
        if !before.contains_key(pair) {
            out.push(change("insert", &key(new), &Value::Null, new));
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
                label(id64(&t["error_snapshot_id"])),
                t["last_error"]
            ));
        }
        if id64(&t["checkpoint"]["snapshot_id"]) == Some(last) {
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
        let snapshot = id64(&e["snapshot_id"]).expect("snapshot_id");
        if id64(&e["sequence_number"]) != sequence.get(&snapshot).copied() {
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

/// A top-level column of a snapshot's schema: its Iceberg field id and name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Column {
    pub(crate) id: i32,
    pub(crate) name: String,
}

/// `row`, an object keyed by the names of schema `from`, as a row of schema `to`, matched
/// by field id as Iceberg reads an older file: a column `from` lacks reads null, a column
/// `to` lacks is gone, a renamed one takes its new name. Promoted values (int to long,
/// float to double, wider decimals) keep their JSON form.
pub(crate) fn project(row: &Value, from: &[Column], to: &[Column]) -> Value {
    let mut out = serde_json::Map::new();
    for column in to {
        let value = from
            .iter()
            .find(|c| c.id == column.id)
            .and_then(|c| row.get(&c.name))
            .cloned()
            .unwrap_or(Value::Null);
        out.insert(column.name.clone(), value);
    }
    Value::Object(out)
}

/// A snapshot as a differential test's oracle read it: its rows under its own schema.
pub(crate) trait OracleSnapshot {
    fn snapshot_id(&self) -> i64;
    fn sequence_number(&self) -> i64;
    /// What made it, for messages.
    fn label(&self) -> String;
    fn schema_id(&self) -> i32;
    /// Its schema's top-level columns, in order.
    fn columns(&self) -> Vec<Column>;
    /// Its schema's column types as Iceberg JSON writes them, when the oracle knows them.
    fn types(&self) -> Option<Vec<String>> {
        None
    }
    /// Its schema's identifier columns' names.
    fn identifier(&self) -> &[String];
    /// Its rows, keyed by its schema's names.
    fn rows(&self) -> &[Value];
}

/// What each snapshot must publish: its parent's rows read under its schema (by field
/// id), diffed with its own rows by its identifier columns.
pub(crate) fn expected_changes<S: OracleSnapshot>(snapshots: &[S]) -> Vec<(i64, Vec<String>)> {
    expected_changes_by(snapshots, |_, before, s| {
        let key: Vec<&str> = s.identifier().iter().map(String::as_str).collect();
        diff(before, s.rows(), &key)
    })
}

/// What each snapshot must publish: `diff(parent, before, snapshot)`, `before` being its
/// parent's rows read under its schema (by field id; none for the first snapshot).
pub(crate) fn expected_changes_by<S: OracleSnapshot>(
    snapshots: &[S],
    diff: impl Fn(Option<&S>, &[Value], &S) -> Vec<String>,
) -> Vec<(i64, Vec<String>)> {
    let mut out = Vec::new();
    let mut prev: Option<&S> = None;
    for s in snapshots {
        let columns = s.columns();
        let before: Vec<Value> = match prev {
            None => Vec::new(),
            Some(p) => {
                let from = p.columns();
                p.rows()
                    .iter()
                    .map(|r| project(r, &from, &columns))
                    .collect()
            }
        };
        out.push((s.snapshot_id(), diff(prev, &before, s)));
        prev = Some(s);
    }
    out
}

/// Each snapshot's label for messages, and its sequence number (for `compare_feed`).
pub(crate) fn labels<S: OracleSnapshot>(
    snapshots: &[S],
) -> (Vec<(i64, String)>, HashMap<i64, i64>) {
    let labels = snapshots
        .iter()
        .map(|s| (s.snapshot_id(), s.label()))
        .collect();
    let sequence = snapshots
        .iter()
        .map(|s| (s.snapshot_id(), s.sequence_number()))
        .collect();
    (labels, sequence)
}

/// Every event of table `id` carries its snapshot's schema id, and icefeed answers each
/// such schema with that snapshot's columns (ids, names, and types where known) and
/// identifier fields.
pub(crate) async fn check_schemas<S: OracleSnapshot>(
    node: &Node,
    id: &str,
    snapshots: &[S],
) -> Result<(), String> {
    let by_id: HashMap<i64, &S> = snapshots.iter().map(|s| (s.snapshot_id(), s)).collect();
    let (events, _) = node.all_events(id, None, 500).await;
    let mut failures = Vec::new();
    let mut used = BTreeMap::new();
    for e in &events {
        let Some(s) = id64(&e["snapshot_id"]).and_then(|s| by_id.get(&s)) else {
            failures.push(format!("event of an unknown snapshot: {e}"));
            continue;
        };
        if e["schema_id"].as_i64() != Some(i64::from(s.schema_id())) {
            failures.push(format!(
                "event of snapshot {} ({}) has schema_id {}, the snapshot's schema is {}: {e}",
                s.snapshot_id(),
                s.label(),
                e["schema_id"],
                s.schema_id()
            ));
        }
        used.insert(s.schema_id(), *s);
    }
    let normalize = |t: &str| t.replace([' ', '"'], "");
    for (schema_id, s) in used {
        let (status, schema) = node
            .get(&format!("/v1/tables/{id}/schemas/{schema_id}"))
            .await;
        if status != 200 {
            failures.push(format!(
                "GET schema {schema_id}, which events carry: {status} {schema}"
            ));
            continue;
        }
        let fields = schema["fields"].as_array().cloned().unwrap_or_default();
        let got: Vec<Column> = fields
            .iter()
            .map(|f| Column {
                id: f["id"].as_i64().unwrap_or(-1) as i32,
                name: f["name"].as_str().unwrap_or("?").to_string(),
            })
            .collect();
        let want = s.columns();
        if got != want {
            failures.push(format!(
                "schema {schema_id}: icefeed answers fields {got:?}, the snapshot's schema has {want:?}"
            ));
        }
        if let Some(want) = s.types() {
            let got: Vec<String> = fields
                .iter()
                .map(|f| normalize(&f["type"].to_string()))
                .collect();
            let want: Vec<String> = want.iter().map(|t| normalize(t)).collect();
            if got != want {
                failures.push(format!(
                    "schema {schema_id}: icefeed answers types {got:?}, the snapshot's schema has {want:?}"
                ));
            }
        }
        let identifier: Vec<i32> = s
            .identifier()
            .iter()
            .filter_map(|n| want.iter().find(|c| &c.name == n).map(|c| c.id))
            .collect();
        // Iceberg leaves the member out when there are none.
        let served = schema
            .get("identifier-field-ids")
            .cloned()
            .unwrap_or(json!([]));
        if served != json!(identifier) {
            failures.push(format!(
                "schema {schema_id}: icefeed answers identifier-field-ids {served}, the \
                 snapshot's schema has {identifier:?}"
            ));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n  "))
    }
}
