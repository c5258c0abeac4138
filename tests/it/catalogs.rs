//! Every catalog kind end to end over HTTP: register, wait for the export, page the
//! events, append, see the new events. Filesystem warehouses (the iceberg crate's
//! `NNNNN-uuid` names and the Hadoop `vN` names), a fixed metadata file, a SQL catalog on
//! PostgreSQL, and a REST catalog served by Apache Iceberg's REST fixture server.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::LocalFsStorageFactory;
use iceberg::table::Table;
use iceberg::{CatalogBuilder, TableIdent};
use iceberg_catalog_rest::RestCatalogBuilder;
use iceberg_catalog_sql::SqlCatalogBuilder;
use icefeed_testkit::writer::{self, AppendOptions};
use serde_json::{Value, json};

use crate::fixtures::{order_json, orders, orders_schema};
use crate::support::{
    KillOnDrop, Node, Warehouse, fresh_database, head, id_json, id64, wait_until,
};

fn ids(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect()
}

/// Checks that `events` are the inserts of `expected` ids of `shop.orders` at `snapshot`.
fn assert_inserts(events: &[Value], expected: &[i64], snapshot: i64) {
    let mut got = ids(events);
    got.sort();
    assert_eq!(got, expected, "{events:?}");
    for e in events {
        let id = e["after"]["id"].as_i64().unwrap();
        assert_eq!(e["op"], "insert");
        assert_eq!(e["table"], "shop.orders");
        assert_eq!(e["key"], json!({ "id": id }));
        assert_eq!(e["after"], order_json(id));
        assert_eq!(e["snapshot_id"], id_json(snapshot));
    }
}

/// The whole cycle every catalog must support: register `catalog`, wait for the export
/// of `table` (ids `1..=3`), then append ids `4..=5` with `append` and see them.
async fn register_export_append<F, Fut>(node: &Node, catalog: Value, table: &Table, append: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Table>,
{
    let id = node
        .register(&json!({"catalog": catalog, "table": "shop.orders", "poll_interval_ms": 100}))
        .await;
    let view = node.wait_for_checkpoint(&id, head(table)).await;
    assert_eq!(view["state"], "active");
    assert_eq!(view["export_pending"], false);
    assert_eq!(view["identifier_columns"], json!(["id"]));
    let (events, next) = node.all_events(&id, None, 2).await;
    assert_inserts(&events, &[1, 2, 3], head(table));

    let appended = append().await;
    assert_ne!(head(&appended), head(table));
    node.wait_for_checkpoint(&id, head(&appended)).await;
    let (events, _) = node.all_events(&id, Some(&next), 100).await;
    assert_inserts(&events, &[4, 5], head(&appended));
    let (_, view) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(view["change_sets"], 2);
    assert_eq!(view["lag"]["snapshots"], 0);
}

async fn expect_problem(node: &Node, body: Value, status: u16, code: &str) -> Value {
    let r = node
        .http
        .post(node.url("/v1/tables"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), status, "expected {code} for {body}");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["code"], code, "{problem}");
    problem
}

/// The warehouse directory of a [`Warehouse`] (its SQL catalog puts tables below it).
fn warehouse_dir(wh: &Warehouse) -> PathBuf {
    writer::catalog_paths(wh.dir.path()).unwrap().1
}

/// The metadata file names of a table's `metadata` directory, sorted.
fn metadata_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    names.sort();
    names
}

fn local_path(location: &str) -> PathBuf {
    PathBuf::from(
        location
            .strip_prefix("file://")
            .or_else(|| location.strip_prefix("file:"))
            .unwrap_or(location),
    )
}

#[tokio::test]
async fn filesystem_warehouse_follows_the_newest_metadata_file() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let warehouse = warehouse_dir(&wh);
    // The iceberg crate's layout: <warehouse>/<ns>/<table>/metadata/NNNNN-<uuid>.metadata.json.
    let metadata_dir = warehouse.join("shop/orders/metadata");
    let names = metadata_files(&metadata_dir);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("00000-") && names[1].starts_with("00001-"));
    assert_eq!(
        local_path(t.metadata_location().unwrap()),
        metadata_dir.join(&names[1])
    );

    let (node, _store) = Node::start_fresh().await;
    let catalog = json!({"type": "filesystem", "warehouse": warehouse.display().to_string()});
    register_export_append(&node, catalog, &t, || async {
        wh.append(&t, &[orders(4..=5)]).await
    })
    .await;
    assert_eq!(metadata_files(&metadata_dir).len(), 3);
    node.shutdown().await;
}

