//! The SeaweedFS server of the object-storage tests: a real S3 API and a real Iceberg
//! REST catalog over its table bucket `lake` (`scripts/seaweedfs.sh` starts it; the
//! README's test command runs that). Tests share the server, so each works below a
//! prefix or namespace of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::TryStreamExt;
use icefeed::config::Settings;
use object_store::ObjectStore;
use object_store::path::Path;
use serde_json::{Value, json};

use crate::support::{fresh_database, test_settings};

/// Access key and secret of the server's admin identity.
pub const ACCESS_KEY: &str = "admin";
pub const SECRET_KEY: &str = "adminsecret";
/// The plain S3 bucket (change stores, filesystem warehouses) and the S3 Tables bucket
/// behind the REST catalog.
pub const BUCKET: &str = "warehouse";
pub const TABLE_BUCKET: &str = "lake";

/// The S3 endpoint.
pub fn endpoint() -> String {
    std::env::var("ICEFEED_TEST_S3_URL").unwrap_or_else(|_| "http://127.0.0.1:8333".into())
}

/// The Iceberg REST catalog.
pub fn rest_uri() -> String {
    std::env::var("ICEFEED_TEST_S3_REST_URL").unwrap_or_else(|_| "http://127.0.0.1:8181".into())
}

/// Runs one `weed shell` command against the server (its master on the default port),
/// e.g. to add or delete S3 identities and keys.
pub fn weed_shell(command: &str) {
    use std::io::Write;
    let weed = std::env::var("ICEFEED_TEST_WEED")
        .expect("ICEFEED_TEST_WEED: the weed binary (`scripts/seaweedfs.sh --binary`)");
    let mut child = std::process::Command::new(weed)
        .args(["shell", "-master=127.0.0.1:9333"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run weed shell");
    writeln!(child.stdin.take().unwrap(), "{command}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weed shell {command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A name no other test (or earlier run) uses: a namespace or a key prefix.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Iceberg FileIO properties that reach the server with `secret`.
pub fn file_io_with(secret: &str) -> BTreeMap<String, String> {
    BTreeMap::from(
        [
            ("s3.endpoint", endpoint()),
            ("s3.access-key-id", ACCESS_KEY.into()),
            ("s3.secret-access-key", secret.into()),
            ("s3.region", "us-east-1".into()),
            ("s3.path-style-access", "true".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
}

/// Iceberg FileIO properties with the right secret.
pub fn file_io() -> BTreeMap<String, String> {
    file_io_with(SECRET_KEY)
}

/// The REST catalog's registration settings, with `properties` merged over the
/// catalog credential.
pub fn rest_catalog(properties: BTreeMap<String, String>) -> Value {
    let mut props = json!({"credential": format!("{ACCESS_KEY}:{SECRET_KEY}")});
    for (k, v) in properties {
        props[k] = json!(v);
    }
    json!({"type": "rest", "uri": rest_uri(), "warehouse": TABLE_BUCKET, "properties": props})
}

/// `object_store` options of a change store on the server.
pub fn change_store_options() -> BTreeMap<String, String> {
    BTreeMap::from(
        [
            ("aws_endpoint", endpoint()),
            ("aws_access_key_id", ACCESS_KEY.into()),
            ("aws_secret_access_key", SECRET_KEY.into()),
            ("aws_region", "us-east-1".into()),
            ("aws_allow_http", "true".into()),
            ("aws_virtual_hosted_style_request", "false".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
}

/// Test node settings with a fresh database and the change store below a fresh prefix
/// of the bucket; returns them with the prefix.
pub async fn node_settings() -> (Settings, String) {
    let prefix = unique("changes");
    let mut settings = test_settings(&fresh_database().await, std::path::Path::new("unused"));
    settings.change_store = format!("s3://{BUCKET}/{prefix}");
    settings.change_store_options = change_store_options();
    (settings, prefix)
}

/// A client of `bucket`, to look at what icefeed stored or to place files.
pub fn bucket(bucket: &str) -> Arc<dyn ObjectStore> {
    let url = url::Url::parse(&format!("s3://{bucket}")).unwrap();
    let (store, _) = object_store::parse_url_opts(&url, change_store_options()).unwrap();
    Arc::from(store)
}

/// Keys below `prefix` in `bucket`.
pub async fn list(bucket_name: &str, prefix: &str) -> Vec<String> {
    bucket(bucket_name)
        .list(Some(&Path::from(prefix)))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap()
}

/// The environment of the pyiceberg writer for a catalog of pyiceberg `properties`
/// (with the S3 FileIO properties added) and the table `table`.
pub fn writer_env(mut properties: Value, table: &str) -> HashMap<String, String> {
    for (k, v) in file_io() {
        properties[k] = json!(v);
    }
    HashMap::from([
        ("ICEFEED_CATALOG".into(), properties.to_string()),
        ("ICEFEED_TABLE".into(), table.to_string()),
    ])
}

/// The pyiceberg properties of the REST catalog.
pub fn rest_writer_catalog() -> Value {
    json!({"type": "rest", "uri": rest_uri(), "warehouse": TABLE_BUCKET,
           "credential": format!("{ACCESS_KEY}:{SECRET_KEY}")})
}
