//! Push subscriptions against the real OpenSearch node: the index ends equal to the
//! table, document for document and version for version, through copy-on-write updates,
//! partition moves, deletes, throttling, outages, a killed node, mapping conflicts and
//! rewinds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use serde_json::{Value, json};

use crate::fault_proxy::{Fault, FaultProxy};
use crate::support::{
    Node, Warehouse, fresh_database, id64, opensearch_url, test_settings, wait_until,
};

/// A row: (region, v, note). `region` is the partition column.
type Row = (String, i64, Option<String>);

/// The table as the test wrote it, and the sequence number of each row's last change.
#[derive(Default, Clone)]
struct Model {
    rows: BTreeMap<i64, Row>,
    versions: BTreeMap<i64, i64>,
    /// Sequence numbers of deletes, per id.
    deleted: BTreeMap<i64, i64>,
}

fn schema() -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids(vec![1])
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "region", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "v", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(4, "note", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap()
}

fn spec() -> UnboundPartitionSpec {
    UnboundPartitionSpec::builder()
        .add_partition_field(2, "region", Transform::Identity)
        .unwrap()
        .build()
}

fn batch(rows: &BTreeMap<i64, Row>) -> RecordBatch {
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema()).unwrap());
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(rows.keys().copied().collect::<Vec<_>>())),
        Arc::new(StringArray::from(
            rows.values().map(|r| r.0.clone()).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.values().map(|r| r.1).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            rows.values().map(|r| r.2.clone()).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(arrow, columns).unwrap()
}

/// The external version the changes of `t`'s current snapshot are pushed with: its
/// sequence number times 256 (see README, push subscriptions).
fn version(t: &Table) -> i64 {
    t.metadata().current_snapshot().unwrap().sequence_number() * 256
}

impl Model {
    fn row(id: i64, region: &str, v: i64) -> (i64, Row) {
        (id, (region.to_string(), v, None))
    }

    /// Appends `rows` (new ids) as one snapshot.
    async fn append(&mut self, wh: &Warehouse, t: &Table, rows: &[(i64, Row)]) -> Table {
        let new: BTreeMap<i64, Row> = rows.iter().cloned().collect();
        let t = wh.append(t, &[batch(&new)]).await;
        for (id, row) in new {
            self.rows.insert(id, row);
            self.versions.insert(id, version(&t));
        }
        t
    }

    /// Rewrites the whole table (copy-on-write) with `change` applied to its rows.
    async fn rewrite(
        &mut self,
        wh: &Warehouse,
        t: &Table,
        change: impl FnOnce(&mut BTreeMap<i64, Row>),
    ) -> Table {
        let before = self.rows.clone();
        change(&mut self.rows);
        let t = wh.overwrite_all(t, &[batch(&self.rows)]).await;
        let seq = version(&t);
        for (id, row) in &self.rows {
            if before.get(id) != Some(row) {
                self.versions.insert(*id, seq);
            }
        }
        for id in before.keys().filter(|id| !self.rows.contains_key(id)) {
            self.versions.remove(id);
            self.deleted.insert(*id, seq);
        }
        t
    }

    /// The documents the index must hold: id → (version, source).
    fn documents(&self) -> BTreeMap<String, (i64, Value)> {
        self.rows
            .iter()
            .map(|(id, (region, v, note))| {
                let doc = json!({"id": id, "region": region, "v": v, "note": note});
                (id.to_string(), (self.versions[id], doc))
            })
            .collect()
    }
}

/// Builds a history: inserts, copy-on-write updates (some moving partitions), deletes,
/// a delete and re-insert of the same id.
async fn history(wh: &Warehouse, model: &mut Model) -> Table {
    let t = wh.create("shop.items", schema(), Some(spec())).await;
    let rows: Vec<_> = (1..=60)
        .map(|i| Model::row(i, ["eu", "us", "ap"][i as usize % 3], i))
        .collect();
    let t = model.append(wh, &t, &rows).await;
    let more: Vec<_> = (61..=80).map(|i| Model::row(i, "eu", i)).collect();
    let t = model.append(wh, &t, &more).await;
    // Updates in place, updates that move partition, and deletes.
    let t = model
        .rewrite(wh, &t, |rows| {
            for id in (1..=30).step_by(3) {
                rows.get_mut(&id).unwrap().1 += 1000;
            }
            for id in (2..=40).step_by(5) {
                rows.get_mut(&id).unwrap().0 = "moved".into();
            }
            for id in 70..=75 {
                rows.remove(&id);
            }
        })
        .await;
    // Delete and re-create an id, delete more, update again.
    let t = model
        .rewrite(wh, &t, |rows| {
            rows.remove(&5);
            rows.remove(&50);
            rows.get_mut(&1).unwrap().1 += 1;
        })
        .await;
    model
        .rewrite(wh, &t, |rows| {
            rows.insert(5, ("ap".into(), 5005, None));
            rows.insert(72, ("us".into(), 7272, None));
        })
        .await
}

pub(crate) fn unique_index(test: &str) -> String {
    format!("icefeed-push-{test}-{}", uuid::Uuid::new_v4().simple())
}

/// A push target at `endpoint`, one shard, with extra fields merged in.
pub(crate) fn target(endpoint: &str, index: &str, extra: Value) -> Value {
    let mut target = json!({
        "endpoints": [endpoint], "index": index,
        "index_settings": {"number_of_shards": 1, "number_of_replicas": 0},
        "batch": {"max_documents": 25},
    });
    for (k, v) in extra.as_object().unwrap() {
        target[k] = v.clone();
    }
    target
}

/// Registers the table and creates a push subscription of it; returns the subscription id.
/// Creates a push subscription named after its index (unique, so that metrics of tests
/// running in parallel do not mix).
async fn push_subscription(node: &Node, wh: &Warehouse, target: Value) -> String {
    let name = target["index"].as_str().unwrap().to_string();
    let table = node
        .register(&wh.registration("shop.items", json!({"start": "earliest"})))
        .await;
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": name, "tables": [table], "kind": "opensearch",
                    "target": target}),
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    sub["id"].as_str().unwrap().to_string()
}

