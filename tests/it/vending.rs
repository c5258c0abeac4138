//! Vended credentials that expire while icefeed follows a table. A REST catalog in front
//! of SeaweedFS's answers LoadTable, when asked for vended credentials
//! (`X-Iceberg-Access-Delegation: vended-credentials`), with the keys of a read-only S3
//! identity it creates on the server and deletes a few seconds later, as a catalog's
//! short-lived session credentials expire. (SeaweedFS's own vending cannot issue
//! credentials that live less than 15 minutes.) Everything else is forwarded as is.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use object_store::ObjectStore;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::object_storage::{LakeTable, insert, rows};
use crate::s3;
use crate::support::wait_until;

/// Keys of one vended identity.
#[derive(Clone, Debug)]
struct Credential {
    user: String,
    key: String,
    secret: String,
    minted: Instant,
}

struct State {
    upstream: String,
    client: reqwest::Client,
    /// How long a vended identity lives on the server.
    ttl: Duration,
    current: tokio::sync::Mutex<Option<Credential>>,
    /// Every credential vended so far, oldest first.
    vended: std::sync::Mutex<Vec<Credential>>,
    /// Credentials deleted from the server.
    expired: AtomicUsize,
    /// LoadTable answers that carried vended keys.
    vended_loads: AtomicUsize,
}

/// A running vending catalog; stops when dropped (the identities it created expire on
/// their own schedule).
pub struct VendingCatalog {
    pub url: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl VendingCatalog {
    /// A catalog in front of SeaweedFS's whose vended identities live `ttl`.
    pub async fn start(ttl: Duration) -> Self {
        let state = Arc::new(State {
            upstream: s3::rest_uri().trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            ttl,
            current: Default::default(),
            vended: Default::default(),
            expired: AtomicUsize::new(0),
            vended_loads: AtomicUsize::new(0),
        });
        let serving = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                forward(serving.clone(), method, uri, headers, body)
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, state, task }
    }

    /// Credentials vended so far.
    fn vended(&self) -> Vec<Credential> {
        self.state.vended.lock().unwrap().clone()
    }

    fn expired(&self) -> usize {
        self.state.expired.load(Ordering::SeqCst)
    }

    fn vended_loads(&self) -> usize {
        self.state.vended_loads.load(Ordering::SeqCst)
    }
}

impl Drop for VendingCatalog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `GET /v1/{prefix}/namespaces/{namespace}/tables/{table}`: LoadTable.
fn is_load_table(method: &Method, uri: &Uri) -> bool {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    method == Method::GET
        && parts.len() == 6
        && parts[0] == "v1"
        && parts[2] == "namespaces"
        && parts[4] == "tables"
}

async fn forward(
    state: Arc<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = state
        .client
        .request(method.clone(), format!("{}{path}", state.upstream))
        .body(body);
    // The delegation is this catalog's to answer: SeaweedFS, asked for it without a role
    // to vend from, would leave the endpoint and region out of its answer.
    for (name, value) in &headers {
        if !["host", "content-length", "x-iceberg-access-delegation"].contains(&name.as_str()) {
            request = request.header(name, value);
        }
    }
    let upstream = request.send().await.unwrap();
    let status = upstream.status();
    let content_type = upstream.headers().get("content-type").cloned();
    let mut bytes = upstream.bytes().await.unwrap();
    let delegated = headers
        .get("x-iceberg-access-delegation")
        .is_some_and(|v| v.to_str().unwrap_or("").contains("vended-credentials"));
    if status == StatusCode::OK && delegated && is_load_table(&method, &uri) {
        let credential = fresh_credential(&state).await;
        let mut answer: Value = serde_json::from_slice(&bytes).unwrap();
        let config = answer
            .as_object_mut()
            .unwrap()
            .entry("config")
            .or_insert_with(|| json!({}));
        config["s3.access-key-id"] = json!(credential.key);
        config["s3.secret-access-key"] = json!(credential.secret);
        bytes = Bytes::from(serde_json::to_vec(&answer).unwrap());
        state.vended_loads.fetch_add(1, Ordering::SeqCst);
    }
    let mut response = Response::builder().status(status);
    if let Some(content_type) = content_type {
        response = response.header("content-type", content_type);
    }
    response.body(Body::from(bytes)).unwrap()
}

