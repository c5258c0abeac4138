//! A fault-injecting HTTP proxy: forwards requests to an upstream server, except that the
//! next requests whose path ends with a given suffix get scripted faults instead: an
//! error status, a dropped connection, an answer cut off in the middle of its body, or a
//! bulk answer refusing every item for now. Besides, every write (PUT, POST, DELETE) on
//! any path can be refused or failed until switched back ([`Writes`]): an S3 bucket that
//! became read-only, or a failing one. The `Host` header is forwarded as sent, so
//! requests signed for the proxy's address (S3's SigV4) still verify upstream.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the proxy does instead of forwarding one request.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Answer this status with an OpenSearch-style error body.
    Status(u16),
    /// Close the connection without answering.
    Drop,
    /// Answer a `_bulk` request 200 with every item refused for now (429,
    /// `es_rejected_execution_exception`); nothing is written.
    RejectItems,
    /// Forward the request after a pause (a slow cluster).
    Delay(std::time::Duration),
    /// Forward the request, then send the status, headers and half of the upstream's
    /// body, and reset the connection (a connection lost mid-download).
    Truncate,
}

/// What the proxy does with every write request (PUT, POST, DELETE), whatever its path;
/// reads (GET, HEAD) are forwarded (or scripted) as usual.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writes {
    /// Forward them.
    #[default]
    Forward,
    /// Refuse them with `403 AccessDenied`, an S3 XML error, as a bucket whose policy
    /// became read-only does. Nothing is written.
    Refuse,
    /// Fail them with this status and an S3 XML error (`500 InternalError`,
    /// `503 SlowDown`). Nothing is written.
    Fail(u16),
    /// Close the connection without answering. Nothing is written.
    Drop,
}

type Body = BoxBody<Bytes, Dropped>;

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

#[derive(Default)]
struct Script {
    path_suffix: String,
    faults: VecDeque<Fault>,
}

struct State {
    upstream: String,
    client: reqwest::Client,
    script: Mutex<Script>,
    writes: Mutex<Writes>,
    /// Writes refused or failed by [`Writes`].
    writes_stopped: AtomicUsize,
    /// Requests on the scripted path that were forwarded.
    forwarded: AtomicUsize,
    /// (request body, answer body) of forwarded requests on the scripted path.
    exchanges: Mutex<Vec<(Bytes, Bytes)>>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    /// Base URL of the proxy.
    pub url: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// Closing the connection: hyper drops it when the service fails.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the fault proxy")
    }
}

