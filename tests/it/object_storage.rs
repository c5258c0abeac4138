//! Tables on object storage, against a real S3 server and a real Iceberg REST catalog
//! (SeaweedFS): a table written by pyiceberg through the REST catalog onto S3, followed
//! into a change store on the same server; filesystem tables (a metadata file, a Hadoop
//! warehouse) on S3; storage failures answered with the problem codes a user acts on;
//! catalog settings replaced without losing the feed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use object_store::ObjectStoreExt;
use serde_json::{Value, json};

use crate::fault_proxy::{Fault, FaultProxy};
use crate::pyiceberg::pyiceberg_with;
use crate::s3;
use crate::support::{KillOnDrop, Node, id_json, id64, image, wait_until};

/// A table `<unique namespace>.orders` (id long identifier, name string) in the REST
/// catalog, written by pyiceberg.
pub(crate) struct LakeTable {
    ident: String,
    env: HashMap<String, String>,
}

impl LakeTable {
    pub(crate) fn create() -> Self {
        Self::create_in(s3::rest_writer_catalog())
    }

    /// `namespace.table`.
    pub(crate) fn ident(&self) -> &str {
        &self.ident
    }

    /// The table in the catalog of pyiceberg `properties`.
    fn create_in(properties: Value) -> Self {
        let ident = format!("{}.orders", s3::unique("icefeed"));
        let env = s3::writer_env(properties, &ident);
        let table = Self { ident, env };
        table.write(&["create"]);
        table
    }

    /// Runs a writer command (see `tests/python/pyiceberg_writer.py`); returns the new
    /// snapshot id.
    pub(crate) fn write(&self, args: &[&str]) -> i64 {
        pyiceberg_with(Path::new("."), &self.env, args)
    }

    fn namespace(&self) -> &str {
        self.ident.split_once('.').unwrap().0
    }

    /// The table's metadata files in the table bucket, oldest first.
    async fn metadata_files(&self) -> Vec<String> {
        let mut files: Vec<String> = s3::list(s3::TABLE_BUCKET, self.namespace())
            .await
            .into_iter()
            .filter(|k| k.ends_with(".metadata.json"))
            .collect();
        // Named `NNNNN-<uuid>.metadata.json`: the number orders them.
        files.sort_by_key(|k| k.rsplit('/').next().unwrap().to_string());
        files
    }

    fn registration(&self, catalog: Value) -> Value {
        json!({"catalog": catalog, "table": self.ident, "poll_interval_ms": 100})
    }
}

/// A node whose change store is below a fresh prefix of the S3 bucket.
async fn node_on_s3() -> (Node, String) {
    let (settings, prefix) = s3::node_settings().await;
    (Node::start(settings).await, prefix)
}

