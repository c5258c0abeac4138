//! An HTTP client of one OpenSearch cluster: creating indices and sending `_bulk`
//! requests until every item is settled.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::network::HostPolicy;

use super::bulk::{self, BulkItem, EncodeError};
use super::config::{Auth, ConfigError, PushTarget, error_chain};
use super::response::{
    self, BulkOutcome, ItemStatus, OpenSearchError, ResponseError, is_retryable_status,
};
use super::retry::{RetryPolicy, retry, sleep_or_cancel};

/// Time to establish a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a whole request; a large `_bulk` on a busy cluster takes a while.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The error type of creating an index that is already there.
const ALREADY_EXISTS: &str = "resource_already_exists_exception";

/// One request that failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No answer: connection refused or dropped, timeout. Retryable.
    #[error("OpenSearch did not answer: {0}")]
    Connection(String),
    /// An error answer; retryable if its status is 429 or 5xx.
    #[error("OpenSearch answered {}: {}: {}", .0.status, .0.error_type, .0.reason)]
    Status(OpenSearchError),
    /// A success answer that cannot be read. Retryable: sending again is harmless.
    #[error(transparent)]
    Response(#[from] ResponseError),
}

/// Why a batch was not settled. The batch may be sent again as a whole: items already
/// written come back as already applied.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The cancellation token fired.
    #[error("cancelled")]
    Cancelled,
    /// OpenSearch refused the request itself (bad credentials, no permission, malformed):
    /// nothing will go through until the target or the cluster is fixed.
    #[error("OpenSearch refused the request ({}): {}: {}", .0.status, .0.error_type, .0.reason)]
    Refused(OpenSearchError),
    /// Still failing after every retry.
    #[error("OpenSearch still failing after {attempts} attempts: {last}")]
    GaveUp {
        /// Requests made.
        attempts: u32,
        /// The last failure.
        last: Box<RequestError>,
    },
    /// An item cannot be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// What became of one item in the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Written, or deleted.
    Applied,
    /// The document already had this version or a newer one.
    AlreadyApplied,
    /// Refused for good; belongs in the dead letters.
    Rejected(OpenSearchError),
}

impl ItemOutcome {
    /// The outcome of a settled status; `None` for a retryable one.
    fn settled(status: ItemStatus) -> Option<Self> {
        match status {
            ItemStatus::Applied => Some(Self::Applied),
            ItemStatus::AlreadyApplied => Some(Self::AlreadyApplied),
            ItemStatus::Rejected(e) => Some(Self::Rejected(e)),
            ItemStatus::Retryable(_) => None,
        }
    }
}

/// A client of one cluster; share it (it pools connections).
#[derive(Debug)]
pub struct OpenSearchClient {
    http: reqwest::Client,
    endpoints: Vec<Url>,
    /// The endpoint to use; moves on after a failure.
    current: AtomicUsize,
    auth: Option<Auth>,
    /// Indices known to exist, so that each is checked once.
    ensured: Mutex<HashSet<String>>,
}

impl OpenSearchClient {
    /// A client for a checked target that connects only where `hosts` allows; reads a
    /// CA bundle given as a path.
    pub fn new(target: &PushTarget, hosts: &HostPolicy) -> Result<Self, ConfigError> {
        // The resolver sees names only.
        for endpoint in &target.endpoints {
            hosts
                .check_address("endpoints", endpoint)
                .map_err(|e| ConfigError::Invalid {
                    field: "endpoints".into(),
                    message: e.to_string(),
                })?;
        }
        let builder = hosts
            .client_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        let http = target
            .config
            .tls
            .apply(builder)?
            .build()
            .map_err(|e| ConfigError::Invalid {
                field: "tls".into(),
                message: error_chain(&e),
            })?;
        Ok(Self {
            http,
            endpoints: target.endpoints.clone(),
            current: AtomicUsize::new(0),
            auth: target.config.auth.clone(),
            ensured: Mutex::default(),
        })
    }

