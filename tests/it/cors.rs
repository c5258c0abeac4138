//! Browsers: a page of another origin may call the API only when the operator lists
//! that origin (`api.cors_allowed_origins`). A preflight is answered before
//! authentication; answers, problem documents included, carry the headers a page needs
//! to read them.

use icefeed::config::Secret;
use reqwest::Method;
use reqwest::header::HeaderMap;

use crate::support::{Node, fresh_database, test_settings};

const DASHBOARD: &str = "http://dashboard.example:3000";
const ADMIN_TOKEN: &str = "icefeed-test-admin-token-0123456789abcdef";

/// The headers of `method path` sent from `origin`, with `extra` headers.
async fn answer(
    node: &Node,
    method: Method,
    path: &str,
    origin: &str,
    extra: &[(&str, &str)],
) -> (u16, HeaderMap) {
    let mut request = reqwest::Client::new()
        .request(method, node.url(path))
        .header("origin", origin);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.headers().clone())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// A preflight of a page that reads a feed with a token.
const PREFLIGHT: [(&str, &str); 2] = [
    ("access-control-request-method", "GET"),
    ("access-control-request-headers", "authorization"),
];

#[tokio::test]
async fn without_allowed_origins_browsers_get_no_cross_origin_answers() {
    let (node, _store) = Node::start_fresh().await;
    let (status, headers) =
        answer(&node, Method::OPTIONS, "/v1/tables", DASHBOARD, &PREFLIGHT).await;
    assert_eq!(status, 405);
    assert_eq!(header(&headers, "access-control-allow-origin"), None);
    let (status, headers) = answer(&node, Method::GET, "/v1/tables", DASHBOARD, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "access-control-allow-origin"), None);
    node.shutdown().await;
}

#[tokio::test]
async fn listed_origins_may_call_the_api_with_a_token() {
    let store = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&fresh_database().await, store.path());
    settings.auth.admin_token = Some(Secret::new(ADMIN_TOKEN));
    // As an operator writes it, with a trailing slash.
    settings.api.cors_allowed_origins = vec![format!("{DASHBOARD}/")];
    let node = Node::start(settings).await;
    let bearer = format!("Bearer {ADMIN_TOKEN}");

    // The preflight needs no token (browsers never send one with it).
    let path = "/v1/tables/0195f0ab-0000-7000-8000-000000000000/changes";
    let (status, headers) = answer(&node, Method::OPTIONS, path, DASHBOARD, &PREFLIGHT).await;
    assert!((200..300).contains(&status), "{status} {headers:?}");
    assert_eq!(
        header(&headers, "access-control-allow-origin"),
        Some(DASHBOARD)
    );
    let methods = header(&headers, "access-control-allow-methods").unwrap();
    assert!(
        methods.contains("GET") && methods.contains("PATCH"),
        "{methods}"
    );
    let allowed = header(&headers, "access-control-allow-headers").unwrap();
    assert!(allowed.contains("authorization"), "{allowed}");
    assert!(header(&headers, "access-control-max-age").is_some());

    // The request itself, and its answer readable by the page, request id included.
    let auth = [("authorization", bearer.as_str())];
    let (status, headers) = answer(&node, Method::GET, "/v1/tables", DASHBOARD, &auth).await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "access-control-allow-origin"),
        Some(DASHBOARD)
    );
    let exposed = header(&headers, "access-control-expose-headers").unwrap();
    assert!(exposed.contains("x-request-id"), "{exposed}");
    assert!(header(&headers, "vary").unwrap().contains("origin"));

    // A refusal is readable too, so the page can show why.
    let (status, headers) = answer(&node, Method::GET, "/v1/tables", DASHBOARD, &[]).await;
    assert_eq!(status, 401);
    assert_eq!(
        header(&headers, "access-control-allow-origin"),
        Some(DASHBOARD)
    );
    assert!(exposed.contains("www-authenticate"), "{exposed}");

    // Other origins get nothing a browser would accept.
    for origin in [
        "http://dashboard.example:3001",
        "https://dashboard.example:3000",
    ] {
        let (_, headers) = answer(&node, Method::OPTIONS, path, origin, &PREFLIGHT).await;
        assert_eq!(
            header(&headers, "access-control-allow-origin"),
            None,
            "{origin}"
        );
        let (_, headers) = answer(&node, Method::GET, "/v1/tables", origin, &auth).await;
        assert_eq!(
            header(&headers, "access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    node.shutdown().await;
}