/// Fast retries and claims for test nodes.
fn push_settings(s: &mut icefeed::config::Settings) {
    s.push.claim_interval = Duration::from_millis(100);
    s.push.retry_initial = Duration::from_millis(10);
    s.push.retry_max = Duration::from_millis(200);
    s.push.backoff = Duration::from_millis(300);
}

pub(crate) async fn push_node() -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, dir.path());
    push_settings(&mut settings);
    (Node::start(settings).await, dir)
}

/// Waits until the subscription has pushed everything the table has.
async fn caught_up(node: &Node, sub: &str, table_head: &Table) -> Value {
    let snapshot = table_head
        .metadata()
        .current_snapshot()
        .unwrap()
        .snapshot_id();
    let (_, s) = node.get(&format!("/v1/subscriptions/{sub}")).await;
    let table = format!(
        "/v1/tables/{}",
        s["tables"][0]["table_id"].as_str().unwrap()
    );
    wait_until(Duration::from_secs(60), || async {
        // The checkpoint first: a lag read before the head is published can be 0 because
        // icefeed has not seen the head yet, not because the subscription pushed it.
        let (_, t) = node.get(&table).await;
        if id64(&t["checkpoint"]["snapshot_id"]) != Some(snapshot) {
            return None;
        }
        let (_, s) = node.get(&format!("/v1/subscriptions/{sub}")).await;
        assert_ne!(s["push"]["state"], "failed", "{s}");
        (s["lag"]["events"] == 0 && s["lag"]["snapshots"] == 0).then_some(s)
    })
    .await
}