/// (op, id, name) of each event, from the image it carries.
pub(crate) fn rows(events: &[Value]) -> Vec<(String, i64, Option<String>)> {
    events
        .iter()
        .map(|e| {
            let image = image(e);
            (
                e["op"].as_str().unwrap().to_string(),
                image["id"].as_i64().unwrap(),
                image["name"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// The row of an insert of `id` by the pyiceberg writer.
pub(crate) fn insert(id: i64) -> (String, i64, Option<String>) {
    ("insert".into(), id, Some(format!("py{id}")))
}

#[tokio::test]
async fn a_rest_catalog_table_on_s3_flows_into_a_change_store_on_s3() {
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "3"]);
    let (node, prefix) = node_on_s3().await;
    // Only the keys: the catalog's answers name the S3 endpoint, region and path style.
    let keys = s3::file_io()
        .into_iter()
        .filter(|(k, _)| k.ends_with("access-key-id") || k.ends_with("secret-access-key"))
        .collect();
    let id = node
        .register(&table.registration(s3::rest_catalog(keys)))
        .await;
    node.wait_for_checkpoint(&id, s1).await;
    let (events, next) = node.all_events(&id, None, 2).await;
    assert_eq!(rows(&events), (1..=3).map(insert).collect::<Vec<_>>());

    // An append, then a copy-on-write delete: its carryover is cancelled and its shuffle
    // files live in the change store on S3 too.
    let s2 = table.write(&["append", "4", "5"]);
    let s3_delete = table.write(&["delete", "2"]);
    node.wait_for_checkpoint(&id, s3_delete).await;
    let (events, _) = node.all_events(&id, Some(&next), 100).await;
    let snapshots: Vec<i64> = events
        .iter()
        .map(|e| id64(&e["snapshot_id"]).unwrap())
        .collect();
    assert_eq!(snapshots, [s2, s2, s3_delete]);
    let mut expected = vec![insert(4), insert(5), insert(2)];
    expected[2].0 = "delete".into();
    assert_eq!(rows(&events), expected);

    let stored = s3::list(s3::BUCKET, &format!("{prefix}/tables/{id}")).await;
    assert!(
        stored.len() >= 3 && stored.iter().all(|k| k.ends_with(".parquet")),
        "segments in the S3 change store: {stored:?}"
    );
    let leftovers: Vec<_> = stored.iter().filter(|k| k.contains("/shuffle/")).collect();
    assert!(
        leftovers.is_empty(),
        "shuffle files cleaned up: {leftovers:?}"
    );

    // Deleting the table removes its segments from the bucket.
    assert_eq!(node.delete(&format!("/v1/tables/{id}")).await, 204);
    let key_prefix = format!("{prefix}/tables/{id}");
    wait_until(Duration::from_secs(30), || async {
        s3::list(s3::BUCKET, &key_prefix)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn filesystem_tables_on_s3_a_metadata_file_and_a_hadoop_warehouse() {
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "2"]);
    let s2 = table.write(&["append", "3", "3"]);
    let files = table.metadata_files().await;
    assert_eq!(files.len(), 3, "create and two appends: {files:?}");
    let (node, _prefix) = node_on_s3().await;

    // One metadata file on S3: the table as of that version, never advancing.
    let second = format!("s3://{}/{}", s3::TABLE_BUCKET, files[1]);
    let id = node
        .register(&json!({
            "catalog": {"type": "filesystem", "metadata_location": second,
                        "properties": s3::file_io()},
            "table": "shop.orders", "poll_interval_ms": 100,
        }))
        .await;
    node.wait_for_checkpoint(&id, s1).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), vec![insert(1), insert(2)]);

    // A Hadoop warehouse on S3 (`vN.metadata.json`), which FileIO cannot list: without
    // a version hint the newest version is found by probing.
    let warehouse = s3::unique("hadoop");
    let bucket = s3::bucket(s3::BUCKET);
    let version_key = |v: usize| {
        object_store::path::Path::from(format!(
            "{warehouse}/shop/orders/metadata/v{v}.metadata.json"
        ))
    };
    let lake = s3::bucket(s3::TABLE_BUCKET);
    for (n, file) in files.iter().take(2).enumerate() {
        let bytes = lake
            .get(&file.as_str().into())
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        bucket.put(&version_key(n + 1), bytes.into()).await.unwrap();
    }
    let hadoop = json!({
        "catalog": {"type": "filesystem", "warehouse": format!("s3://{}/{warehouse}", s3::BUCKET),
                    "properties": s3::file_io()},
        "table": "shop.orders", "poll_interval_ms": 100,
    });
    let id = node.register(&hadoop).await;
    node.wait_for_checkpoint(&id, s1).await;

    // A newer version beyond a stale hint is found too, and followed.
    let hint = object_store::path::Path::from(format!(
        "{warehouse}/shop/orders/metadata/version-hint.text"
    ));
    bucket.put(&hint, "1".into()).await.unwrap();
    let third = lake
        .get(&files[2].as_str().into())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    bucket.put(&version_key(3), third.into()).await.unwrap();
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), (1..=3).map(insert).collect::<Vec<_>>());

    // A warehouse without the table answers as a missing table does.
    let (status, problem) = node
        .post(
            "/v1/tables",
            &json!({"catalog": hadoop["catalog"], "table": "shop.missing"}),
        )
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("iceberg_table_not_found")),
        "{problem}"
    );
    node.shutdown().await;
}

/// Registers `body`, expecting a problem with `status` and `code`; returns it.
async fn refused(node: &Node, body: &Value, status: u16, code: &str) -> Value {
    let (got, problem) = node.post("/v1/tables", body).await;
    assert_eq!(
        (got, problem["code"].as_str()),
        (status, Some(code)),
        "{problem}"
    );
    problem
}

