//! The HTTP API: routes and the OpenAPI document come from the same handler list.
//! Must not reach: `changelog` (the API plans no snapshots; workers do).

pub mod admission;
pub mod auth;
pub mod change_sets;
pub mod changes;
pub mod error;
pub mod extract;
pub mod health;
pub mod limits;
pub mod net;
pub mod pages;
pub mod pages_ahead;
pub mod problem;
pub mod request_metrics;
pub mod stream;
mod strict;
pub mod subscriptions;
pub mod tables;
pub mod tokens;
mod ui;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Notify;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::changes::ChangeStore;
use crate::config::{CorsOrigins, Settings};
use crate::delivery::{ChangeNotifier, Feed};
use crate::store::Store;
use error::{ApiError, ProblemCode};

/// How long a browser may reuse a preflight's answer.
const CORS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The coordination store.
    pub store: Store,
    /// The change store.
    pub changes: ChangeStore,
    /// Reads pages of feeds.
    pub feed: Feed,
    /// Wakes long polls and streams when change sets are published.
    pub notifier: ChangeNotifier,
    /// The node's settings.
    pub settings: Arc<Settings>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Wakes this node's scheduler (a table was registered or resumed).
    pub scheduler_wake: Arc<Notify>,
    /// Verifies bearer tokens.
    pub auth: auth::Authenticator,
    /// Where tables' local files may be and which hosts may be reached
    /// (`catalog.local_paths`, `network.allowed_hosts`).
    pub reach: crate::catalog::Reach,
    /// The node's long-running services and whether each is up, for `/readyz`.
    pub services: crate::workers::supervisor::Services,
    /// How much work the node takes on (`limits.*`).
    pub admission: Arc<admission::Admission>,
    /// Table pages prepared ahead of the consumers paging through them.
    pub pages_ahead: pages_ahead::PagesAhead,
}

impl AppState {
    /// Lets the scheduler look for work now instead of at its next tick.
    pub fn wake_scheduler(&self) {
        self.scheduler_wake.notify_one();
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "icefeed",
        description = "Change feeds of Apache Iceberg tables: register tables, then pull their \
                       inserts, updates and deletes as pages of JSON, NDJSON or Arrow (long \
                       polls with `wait`) or as server-sent events, directly or through \
                       subscriptions that remember what was acknowledged.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    servers(
        (url = "{scheme}://{host}:{port}", description = "An icefeed node", variables(
            ("scheme" = (default = "http", enum_values("http", "https"), description = "`https` behind a TLS proxy")),
            ("host" = (default = "127.0.0.1", description = "Where the node listens (`listen`)")),
            ("port" = (default = "8080", description = "Its port")),
        )),
    ),
    tags(
        (name = "tables", description = "Registering and managing source tables"),
        (name = "changes", description = "Reading change events"),
        (name = "subscriptions", description = "Named consumers with committed positions"),
        (name = "tokens", description = "API tokens and their scopes (when the node has `auth.admin_token`)"),
        (name = "operations", description = "Health, readiness and metrics"),
    ),
    // Query parameter types and problems: utoipa refers to them but collects only body
    // schemas.
    components(schemas(pages::Longs, pages::Format, error::Problem))
)]
struct ApiDoc;

fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(tables::register_table, tables::list_tables))
        .routes(routes!(
            tables::get_table,
            tables::update_table,
            tables::delete_table
        ))
        .routes(routes!(tables::retry_table))
        .routes(routes!(changes::get_changes))
        .routes(routes!(stream::stream_changes))
        .routes(routes!(changes::get_schema))
        .routes(routes!(change_sets::list_change_sets))
        .routes(routes!(
            subscriptions::create_subscription,
            subscriptions::list_subscriptions
        ))
        .routes(routes!(
            subscriptions::get_subscription,
            subscriptions::update_subscription,
            subscriptions::delete_subscription
        ))
        .routes(routes!(subscriptions::get_subscription_events))
        .routes(routes!(subscriptions::ack_subscription))
        .routes(routes!(subscriptions::stream::stream_subscription))
        .routes(routes!(subscriptions::push::rewind_subscription))
        .routes(routes!(subscriptions::push::list_dead_letters))
        .routes(routes!(subscriptions::push::redrive_dead_letters))
        .routes(routes!(tokens::create_token, tokens::list_tokens))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(tokens::create_stream_token))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
}

/// The OpenAPI document of the API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, mut api) = routes().split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_string();
    declare_security(&mut api);
    declare_unavailable(&mut api);
    api
}

/// Every operation of `api` with its path.
fn operations(
    api: &mut utoipa::openapi::OpenApi,
) -> impl Iterator<Item = (&str, &mut utoipa::openapi::path::Operation)> {
    api.paths.paths.iter_mut().flat_map(|(path, item)| {
        [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        .map(move |operation| (path.as_str(), operation))
    })
}

/// Adds `description` to an operation's own answer for `status`, if it has one.
fn add_response(operation: &mut utoipa::openapi::path::Operation, status: &str, description: &str) {
    let merged = match operation.responses.responses.get(status) {
        Some(utoipa::openapi::RefOr::T(own)) => {
            let mut own = own.description.chars();
            let first = own.next().map(|c| c.to_ascii_lowercase());
            format!("{description}; or {}{}", first.unwrap_or(' '), own.as_str())
        }
        _ => description.to_string(),
    };
    operation.responses.responses.insert(
        status.into(),
        problem::docs::problem_response(&merged).into(),
    );
}

/// The bearer scheme, required by every operation but health, readiness and metrics,
/// each of which then also answers 401 and 403.
fn declare_security(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };

    const SCHEME: &str = "bearer";
    api.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Needed when the node has `auth.admin_token`: that token, or one \
                         made with `POST /v1/tokens`, with a scope that allows the operation",
                    ))
                    .build(),
            ),
        );
    for (path, operation) in operations(api) {
        if matches!(path, "/healthz" | "/readyz" | "/metrics") {
            continue;
        }
        operation.security = Some(vec![SecurityRequirement::new::<_, _, &str>(SCHEME, [])]);
        operation.responses.responses.insert(
            "401".into(),
            problem::docs::problem_response(&problem::docs::describe(&[
                ProblemCode::Unauthenticated,
                ProblemCode::InvalidToken,
            ]))
            .into(),
        );
        // An operation's own 403 (settings the node refuses) adds to the scopes'.
        add_response(
            operation,
            "403",
            &problem::docs::describe(&[ProblemCode::Forbidden]),
        );
    }
}