async fn scrape(node: &Node) -> String {
    node.http
        .get(node.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the sample of `name` whose labels include all of `labels` (`k="v"`).
fn gauge(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        let have: Vec<&str> = set.split(',').collect();
        labels
            .iter()
            .all(|l| have.contains(l))
            .then(|| value.trim().parse().ok())?
    })
}

/// The `icefeed_push_state` gauges of a subscription: running, backing off, paused, failed.
fn states(metrics: &str, sub_label: &str) -> Vec<Option<f64>> {
    ["running", "backing_off", "paused", "failed"]
        .iter()
        .map(|s| {
            gauge(
                metrics,
                "icefeed_push_state",
                &[sub_label, &format!("state=\"{s}\"")],
            )
        })
        .collect()
}

/// Every document of `index`: id → (version, source).
pub(crate) async fn documents(index: &str) -> BTreeMap<String, (i64, Value)> {
    let http = reqwest::Client::new();
    let base = opensearch_url();
    http.post(format!("{base}/{index}/_refresh"))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let answer: Value = http
        .post(format!("{base}/{index}/_search"))
        .json(&json!({"size": 10000, "version": true, "query": {"match_all": {}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["hits"]["hits"]
        .as_array()
        .expect("search hits")
        .iter()
        .map(|h| {
            (
                h["_id"].as_str().unwrap().to_string(),
                (h["_version"].as_i64().unwrap(), h["_source"].clone()),
            )
        })
        .collect()
}

fn assert_index_equals(actual: &BTreeMap<String, (i64, Value)>, model: &Model) {
    let expected = model.documents();
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the index holds other ids than the table"
    );
    for (id, want) in &expected {
        assert_eq!(&actual[id], want, "document {id} (version, source)");
    }
}

#[tokio::test]
async fn the_index_ends_equal_to_the_table_through_updates_moves_and_deletes() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let (node, _dir) = push_node().await;
    let index = unique_index("history");
    let sub = push_subscription(
        &node,
        &wh,
        target(
            &opensearch_url(),
            &index,
            json!({"auth": {"type": "basic", "username": "u", "password": "PUSH-SECRET-1"}}),
        ),
    )
    .await;
    let s = caught_up(&node, &sub, &t).await;
    assert_index_equals(&documents(&index).await, &model);
    // Secrets are stored but never shown.
    assert!(!s.to_string().contains("PUSH-SECRET-1"), "{s}");
    assert_eq!(s["target"]["auth"]["password"], "********");
    assert_eq!(s["push"]["state"], "running");
    assert_eq!(s["push"]["documents_rejected"], 0);
    assert!(s["push"]["documents_deleted"].as_i64().unwrap() >= 8, "{s}");

    // Later commits keep flowing, woken by the publish notification.
    let t = model
        .rewrite(&wh, &t, |rows| {
            rows.remove(&1);
            rows.get_mut(&2).unwrap().0 = "eu".into();
        })
        .await;
    caught_up(&node, &sub, &t).await;
    assert_index_equals(&documents(&index).await, &model);

    // A push subscription is not pulled.
    let (status, problem) = node.get(&format!("/v1/subscriptions/{sub}/events")).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("push_subscription"))
    );
    let metrics = scrape(&node).await;
    let sub_label = format!("subscription=\"{index}\"");
    // Labelled by the subscription's id, which never changes, as well as its name.
    let id_label = format!("subscription_id=\"{sub}\"");
    assert!(
        gauge(
            &metrics,
            "icefeed_push_documents_indexed_total",
            &[&id_label, &sub_label]
        )
        .is_some_and(|n| n > 0.0),
        "{metrics}"
    );
    // The gauges: running and caught up (set when the worker finds nothing more to push).
    wait_until(Duration::from_secs(10), || async {
        let metrics = scrape(&node).await;
        let gauge = |name: &str, labels: &[&str]| gauge(&metrics, name, labels);
        let states = states(&metrics, &sub_label);
        let lag = [
            "icefeed_push_lag_events",
            "icefeed_push_lag_snapshots",
            "icefeed_push_lag_seconds",
        ]
        .map(|name| gauge(name, &[&id_label, &sub_label]));
        (states == [Some(1.0), Some(0.0), Some(0.0), Some(0.0)] && lag == [Some(0.0); 3])
            .then_some(())
    })
    .await;
    // Paused: the node that saw it says so; deleted: no node reports it any more.
    let path = format!("/v1/subscriptions/{sub}");
    assert_eq!(node.patch(&path, &json!({"paused": true})).await.0, 200);
    wait_until(Duration::from_secs(10), || async {
        (states(&scrape(&node).await, &sub_label) == [Some(0.0), Some(0.0), Some(1.0), Some(0.0)])
            .then_some(())
    })
    .await;
    assert_eq!(node.delete(&path).await, 204);
    wait_until(Duration::from_secs(10), || async {
        (states(&scrape(&node).await, &sub_label) == [Some(0.0); 4]).then_some(())
    })
    .await;
    node.shutdown().await;
}

