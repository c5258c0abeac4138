//! The web dashboard: static assets built into the binary, served at `/ui` (and `/`
//! redirects there). The page itself holds no data and needs no token; it calls the
//! same API as any client, with the token the user enters.
//! Must not reach: the rest of the crate (assets only).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// Only this origin's scripts, styles and API; no framing, no inline code.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

fn asset(media_type: &'static str, body: &'static str) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(media_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        body,
    )
        .into_response();
    // Assets change with the binary: revalidate rather than run a stale script.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The dashboard's routes; they sit outside the API's authorization.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui") }))
        .route(
            "/ui",
            get(|| async { asset("text/html; charset=utf-8", include_str!("ui/index.html")) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", include_str!("ui/app.js")) }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset("text/css; charset=utf-8", include_str!("ui/style.css")) }),
        )
}
