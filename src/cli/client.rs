//! The HTTP client of the command line: the running node's API, with its problem
//! documents turned into errors a person can act on.
//! Must not reach: the rest of the crate (it sees a node only through its HTTP API).

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The node answered with a problem document.
    #[error("{detail} ({code}, HTTP {status})")]
    Problem {
        status: u16,
        code: String,
        detail: String,
    },
    /// The node could not be reached, or answered something that is not the API.
    #[error("{0}")]
    Http(String),
    /// The command line itself is wrong.
    #[error("{0}")]
    Usage(String),
}

/// A running node's API at `base`, with an optional bearer token.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Result<Self, CliError> {
        let base = base.trim_end_matches('/').to_string();
        url::Url::parse(&base)
            .map_err(|e| CliError::Usage(format!("--url {base:?} is not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| CliError::Http(e.to_string()))?;
        Ok(Self { http, base, token })
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::DELETE, path, None).await
    }

    /// Sends one request; 204 answers `null`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| CliError::Http(format!("cannot reach icefeed at {}: {e}", self.base)))?;
        let status = response.status();
        if status == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        let text = response
            .text()
            .await
            .map_err(|e| CliError::Http(format!("reading the answer failed: {e}")))?;
        let value: Value = serde_json::from_str(&text).map_err(|_| {
            CliError::Http(format!(
                "{} answered HTTP {status} with something that is not JSON; is --url an icefeed node?",
                self.base
            ))
        })?;
        if status.is_success() {
            return Ok(value);
        }
        let field = |name: &str| value[name].as_str().unwrap_or_default().to_string();
        let mut detail = field("detail");
        if status == StatusCode::UNAUTHORIZED {
            detail.push_str("; pass a token with --token or ICEFEED_TOKEN");
        }
        Err(CliError::Problem {
            status: status.as_u16(),
            code: field("code"),
            detail,
        })
    }
}