/// A document id rendered from a column updates change (`{region}-{id}`; the history
/// moves rows between regions): such an update deletes the old document and indexes the
/// new one, so no document of a row's old values lingers.
#[tokio::test]
async fn an_update_that_changes_a_template_id_moves_the_document() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let (node, _dir) = push_node().await;
    let index = unique_index("moves");
    let by_region = json!({"document_id": "{region}-{id}"});
    let sub = push_subscription(&node, &wh, target(&opensearch_url(), &index, by_region)).await;
    let s = caught_up(&node, &sub, &t).await;
    let have = documents(&index).await;
    let want: BTreeMap<String, Value> = model
        .documents()
        .into_values()
        .map(|(_, doc)| {
            (
                format!("{}-{}", doc["region"].as_str().unwrap(), doc["id"]),
                doc,
            )
        })
        .collect();
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the index holds other documents than the table's rows"
    );
    for (id, doc) in &want {
        assert_eq!(&have[id].1, doc, "document {id}");
    }
    assert_eq!(s["push"]["documents_rejected"], 0, "{s}");
    node.shutdown().await;
}

#[tokio::test]
async fn throttling_outages_and_dropped_connections_lose_nothing() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, dir.path());
    push_settings(&mut settings);
    settings.push.max_retries = 3;
    let node = Node::start(settings).await;
    let proxy = FaultProxy::start(&opensearch_url()).await;
    // Enough 503s in a row to exhaust the retries twice: the subscription backs off.
    let mut faults = vec![Fault::Status(503); 9];
    faults.extend([
        Fault::Status(429),
        Fault::Drop,
        Fault::RejectItems,
        Fault::Status(503),
        Fault::Drop,
        Fault::Status(429),
        Fault::RejectItems,
    ]);
    proxy.script("/_bulk", faults);
    let index = unique_index("faults");
    let sub = push_subscription(&node, &wh, target(&proxy.url, &index, json!({}))).await;
    wait_until(Duration::from_secs(30), || async {
        let (_, s) = node.get(&format!("/v1/subscriptions/{sub}")).await;
        (s["push"]["state"] == "backing_off" && s["state"] == "backing_off").then_some(())
    })
    .await;
    let s = caught_up(&node, &sub, &t).await;
    assert_eq!(proxy.pending(), 0, "every scripted fault was met");
    assert_eq!(s["push"]["state"], "running", "{s}");
    assert_eq!(s["push"]["documents_rejected"], 0, "{s}");
    assert!(
        s["push"]["last_error"]
            .as_str()
            .unwrap()
            .contains("injected 503"),
        "{s}"
    );
    assert_index_equals(&documents(&index).await, &model);
    node.shutdown().await;
}

