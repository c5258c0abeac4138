//! `catalog.local_paths`: a node reads local files only below the directories it is
//! given — SQLite catalog files, filesystem warehouses and metadata files, and every file
//! their metadata names — whatever a registration says, through `..` and symbolic links
//! too, and without telling a missing file from an existing one outside. And
//! `catalog.allowed_types`: only the catalog types the operator lists are used.

use icefeed::config::Settings;
use serde_json::{Value, json};

use crate::fixtures::{orders, orders_schema};
use crate::support::{Node, Warehouse, fresh_database, test_settings};

/// A node allowed to read only below `allowed`.
async fn node_reading(allowed: &std::path::Path) -> (Node, tempfile::TempDir) {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.catalog.local_paths = vec![allowed.to_path_buf()];
    (Node::start(settings).await, store)
}

async fn refused(node: &Node, body: &Value) -> Value {
    let (status, problem) = node.post("/v1/tables", body).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (403, Some("local_path_not_allowed")),
        "{body}: {problem}"
    );
    problem
}

fn metadata_file(location: &str) -> Value {
    json!({"catalog": {"type": "filesystem", "metadata_location": location},
           "table": "shop.orders"})
}

/// A table registered and published by a node, and a node started after it on the same
/// database and change store with other settings.
struct Restarted {
    wh: Warehouse,
    table: iceberg::table::Table,
    id: String,
    node: Node,
    store: tempfile::TempDir,
}

/// The first node has the tests' settings; `after` changes the second node's.
async fn restarted(after: impl FnOnce(&mut Settings)) -> Restarted {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&created, &[orders(1..=2)]).await;
    let database = fresh_database().await;
    let store = tempfile::tempdir().unwrap();
    let node = Node::start(test_settings(&database, store.path())).await;
    let id = node
        .register(&wh.registration("shop.orders", json!({})))
        .await;
    node.wait_for_checkpoint(&id, crate::support::head(&table))
        .await;
    node.shutdown().await;

    let mut settings = test_settings(&database, store.path());
    after(&mut settings);
    let node = Node::start(settings).await;
    Restarted {
        wh,
        table,
        id,
        node,
        store,
    }
}

#[tokio::test]
async fn only_files_below_the_allowed_directories_are_read() {
    // Two warehouses side by side; the node may read the first only.
    let inside = Warehouse::new().await;
    let outside = Warehouse::new().await;
    for wh in [&inside, &outside] {
        let created = wh.create("shop.orders", orders_schema(), None).await;
        wh.append(&created, &[orders(1..=2)]).await;
    }
    let (node, _store) = node_reading(inside.dir.path()).await;

    // Inside: followed as usual.
    let id = node
        .register(&inside.registration("shop.orders", json!({})))
        .await;
    let (_, table) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(table["state"], "active", "{table}");

    // Outside: the SQLite catalog file itself is refused.
    let problem = refused(&node, &outside.registration("shop.orders", json!({}))).await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("catalog.local_paths"),
        "{problem}"
    );
    // A filesystem warehouse at the root, a file elsewhere on the disk, and a path that
    // does not exist all answer alike, so the answer tells nothing about the disk.
    refused(
        &node,
        &json!({"catalog": {"type": "filesystem", "warehouse": "/"}, "table": "etc.passwd"}),
    )
    .await;
    refused(&node, &metadata_file("/etc/passwd")).await;
    refused(&node, &metadata_file("/no/such/dir/v1.metadata.json")).await;
    // `..` out of the allowed directory.
    let outside_metadata = outside
        .catalog
        .load_table(&iceberg::TableIdent::from_strs(["shop", "orders"]).unwrap())
        .await
        .unwrap()
        .metadata_location()
        .unwrap()
        .to_string();
    let escape = format!(
        "{}/../{}",
        inside.dir.path().display(),
        std::path::Path::new(&outside_metadata)
            .strip_prefix(outside.dir.path().parent().unwrap())
            .unwrap()
            .display()
    );
    refused(&node, &metadata_file(&escape)).await;
    // A symbolic link inside pointing out.
    let link = inside.dir.path().join("elsewhere.metadata.json");
    std::os::unix::fs::symlink(&outside_metadata, &link).unwrap();
    refused(&node, &metadata_file(link.to_str().unwrap())).await;
    // A metadata file copied inside still names the manifests outside: the files its
    // metadata names are checked too.
    let copied = inside.dir.path().join("copied.metadata.json");
    std::fs::copy(&outside_metadata, &copied).unwrap();
    refused(&node, &metadata_file(copied.to_str().unwrap())).await;

    // SQLite may not create a catalog file, wherever it is.
    let mut create = inside.registration("shop.orders", json!({}));
    create["catalog"]["uri"] = json!(format!(
        "sqlite:{}/new.db?mode=rwc",
        inside.dir.path().display()
    ));
    let (status, problem) = node.post("/v1/tables", &create).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("invalid_catalog")),
        "{problem}"
    );
    assert!(!inside.dir.path().join("new.db").exists());

    // A catalog file that is not there is the caller's mistake, not an unreachable catalog.
    let mut missing = inside.registration("shop.orders", json!({}));
    missing["catalog"]["uri"] = json!(format!("sqlite:{}/nope.db", inside.dir.path().display()));
    let (status, problem) = node.post("/v1/tables", &missing).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("storage_not_found")),
        "{problem}"
    );

    let (_, tables) = node.get("/v1/tables").await;
    assert_eq!(tables["tables"].as_array().unwrap().len(), 1, "{tables}");
    node.shutdown().await;
}