#[tokio::test]
async fn filesystem_hadoop_layout_orders_versions_by_number() {
    // A Hadoop layout (vN.metadata.json, no version hint) built from real metadata files:
    // v1..v9 hold the table before the first append and v10 after it, so only a numeric
    // ordering finds the current version (a textual one would stop at v9).
    let wh = Warehouse::new().await;
    let t0 = wh.create("shop.orders", orders_schema(), None).await;
    let t1 = wh.append(&t0, &[orders(1..=3)]).await;
    let hadoop = tempfile::tempdir().unwrap();
    let metadata_dir = hadoop.path().join("shop/orders/metadata");
    std::fs::create_dir_all(&metadata_dir).unwrap();
    let put = |version: u32, table: &Table| {
        std::fs::copy(
            local_path(table.metadata_location().unwrap()),
            metadata_dir.join(format!("v{version}.metadata.json")),
        )
        .unwrap();
    };
    for v in 1..=9 {
        put(v, &t0);
    }
    put(10, &t1);

    let (node, _store) = Node::start_fresh().await;
    let catalog = json!({"type": "filesystem", "warehouse": hadoop.path().display().to_string()});
    register_export_append(&node, catalog, &t1, || async {
        let t2 = wh.append(&t1, &[orders(4..=5)]).await;
        put(11, &t2);
        t2
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn filesystem_metadata_location_reads_one_fixed_version() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=3)]).await;
    let location = t.metadata_location().unwrap().to_string();
    let (node, _store) = Node::start_fresh().await;

    let id = node
        .register(&json!({
            "catalog": {"type": "filesystem", "metadata_location": location},
            "table": "shop.orders", "poll_interval_ms": 100,
        }))
        .await;
    node.wait_for_checkpoint(&id, head(&t)).await;
    let (events, next) = node.all_events(&id, None, 100).await;
    assert_inserts(&events, &[1, 2, 3], head(&t));

    // A later commit writes a new metadata file; the registered one never changes, so
    // the feed stays where it is (and healthy) however often the table is polled.
    let t2 = wh.append(&t, &[orders(4..=5)]).await;
    assert_ne!(head(&t2), head(&t));
    let committed = chrono::Utc::now();
    let polled_at = |v: &Value| {
        v["last_polled_at"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|d| d.with_timezone(&chrono::Utc))
    };
    // Two polls after the commit: the second one surely started after it.
    let first = wait_until(Duration::from_secs(10), || async {
        let (_, v) = node.get(&format!("/v1/tables/{id}")).await;
        polled_at(&v).filter(|p| *p > committed)
    })
    .await;
    let after = wait_until(Duration::from_secs(10), || async {
        let (_, v) = node.get(&format!("/v1/tables/{id}")).await;
        (polled_at(&v) > Some(first)).then_some(v)
    })
    .await;
    assert_eq!(after["state"], "active", "{after}");
    assert_eq!(after["checkpoint"]["snapshot_id"], id_json(head(&t)));
    assert_eq!(after["head_snapshot_id"], id_json(head(&t)));
    assert_eq!(after["lag"]["snapshots"], 0);
    assert_eq!(after["change_sets"], 1);
    assert!(after["last_error"].is_null(), "{after}");
    let (events, _) = node.all_events(&id, Some(&next), 100).await;
    assert_eq!(events, Vec::<Value>::new());
    node.shutdown().await;
}

