//! Liveness, readiness and Prometheus metrics.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use crate::api::problem::problems;

const TAG: &str = "operations";

/// A health answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
}

/// Liveness: the process is up and serving.
#[utoipa::path(get, path = "/healthz", tag = TAG, operation_id = "healthz",
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

problems! {
    /// What `readyz` answers besides success.
    ReadyzProblems = [
        &[DatabaseUnavailable, MigrationsPending, ServiceDown, ChangeStoreUnavailable],
    ];
}

/// Readiness: the database answers, every migration is applied, every background
/// service (scheduler, task workers, pusher, janitor, change notifier) runs, and the
/// change store answers within 2 s.
#[utoipa::path(get, path = "/readyz", tag = TAG, operation_id = "readyz",
    responses(
        (status = 200, description = "Ready", body = Health),
        ReadyzProblems,
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<axum::Json<Health>, ApiError> {
    if let Some((service, why)) = state.services.down().into_iter().next() {
        return Err(ApiError::new(
            ProblemCode::ServiceDown,
            format!("the {service} of this node stopped ({why}) and is about to start again"),
        ));
    }
    match state.store.ready().await {
        Ok(true) => {}
        Ok(false) => {
            return Err(ApiError::new(
                ProblemCode::MigrationsPending,
                "the database schema is behind this binary; run `icefeed migrate`",
            ));
        }
        Err(e) => return Err(ApiError::database_unavailable(&e)),
    }
    // The change store's own retries can take long: a probe that is slow fails.
    match tokio::time::timeout(CHANGE_STORE_PROBE, state.changes.probe()).await {
        Ok(Ok(())) => Ok(axum::Json(Health { status: "ok" })),
        Ok(Err(_)) | Err(_) => Err(ApiError::new(
            ProblemCode::ChangeStoreUnavailable,
            "the node cannot reach its change store right now (its log says why)",
        )),
    }
}

/// How long readiness waits for the change store to answer.
const CHANGE_STORE_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// Metrics in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = TAG, operation_id = "metrics",
    responses((status = 200, description = "Prometheus metrics", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