/// The dead letters at `path` once no redrive is queued any more.
async fn settled(node: &Node, path: &str) -> Value {
    wait_until(Duration::from_secs(20), || async {
        let (status, page) = node.get(path).await;
        assert_eq!(status, 200, "{page}");
        let queued = page["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| !d["queued_at"].is_null());
        (!queued).then_some(page)
    })
    .await
}

#[tokio::test]
async fn mapping_conflicts_go_to_the_dead_letters_and_redrive_after_the_fix() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = wh.create("shop.items", schema(), Some(spec())).await;
    let bad = |id: i64| (id, ("eu".to_string(), id, Some(format!("bad-{id}"))));
    let mut rows: Vec<_> = (1..=30).map(|i| Model::row(i, "us", i)).collect();
    for id in [3, 7, 11] {
        rows[id as usize - 1] = bad(id);
    }
    let t = model.append(&wh, &t, &rows).await;
    // 11 is fixed by a later update, which supersedes its dead letter.
    let t = model
        .rewrite(&wh, &t, |rows| {
            rows.get_mut(&11).unwrap().2 = None;
        })
        .await;
    let (node, _dir) = push_node().await;
    let index = unique_index("mapping");
    let mappings = json!({"properties": {"note": {"type": "long"}}});
    let sub = push_subscription(
        &node,
        &wh,
        target(&opensearch_url(), &index, json!({"mappings": mappings})),
    )
    .await;
    let s = caught_up(&node, &sub, &t).await;
    assert_eq!(s["push"]["documents_rejected"], 3, "{s}");
    assert_eq!(s["push"]["dead_letters"], 2, "{s}");

    let dead_ids = |page: &Value| -> Vec<String> {
        page["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["document_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, page) = node
        .get(&format!("/v1/subscriptions/{sub}/dead-letters?limit=1"))
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(dead_ids(&page), ["3"]);
    let letter = &page["dead_letters"][0];
    assert_eq!(letter["error_type"], "mapper_parsing_exception");
    assert_eq!(letter["event"]["after"]["note"], "bad-3");
    let (_, rest) = node
        .get(&format!(
            "/v1/subscriptions/{sub}/dead-letters?after={}",
            page["next"].as_str().unwrap()
        ))
        .await;
    assert_eq!(dead_ids(&rest), ["7"]);
    assert_eq!(rest["next"], Value::Null);

    // Everything else went through.
    let mut expected = model.clone();
    expected.rows.retain(|id, _| ![3, 7].contains(id));
    assert_index_equals(&documents(&index).await, &expected);

    // Redriving before the fix: the pushing node sends them again and they come back
    // with the same failures, no longer queued.
    let redrive = format!("/v1/subscriptions/{sub}/dead-letters/redrive");
    let letters = format!("/v1/subscriptions/{sub}/dead-letters");
    let (status, result) = node.post(&redrive, &json!({})).await;
    assert_eq!(status, 202, "{result}");
    assert_eq!(result, json!({"queued": 2, "next": null}));
    let refused_again = settled(&node, &letters).await;
    assert_eq!(dead_ids(&refused_again), ["3", "7"]);
    for letter in refused_again["dead_letters"].as_array().unwrap() {
        assert_eq!(letter["error_type"], "mapper_parsing_exception", "{letter}");
    }
    // A page at a time: `next` moves past the queued ones.
    let (_, first) = node.post(&redrive, &json!({"limit": 1})).await;
    assert_eq!(first["queued"].as_u64(), Some(1), "{first}");
    let (_, second) = node
        .post(&redrive, &json!({"after": first["next"], "limit": 1}))
        .await;
    assert_eq!(second["queued"].as_u64(), Some(1), "{second}");
    assert_ne!(first["next"], second["next"]);
    let (_, last) = node
        .post(&redrive, &json!({"after": second["next"], "limit": 1}))
        .await;
    assert_eq!(last, json!({"queued": 0, "next": null}));
    settled(&node, &letters).await;
    for (body, code) in [
        (json!({"ids": [1], "limit": 5}), "invalid_redrive"),
        (json!({"ids": [1], "after": 5}), "invalid_redrive"),
        (json!({"ids": []}), "limit_out_of_range"),
        (json!({"limit": 0}), "limit_out_of_range"),
        (json!({"limit": 1001}), "limit_out_of_range"),
    ] {
        let (status, problem) = node.post(&redrive, &body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }

    // Fix the mapping: malformed values are kept in the source, not indexed.
    reqwest::Client::new()
        .put(format!("{}/{index}/_mapping", opensearch_url()))
        .json(&json!({"properties": {"note": {"type": "long", "ignore_malformed": true}}}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    // Dead-letter ids are answered as strings and taken back as strings.
    let id3 = letter["id"].as_str().unwrap();
    let (status, result) = node.post(&redrive, &json!({"ids": [id3]})).await;
    assert_eq!((status, result), (202, json!({"queued": 1, "next": null})));
    assert_eq!(dead_ids(&settled(&node, &letters).await), ["7"]);
    let (_, result) = node.post(&redrive, &json!({})).await;
    assert_eq!(result["queued"].as_u64(), Some(1));
    let page = settled(&node, &letters).await;
    assert_eq!(page["dead_letters"], json!([]));
    assert_index_equals(&documents(&index).await, &model);
    node.shutdown().await;
}

#[tokio::test]
async fn a_rewind_reproduces_the_same_end_state() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let (node, _dir) = push_node().await;
    let index = unique_index("rewind");
    // Small batches make a replay long enough to rewind in the middle of.
    let small = json!({"batch": {"max_documents": 3}});
    let sub = push_subscription(&node, &wh, target(&opensearch_url(), &index, small)).await;
    let before = caught_up(&node, &sub, &t).await;
    assert_index_equals(&documents(&index).await, &model);

    let rewind = format!("/v1/subscriptions/{sub}/rewind");
    let (status, problem) = node
        .post(&rewind, &json!({"earliest": true, "snapshot_id": 1}))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("invalid_rewind"))
    );

    // Paused, the worker leaves the positions alone while we rewind.
    let path = format!("/v1/subscriptions/{sub}");
    let (status, paused) = node.patch(&path, &json!({"paused": true})).await;
    assert_eq!(
        (status, paused["push"]["state"].as_str()),
        (200, Some("paused")),
        "{paused}"
    );
    let (status, s) = node.post(&rewind, &json!({"earliest": true})).await;
    assert_eq!(status, 200, "{s}");
    assert_ne!(s["committed"], before["committed"]);
    assert!(s["lag"]["events"].as_i64().unwrap() > 0, "{s}");
    // A rewind only moves back.
    let (status, problem) = node
        .post(&rewind, &json!({"position": before["committed"]}))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("rewind_forward"))
    );

    let (status, _) = node.patch(&path, &json!({"paused": false})).await;
    assert_eq!(status, 200);
    let again = caught_up(&node, &sub, &t).await;
    assert_eq!(again["committed"], before["committed"]);
    assert_index_equals(&documents(&index).await, &model);
    // The replay met documents already at their versions (or deleted at newer ones).
    let skipped = again["push"]["documents_skipped"].as_i64().unwrap();
    assert!(skipped > 0, "{again}");

    // Rewound while pushing: once the replay has committed a batch, rewinding again
    // lands on a batch in flight (and the one committing behind it) most of the time.
    let (status, earliest) = node.post(&rewind, &json!({"earliest": true})).await;
    assert_eq!(status, 200, "{earliest}");
    wait_until(Duration::from_secs(30), || async {
        let (_, s) = node.get(&path).await;
        (s["committed"] != earliest["committed"]).then_some(())
    })
    .await;
    let (status, s) = node.post(&rewind, &json!({"earliest": true})).await;
    assert_eq!(status, 200, "{s}");
    let third = caught_up(&node, &sub, &t).await;
    assert_eq!(third["committed"], before["committed"]);
    assert_index_equals(&documents(&index).await, &model);
    node.shutdown().await;
}

