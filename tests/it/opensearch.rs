//! The OpenSearch bulk client against a real OpenSearch node (scripts/opensearch.sh), with
//! a fault-injecting proxy in between where a test needs throttling or outages.

use std::time::{Duration, Instant};

use bytes::Bytes;
use icefeed::delivery::opensearch::{
    BulkAction, BulkItem, ItemOutcome, OpenSearchClient, PushTarget, RetryPolicy, SendError, split,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fault_proxy::{Fault, FaultProxy};
use crate::support::opensearch_url;

/// Each test writes its own index.
fn unique_index(test: &str) -> String {
    format!("icefeed-it-{test}-{}", uuid::Uuid::new_v4().simple())
}

fn client(endpoints: &[&str], index: &str) -> (OpenSearchClient, PushTarget) {
    let target = PushTarget::from_json(&json!({
        "endpoints": endpoints,
        "index": index,
        "index_settings": {"number_of_shards": 1, "number_of_replicas": 0},
    }))
    .unwrap();
    (
        OpenSearchClient::new(&target, &icefeed::network::HostPolicy::unrestricted()).unwrap(),
        target,
    )
}

/// Quick retries, so that tests of throttling stay fast.
fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(200),
        max_retries: 6,
    }
}

fn index(index: &str, id: &str, version: i64, document: Value) -> BulkItem {
    BulkItem {
        index: index.into(),
        id: id.into(),
        routing: None,
        version,
        action: BulkAction::Index(Bytes::from(document.to_string())),
    }
}

fn delete(index: &str, id: &str, version: i64) -> BulkItem {
    BulkItem {
        index: index.into(),
        id: id.into(),
        routing: None,
        version,
        action: BulkAction::Delete,
    }
}

async fn ensure(client: &OpenSearchClient, target: &PushTarget) {
    client
        .ensure_index(
            &target.config.index,
            target.config.index_settings.as_ref(),
            target.config.mappings.as_ref(),
        )
        .await
        .expect("create the index");
}

async fn send(client: &OpenSearchClient, items: &[BulkItem]) -> Vec<ItemOutcome> {
    client
        .send_batch(items, &fast_retries(), &CancellationToken::new())
        .await
        .expect("batch settled")
}

/// A document as OpenSearch holds it: (version, source), or None.
async fn get(index: &str, id: &str) -> Option<(i64, Value)> {
    let url = format!("{}/{index}/_doc/{id}", opensearch_url());
    let answer: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    (answer["found"] == json!(true)).then(|| {
        (
            answer["_version"].as_i64().unwrap(),
            answer["_source"].clone(),
        )
    })
}

