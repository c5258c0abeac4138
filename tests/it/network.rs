//! `network.allowed_hosts`: a node connects to hosts outside the public internet only
//! when they are listed, whatever a registration or a subscription names — catalog
//! services, storage endpoints, OAuth servers, push targets — by address or by a name
//! that resolves to one, and refusing changes nothing.

use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::s3;
use crate::support::{Node, Warehouse, fresh_database, head, opensearch_url, test_settings};

/// A node that may reach `allowed` beyond the public internet (nothing by default).
async fn node_allowing(allowed: &[&str]) -> (Node, tempfile::TempDir) {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.network = Default::default();
    settings.network.allowed_hosts = allowed.iter().map(|h| h.to_string()).collect();
    (Node::start(settings).await, store)
}

async fn refused(node: &Node, path: &str, body: &Value, field: &str) -> Value {
    let (status, problem) = node.post(path, body).await;
    assert_eq!(
        (status, problem["code"].as_str(), problem["field"].as_str()),
        (403, Some("host_not_allowed"), Some(field)),
        "{body}: {problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("network.allowed_hosts"),
        "{problem}"
    );
    problem
}

#[tokio::test]
async fn hosts_beyond_the_public_internet_are_refused_unless_allowed() {
    let (node, _store) = node_allowing(&[]).await;
    let rest = json!({"catalog": s3::rest_catalog(s3::file_io()), "table": "ns.orders"});
    refused(&node, "/v1/tables", &rest, "catalog uri").await;

    // By name too: `localhost` resolves to loopback.
    let mut by_name = rest.clone();
    by_name["catalog"]["uri"] = json!(s3::rest_uri().replace("127.0.0.1", "localhost"));
    refused(&node, "/v1/tables", &by_name, "catalog uri").await;

    // A storage endpoint: the cloud metadata service, and the S3 server.
    let on_s3 = |endpoint: &str| {
        let mut props = s3::file_io();
        props.insert("s3.endpoint".into(), endpoint.into());
        json!({"catalog": {"type": "filesystem", "properties": props,
                           "metadata_location": "s3://warehouse/t/metadata/v1.metadata.json"},
               "table": "shop.orders"})
    };
    let problem = refused(
        &node,
        "/v1/tables",
        &on_s3("http://169.254.169.254/latest"),
        "s3.endpoint",
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("169.254.169.254"),
        "{problem}"
    );
    refused(&node, "/v1/tables", &on_s3(&s3::endpoint()), "s3.endpoint").await;

    // Any URL among the properties, an OAuth server for one.
    let mut oauth = rest.clone();
    oauth["catalog"]["uri"] = json!("https://8.8.8.8/catalog");
    oauth["catalog"]["properties"]["oauth2-server-uri"] = json!("http://[::1]:8181/v1/token");
    refused(&node, "/v1/tables", &oauth, "oauth2-server-uri").await;

    // SQL catalogs on PostgreSQL and Hive metastores, by address and port.
    let database = std::env::var("ICEFEED_TEST_DATABASE_URL").unwrap();
    let sql = json!({"catalog": {"type": "sql", "uri": database, "warehouse": "/tmp/x"},
                     "table": "shop.orders"});
    let problem = refused(&node, "/v1/tables", &sql, "catalog uri").await;
    let password = url::Url::parse(&database)
        .unwrap()
        .password()
        .unwrap()
        .to_string();
    assert!(
        !problem["detail"]
            .as_str()
            .unwrap()
            .contains(&format!(":{password}@")),
        "the password is not shown: {problem}"
    );
    let hive = json!({"catalog": {"type": "hive", "uri": "127.0.0.1:9083", "warehouse": "/tmp/x"},
                      "table": "shop.orders"});
    refused(&node, "/v1/tables", &hive, "catalog uri").await;

    // Push targets: a local table may be followed, but not pushed to a private host.
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&created, &[orders(1..=2)]).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let push = json!({"name": "to-opensearch", "tables": [id], "kind": "opensearch",
                      "target": {"endpoints": [opensearch_url()], "index": "orders"}});
    refused(&node, "/v1/subscriptions", &push, "target.endpoints").await;

    // Nothing was registered or created by the refused requests.
    let (_, tables) = node.get("/v1/tables").await;
    assert_eq!(tables["tables"].as_array().unwrap().len(), 1, "{tables}");
    let (_, subscriptions) = node.get("/v1/subscriptions").await;
    assert_eq!(
        subscriptions["subscriptions"].as_array().unwrap().len(),
        0,
        "{subscriptions}"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn listed_names_and_networks_are_reached() {
    // A name is allowed whatever it resolves to; an address by its network.
    let (node, _store) = node_allowing(&["localhost"]).await;
    let lake = Warehouse::on_s3().await;
    let created = lake.create("shop.orders", orders_schema(), None).await;
    let table = lake.append(&created, &[orders(1..=3)]).await;
    let mut registration = lake.registration("shop.orders", json!({}));
    let by_name = s3::endpoint().replace("127.0.0.1", "localhost");
    registration["catalog"]["properties"]["s3.endpoint"] = json!(by_name);
    let id = node.register(&registration).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(events.len(), 3);

    // The address behind the name is not listed.
    registration["catalog"]["properties"]["s3.endpoint"] = json!(s3::endpoint());
    refused(&node, "/v1/tables", &registration, "s3.endpoint").await;
    node.shutdown().await;

    let (node, _store) = node_allowing(&["127.0.0.0/8"]).await;
    let id = node.register(&registration).await;
    node.wait_for_checkpoint(&id, head(&table)).await;
    node.shutdown().await;
}

#[tokio::test]
async fn a_table_whose_settings_are_refused_later_stops_with_the_reason() {
    // Registered on a node that allows the S3 server, then followed by one that does
    // not (the operator tightened the list): the table stops instead of retrying.
    let lake = Warehouse::on_s3().await;
    let created = lake.create("shop.orders", orders_schema(), None).await;
    let table = lake.append(&created, &[orders(1..=2)]).await;
    let store = tempfile::tempdir().unwrap();
    let database = fresh_database().await;
    let open = Node::start(test_settings(&database, store.path())).await;
    let id = open
        .register(&lake.registration("shop.orders", json!({})))
        .await;
    open.wait_for_checkpoint(&id, head(&table)).await;
    open.shutdown().await;

    let mut settings = test_settings(&database, store.path());
    settings.network = Default::default();
    let closed = Node::start(settings).await;
    lake.append(&table, &[orders(3..=3)]).await;
    let stopped = crate::support::wait_until(std::time::Duration::from_secs(30), || async {
        let (_, t) = closed.get(&format!("/v1/tables/{id}")).await;
        (t["state"] == "error").then_some(t)
    })
    .await;
    let error = stopped["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("host_not_allowed") && error.contains("s3.endpoint"),
        "{stopped}"
    );
    closed.shutdown().await;
}