/// With claim rounds an hour apart, subscriptions are still claimed at once when they are
/// created or resumed, and a node that stops hands its subscription to another at once.
#[tokio::test]
async fn announced_subscriptions_are_claimed_at_once_and_handed_over_on_shutdown() {
    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let (database, dir) = (fresh_database().await, tempfile::tempdir().unwrap());
    let start = || async {
        let mut settings = test_settings(&database, dir.path());
        push_settings(&mut settings);
        settings.push.claim_interval = Duration::from_secs(3600);
        Node::start(settings).await
    };
    let first = start().await;
    let index = unique_index("announced");
    let sub = push_subscription(&first, &wh, target(&opensearch_url(), &index, json!({}))).await;
    caught_up(&first, &sub, &t).await;

    let path = format!("/v1/subscriptions/{sub}");
    assert_eq!(first.patch(&path, &json!({"paused": true})).await.0, 200);
    wait_until(Duration::from_secs(10), || async {
        let (_, s) = first.get(&path).await;
        s["push"]["node"].is_null().then_some(())
    })
    .await;
    let t = model.append(&wh, &t, &[Model::row(101, "eu", 1)]).await;
    assert_eq!(first.patch(&path, &json!({"paused": false})).await.0, 200);
    caught_up(&first, &sub, &t).await;
    assert_index_equals(&documents(&index).await, &model);

    let second = start().await;
    let (_, s) = second.get(&path).await;
    let pushed_by = s["push"]["node"].clone();
    assert!(pushed_by.is_string(), "{s}");
    first.shutdown().await;
    let t = model.append(&wh, &t, &[Model::row(102, "us", 2)]).await;
    let s = caught_up(&second, &sub, &t).await;
    assert_ne!(s["push"]["node"], pushed_by, "{s}");
    assert_index_equals(&documents(&index).await, &model);
    second.shutdown().await;
}

