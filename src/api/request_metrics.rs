//! Metrics of answered requests, by method, route template (never the concrete path,
//! whose ids would make a series per table) and status.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::time::Instant;

use crate::telemetry::metric::{HTTP_REQUEST_DURATION, HTTP_REQUESTS};
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

/// Counts and times every request.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    // Methods are a closed set, so a client cannot mint series.
    let method = match *request.method() {
        Method::GET
        | Method::HEAD
        | Method::POST
        | Method::PATCH
        | Method::PUT
        | Method::DELETE
        | Method::OPTIONS => request.method().as_str().to_string(),
        _ => "other".to_string(),
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let labels = [
        ("method", method),
        ("route", route),
        ("status", response.status().as_u16().to_string()),
    ];
    metrics::counter!(HTTP_REQUESTS.name, &labels).increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION.name, &labels)
        .record(started.elapsed().as_secs_f64());
    response
}