/// Documents in the index, after a refresh.
async fn count(index: &str) -> u64 {
    let http = reqwest::Client::new();
    let base = opensearch_url();
    http.post(format!("{base}/{index}/_refresh"))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let answer: Value = http
        .get(format!("{base}/{index}/_count"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["count"].as_u64().expect("a count")
}

#[tokio::test]
async fn indexes_and_deletes_with_external_versions() {
    let name = unique_index("versions");
    let (client, target) = client(&[&opensearch_url()], &name);
    ensure(&client, &target).await;

    let outcomes = send(
        &client,
        &[
            index(&name, "1", 3, json!({"id": 1, "s": "one"})),
            index(&name, "2", 3, json!({"id": 2, "s": "two"})),
            index(&name, "a|b", 4, json!({"id": 3, "s": "three"})),
            delete(&name, "2", 5),
            delete(&name, "never-there", 5),
        ],
    )
    .await;
    assert_eq!(outcomes, vec![ItemOutcome::Applied; 5]);
    assert_eq!(
        get(&name, "1").await,
        Some((3, json!({"id": 1, "s": "one"})))
    );
    assert_eq!(get(&name, "a%7Cb").await.unwrap().0, 4);
    assert_eq!(get(&name, "2").await, None);
    assert_eq!(count(&name).await, 2);
}

#[tokio::test]
async fn replays_of_older_versions_are_already_applied_and_change_nothing() {
    let name = unique_index("replay");
    let (client, target) = client(&[&opensearch_url()], &name);
    ensure(&client, &target).await;
    let newest = json!({"id": 1, "s": "newest"});
    assert_eq!(
        send(&client, &[index(&name, "1", 7, newest.clone())]).await,
        [ItemOutcome::Applied]
    );

    let replay = [
        index(&name, "1", 6, json!({"id": 1, "s": "older"})),
        index(&name, "1", 7, json!({"id": 1, "s": "same version"})),
        delete(&name, "1", 5),
    ];
    assert_eq!(
        send(&client, &replay).await,
        vec![ItemOutcome::AlreadyApplied; 3]
    );
    assert_eq!(get(&name, "1").await, Some((7, newest)));

    // A newer change still goes through.
    assert_eq!(
        send(&client, &[delete(&name, "1", 8)]).await,
        [ItemOutcome::Applied]
    );
    assert_eq!(get(&name, "1").await, None);
}

#[tokio::test]
async fn a_mapping_conflict_rejects_exactly_that_document() {
    let name = unique_index("mapping");
    let target = PushTarget::from_json(&json!({
        "endpoints": [opensearch_url()],
        "index": name,
        "index_settings": {"number_of_replicas": 0},
        "mappings": {"properties": {"n": {"type": "long"}}},
    }))
    .unwrap();
    let client =
        OpenSearchClient::new(&target, &icefeed::network::HostPolicy::unrestricted()).unwrap();
    ensure(&client, &target).await;
    // A second call (and a second client) find the index there.
    ensure(&client, &target).await;
    ensure(
        &OpenSearchClient::new(&target, &icefeed::network::HostPolicy::unrestricted()).unwrap(),
        &target,
    )
    .await;

    let outcomes = send(
        &client,
        &[
            index(&name, "1", 1, json!({"n": 1})),
            index(&name, "2", 1, json!({"n": "not a number"})),
            index(&name, "3", 1, json!({"n": 3})),
        ],
    )
    .await;
    assert_eq!(outcomes[0], ItemOutcome::Applied);
    assert_eq!(outcomes[2], ItemOutcome::Applied);
    let ItemOutcome::Rejected(error) = &outcomes[1] else {
        panic!("expected a rejection, got {outcomes:?}");
    };
    assert_eq!(
        (error.status, error.error_type.as_str()),
        (400, "mapper_parsing_exception")
    );
    assert!(error.reason.contains("[n]"), "{}", error.reason);
    assert_eq!(count(&name).await, 2);
    assert_eq!(get(&name, "2").await, None);
}

#[tokio::test]
async fn throttling_outages_and_dropped_connections_lose_nothing() {
    let name = unique_index("faults");
    let proxy = FaultProxy::start(&opensearch_url()).await;
    let (client, target) = client(&[&proxy.url], &name);
    ensure(&client, &target).await;
    proxy.script(
        "/_bulk",
        [
            Fault::Status(429),
            Fault::Status(503),
            Fault::Drop,
            Fault::Status(502),
            Fault::Status(429),
        ],
    );

    let items: Vec<_> = (0..200)
        .map(|i| index(&name, &i.to_string(), 1, json!({"i": i})))
        .collect();
    let limits = icefeed::delivery::opensearch::BatchLimits {
        max_documents: 50,
        max_bytes: 1 << 20,
    };
    let batches = split(&items, &limits);
    assert_eq!(batches.len(), 4);
    for batch in batches {
        assert_eq!(
            send(&client, &items[batch]).await,
            vec![ItemOutcome::Applied; 50]
        );
    }
    assert_eq!(proxy.pending(), 0, "every fault was met");
    assert_eq!(proxy.forwarded(), 4, "one successful request per batch");
    assert_eq!(count(&name).await, 200);
}

#[tokio::test]
async fn items_refused_for_now_are_retried_one_by_one() {
    let name = unique_index("items");
    let proxy = FaultProxy::start(&opensearch_url()).await;
    let (client, target) = client(&[&proxy.url], &name);
    ensure(&client, &target).await;
    // The whole batch is refused item by item, then the first single retry is too.
    proxy.script("/_bulk", [Fault::RejectItems, Fault::RejectItems]);

    let items: Vec<_> = (0..5)
        .map(|i| index(&name, &i.to_string(), 1, json!({"i": i})))
        .collect();
    assert_eq!(send(&client, &items).await, vec![ItemOutcome::Applied; 5]);
    assert_eq!(proxy.pending(), 0);
    assert_eq!(proxy.forwarded(), 5, "each item sent alone");
    assert_eq!(count(&name).await, 5);
}

#[tokio::test]
async fn a_request_too_large_is_sent_again_one_document_at_a_time() {
    let name = unique_index("large");
    let proxy = FaultProxy::start(&opensearch_url()).await;
    let (client, target) = client(&[&proxy.url], &name);
    ensure(&client, &target).await;
    proxy.script("/_bulk", [Fault::Status(413)]);

    let items = [
        index(&name, "1", 1, json!({"i": 1})),
        delete(&name, "2", 1),
        index(&name, "3", 1, json!({"i": 3})),
    ];
    assert_eq!(send(&client, &items).await, vec![ItemOutcome::Applied; 3]);
    assert_eq!(proxy.forwarded(), 3);
    assert_eq!(count(&name).await, 2);
}

#[tokio::test]
async fn a_refused_request_is_not_retried() {
    let name = unique_index("refused");
    let proxy = FaultProxy::start(&opensearch_url()).await;
    let (client, target) = client(&[&proxy.url], &name);
    ensure(&client, &target).await;
    proxy.script("/_bulk", [Fault::Status(403), Fault::Status(403)]);

    let result = client
        .send_batch(
            &[index(&name, "1", 1, json!({}))],
            &fast_retries(),
            &CancellationToken::new(),
        )
        .await;
    assert!(
        matches!(&result, Err(SendError::Refused(e)) if e.status == 403),
        "{result:?}"
    );
    assert_eq!(proxy.pending(), 1, "sent once");
    assert_eq!(proxy.forwarded(), 0);
}

#[tokio::test]
async fn cancelling_interrupts_the_backoff() {
    let name = unique_index("cancel");
    let proxy = FaultProxy::start(&opensearch_url()).await;
    let (client, target) = client(&[&proxy.url], &name);
    ensure(&client, &target).await;
    proxy.script("/_bulk", [Fault::Status(503); 100]);

    let patient = RetryPolicy {
        initial_delay: Duration::from_secs(60),
        max_delay: Duration::from_secs(60),
        max_retries: 100,
    };
    let cancel = CancellationToken::new();
    let cancelling = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancelling.cancel();
    });
    let started = Instant::now();
    let result = client
        .send_batch(&[index(&name, "1", 1, json!({}))], &patient, &cancel)
        .await;
    assert!(matches!(result, Err(SendError::Cancelled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(proxy.forwarded(), 0);
}

#[tokio::test]
async fn a_dead_endpoint_fails_over_to_the_next() {
    let name = unique_index("failover");
    // Port 9 (discard) on loopback: nothing listens there.
    let (client, target) = client(&["http://127.0.0.1:9", &opensearch_url()], &name);
    icefeed::delivery::opensearch::retry(&fast_retries(), &CancellationToken::new(), || {
        client.ensure_index(&name, target.config.index_settings.as_ref(), None)
    })
    .await
    .expect("created through the second endpoint");
    assert_eq!(
        send(&client, &[index(&name, "1", 1, json!({"i": 1}))]).await,
        [ItemOutcome::Applied]
    );
    assert_eq!(count(&name).await, 1);
}
