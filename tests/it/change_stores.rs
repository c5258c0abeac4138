//! The change store on object stores, against real servers: S3 (SeaweedFS) and Azure Blob
//! Storage (Azurite, started by `scripts/azurite.sh`). Each keeps a history with a
//! copy-on-write rewrite (segments and shuffle files), cleans the shuffle files and, when
//! the table is deleted, its segments; and copies a data file larger than one upload in
//! parts, or, from the change store's own bucket, by the S3 server. Google Cloud Storage
//! is missing: `object_store` writes through GCS's XML API, which fake-gcs-server does not
//! serve (it answers `PUT /bucket/object` as a JSON-API upload without `uploadType`);
//! tables on GCS are tested in `gcs.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use icefeed::config::Settings;
use object_store::ObjectStore;
use object_store::path::Path;
use serde_json::json;

use crate::fixtures::{order_json, orders, orders_named, orders_schema};
use crate::s3;
use crate::support::{Node, Warehouse, fresh_database, head, test_settings, wait_until};

/// The emulator's account and its published development key (not a secret).
const AZURE_ACCOUNT: &str = "devstoreaccount1";
const AZURE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The container `scripts/azurite.sh` creates.
const AZURE_CONTAINER: &str = "changes";

/// `object_store` options of a change store on the Azure emulator: an account, its key
/// and an endpoint, as for any Azure-compatible service that is not Azure itself.
fn azure_options() -> BTreeMap<String, String> {
    let endpoint = std::env::var("ICEFEED_TEST_AZURE_URL")
        .unwrap_or_else(|_| format!("http://127.0.0.1:10000/{AZURE_ACCOUNT}"));
    BTreeMap::from(
        [
            ("azure_storage_account_name", AZURE_ACCOUNT.to_string()),
            ("azure_storage_access_key", AZURE_KEY.to_string()),
            ("azure_storage_endpoint", endpoint),
            ("azure_allow_http", "true".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
}

/// A node's change store below a fresh prefix of a bucket, and a client of that bucket.
struct ChangeStore {
    settings: Settings,
    bucket: Arc<dyn ObjectStore>,
    prefix: String,
}

impl ChangeStore {
    async fn at(url: &str, options: BTreeMap<String, String>) -> Self {
        let prefix = s3::unique("changes");
        let mut settings = test_settings(&fresh_database().await, std::path::Path::new("unused"));
        settings.change_store = format!("{url}/{prefix}");
        settings.change_store_options = options.clone();
        let (bucket, _) =
            object_store::parse_url_opts(&url::Url::parse(url).unwrap(), options).unwrap();
        Self {
            settings,
            bucket: Arc::from(bucket),
            prefix,
        }
    }

    async fn s3() -> Self {
        Self::at(&format!("s3://{}", s3::BUCKET), s3::change_store_options()).await
    }

    async fn azure() -> Self {
        Self::at(&format!("az://{AZURE_CONTAINER}"), azure_options()).await
    }

    /// Keys and sizes below `below` (relative to the store's prefix).
    async fn list(&self, below: &str) -> Vec<(String, u64)> {
        let prefix = Path::from(format!("{}/{below}", self.prefix));
        self.bucket
            .list(Some(&prefix))
            .map_ok(|meta| (meta.location.to_string(), meta.size))
            .try_collect()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_change_store_on_s3_keeps_a_history_and_cleans_up() {
    keeps_a_history_and_cleans_up(ChangeStore::s3().await).await;
}

#[tokio::test]
async fn a_change_store_on_azure_keeps_a_history_and_cleans_up() {
    keeps_a_history_and_cleans_up(ChangeStore::azure().await).await;
}

/// Appends, then a copy-on-write rewrite that updates one row of three: the feed is
/// exact, the shuffle files of the rewrite are gone once it is published, and deleting
/// the table empties its part of the store.
async fn keeps_a_history_and_cleans_up(store: ChangeStore) {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let first = wh.append(&created, &[orders(1..=3)]).await;
    let node = Node::start(store.settings.clone()).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({"start": "earliest"})))
        .await;
    node.wait_for_checkpoint(&id, head(&first)).await;
    let rewritten = wh
        .overwrite_all(&first, &[orders(1..=2), orders_named(3..=3, "-new")])
        .await;
    node.wait_for_checkpoint(&id, head(&rewritten)).await;

    let (events, _) = node.all_events(&id, None, 100).await;
    let seen: Vec<(&str, &serde_json::Value)> = events
        .iter()
        .map(|e| (e["op"].as_str().unwrap(), &e["after"]))
        .collect();
    let mut updated = order_json(3);
    updated["name"] = json!("n3-new");
    assert_eq!(
        seen,
        [
            ("insert", &order_json(1)),
            ("insert", &order_json(2)),
            ("insert", &order_json(3)),
            ("update", &updated),
        ],
        "{events:?}"
    );
    assert_eq!(events[3]["before"], order_json(3));
    assert!(!store.list(&format!("tables/{id}")).await.is_empty());
    wait_until(Duration::from_secs(30), || async {
        store.list("shuffle").await.is_empty().then_some(())
    })
    .await;

    assert_eq!(node.delete(&format!("/v1/tables/{id}")).await, 204);
    wait_until(Duration::from_secs(30), || async {
        store.list("tables").await.is_empty().then_some(())
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn a_data_file_larger_than_one_put_is_copied_to_s3_in_parts() {
    copies_a_large_data_file_in_parts(ChangeStore::s3().await).await;
}

#[tokio::test]
async fn a_data_file_larger_than_one_upload_is_copied_to_azure_in_parts() {
    copies_a_large_data_file_in_parts(ChangeStore::azure().await).await;
}

async fn copies_a_large_data_file_in_parts(store: ChangeStore) {
    // Names zstd cannot shrink keep the one data file above the 16 MiB a single upload
    // carries: the change store copies it in 8 MiB parts.
    let rows = 30_000;
    let (batch, names) = orders_with_random_names(rows, 13);
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&created, &[batch]).await;
    let files = icefeed_testkit::rewrite::live_data_files(&table)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    let size = files[0].file_size_in_bytes();
    assert!(size > 16 << 20, "the data file has {size} bytes");

    let node = Node::start(store.settings.clone()).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let sizes: Vec<u64> = store
        .list(&format!("tables/{id}"))
        .await
        .into_iter()
        .map(|(_, size)| size)
        .collect();
    assert_eq!(
        sizes,
        [size],
        "the segment is the data file, byte for byte in size"
    );
    let (events, _) = node.all_events(&id, None, 10_000).await;
    assert_eq!(events.len(), rows);
    for (event, name) in events.iter().zip(&names) {
        assert_eq!(event["after"]["name"], name.as_str());
    }
    node.shutdown().await;
}

/// A data file whose bucket the change store lives in is copied by the S3 server
/// (CopyObject): every S3 request of the node passes a recording proxy, and only footer
/// reads of the file do. With the change store in another bucket, the same table's file
/// passes through the node, read and written whole.
#[tokio::test]
async fn data_files_in_the_change_stores_bucket_are_copied_by_the_s3_server() {
    use crate::fault_proxy::FaultProxy;
    use object_store::ObjectStoreExt;

    let wh = Warehouse::on_s3().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let (batch, names) = orders_with_random_names(3_000, 17);
    let table = wh.append(&created, &[batch]).await;
    let files = icefeed_testkit::rewrite::live_data_files(&table)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    let (file, size) = (files[0].file_path(), files[0].file_size_in_bytes());
    assert!(size > 1 << 20, "the data file has {size} bytes");

    let proxy = FaultProxy::start(&s3::endpoint()).await;
    proxy.script(".parquet", []);
    let mut registration = wh.registration("shop.orders", json!({}));
    registration["catalog"]["properties"]["s3.endpoint"] = json!(proxy.url);
    let mut options = s3::change_store_options();
    options.insert("aws_endpoint".into(), proxy.url.clone());
    let other_bucket = format!(
        "changes-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    s3::weed_shell(&format!("s3.bucket.create -name {other_bucket}"));

    let mut moved = Vec::new();
    for bucket in [s3::BUCKET, other_bucket.as_str()] {
        let store = ChangeStore::at(&format!("s3://{bucket}"), options.clone()).await;
        let before: usize = exchanged(&proxy);
        let node = Node::start(store.settings.clone()).await;
        let id = node.register(&registration).await;
        node.wait_for_checkpoint(&id, head(&table)).await;
        moved.push(exchanged(&proxy) - before);

        let (events, _) = node.all_events(&id, None, 10_000).await;
        let got: Vec<&str> = events
            .iter()
            .map(|e| e["after"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
        let segments = store.list(&format!("tables/{id}")).await;
        assert_eq!(segments.len(), 1, "{segments:?}");
        let direct = s3::bucket(bucket);
        let segment = direct.get(&segments[0].0.as_str().into()).await.unwrap();
        let source_key = file.strip_prefix(&format!("s3://{}/", s3::BUCKET)).unwrap();
        let source = s3::bucket(s3::BUCKET)
            .get(&source_key.into())
            .await
            .unwrap();
        assert!(
            segment.bytes().await.unwrap() == source.bytes().await.unwrap(),
            "the segment is the data file, byte for byte"
        );
        assert_eq!(node.delete(&format!("/v1/tables/{id}")).await, 204);
        node.shutdown().await;
    }
    s3::weed_shell(&format!("s3.bucket.delete -name {other_bucket}"));
    let size = size as usize;
    assert!(
        moved[0] < size / 10,
        "same bucket: {} bytes of a {size}-byte file passed the node",
        moved[0]
    );
    assert!(
        moved[1] >= 2 * size,
        "another bucket: the file is read and written through the node ({} bytes moved)",
        moved[1]
    );
}

/// Bytes of the request and answer bodies the proxy forwarded on its scripted path.
fn exchanged(proxy: &crate::fault_proxy::FaultProxy) -> usize {
    proxy
        .exchanges()
        .iter()
        .map(|(request, answer)| request.len() + answer.len())
        .sum()
}

/// `rows` orders with random 1000-character names (seeded), which zstd cannot shrink:
/// the data file holds about `rows` KB. Returns the batch and the names.
fn orders_with_random_names(rows: usize, seed: u64) -> (arrow::array::RecordBatch, Vec<String>) {
    use arrow::array::{RecordBatch, StringArray};
    use rand::distr::{Alphanumeric, SampleString};
    use rand::{SeedableRng, rngs::StdRng};

    let mut rng = StdRng::seed_from_u64(seed);
    let names: Vec<String> = (0..rows)
        .map(|_| Alphanumeric.sample_string(&mut rng, 1000))
        .collect();
    let base = orders(1..=rows as i64);
    let mut columns = base.columns().to_vec();
    columns[1] = Arc::new(StringArray::from(names.clone()));
    (RecordBatch::try_new(base.schema(), columns).unwrap(), names)
}