#[tokio::test]
async fn storage_failures_at_registration_are_named() {
    let table = LakeTable::create();
    table.write(&["append", "1", "1"]);
    let (node, _prefix) = node_on_s3().await;

    // The REST catalog serves the metadata, but the files cannot be read with a wrong
    // secret: the registration checks them and says so, naming the file.
    let wrong = s3::rest_catalog(s3::file_io_with("not-the-secret"));
    let problem = refused(
        &node,
        &table.registration(wrong),
        422,
        "storage_access_denied",
    )
    .await;
    let location = problem["location"].as_str().unwrap();
    assert!(
        location.starts_with("s3://lake/") && location.ends_with(".metadata.json"),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("access denied"),
        "{problem}"
    );
    assert!(
        !problem.to_string().contains("not-the-secret"),
        "the secret stays out of the answer: {problem}"
    );

    let fixed = |location: String, props: BTreeMap<String, String>| {
        json!({"catalog": {"type": "filesystem", "metadata_location": location, "properties": props},
               "table": "shop.orders"})
    };
    for missing in [
        "s3://icefeed-no-such-bucket/t/metadata/v1.metadata.json".to_string(),
        format!(
            "s3://{}/{}/v1.metadata.json",
            s3::BUCKET,
            s3::unique("nothing")
        ),
    ] {
        let problem = refused(
            &node,
            &fixed(missing.clone(), s3::file_io()),
            422,
            "storage_not_found",
        )
        .await;
        assert_eq!(problem["location"], missing.as_str());
    }

    let mut closed = s3::file_io();
    closed.insert("s3.endpoint".into(), "http://127.0.0.1:9".into());
    let location = format!("s3://{}/t/metadata/v1.metadata.json", s3::BUCKET);
    refused(&node, &fixed(location, closed), 502, "storage_unreachable").await;

    let (_, tables) = node.get("/v1/tables").await;
    assert_eq!(
        tables["tables"],
        json!([]),
        "nothing was registered: {tables}"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn catalog_settings_are_replaced_without_losing_the_feed() {
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "2"]);
    let (node, _prefix) = node_on_s3().await;
    let id = node
        .register(&table.registration(s3::rest_catalog(s3::file_io())))
        .await;
    node.wait_for_checkpoint(&id, s1).await;
    let path = format!("/v1/tables/{id}");

    // Settings that cannot read the files are refused, and change nothing.
    let wrong = s3::rest_catalog(s3::file_io_with("rotated-away"));
    let (status, problem) = node
        .patch(&path, &json!({"catalog": wrong, "poll_interval_ms": 5000}))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("storage_access_denied")),
        "{problem}"
    );
    let (_, view) = node.get(&path).await;
    assert_eq!(
        view["poll_interval_ms"], 100,
        "a refused PATCH changes nothing: {view}"
    );

    // Settings that reach another table (one without the feed's checkpoint) are refused.
    let other = LakeTable::create();
    other.write(&["append", "7", "7"]);
    let other_metadata = other.metadata_files().await.pop().unwrap();
    let elsewhere = json!({"type": "filesystem", "properties": s3::file_io(),
        "metadata_location": format!("s3://{}/{other_metadata}", s3::TABLE_BUCKET)});
    let (status, problem) = node.patch(&path, &json!({"catalog": elsewhere})).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("catalog_table_mismatch")),
        "{problem}"
    );

    // The settings as `GET` shows them (secrets masked) keep the stored secrets; a
    // changed property is taken. The feed goes on from its checkpoint.
    let mut shown = view["catalog"].clone();
    assert_eq!(shown["properties"]["s3.secret-access-key"], "********");
    shown["properties"]["s3.region"] = json!("us-east-1");
    shown["properties"]["header.X-Iceberg-Access-Delegation"] = json!("vended-credentials");
    let (status, updated) = node.patch(&path, &json!({"catalog": shown})).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(
        updated["catalog"]["properties"]["header.X-Iceberg-Access-Delegation"],
        "vended-credentials"
    );
    assert_eq!(updated["checkpoint"]["snapshot_id"], id_json(s1));
    let s2 = table.write(&["append", "3", "3"]);
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), (1..=3).map(insert).collect::<Vec<_>>());
    node.shutdown().await;
}