#[tokio::test]
async fn push_subscriptions_are_checked_with_stable_codes() {
    let wh = Warehouse::new().await;
    wh.create("shop.items", schema(), Some(spec())).await;
    let (node, _dir) = push_node().await;
    let table = node
        .register(&wh.registration("shop.items", json!({"identifier_columns": []})))
        .await;
    let index = unique_index("codes");
    let cases = [
        (json!({"kind": "opensearch"}), "target_required"),
        (
            json!({"target": target(&opensearch_url(), &index, json!({}))}),
            "target_not_allowed",
        ),
        (
            json!({"kind": "opensearch", "target": target("ftp://x", &index, json!({}))}),
            "invalid_target",
        ),
        (
            json!({"kind": "opensearch", "target": target(&opensearch_url(), "Upper", json!({}))}),
            "invalid_target",
        ),
        (
            json!({"kind": "opensearch", "target": target(&opensearch_url(), &index, json!({}))}),
            "document_id_required",
        ),
    ];
    for (extra, code) in cases {
        let mut body = json!({"name": "s", "tables": [table]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, problem) = node.post("/v1/subscriptions", &body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (400, Some(code)),
            "{problem}"
        );
    }
    // A template id makes a table without identifier columns pushable.
    let body = json!({"name": "s", "tables": [table], "kind": "opensearch",
        "target": target(&opensearch_url(), &index, json!({"document_id": "{id}"}))});
    let (status, sub) = node.post("/v1/subscriptions", &body).await;
    assert_eq!(status, 201, "{sub}");
    let (status, pull) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "p", "tables": [table]}),
        )
        .await;
    assert_eq!(status, 201, "{pull}");
    let (status, problem) = node.get("/v1/subscriptions/p/dead-letters").await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("not_a_push_subscription"))
    );
    let (status, problem) = node
        .post(
            "/v1/subscriptions/s/ack",
            &json!({"position": sub["committed"]}),
        )
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("push_subscription"))
    );
    node.shutdown().await;
}