/// Every operation that reads or writes the database answers 503 while the node cannot
/// reach it or is at its limits, and those that may wait (streams, long polls) 429 past a
/// client's limit, with `Retry-After`.
fn declare_unavailable(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};

    let retry_after = HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::Integer))
        .description(Some("Seconds to wait before retrying"))
        .build();
    for (path, operation) in operations(api) {
        // Readiness documents its own 503; health and metrics do not touch the database.
        if matches!(path, "/healthz" | "/readyz" | "/metrics") {
            continue;
        }
        add_response(
            operation,
            "503",
            &problem::docs::describe(&[
                ProblemCode::DatabaseUnavailable,
                ProblemCode::ChangeStoreUnavailable,
                ProblemCode::Overloaded,
            ]),
        );
        let streams = matches!(
            operation.responses.responses.get("200"),
            Some(utoipa::openapi::RefOr::T(ok)) if ok.content.contains_key("text/event-stream")
        );
        let waits = streams
            || operation
                .parameters
                .iter()
                .flatten()
                .any(|p| p.name == "wait");
        if waits {
            add_response(
                operation,
                "429",
                &problem::docs::describe(&[ProblemCode::TooManyWaitingRequests]),
            );
        }
        for status in ["503", "429"] {
            if let Some(utoipa::openapi::RefOr::T(answer)) =
                operation.responses.responses.get_mut(status)
            {
                answer
                    .headers
                    .insert("Retry-After".into(), retry_after.clone());
            }
        }
    }
}

/// The OpenAPI document as committed under `openapi/`: pretty JSON with a final newline.
pub fn openapi_json() -> String {
    let mut json = openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

/// One log line per answered request: method, path (never the query, which may hold a
/// stream token), status, latency and request id; failures at `error`.
fn access_log() -> TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
    impl Fn(&axum::http::Request<axum::body::Body>) -> tracing::Span + Clone,
    (),
    tower_http::trace::DefaultOnResponse,
> {
    TraceLayer::new_for_http()
        .make_span_with(|request: &axum::http::Request<axum::body::Body>| {
            let request_id = request
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!(
                "request",
                method = %request.method(),
                path = request.uri().path(),
                request_id,
            )
        })
        .on_request(())
        .on_response(
            tower_http::trace::DefaultOnResponse::new()
                .level(tracing::Level::INFO)
                .latency_unit(tower_http::LatencyUnit::Millis),
        )
}

/// The complete HTTP application.
pub fn router(state: AppState) -> Router {
    let (router, _) = routes().split_for_parts();
    let document = Arc::new(openapi_json());
    let request_id = HeaderName::from_static("x-request-id");
    let max_body = state.settings.api.max_body_bytes;
    let cors = state
        .settings
        .api
        .cors_origins()
        .expect("settings are validated at start")
        .map(cors_layer);
    let router = router
        // On the API's routes only: `/openapi.json` and the fallbacks need no token.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        // Before authentication: a node at its limit spends nothing on a request.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admission::admit,
        ));
    // Outside authentication and admission, so that their answers are checked too.
    #[cfg(debug_assertions)]
    let router = router.route_layer(axum::middleware::from_fn(
        problem::check::answers_as_documented,
    ));
    let router = router
        .route(
            "/openapi.json",
            get(move || {
                let document = document.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        document.as_str().to_owned(),
                    )
                }
            }),
        )
        .merge(ui::routes())
        .fallback(|| async {
            ApiError::new(
                ProblemCode::RouteNotFound,
                "no such endpoint; GET /openapi.json describes the API",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ProblemCode::MethodNotAllowed,
                "this endpoint does not support the method; GET /openapi.json describes the API",
            )
        })
        .with_state(state)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::internal(&"handler panicked").into_response()
        }))
        // Pages and documents are compressed when the client asks (gzip or zstd); event
        // streams never are, so that each event leaves when it is written.
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn(request_metrics::track))
        .layer(access_log())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid));
    // Outermost: a preflight is answered before authentication, which browsers never
    // send one with.
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Cross-origin requests from the web origins the settings allow; none without them.
fn cors_layer(origins: CorsOrigins) -> CorsLayer {
    use axum::http::{Method, header};
    let allowed = match origins {
        CorsOrigins::Any => AllowOrigin::any(),
        CorsOrigins::Only(origins) => AllowOrigin::list(
            origins
                .iter()
                .map(|o| HeaderValue::from_str(o).expect("an origin is a header value")),
        ),
    };
    CorsLayer::new()
        .allow_origin(allowed)
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            HeaderName::from_static("x-request-id"),
            header::WWW_AUTHENTICATE,
            header::RETRY_AFTER,
            header::LOCATION,
        ])
        .max_age(CORS_MAX_AGE)
}
