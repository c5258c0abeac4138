//! `/v1/tables`: registering, inspecting, pausing and removing source tables.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

pub mod model;
mod register;

use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use uuid::Uuid;

use super::AppState;
use super::auth::Access;
use super::error::{ApiError, ProblemCode};
use super::extract::{Json, Path};
use crate::api::problem::problems;
use crate::store::{StoreError, TableId};
use model::{RegisterTable, TableList, TableView, UpdateTable};

pub(crate) const TAG: &str = "tables";

/// Parses a table id from the path, answering 404 `table_not_found` for unknown ids.
pub(crate) async fn load(
    state: &AppState,
    id: &str,
) -> Result<crate::store::SourceTable, ApiError> {
    let id = Uuid::parse_str(id).map_err(|_| {
        ApiError::new(
            ProblemCode::InvalidTableId,
            format!("{id:?} is not a table id (a UUID)"),
        )
    })?;
    state.store.get_table(TableId(id)).await.map_err(not_found)
}

fn not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::new(
            ProblemCode::TableNotFound,
            "no table is registered with this id; GET /v1/tables lists them",
        ),
        other => other.into(),
    }
}

problems! {
    /// What `registerTable` answers besides success.
    RegisterTableProblems = [
        JSON_BODY,
        CATALOG,
        &[
            InvalidPollInterval,
            InvalidRetention,
            TimestampOutOfRange,
            DuplicateIdentifierColumn,
            UnknownIdentifierColumn,
            BranchNotFound,
            UnknownSnapshot,
            TableAlreadyRegistered,
        ],
    ];
}

/// Register an Iceberg table and start its change feed.
#[utoipa::path(
    post, path = "/v1/tables", tag = TAG, operation_id = "registerTable",
    request_body = RegisterTable,
    responses(
        (status = 201, description = "Registered; the feed starts at the next poll", body = TableView,
         headers(("Location" = String, description = "URL of the new table"))),
        RegisterTableProblems,
    )
)]
pub async fn register_table(
    State(state): State<AppState>,
    Json(request): Json<RegisterTable>,
) -> Result<impl IntoResponse, ApiError> {
    let new = register::prepare(
        request,
        state.settings.scheduler.default_poll_interval,
        state.settings.catalog.timeout,
        &state.reach,
    )
    .await?;
    let table = state.store.insert_table(&new).await.map_err(|e| match e {
        StoreError::Conflict(_) => ApiError::new(
            ProblemCode::TableAlreadyRegistered,
            format!(
                "{} on branch {:?} of this catalog is registered already; GET /v1/tables lists it",
                table_display(&new),
                new.branch
            ),
        ),
        other => other.into(),
    })?;
    state.wake_scheduler();
    let location = format!("/v1/tables/{}", table.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(TableView::from(&table)),
    ))
}

fn table_display(t: &crate::store::NewSourceTable) -> String {
    crate::store::display_name(&t.namespace, &t.name)
}

problems! {
    /// What `listTables` answers besides success.
    ListTablesProblems = [&[InternalError]];
}

/// List registered tables.
#[utoipa::path(
    get, path = "/v1/tables", tag = TAG, operation_id = "listTables",
    responses(
        (status = 200, description = "The registered tables the token may read", body = TableList),
        ListTablesProblems,
    )
)]
pub async fn list_tables(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
) -> Result<axum::Json<TableList>, ApiError> {
    let tables = state.store.list_tables().await?;
    Ok(axum::Json(TableList {
        tables: tables
            .iter()
            .filter(|t| access.reads_table(t.id))
            .map(TableView::from)
            .collect(),
    }))
}

problems! {
    /// What `getTable` answers besides success.
    GetTableProblems = [TABLE];
}