#[tokio::test]
async fn filesystem_catalog_settings_are_checked() {
    let wh = Warehouse::new().await;
    let t = wh.create("shop.orders", orders_schema(), None).await;
    let t = wh.append(&t, &[orders(1..=2)]).await;
    let warehouse = warehouse_dir(&wh).display().to_string();
    let location = t.metadata_location().unwrap().to_string();
    let (node, _store) = Node::start_fresh().await;
    let body = |catalog: Value, table: &str| json!({"catalog": catalog, "table": table});

    let both = json!({"type": "filesystem", "warehouse": warehouse, "metadata_location": location});
    let p = expect_problem(&node, body(both, "shop.orders"), 400, "invalid_catalog").await;
    assert!(p["detail"].as_str().unwrap().contains("exactly one"), "{p}");
    let neither = json!({"type": "filesystem"});
    expect_problem(&node, body(neither, "shop.orders"), 400, "invalid_catalog").await;

    let in_warehouse = json!({"type": "filesystem", "warehouse": warehouse});
    let p = expect_problem(
        &node,
        body(in_warehouse.clone(), "shop.missing"),
        422,
        "iceberg_table_not_found",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("shop.missing"),
        "{p}"
    );
    expect_problem(
        &node,
        body(in_warehouse, "other.orders"),
        422,
        "iceberg_table_not_found",
    )
    .await;
    let missing_file = json!({"type": "filesystem",
                              "metadata_location": format!("{warehouse}/shop/orders/metadata/v99.metadata.json")});
    expect_problem(
        &node,
        body(missing_file, "shop.orders"),
        422,
        "iceberg_table_not_found",
    )
    .await;
    // A warehouse directory that is not there is the caller's mistake, not an outage.
    let no_warehouse = json!({"type": "filesystem", "warehouse": format!("{warehouse}/nowhere")});
    expect_problem(
        &node,
        body(no_warehouse, "shop.orders"),
        422,
        "storage_not_found",
    )
    .await;

    let (_, list) = node.get("/v1/tables").await;
    assert_eq!(
        list["tables"],
        json!([]),
        "failed registrations store nothing"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn sql_catalog_on_postgres() {
    // The catalog's own tables (iceberg_tables, iceberg_namespace_properties) in a fresh
    // PostgreSQL database, created and written by iceberg-catalog-sql through sqlx `Any`.
    let catalog_url = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().display().to_string();
    let catalog = SqlCatalogBuilder::default()
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load(
            "pg",
            HashMap::from([
                ("uri".to_string(), catalog_url.clone()),
                ("warehouse".to_string(), warehouse.clone()),
                ("sql_bind_style".to_string(), "DollarNumeric".to_string()),
            ]),
        )
        .await
        .expect("iceberg-catalog-sql on PostgreSQL");
    let ident = TableIdent::from_strs(["shop", "orders"]).unwrap();
    let t = writer::create_table(&catalog, &ident, orders_schema(), None)
        .await
        .unwrap();
    let t = writer::append(&catalog, &t, &[orders(1..=3)], &AppendOptions::default())
        .await
        .unwrap();
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables")
            .fetch_all(&mut connect(&catalog_url).await)
            .await
            .unwrap();
    assert_eq!(rows, [("pg".into(), "shop".into(), "orders".into())]);

    let (node, _store) = Node::start_fresh().await;
    // No `sql_bind_style`: icefeed picks PostgreSQL's for a postgres:// URI.
    let registered =
        json!({"type": "sql", "uri": catalog_url, "warehouse": warehouse, "name": "pg"});
    register_export_append(&node, registered, &t, || async {
        writer::append(&catalog, &t, &[orders(4..=5)], &AppendOptions::default())
            .await
            .unwrap()
    })
    .await;

    // The database password is not shown back.
    let (_, list) = node.get("/v1/tables").await;
    let shown = list["tables"][0]["catalog"]["uri"].as_str().unwrap();
    assert!(shown.contains(":********@"), "{shown}");

    // A catalog name with no such table in the same database is a clean 422.
    let other = json!({"catalog": {"type": "sql", "uri": catalog_url, "warehouse": warehouse,
                                   "name": "elsewhere"}, "table": "shop.orders"});
    expect_problem(&node, other, 422, "iceberg_table_not_found").await;
    node.shutdown().await;
}

async fn connect(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.unwrap()
}

/// Apache Iceberg's REST catalog fixture server (`org.apache.iceberg.rest.RESTCatalogServer`
/// from `iceberg-open-api`'s test fixtures, a JDBC catalog on SQLite behind the REST API),
/// run with `java` on the classpath in `ICEFEED_TEST_REST_FIXTURE` (default
/// `$HOME/.cache/icefeed/rest-fixture/lib/*`). Killed on drop.
struct RestFixture {
    child: KillOnDrop,
    uri: String,
    _dir: tempfile::TempDir,
    warehouse: PathBuf,
}

impl RestFixture {
    fn classpath() -> String {
        if let Ok(cp) = std::env::var("ICEFEED_TEST_REST_FIXTURE") {
            return cp;
        }
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let lib = PathBuf::from(home).join(".cache/icefeed/rest-fixture/lib");
        assert!(
            lib.join("iceberg-open-api-1.10.0-test-fixtures.jar")
                .is_file(),
            "the Iceberg REST fixture server is not installed in {}: fetch \
             org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures and its runtime \
             dependencies there with Maven, or set ICEFEED_TEST_REST_FIXTURE to a classpath",
            lib.display()
        );
        format!("{}/*", lib.display())
    }

    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("warehouse");
        std::fs::create_dir_all(&warehouse).unwrap();
        let child = Command::new("java")
            .args(["-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp"])
            .arg(Self::classpath())
            .arg("org.apache.iceberg.rest.RESTCatalogServer")
            // RCKUtils maps CATALOG_A_B__C to the catalog property `a.b-c`.
            .env("CATALOG_WAREHOUSE", &warehouse)
            .env(
                "CATALOG_URI",
                format!("jdbc:sqlite:{}/catalog.db", dir.path().display()),
            )
            .env("CATALOG_REST_PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run java (install a JRE, e.g. Debian's openjdk-17-jre-headless)");
        // Owned from here on, so that a failed start kills the server too.
        let mut server = Self {
            child: KillOnDrop(child),
            uri: String::new(),
            _dir: dir,
            warehouse,
        };
        let stderr = server.child.stderr.take().unwrap();
        // Jetty logs `Started ServerConnector@…{HTTP/1.1, (http/1.1)}{0.0.0.0:PORT}`.
        let port = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stderr).lines();
            let mut seen = Vec::new();
            for line in lines.by_ref() {
                let line = line.unwrap();
                if line.contains("Started ServerConnector")
                    && let Some(port) = line
                        .rsplit_once(':')
                        .and_then(|(_, p)| p.trim_end_matches('}').parse::<u16>().ok())
                {
                    // Keep draining the log so the server never blocks on a full pipe.
                    std::thread::spawn(move || for _ in lines {});
                    return Ok(port);
                }
                seen.push(line);
            }
            Err(seen.join("\n"))
        });
        let port = tokio::time::timeout(Duration::from_secs(60), port)
            .await
            .expect("the REST fixture server did not start within 60 s")
            .unwrap()
            .unwrap_or_else(|log| panic!("the REST fixture server exited:\n{log}"));
        server.uri = format!("http://127.0.0.1:{port}");
        server
    }

    async fn client(&self) -> iceberg_catalog_rest::RestCatalog {
        RestCatalogBuilder::default()
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(
                "fixture",
                HashMap::from([("uri".to_string(), self.uri.clone())]),
            )
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn rest_catalog_fixture_server() {
    let server = RestFixture::start().await;
    let catalog = server.client().await;
    let ident = TableIdent::from_strs(["shop", "orders"]).unwrap();
    let t = writer::create_table(&catalog, &ident, orders_schema(), None)
        .await
        .unwrap();
    let t = writer::append(&catalog, &t, &[orders(1..=3)], &AppendOptions::default())
        .await
        .unwrap();
    // The server wrote the metadata below its warehouse; the data files are ours.
    assert!(
        local_path(t.metadata_location().unwrap()).starts_with(&server.warehouse),
        "{:?}",
        t.metadata_location()
    );

    let (node, _store) = Node::start_fresh().await;
    register_export_append(
        &node,
        json!({"type": "rest", "uri": server.uri}),
        &t,
        || async {
            writer::append(&catalog, &t, &[orders(4..=5)], &AppendOptions::default())
                .await
                .unwrap()
        },
    )
    .await;

    let missing = json!({"catalog": {"type": "rest", "uri": server.uri}, "table": "shop.missing"});
    expect_problem(&node, missing, 422, "iceberg_table_not_found").await;
    let missing_ns =
        json!({"catalog": {"type": "rest", "uri": server.uri}, "table": "nope.orders"});
    expect_problem(&node, missing_ns, 422, "iceberg_table_not_found").await;
    node.shutdown().await;
}

/// Apache Hive's standalone metastore (`tests/hive-metastore`, built by
/// `scripts/hive-metastore.sh`; its classpath in `ICEFEED_TEST_HIVE_METASTORE`) on a port
/// and a Derby database of its own, with a local warehouse. Killed on drop.
struct HiveMetastore {
    child: KillOnDrop,
    port: u16,
    dir: tempfile::TempDir,
}

impl HiveMetastore {
    async fn start() -> Self {
        let classpath = std::env::var("ICEFEED_TEST_HIVE_METASTORE")
            .expect("ICEFEED_TEST_HIVE_METASTORE: the classpath scripts/hive-metastore.sh prints");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("java")
            .args(["-XX:TieredStopAtLevel=1", "-Xmx512m", "-cp", &classpath])
            .arg("icefeed.testing.HiveMetastore")
            .arg(port.to_string())
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run java (install a JRE, e.g. Debian's openjdk-17-jre-headless)");
        let mut server = Self {
            child: KillOnDrop(child),
            port,
            dir,
        };
        let stdout = server.child.stdout.take().unwrap();
        let ready = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines.any(|l| l.is_ok_and(|l| l == "metastore ready"));
            std::thread::spawn(move || for _ in lines {});
            ready
        });
        let ready = tokio::time::timeout(Duration::from_secs(120), ready)
            .await
            .expect("the Hive metastore did not start within 120 s")
            .unwrap();
        assert!(ready, "the Hive metastore exited before it was ready");
        server
    }

    fn warehouse(&self) -> String {
        format!("file://{}/warehouse", self.dir.path().display())
    }
}