/// (document id, version) of every change OpenSearch applied, in the order it answered.
fn applied_versions(exchanges: &[(bytes::Bytes, bytes::Bytes)]) -> Vec<(String, i64)> {
    let mut applied = Vec::new();
    for (request, answer) in exchanges {
        let answer: Value = serde_json::from_slice(answer).unwrap();
        let mut actions = Vec::new();
        let mut lines = request.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        while let Some(line) = lines.next() {
            let action: Value = serde_json::from_slice(line).unwrap();
            let (name, meta) = action.as_object().unwrap().iter().next().unwrap();
            if name == "index" {
                lines.next();
            }
            actions.push((
                meta["_id"].as_str().unwrap().to_string(),
                meta["version"].as_i64().unwrap(),
            ));
        }
        for (action, item) in actions.into_iter().zip(answer["items"].as_array().unwrap()) {
            let (_, result) = item.as_object().unwrap().iter().next().unwrap();
            if result["status"].as_u64().is_some_and(|s| s < 300) {
                applied.push(action);
            }
        }
    }
    applied
}

#[tokio::test]
async fn a_node_killed_mid_batch_is_replaced_and_the_index_stays_exact() {
    use crate::nodes::{spawn_node_with, terminate, wait_ready};

    let wh = Warehouse::new().await;
    let mut model = Model::default();
    let t = history(&wh, &mut model).await;
    let db = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let proxy = FaultProxy::start(&opensearch_url()).await;
    // Slow bulk requests, so that the kill lands in the middle of one.
    proxy.script(
        "/_bulk",
        vec![Fault::Delay(Duration::from_millis(300)); 1000],
    );
    let env = [("ICEFEED_PUSH__CLAIM_INTERVAL", "100ms")];
    let nodes = [
        spawn_node_with(&db, store.path(), "node-a", &env),
        spawn_node_with(&db, store.path(), "node-b", &env),
    ];
    for n in &nodes {
        wait_ready(&http, n).await;
    }
    let a = Node::remote(nodes[0].base.clone());
    let index = unique_index("kill");
    let sub = push_subscription(
        &a,
        &wh,
        target(&proxy.url, &index, json!({"batch": {"max_documents": 10}})),
    )
    .await;
    let pushing = wait_until(Duration::from_secs(30), || async {
        let (_, s) = a.get(&format!("/v1/subscriptions/{sub}")).await;
        let indexed = s["push"]["documents_indexed"].as_i64().unwrap_or(0);
        (indexed >= 20).then(|| s["push"]["node"].as_str().unwrap().to_string())
    })
    .await;
    let (victim, survivor) = match pushing.as_str() {
        "node-a" => (0, 1),
        "node-b" => (1, 0),
        other => panic!("pushed by {other}"),
    };
    let [first, second] = nodes;
    let (victim_process, survivor_process) = if victim == 0 {
        (first, second)
    } else {
        (second, first)
    };
    let _ = survivor;
    std::process::Command::new("kill")
        .args(["-KILL", &victim_process.child_id().to_string()])
        .status()
        .unwrap();
    let other = Node::remote(survivor_process.base.clone());
    let s = caught_up(&other, &sub, &t).await;
    assert_ne!(s["push"]["node"].as_str(), Some(pushing.as_str()), "{s}");
    assert_index_equals(&documents(&index).await, &model);

    // Replays after the takeover never moved a document backwards.
    let applied = applied_versions(&proxy.exchanges());
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for (id, version) in &applied {
        if let Some(previous) = last.insert(id.clone(), *version) {
            assert!(
                *version > previous,
                "document {id} written at version {version} after {previous}"
            );
        }
    }
    assert!(
        applied.len() >= model.rows.len(),
        "{} applied",
        applied.len()
    );
    let (status, _) = terminate(survivor_process);
    assert!(status.success());
}