#[tokio::test]
async fn by_default_no_local_table_may_be_registered() {
    let wh = Warehouse::new().await;
    let created = wh.create("shop.orders", orders_schema(), None).await;
    let table = wh.append(&created, &[orders(1..=2)]).await;
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.catalog.local_paths = icefeed::config::Settings::default().catalog.local_paths;
    let node = Node::start(settings).await;
    refused(&node, &wh.registration("shop.orders", json!({}))).await;
    refused(&node, &metadata_file(table.metadata_location().unwrap())).await;
    node.shutdown().await;
}

/// `catalog.allowed_types`: a type the operator took off the list is refused at
/// registration, and a table registered with it before stops instead of being read.
#[tokio::test]
async fn catalog_types_off_the_allowed_list_are_refused_and_their_tables_stop() {
    // Registered (a SQL catalog) while every type is allowed.
    let Restarted {
        wh,
        table,
        id,
        node,
        store: _store,
    } = restarted(|s| s.catalog.allowed_types = vec!["rest".into(), "glue".into()]).await;
    for body in [
        wh.registration("shop.orders", json!({})),
        metadata_file(table.metadata_location().unwrap()),
    ] {
        let (status, problem) = node.post("/v1/tables", &body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (403, Some("catalog_type_not_allowed")),
            "{body}: {problem}"
        );
        assert_eq!(problem["allowed"], json!(["rest", "glue"]), "{problem}");
    }
    // The table of a type now refused stops with the reason; it is not read.
    wh.append(&table, &[orders(3..=3)]).await;
    let stopped = node.wait_for_state(&id, "error").await;
    let error = stopped["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("catalog_type_not_allowed:") && error.contains("\"sql\""),
        "{stopped}"
    );
    assert_eq!(stopped["last_error_code"], "catalog_type_not_allowed");
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(events.len(), 2, "nothing read after the type was refused");
    node.shutdown().await;
}

/// A table registered while its directory was allowed stops, saying why, once the
/// operator takes the directory off `catalog.local_paths`: it is not polled forever.
#[tokio::test]
async fn a_table_whose_directory_is_no_longer_allowed_stops() {
    let elsewhere = tempfile::tempdir().unwrap();
    let Restarted {
        wh,
        table,
        id,
        node,
        store: _store,
    } = restarted(|s| s.catalog.local_paths = vec![elsewhere.path().to_path_buf()]).await;
    wh.append(&table, &[orders(3..=3)]).await;
    let stopped = node.wait_for_state(&id, "error").await;
    assert_eq!(
        stopped["last_error_code"], "local_path_not_allowed",
        "{stopped}"
    );
    let error = stopped["last_error"].as_str().unwrap();
    // The registration's own file, and the setting that refuses it.
    assert!(
        error.contains("catalog.db") && error.contains("catalog.local_paths"),
        "{error}"
    );
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(
        events.len(),
        2,
        "nothing read once the directory was refused"
    );
    node.shutdown().await;
}