/// The sum of a counter's samples for one table in `/metrics`, labelled with its id
/// and its name.
async fn table_counter(node: &Node, name: &str, id: &str, table: &str) -> f64 {
    let labels = [format!("table_id=\"{id}\""), format!("table=\"{table}\"")];
    node.get_text("/metrics")
        .await
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn storage_faults_are_retried_and_lose_nothing() {
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "3"]);
    // Table files are read through a fault-injecting proxy; the catalog is reached
    // directly (its answer names the endpoint, but the registration's properties win).
    let proxy = FaultProxy::start(&s3::endpoint()).await;
    let mut props = s3::file_io();
    props.insert("s3.endpoint".into(), proxy.url.clone());
    let (node, _prefix) = node_on_s3().await;
    let id = node
        .register(&table.registration(s3::rest_catalog(props)))
        .await;
    node.wait_for_checkpoint(&id, s1).await;
    let errors = || {
        table_counter(
            &node,
            "icefeed_scheduler_poll_errors_total",
            &id,
            &table.ident,
        )
    };
    let before = errors().await;

    // Throttling, resets, bodies cut off and slow answers on the data files: more in a
    // row than the storage layer retries by itself, so polls fail and are retried.
    proxy.script(
        ".parquet",
        [
            Fault::Status(503),
            Fault::Drop,
            Fault::Truncate,
            Fault::Status(500),
            Fault::Status(503),
            Fault::Drop,
            Fault::Truncate,
            Fault::Delay(Duration::from_secs(2)),
        ],
    );
    let s2 = table.write(&["append", "4", "6"]);
    node.wait_for_checkpoint(&id, s2).await;
    assert_eq!(proxy.pending(), 0, "every fault was met");
    assert!(errors().await > before, "the failed polls are counted");
    let (_, view) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(
        view["last_error"],
        Value::Null,
        "a publish clears the error: {view}"
    );

    // One access-denied answer (as when credentials expire) is retried with the
    // credentials the next load of the table brings...
    proxy.script(".avro", [Fault::Status(403)]);
    let s3_append = table.write(&["append", "7", "7"]);
    node.wait_for_checkpoint(&id, s3_append).await;
    assert_eq!(proxy.pending(), 0);

    // ...but denied again after that, the table stops, saying why.
    proxy.script(".avro", [Fault::Status(403), Fault::Status(403)]);
    let s4 = table.write(&["append", "8", "8"]);
    let stopped = node.wait_for_state(&id, "error").await;
    let error = stopped["last_error"].as_str().unwrap();
    assert!(error.starts_with("storage_access_denied"), "{stopped}");
    assert_eq!(stopped["last_error_code"], "storage_access_denied");
    assert!(
        error.contains(&s4.to_string()),
        "names the snapshot: {error}"
    );
    let (status, _) = node
        .post(&format!("/v1/tables/{id}/retry"), &json!({}))
        .await;
    assert_eq!(status, 200);
    node.wait_for_checkpoint(&id, s4).await;

    // Nothing lost, nothing twice.
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), (1..=8).map(insert).collect::<Vec<_>>());
    node.shutdown().await;
}

/// moto's AWS emulator in server mode (`python -m moto.server`, from the test
/// virtualenv), whose Glue API serves as the Glue Data Catalog. Killed on drop.
struct Moto {
    /// Held for its drop, which stops the server.
    _process: KillOnDrop,
    url: String,
}