/// Get a table: state, checkpoint, lag and last error.
#[utoipa::path(
    get, path = "/v1/tables/{id}", tag = TAG, operation_id = "getTable",
    params(("id" = uuid::Uuid, Path, description = "Table id")),
    responses(
        (status = 200, description = "The table", body = TableView),
        GetTableProblems,
    )
)]
pub async fn get_table(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<axum::Json<TableView>, ApiError> {
    let table = load(&state, &id).await?;
    Ok(axum::Json(TableView::from(&table)))
}

problems! {
    /// What `updateTable` answers besides success.
    UpdateTableProblems = [
        TABLE,
        JSON_BODY,
        CATALOG,
        &[InvalidPollInterval, InvalidRetention, CatalogTableMismatch, Conflict],
    ];
}

/// Pause or resume a table (resuming retries a table in the error state), change its poll interval or retention, or replace its catalog settings.
#[utoipa::path(
    patch, path = "/v1/tables/{id}", tag = TAG, operation_id = "updateTable",
    params(("id" = uuid::Uuid, Path, description = "Table id")),
    request_body = UpdateTable,
    responses(
        (status = 200, description = "The updated table", body = TableView),
        UpdateTableProblems,
    )
)]
pub async fn update_table(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(update): Json<UpdateTable>,
) -> Result<axum::Json<TableView>, ApiError> {
    let table = load(&state, &id).await?;
    let poll = update
        .poll_interval_ms
        .map(register::validate_poll_interval)
        .transpose()?
        .map(|d| d.as_millis() as i64);
    let retention = update
        .retention
        .map(register::validate_retention)
        .transpose()?;
    // Checked before anything is written, so a refused catalog changes nothing else.
    let catalog = match update.catalog {
        Some(catalog) => Some(
            register::replacement_catalog(
                &table,
                catalog,
                state.settings.catalog.timeout,
                &state.reach,
            )
            .await?,
        ),
        None => None,
    };
    if let Some(retention) = retention {
        state.store.set_retention(table.id, &retention).await?;
    }
    if let Some((catalog, key)) = catalog {
        state.store.set_catalog(table.id, &catalog, &key).await?;
        state.wake_scheduler();
    }
    let table = state
        .store
        .update_table(table.id, update.paused, poll)
        .await
        .map_err(not_found)?;
    if update.paused == Some(false) {
        state.wake_scheduler();
    }
    Ok(axum::Json(TableView::from(&table)))
}

problems! {
    /// What `deleteTable` answers besides success.
    DeleteTableProblems = [TABLE, &[TableInUse]];
}

/// Unregister a table and delete its change sets.
#[utoipa::path(
    delete, path = "/v1/tables/{id}", tag = TAG, operation_id = "deleteTable",
    params(("id" = uuid::Uuid, Path, description = "Table id")),
    responses(
        (status = 204, description = "Deleted"),
        DeleteTableProblems,
    )
)]
pub async fn delete_table(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let table = load(&state, &id).await?;
    let readers = state.store.subscriptions_of_table(table.id).await?;
    if !readers.is_empty() {
        return Err(ApiError::new(
            ProblemCode::TableInUse,
            format!(
                "subscriptions read this table: {}; delete them first",
                readers.join(", ")
            ),
        )
        .with("subscriptions", readers));
    }
    // The index goes at once, so nothing can find the segments any more; the janitor
    // deletes them after the grace, also if this node dies in between.
    state
        .store
        .delete_table(
            table.id,
            &crate::changes::key::table_prefixes(table.id),
            state.settings.retention.grace,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

problems! {
    /// What `retryTable` answers besides success.
    RetryTableProblems = [TABLE, &[TableNotInError]];
}

/// Retry a table in the error state: the scheduler polls it again at once.
#[utoipa::path(
    post, path = "/v1/tables/{id}/retry", tag = TAG, operation_id = "retryTable",
    params(("id" = uuid::Uuid, Path, description = "Table id")),
    responses(
        (status = 200, description = "The table, active again", body = TableView),
        RetryTableProblems,
    )
)]
pub async fn retry_table(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<axum::Json<TableView>, ApiError> {
    let table = load(&state, &id).await?;
    if table.state != crate::store::TableState::Error {
        return Err(ApiError::new(
            ProblemCode::TableNotInError,
            format!(
                "the table is {}; only a table in the error state can be retried",
                serde_json::to_value(table.state)
                    .expect("state serializes")
                    .as_str()
                    .unwrap_or("")
            ),
        ));
    }
    let table = state
        .store
        .update_table(table.id, Some(false), None)
        .await
        .map_err(not_found)?;
    state.wake_scheduler();
    Ok(axum::Json(TableView::from(&table)))
}
