//! The HTTP API's settings: page sizes, waits, streams, bodies and which web origins
//! may call it.
//! Must not reach: `api` (the API reads its settings, not the other way round).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, comma_list};

/// Limits of the pull API.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Events per page when a request names no limit.
    pub default_limit: u32,
    /// The largest page a request may ask for.
    pub max_limit: u32,
    /// The largest Arrow page a request may ask for (at least `max_limit`). An Arrow
    /// page's body is little more than its events' decoded columns, sliced from the
    /// decoded segments, which a page's byte bounds (32 MiB decoded) already limit; a
    /// JSON page renders its events to several times their decoded size, so its count
    /// bounds its memory. Bulk readers pay per-page costs (a request, a round trip,
    /// lookups) ten times less often.
    pub max_arrow_limit: u32,
    /// How long a graceful shutdown waits for in-flight requests.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// The longest `wait` a long poll may ask for.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// Idle time after which an event stream sends a heartbeat comment.
    #[serde(with = "humantime_serde")]
    pub stream_heartbeat: Duration,
    /// The reconnection delay an event stream advises its clients (`retry:`).
    #[serde(with = "humantime_serde")]
    pub stream_retry: Duration,
    /// The largest request body accepted, in bytes; larger ones answer `413`.
    pub max_body_bytes: usize,
    /// Web origins (`https://dashboard.example`) whose pages may call the API from a
    /// browser (CORS), or `*` for any. None by default: a browser then keeps pages of
    /// other origins from reading answers. In the environment a list separated by commas
    /// (`ICEFEED_API__CORS_ALLOWED_ORIGINS=https://a.example,http://localhost:3000`).
    #[serde(deserialize_with = "comma_list")]
    pub cors_allowed_origins: Vec<String>,
    /// How often one node sets the lag gauges of pull subscriptions
    /// (`icefeed_subscription_lag_*`).
    #[serde(with = "humantime_serde")]
    pub lag_report_interval: Duration,
}

/// Which web origins may call the API from a browser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorsOrigins {
    /// Any origin (`*`).
    Any,
    /// These origins, as browsers send them (`scheme://host[:port]`).
    Only(Vec<String>),
}

impl ApiSettings {
    /// The origins `cors_allowed_origins` names; `None` when CORS is off.
    pub fn cors_origins(&self) -> Result<Option<CorsOrigins>, ConfigError> {
        let origins = &self.cors_allowed_origins;
        if origins.is_empty() {
            return Ok(None);
        }
        if origins.iter().any(|o| o == "*") {
            return Ok(Some(CorsOrigins::Any));
        }
        let origin = |entry: &String| {
            let bad = |why: &str| {
                ConfigError::Invalid(format!(
                    "api.cors_allowed_origins: {entry:?} {why}; write an origin such as \
                     https://dashboard.example or http://localhost:3000, or * for any"
                ))
            };
            let url = url::Url::parse(entry).map_err(|_| bad("is not a URL"))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(bad("is not an http(s) origin"));
            }
            if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
                return Err(bad("has more than a scheme, host and port"));
            }
            Ok(url.origin().ascii_serialization())
        };
        Ok(Some(CorsOrigins::Only(
            origins.iter().map(origin).collect::<Result<_, _>>()?,
        )))
    }
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            default_limit: 1000,
            max_limit: 10_000,
            max_arrow_limit: 100_000,
            shutdown_grace: Duration::from_secs(10),
            max_wait: Duration::from_secs(60),
            stream_heartbeat: Duration::from_secs(15),
            stream_retry: Duration::from_secs(3),
            max_body_bytes: 1 << 20,
            cors_allowed_origins: Vec::new(),
            lag_report_interval: Duration::from_secs(15),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_origins_are_origins_or_a_star() {
        let api = |origins: &[&str]| ApiSettings {
            cors_allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
            ..ApiSettings::default()
        };
        assert_eq!(ApiSettings::default().cors_origins().unwrap(), None);
        assert_eq!(
            api(&["https://dash.example/", "http://localhost:3000"])
                .cors_origins()
                .unwrap(),
            Some(CorsOrigins::Only(vec![
                "https://dash.example".into(),
                "http://localhost:3000".into()
            ]))
        );
        assert_eq!(
            api(&["https://dash.example", "*"]).cors_origins().unwrap(),
            Some(CorsOrigins::Any)
        );
        for bad in [
            "dash.example",
            "ftp://dash.example",
            "https://dash.example/app",
            "https://dash.example?x=1",
        ] {
            let error = api(&[bad]).cors_origins().unwrap_err().to_string();
            assert!(
                error.contains("api.cors_allowed_origins") && error.contains(bad),
                "{error}"
            );
        }
    }
}