impl Moto {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(crate::pyiceberg::python())
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run moto (see scripts/python-env.sh)");
        let moto = Self {
            _process: KillOnDrop(child),
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        wait_until(Duration::from_secs(30), || async {
            http.get(format!("{}/moto-api/", moto.url))
                .send()
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        moto
    }
}

#[tokio::test]
async fn a_glue_catalog_table_on_s3() {
    let moto = Moto::start().await;
    let warehouse = format!("s3://{}/{}", s3::BUCKET, s3::unique("glue"));
    // pyiceberg writes through Glue (moto) onto S3 (SeaweedFS).
    let table = LakeTable::create_in(json!({
        "type": "glue", "warehouse": warehouse, "glue.endpoint": moto.url,
        "glue.region": "us-east-1", "glue.access-key-id": "testing",
        "glue.secret-access-key": "testing",
    }));
    let s1 = table.write(&["append", "1", "2"]);
    let (node, _prefix) = node_on_s3().await;
    let mut properties = s3::file_io();
    for (k, v) in [
        ("region_name", "us-east-1"),
        ("aws_access_key_id", "testing"),
        ("aws_secret_access_key", "testing"),
    ] {
        properties.insert(k.into(), v.into());
    }
    let catalog = json!({"type": "glue", "warehouse": warehouse, "uri": moto.url,
                         "properties": properties});
    let id = node.register(&table.registration(catalog.clone())).await;
    node.wait_for_checkpoint(&id, s1).await;
    let s2 = table.write(&["append", "3", "3"]);
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), (1..=3).map(insert).collect::<Vec<_>>());

    let (_, view) = node.get(&format!("/v1/tables/{id}")).await;
    assert_eq!(
        view["catalog"]["properties"]["aws_secret_access_key"],
        "********"
    );
    let missing = json!({"catalog": catalog, "table": format!("{}.missing", table.namespace())});
    refused(&node, &missing, 422, "iceberg_table_not_found").await;
    node.shutdown().await;
}

#[tokio::test]
async fn rotated_keys_stop_the_table_until_new_ones_are_patched_in() {
    // A read-only identity of its own, whose key the test rotates on the server.
    let user = s3::unique("reader");
    let key = |n: u8| {
        (
            format!("{user}_key{n}").to_uppercase(),
            format!("{user}-secret{n}"),
        )
    };
    let ((old_key, old_secret), (new_key, new_secret)) = (key(1), key(2));
    s3::weed_shell(&format!(
        "s3.configure -user={user} -access_key={old_key} -secret_key={old_secret} \
         -actions=Read,List -apply"
    ));
    let keys = |key: &str, secret: &str| {
        BTreeMap::from([
            ("s3.access-key-id".to_string(), key.to_string()),
            ("s3.secret-access-key".to_string(), secret.to_string()),
        ])
    };
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "2"]);
    let (node, _prefix) = node_on_s3().await;
    let id = node
        .register(&table.registration(s3::rest_catalog(keys(&old_key, &old_secret))))
        .await;
    node.wait_for_checkpoint(&id, s1).await;

    // The old key is replaced on the server: the next snapshot cannot be read.
    s3::weed_shell(&format!(
        "s3.configure -user={user} -access_key={new_key} -secret_key={new_secret} -apply"
    ));
    s3::weed_shell(&format!(
        "s3.configure -user={user} -access_key={old_key} -delete -apply"
    ));
    let s2 = table.write(&["append", "3", "3"]);
    let stopped = node.wait_for_state(&id, "error").await;
    let error = stopped["last_error"].as_str().unwrap();
    assert!(error.starts_with("storage_access_denied"), "{stopped}");
    assert!(
        !error.contains(&old_secret),
        "no secret in the error: {error}"
    );
    assert_eq!(stopped["checkpoint"]["snapshot_id"], id_json(s1));

    // The operator patches the new key in and retries: the feed goes on where it was.
    let path = format!("/v1/tables/{id}");
    let mut catalog = stopped["catalog"].clone();
    catalog["properties"]["s3.access-key-id"] = json!(new_key);
    catalog["properties"]["s3.secret-access-key"] = json!(new_secret);
    let (status, patched) = node.patch(&path, &json!({ "catalog": catalog })).await;
    assert_eq!(status, 200, "{patched}");
    let (status, _) = node.post(&format!("{path}/retry"), &json!({})).await;
    assert_eq!(status, 200);
    node.wait_for_checkpoint(&id, s2).await;
    let (events, _) = node.all_events(&id, None, 100).await;
    assert_eq!(rows(&events), (1..=3).map(insert).collect::<Vec<_>>());
    s3::weed_shell(&format!("s3.configure -user={user} -delete -apply"));
    node.shutdown().await;
}
