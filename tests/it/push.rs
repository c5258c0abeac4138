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
use crate::support::{Node, Warehouse, fresh_database, opensearch_url, test_settings, wait_until};

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
        Arc::new(Int64Array::from(rows.values().map(|r| r.1).collect::<Vec<_>>())),
        Arc::new(StringArray::from(
            rows.values().map(|r| r.2.clone()).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(arrow, columns).unwrap()
}

fn sequence_number(t: &Table) -> i64 {
    t.metadata().current_snapshot().unwrap().sequence_number()
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
            self.versions.insert(id, sequence_number(&t));
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
        let seq = sequence_number(&t);
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

fn unique_index(test: &str) -> String {
    format!("icefeed-push-{test}-{}", uuid::Uuid::new_v4().simple())
}

/// A push target at `endpoint`, one shard, with extra fields merged in.
fn target(endpoint: &str, index: &str, extra: Value) -> Value {
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
async fn push_subscription(node: &Node, wh: &Warehouse, target: Value) -> String {
    let table = node
        .register(&wh.registration("shop.items", json!({"start": "earliest"})))
        .await;
    let (status, sub) = node
        .post(
            "/v1/subscriptions",
            &json!({"name": "items-to-search", "tables": [table], "kind": "opensearch",
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

async fn push_node() -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, dir.path());
    push_settings(&mut settings);
    (Node::start(settings).await, dir)
}

/// Waits until the subscription has pushed everything the table has.
async fn caught_up(node: &Node, sub: &str, table_head: &Table) -> Value {
    let snapshot = table_head.metadata().current_snapshot().unwrap().snapshot_id();
    wait_until(Duration::from_secs(60), || async {
        let (_, s) = node.get(&format!("/v1/subscriptions/{sub}")).await;
        assert_ne!(s["push"]["state"], "failed", "{s}");
        let (_, t) = node.get(&format!("/v1/tables/{}", s["tables"][0]["table_id"].as_str()?)).await;
        let done = t["checkpoint"]["snapshot_id"].as_i64() == Some(snapshot)
            && s["lag"]["events"] == 0
            && s["lag"]["snapshots"] == 0;
        done.then_some(s)
    })
    .await
}

/// Every document of `index`: id → (version, source).
async fn documents(index: &str) -> BTreeMap<String, (i64, Value)> {
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
    assert_eq!((status, problem["code"].as_str()), (409, Some("push_subscription")));
    let metrics = node
        .http
        .get(node.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("icefeed_push_documents_indexed_total{subscription=\"items-to-search\"}"),
        "{metrics}"
    );
    node.shutdown().await;
}