/// The credential to vend now: the current one while it has at least half its life
/// left, else a new one (as STS-backed catalogs hand out credentials with time to run).
async fn fresh_credential(state: &Arc<State>) -> Credential {
    let mut current = state.current.lock().await;
    if let Some(credential) = current.as_ref()
        && credential.minted.elapsed() < state.ttl / 2
    {
        return credential.clone();
    }
    let credential = mint().await;
    state.vended.lock().unwrap().push(credential.clone());
    let (expiring, state_for_expiry) = (credential.clone(), state.clone());
    tokio::spawn(async move {
        tokio::time::sleep(state_for_expiry.ttl).await;
        let user = expiring.user.clone();
        tokio::task::spawn_blocking(move || {
            s3::weed_shell(&format!("s3.configure -user={user} -delete -apply"))
        })
        .await
        .unwrap();
        state_for_expiry.expired.fetch_add(1, Ordering::SeqCst);
    });
    *current = Some(credential.clone());
    credential
}

/// Creates a read-only identity on the server and waits until the S3 API accepts it.
async fn mint() -> Credential {
    let user = s3::unique("vended");
    let credential = Credential {
        key: user.to_uppercase(),
        secret: format!("{user}-secret"),
        user,
        minted: Instant::now(),
    };
    let command = format!(
        "s3.configure -user={} -access_key={} -secret_key={} -actions=Read,List -apply",
        credential.user, credential.key, credential.secret
    );
    tokio::task::spawn_blocking(move || s3::weed_shell(&command))
        .await
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        let credential = credential.clone();
        async move { accepts(&credential).await.then_some(()) }
    })
    .await;
    credential
}

/// Whether the S3 server accepts `credential` (a listing of the table bucket).
async fn accepts(credential: &Credential) -> bool {
    let mut options = s3::change_store_options();
    options.insert("aws_access_key_id".into(), credential.key.clone());
    options.insert("aws_secret_access_key".into(), credential.secret.clone());
    let url = url::Url::parse(&format!("s3://{}", s3::TABLE_BUCKET)).unwrap();
    let (store, _) = object_store::parse_url_opts(&url, options).unwrap();
    store.list_with_delimiter(None).await.is_ok()
}

#[tokio::test]
async fn vended_credentials_that_expire_while_following_are_renewed() {
    let ttl = Duration::from_secs(6);
    let catalog = VendingCatalog::start(ttl).await;
    let table = LakeTable::create();
    let s1 = table.write(&["append", "1", "2"]);
    let (settings, _prefix) = s3::node_settings().await;
    let node = crate::support::Node::start(settings).await;
    // No keys anywhere in the registration: the table's files are read with whatever
    // the catalog vends.
    let registration = json!({
        "catalog": {"type": "rest", "uri": catalog.url, "warehouse": s3::TABLE_BUCKET,
                    "properties": {
                        "credential": format!("{}:{}", s3::ACCESS_KEY, s3::SECRET_KEY),
                        "header.X-Iceberg-Access-Delegation": "vended-credentials"}},
        "table": table.ident(),
        "poll_interval_ms": 100,
    });
    let id = node.register(&registration).await;
    node.wait_for_checkpoint(&id, s1).await;

    // Commits spread over more than two lifetimes of a credential, a copy-on-write delete
    // (read by map tasks, which load the table themselves) among them.
    let started = Instant::now();
    let mut head = s1;
    for n in 3..=8 {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        head = if n == 5 {
            table.write(&["delete", "2"])
        } else {
            table.write(&["append", &n.to_string(), &n.to_string()])
        };
    }
    let view = node.wait_for_checkpoint(&id, head).await;
    assert_eq!(view["state"], "active", "{view}");
    assert!(started.elapsed() > 2 * ttl);

    let vended = catalog.vended();
    assert!(
        vended.len() >= 3 && catalog.expired() >= 2,
        "credentials were renewed and expired while the table was followed: {} vended, {} expired",
        vended.len(),
        catalog.expired()
    );
    assert!(catalog.vended_loads() > vended.len());
    // Expired means refused: the first identity is gone from the server.
    assert!(!accepts(&vended[0]).await, "an expired key is refused");

    // Nothing lost, nothing twice.
    let (events, _) = node.all_events(&id, None, 100).await;
    let mut expected: Vec<_> = (1..=4).map(insert).collect();
    expected.push(("delete".into(), 2, Some("py2".into())));
    expected.extend((6..=8).map(insert));
    assert_eq!(rows(&events), expected);
    node.shutdown().await;
}