impl std::error::Error for Dropped {}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a random port.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            script: Mutex::default(),
            writes: Mutex::default(),
            writes_stopped: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            exchanges: Mutex::default(),
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| handle(state.clone(), request));
                    // An error here is a dropped connection, scripted or by the client.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, state, task }
    }

    /// Answers the next requests whose path ends with `path_suffix` with `faults`, in order.
    pub fn script(&self, path_suffix: &str, faults: impl IntoIterator<Item = Fault>) {
        let mut script = self.state.script.lock().unwrap();
        script.path_suffix = path_suffix.to_string();
        script.faults = faults.into_iter().collect();
    }

    /// Treats every write from now on as `writes` says, until set again.
    pub fn set_writes(&self, writes: Writes) {
        *self.state.writes.lock().unwrap() = writes;
    }

    /// Writes that [`Writes`] refused, failed or dropped so far.
    pub fn writes_stopped(&self) -> usize {
        self.state.writes_stopped.load(Ordering::SeqCst)
    }

    /// Scripted faults not yet used.
    pub fn pending(&self) -> usize {
        self.state.script.lock().unwrap().faults.len()
    }

    /// Requests on the scripted path that reached the upstream.
    pub fn forwarded(&self) -> usize {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// (request body, answer body) of every forwarded request on the scripted path, in
    /// the order the answers came.
    pub fn exchanges(&self) -> Vec<(Bytes, Bytes)> {
        self.state.exchanges.lock().unwrap().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Body>, Dropped> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let writes = *state.writes.lock().unwrap();
    let write = matches!(
        parts.method,
        hyper::Method::PUT | hyper::Method::POST | hyper::Method::DELETE
    );
    if write && writes != Writes::Forward {
        state.writes_stopped.fetch_add(1, Ordering::SeqCst);
        return match writes {
            Writes::Refuse => Ok(s3_error(
                403,
                "AccessDenied",
                "Access Denied",
                parts.uri.path(),
            )),
            Writes::Fail(status) => {
                let code = match status {
                    503 => "SlowDown",
                    _ => "InternalError",
                };
                Ok(s3_error(
                    status,
                    code,
                    "injected: the store is failing",
                    parts.uri.path(),
                ))
            }
            Writes::Drop | Writes::Forward => Err(Dropped),
        };
    }
    let (scripted, fault) = {
        let mut script = state.script.lock().unwrap();
        let scripted =
            !script.path_suffix.is_empty() && parts.uri.path().ends_with(&script.path_suffix);
        (
            scripted,
            scripted.then(|| script.faults.pop_front()).flatten(),
        )
    };
    match fault {
        Some(Fault::Drop) => Err(Dropped),
        Some(Fault::Status(status)) => Ok(json_response(
            status,
            &json!({"error": {"type": "injected_fault", "reason": format!("injected {status}")}, "status": status}),
        )),
        Some(Fault::RejectItems) => Ok(json_response(200, &refuse_all(&body))),
        Some(Fault::Delay(pause)) => {
            tokio::time::sleep(pause).await;
            forward(&state, parts, body, true).await
        }
        Some(Fault::Truncate) => {
            let (head, body) = forward(&state, parts, body, true).await?.into_parts();
            let whole = body.collect().await?.to_bytes();
            let half = whole.slice(..whole.len() / 2);
            let chunks = futures::stream::iter([Ok(hyper::body::Frame::data(half)), Err(Dropped)]);
            Ok(Response::from_parts(head, StreamBody::new(chunks).boxed()))
        }
        None => forward(&state, parts, body, scripted).await,
    }
}

async fn forward(
    state: &State,
    parts: hyper::http::request::Parts,
    body: Bytes,
    scripted: bool,
) -> Result<Response<Body>, Dropped> {
    if scripted {
        state.forwarded.fetch_add(1, Ordering::SeqCst);
    }
    let request_body = body.clone();
    let target = format!(
        "{}{}",
        state.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut request = state.client.request(parts.method, target).body(body);
    for (name, value) in &parts.headers {
        if name != hyper::header::CONTENT_LENGTH {
            request = request.header(name, value);
        }
    }
    let answer = request.send().await.map_err(|_| Dropped)?;
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != hyper::header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    let body = answer.bytes().await.map_err(|_| Dropped)?;
    if scripted {
        state
            .exchanges
            .lock()
            .unwrap()
            .push((request_body, body.clone()));
    }
    Ok(response.body(full(body)).unwrap())
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(Bytes::from(body.to_string())))
        .unwrap()
}

/// An S3 error answer: `status` with the XML error document S3 sends.
fn s3_error(status: u16, code: &str, message: &str, resource: &str) -> Response<Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message><Resource>{resource}</Resource>\
         <RequestId>fault-proxy</RequestId></Error>"
    );
    Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(full(Bytes::from(body)))
        .unwrap()
}

/// A bulk answer refusing each action of an NDJSON `_bulk` body for now.
fn refuse_all(body: &[u8]) -> Value {
    let mut items = Vec::new();
    let mut lines = body.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    while let Some(line) = lines.next() {
        let action: Value = serde_json::from_slice(line).expect("an action line");
        let (name, _) = action.as_object().unwrap().iter().next().unwrap();
        if name != "delete" {
            lines.next(); // the document
        }
        items.push(json!({ name.as_str(): {"status": 429, "error": {
            "type": "es_rejected_execution_exception", "reason": "injected: write queue full"}}}));
    }
    json!({"took": 0, "errors": true, "items": items})
}