#[tokio::test]
async fn hive_metastore_catalog() {
    let hms = HiveMetastore::start().await;
    // pyiceberg creates and appends through the metastore (Thrift).
    let writer = json!({"type": "hive", "uri": format!("thrift://127.0.0.1:{}", hms.port),
                        "warehouse": hms.warehouse()});
    let env = HashMap::from([
        ("ICEFEED_CATALOG".to_string(), writer.to_string()),
        ("ICEFEED_TABLE".to_string(), "shop.orders".to_string()),
    ]);
    let write = |args: &[&str]| crate::pyiceberg::pyiceberg_with(hms.dir.path(), &env, args);
    write(&["create"]);
    let s1 = write(&["append", "1", "2"]);

    let (node, _store) = Node::start_fresh().await;
    let catalog = json!({"type": "hive", "uri": format!("127.0.0.1:{}", hms.port),
                         "warehouse": hms.warehouse()});
    let id = node
        .register(&json!({"catalog": catalog, "table": "shop.orders", "poll_interval_ms": 100}))
        .await;
    node.wait_for_checkpoint(&id, s1).await;
    let s2 = write(&["append", "3", "3"]);
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    let rows: Vec<(i64, String, i64)> = events
        .iter()
        .map(|e| {
            (
                e["after"]["id"].as_i64().unwrap(),
                e["after"]["name"].as_str().unwrap().to_string(),
                id64(&e["snapshot_id"]).unwrap(),
            )
        })
        .collect();
    let expected: Vec<(i64, String, i64)> = (1..=3)
        .map(|i| (i, format!("py{i}"), if i <= 2 { s1 } else { s2 }))
        .collect();
    assert_eq!(rows, expected);

    let missing = json!({"catalog": catalog, "table": "shop.missing"});
    expect_problem(&node, missing, 422, "iceberg_table_not_found").await;
    let nowhere = json!({"catalog": {"type": "hive", "uri": "127.0.0.1:9", "warehouse": "/w"},
                         "table": "shop.orders"});
    expect_problem(&node, nowhere, 502, "catalog_unreachable").await;
    node.shutdown().await;
}
