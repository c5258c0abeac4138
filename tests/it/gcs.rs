//! Tables on Google Cloud Storage, against a real GCS JSON API server (fake-gcs-server,
//! started by `scripts/fake-gcs.sh`; the README's test command runs it): tables written
//! by the iceberg crate onto `gs://` and followed through a SQL catalog and by their
//! metadata file; storage failures answered with the problem codes a user acts on. The
//! server has no authentication, so access denied is proven on S3 only
//! (`object_storage.rs`); the change stores here are local (see `change_stores.rs`).

use std::collections::BTreeMap;

use serde_json::json;

use crate::support::{Node, Warehouse, head};

/// The bucket of table files and change stores.
pub const BUCKET: &str = "warehouse";

/// The server's URL.
pub fn endpoint() -> String {
    std::env::var("ICEFEED_TEST_GCS_URL").unwrap_or_else(|_| "http://127.0.0.1:4443".into())
}

/// Iceberg FileIO properties that reach the server.
pub fn file_io() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("gcs.service.path".to_string(), endpoint()),
        ("gcs.no-auth".to_string(), "true".to_string()),
    ])
}

#[tokio::test]
async fn a_table_on_gcs_is_followed_through_its_catalog_and_by_its_metadata_file() {
    let wh = Warehouse::on_gcs().await;
    let created = wh
        .create("shop.orders", crate::fixtures::orders_schema(), None)
        .await;
    let first = wh.append(&created, &[crate::fixtures::orders(1..=3)]).await;
    let (node, _store) = Node::start_fresh().await;
    let id = node
        .register(&wh.registration("shop.orders", json!({"start": "earliest"})))
        .await;
    node.wait_for_checkpoint(&id, head(&first)).await;
    let second = wh.append(&first, &[crate::fixtures::orders(4..=5)]).await;
    node.wait_for_checkpoint(&id, head(&second)).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    let ids: Vec<i64> = events
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5], "{events:?}");

    // The same table by its metadata file, through a filesystem catalog.
    let location = second.metadata_location().unwrap().to_string();
    assert!(location.starts_with("gs://"), "{location}");
    let fixed = node
        .register(&json!({
            "catalog": {"type": "filesystem", "metadata_location": location,
                        "properties": file_io()},
            "table": "shop.orders", "start": "earliest",
        }))
        .await;
    node.wait_for_checkpoint(&fixed, head(&second)).await;
    let (same, _) = node.all_events(&fixed, None, 100).await;
    assert_eq!(same.len(), 5, "{same:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn storage_failures_on_gcs_at_registration_are_named() {
    let (node, _store) = Node::start_fresh().await;
    let fixed = |location: &str, props: BTreeMap<String, String>| {
        json!({"catalog": {"type": "filesystem", "metadata_location": location,
                           "properties": props},
               "table": "shop.orders"})
    };
    let missing_object = format!(
        "gs://{BUCKET}/{}/v1.metadata.json",
        crate::s3::unique("nothing")
    );
    for missing in [
        "gs://icefeed-no-such-bucket/t/metadata/v1.metadata.json",
        missing_object.as_str(),
    ] {
        let (status, problem) = node.post("/v1/tables", &fixed(missing, file_io())).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (422, Some("storage_not_found")),
            "{problem}"
        );
        assert_eq!(problem["location"], missing, "{problem}");
    }
    let mut closed = file_io();
    closed.insert("gcs.service.path".into(), "http://127.0.0.1:9".into());
    let (status, problem) = node
        .post("/v1/tables", &fixed(&missing_object, closed))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (502, Some("storage_unreachable")),
        "{problem}"
    );
    let (_, tables) = node.get("/v1/tables").await;
    assert_eq!(tables["tables"], json!([]), "nothing was registered");
    node.shutdown().await;
}
