//! Admission: a node under load answers at once rather than letting every request slow
//! down. Ordinary requests share `limits.max_concurrent_requests` permits; event streams
//! and long polls, which mostly wait, count against `limits.max_waiting_requests` per
//! node and `limits.max_waiting_per_client` per client for as long as they are open.
//! Past a node limit the answer is `503 overloaded`, past a client's `429
//! too_many_waiting_requests`, both with `Retry-After`. Health, readiness and metrics
//! are never refused, so that probes see a busy node as alive.
//!
//! A client is its bearer token when it sends one (by hash), else its address.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use crate::config::LimitSettings;
use crate::telemetry::metric::{HTTP_REQUESTS_SHED, HTTP_WAITING_REQUESTS};

/// The admission state of one node.
pub struct Admission {
    limits: LimitSettings,
    requests: Arc<Semaphore>,
    waiting: Arc<Mutex<Waiting>>,
}

#[derive(Debug, Default)]
struct Waiting {
    total: usize,
    by_client: HashMap<String, usize>,
}

/// What a request is, for admission.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    /// Never refused.
    Probe,
    /// A stream or a long poll: it holds its place while open.
    Waiting,
    Ordinary,
}

impl Admission {
    pub fn new(limits: LimitSettings) -> Self {
        Self {
            requests: Arc::new(Semaphore::new(limits.max_concurrent_requests)),
            waiting: Arc::default(),
            limits,
        }
    }

    /// Takes a waiting place for `client`, or says why not.
    fn wait_place(&self, client: String) -> Result<WaitingPlace, ApiError> {
        let mut waiting = self.waiting.lock().expect("admission lock");
        let open = waiting.by_client.get(&client).copied().unwrap_or(0);
        if open >= self.limits.max_waiting_per_client {
            metrics::counter!(HTTP_REQUESTS_SHED.name, "reason" => "client_limit").increment(1);
            return Err(ApiError::new(
                ProblemCode::TooManyWaitingRequests,
                format!(
                    "this client already has {open} event streams and long polls open on this \
                     node, the most limits.max_waiting_per_client allows; close one, or retry \
                     after the time in Retry-After"
                ),
            )
            .with("limit", self.limits.max_waiting_per_client));
        }
        if waiting.total >= self.limits.max_waiting_requests {
            return Err(overloaded("event streams and long polls"));
        }
        waiting.total += 1;
        *waiting.by_client.entry(client.clone()).or_default() += 1;
        metrics::gauge!(HTTP_WAITING_REQUESTS.name).set(waiting.total as f64);
        Ok(WaitingPlace {
            waiting: self.waiting.clone(),
            client,
        })
    }
}

fn overloaded(what: &str) -> ApiError {
    metrics::counter!(HTTP_REQUESTS_SHED.name, "reason" => "overloaded").increment(1);
    ApiError::new(
        ProblemCode::Overloaded,
        format!(
            "this node is at its limit of {what} right now; retry after the time in \
             Retry-After (another node may have room)"
        ),
    )
}

/// A stream's or long poll's place, given back when its answer is dropped.
#[derive(Debug)]
struct WaitingPlace {
    waiting: Arc<Mutex<Waiting>>,
    client: String,
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let mut waiting = self.waiting.lock().expect("admission lock");
        waiting.total -= 1;
        if let Some(open) = waiting.by_client.get_mut(&self.client) {
            *open -= 1;
            if *open == 0 {
                waiting.by_client.remove(&self.client);
            }
        }
        metrics::gauge!(HTTP_WAITING_REQUESTS.name).set(waiting.total as f64);
    }
}

/// The middleware: admits the request or answers why not.
pub async fn admit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let admission = &state.admission;
    match classify(&request) {
        Class::Probe => next.run(request).await,
        Class::Ordinary => {
            let Ok(_permit) = admission.requests.try_acquire() else {
                return overloaded("requests").into_response();
            };
            next.run(request).await
        }
        Class::Waiting => match admission.wait_place(client(&request)) {
            Ok(place) => {
                let response = next.run(request).await;
                response.map(|body| {
                    Body::new(Held {
                        body,
                        _place: place,
                    })
                })
            }
            Err(refused) => refused.into_response(),
        },
    }
}

fn classify(request: &Request) -> Class {
    let path = request.uri().path();
    if matches!(path, "/healthz" | "/readyz" | "/metrics") {
        return Class::Probe;
    }
    let stream = request.method() == Method::GET && path.ends_with("/stream");
    let long_poll = request.uri().query().is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(k, v)| k == "wait" && v.parse::<i64>().is_ok_and(|wait| wait > 0))
    });
    if stream || long_poll {
        Class::Waiting
    } else {
        Class::Ordinary
    }
}

/// Who sent the request: its bearer token (hashed) or its address.
fn client(request: &Request) -> String {
    if let Some(token) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        let digest = Sha256::digest(token.trim().as_bytes());
        return format!("token:{}", hex::encode(&digest[..16]));
    }
    match request.extensions().get::<ConnectInfo<SocketAddr>>() {
        Some(ConnectInfo(address)) => format!("address:{}", address.ip()),
        None => "address:unknown".into(),
    }
}

/// A response body that holds its request's waiting place until it is dropped.
struct Held {
    body: Body,
    _place: WaitingPlace,
}

impl http_body::Body for Held {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, uri: &str) -> Request {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn streams_and_long_polls_wait_and_probes_pass() {
        let class = |method, uri| classify(&request(method, uri));
        assert_eq!(class(Method::GET, "/v1/tables/x/stream"), Class::Waiting);
        assert_eq!(
            class(Method::GET, "/v1/subscriptions/s/stream"),
            Class::Waiting
        );
        assert_eq!(
            class(Method::GET, "/v1/tables/x/changes?wait=20"),
            Class::Waiting
        );
        assert_eq!(
            class(Method::GET, "/v1/tables/x/changes?wait=0"),
            Class::Ordinary
        );
        assert_eq!(class(Method::GET, "/v1/tables/x/changes"), Class::Ordinary);
        assert_eq!(class(Method::POST, "/v1/tokens/stream"), Class::Ordinary);
        assert_eq!(class(Method::GET, "/readyz"), Class::Probe);
    }

    #[test]
    fn places_are_counted_per_client_and_given_back() {
        let admission = Admission::new(LimitSettings {
            max_concurrent_requests: 1,
            max_waiting_requests: 3,
            max_waiting_per_client: 2,
        });
        let a1 = admission.wait_place("a".into()).unwrap();
        let _a2 = admission.wait_place("a".into()).unwrap();
        let refused = admission.wait_place("a".into()).unwrap_err();
        assert_eq!(refused.code(), ProblemCode::TooManyWaitingRequests);
        let _b1 = admission.wait_place("b".into()).unwrap();
        let refused = admission.wait_place("c".into()).unwrap_err();
        assert_eq!(refused.code(), ProblemCode::Overloaded);
        drop(a1);
        let _c1 = admission.wait_place("c".into()).unwrap();
        assert_eq!(admission.waiting.lock().unwrap().by_client.len(), 3);
    }
}
