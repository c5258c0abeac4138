//! Answers as documented: in debug builds, and so in every test run, the router passes
//! each answer of an operation through [`answers_as_documented`], which panics (a 500
//! for the caller, the message in the log) when the answer is a problem whose code the
//! operation's OpenAPI responses do not name under its status. The integration tests
//! drive every handler through its error paths, so a handler that starts answering a
//! new code fails them until its `problems!` list names it.
//!
//! Checked against the document itself, not against the lists it was built from: the
//! responses are what clients generate code from.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use utoipa::openapi::{OpenApi, RefOr};

use super::ProblemCode;

/// Whether `api` lists `code` among the responses of `method` on `route` (a path
/// template). Server faults (500) are any operation's and need no listing.
pub fn documents(api: &OpenApi, method: &Method, route: &str, code: ProblemCode) -> bool {
    if code.is_server_fault() {
        return true;
    }
    let Some(item) = api.paths.paths.get(route) else {
        return false;
    };
    let operation = match *method {
        Method::GET | Method::HEAD => &item.get,
        Method::POST => &item.post,
        Method::PUT => &item.put,
        Method::PATCH => &item.patch,
        Method::DELETE => &item.delete,
        _ => &None,
    };
    let response = operation
        .as_ref()
        .and_then(|o| o.responses.responses.get(code.status().as_str()));
    matches!(response, Some(RefOr::T(r)) if super::docs::names(&r.description, code))
}

/// The middleware: panics when an operation answers a problem it does not document.
pub async fn answers_as_documented(route: MatchedPath, request: Request, next: Next) -> Response {
    static API: OnceLock<OpenApi> = OnceLock::new();
    let method = request.method().clone();
    let response = next.run(request).await;
    if let Some(&code) = response.extensions().get::<ProblemCode>() {
        let api = API.get_or_init(crate::api::openapi);
        assert!(
            documents(api, &method, route.as_str(), code),
            "{method} {} answered {} {code}, which its OpenAPI responses do not name: add \
             ProblemCode::{code:?} to the operation's problems! list",
            route.as_str(),
            code.status().as_u16(),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProblemCode::*;

    #[test]
    fn the_document_names_what_operations_answer() {
        let api = crate::api::openapi();
        let get = Method::GET;
        assert!(documents(&api, &get, "/v1/tables/{id}", TableNotFound));
        assert!(documents(&api, &get, "/v1/tables/{id}", InvalidTableId));
        assert!(documents(&api, &get, "/v1/tables/{id}", Forbidden));
        assert!(documents(
            &api,
            &get,
            "/v1/tables/{id}",
            DatabaseUnavailable
        ));
        assert!(documents(&api, &get, "/v1/tables/{id}", InternalError));
        // A code of another operation, the right code under another method, and one of
        // the right string under another status are not documented.
        assert!(!documents(&api, &get, "/v1/tables/{id}", TableInUse));
        assert!(documents(
            &api,
            &Method::DELETE,
            "/v1/tables/{id}",
            TableInUse
        ));
        assert!(!documents(
            &api,
            &Method::DELETE,
            "/v1/tables/{id}",
            TableNotInError
        ));
        assert!(!documents(&api, &Method::POST, "/v1/tokens", TableNotFound));
        assert!(documents(
            &api,
            &Method::POST,
            "/v1/tokens",
            ScopeTableNotFound
        ));
        assert!(!documents(&api, &get, "/healthz", Forbidden));
        assert!(!documents(&api, &get, "/v1/nowhere", TableNotFound));
    }

    /// A code no operation lists could only be answered undocumented (or never).
    #[test]
    fn every_code_is_listed_somewhere() {
        let api = crate::api::openapi();
        let descriptions: Vec<&str> = api
            .paths
            .paths
            .values()
            .flat_map(|item| [&item.get, &item.post, &item.patch, &item.delete])
            .flatten()
            .flat_map(|op| op.responses.responses.values())
            .filter_map(|r| match r {
                RefOr::T(r) => Some(r.description.as_str()),
                RefOr::Ref(_) => None,
            })
            .collect();
        for &code in ProblemCode::ALL {
            // Answers of no operation: unknown routes and methods.
            if matches!(code, RouteNotFound | MethodNotAllowed) || code.is_server_fault() {
                continue;
            }
            assert!(
                descriptions
                    .iter()
                    .any(|d| super::super::docs::names(d, code)),
                "no operation lists {code:?}"
            );
        }
    }

    /// A handler answering a code its operation lists passes; one answering another
    /// fails, as a 500 with the message in the log.
    #[tokio::test]
    async fn an_undocumented_answer_fails_the_request() {
        use crate::api::error::ApiError;
        let router = axum::Router::new()
            .route(
                "/v1/tables/{id}",
                axum::routing::get(
                    |axum::extract::Path(id): axum::extract::Path<String>| async move {
                        match id.as_str() {
                            "in-use" => ApiError::new(TableInUse, "in use"),
                            _ => ApiError::new(TableNotFound, "none"),
                        }
                    },
                ),
            )
            .route_layer(axum::middleware::from_fn(answers_as_documented))
            .layer(tower_http::catch_panic::CatchPanicLayer::new());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let status = |path: &'static str| {
            let url = format!("{base}{path}");
            async move { reqwest::get(url).await.unwrap().status().as_u16() }
        };
        assert_eq!(status("/v1/tables/gone").await, 404);
        assert_eq!(status("/v1/tables/in-use").await, 500);
        server.abort();
    }
}