    /// Sends one request to the current endpoint; moves to the next endpoint when it fails.
    async fn send(
        &self,
        method: Method,
        path: &[&str],
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<(StatusCode, Bytes), RequestError> {
        let current = self.current.load(Ordering::Relaxed);
        let mut url = self.endpoints[current % self.endpoints.len()].clone();
        url.path_segments_mut()
            .expect("http(s) URLs have a path")
            .pop_if_empty()
            .extend(path);
        let mut request = build(self.http.request(method, url));
        request = match &self.auth {
            Some(Auth::Basic { username, password }) => {
                request.basic_auth(username, Some(password.expose()))
            }
            Some(Auth::Bearer { token }) => request.bearer_auth(token.expose()),
            None => request,
        };
        let result = async {
            let response = request.send().await?;
            let status = response.status();
            Ok((status, response.bytes().await?))
        }
        .await
        .map_err(|e: reqwest::Error| RequestError::Connection(error_chain(&e)));
        if result
            .as_ref()
            .map_or(true, |(status, _)| is_retryable_status(status.as_u16()))
        {
            // Others may have moved on already; move once per failure seen at `current`.
            let _ = self.current.compare_exchange(
                current,
                current.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        result
    }

    /// Creates `index` with these settings and mappings unless it exists. One attempt:
    /// wrap it in [`retry`] to retry.
    pub async fn ensure_index(
        &self,
        index: &str,
        settings: Option<&Value>,
        mappings: Option<&Value>,
    ) -> Result<(), RequestError> {
        if self.ensured.lock().expect("not poisoned").contains(index) {
            return Ok(());
        }
        let (status, body) = self.send(Method::HEAD, &[index], |r| r).await?;
        if status == StatusCode::NOT_FOUND {
            let mut create = Map::new();
            if let Some(settings) = settings {
                create.insert("settings".into(), settings.clone());
            }
            if let Some(mappings) = mappings {
                create.insert("mappings".into(), mappings.clone());
            }
            let (status, body) = self
                .send(Method::PUT, &[index], |r| r.json(&create))
                .await?;
            if !status.is_success() {
                let error = response::parse_error(status.as_u16(), &body);
                // Someone else created it in between.
                if error.error_type != ALREADY_EXISTS {
                    return Err(RequestError::Status(error));
                }
            }
            tracing::info!(index, "created OpenSearch index");
        } else if !status.is_success() {
            return Err(RequestError::Status(response::parse_error(
                status.as_u16(),
                &body,
            )));
        }
        self.ensured
            .lock()
            .expect("not poisoned")
            .insert(index.to_string());
        Ok(())
    }

    /// Sends one `_bulk` request of `items` items (see [`bulk::encode`]). One attempt.
    pub async fn bulk(&self, body: Bytes, items: usize) -> Result<BulkOutcome, RequestError> {
        let (status, answer) = self
            .send(Method::POST, &["_bulk"], |r| {
                r.header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                    .body(body)
            })
            .await?;
        if !status.is_success() {
            return Err(RequestError::Status(response::parse_error(
                status.as_u16(),
                &answer,
            )));
        }
        Ok(response::parse_bulk(&answer, items)?)
    }

    /// Sends a batch until every item is settled, returning one outcome per item in order.
    /// Failed requests are retried whole; items that failed for now inside a successful
    /// answer are retried one at a time; items refused for good are reported as rejected.
    /// A request too large for the cluster (413) is split into single items.
    pub async fn send_batch(
        &self,
        items: &[BulkItem],
        policy: &RetryPolicy,
        cancel: &CancellationToken,
    ) -> Result<Vec<ItemOutcome>, SendError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let body = bulk::encode(items)?;
        let statuses = match retry(policy, cancel, || self.bulk(body.clone(), items.len())).await {
            Ok(outcome) => {
                if outcome
                    .items
                    .iter()
                    .any(|s| matches!(s, ItemStatus::Retryable(_)))
                {
                    // The cluster is pushing back: give it a moment before the retries.
                    sleep_or_cancel(policy.delay(0), cancel).await?;
                }
                outcome.items
            }
            Err(SendError::Refused(e)) if e.status == 413 && items.len() > 1 => {
                vec![ItemStatus::Retryable(e); items.len()]
            }
            Err(e) => return Err(e),
        };
        let mut outcomes = Vec::with_capacity(items.len());
        for (item, status) in items.iter().zip(statuses) {
            let outcome = match ItemOutcome::settled(status) {
                Some(settled) => settled,
                None => self.send_alone(item, policy, cancel).await?,
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Sends one item that failed for now until it is settled.
    async fn send_alone(
        &self,
        item: &BulkItem,
        policy: &RetryPolicy,
        cancel: &CancellationToken,
    ) -> Result<ItemOutcome, SendError> {
        let body = bulk::encode(std::slice::from_ref(item))?;
        let mut retries = 0;
        loop {
            let status = match retry(policy, cancel, || self.bulk(body.clone(), 1)).await {
                Ok(outcome) => outcome
                    .items
                    .into_iter()
                    .next()
                    .expect("parse_bulk checks the count"),
                Err(SendError::Refused(e)) if e.status == 413 => {
                    return Ok(ItemOutcome::Rejected(e));
                }
                Err(e) => return Err(e),
            };
            match status {
                ItemStatus::Retryable(e) if retries >= policy.max_retries => {
                    return Err(SendError::GaveUp {
                        attempts: retries + 1,
                        last: Box::new(RequestError::Status(e)),
                    });
                }
                ItemStatus::Retryable(e) => {
                    tracing::warn!(id = item.id, index = item.index, error = %e.reason, "OpenSearch refused a document for now; retrying it");
                    sleep_or_cancel(policy.delay(retries), cancel).await?;
                    retries += 1;
                }
                settled => return Ok(ItemOutcome::settled(settled).expect("not retryable")),
            }
        }
    }
}
