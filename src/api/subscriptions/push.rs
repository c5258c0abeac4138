//! Push subscriptions: checking their target at creation, their status, rewinds, and
//! their dead letters.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::IntoParams;

use super::model::{
    CreateSubscription, DeadLetterPage, DeadLetterView, PushState, PushStatus, Redrive,
    RedriveQueued, Rewind, SubscriptionKind, SubscriptionStart, SubscriptionStartName,
    SubscriptionView,
};
use super::{Loaded, TAG, load, start, view};
use crate::api::AppState;
use crate::api::error::{ApiError, ProblemCode};
use crate::api::extract::{Json, Path, Query};
use crate::api::limits;
use crate::api::problem::problems;
use crate::delivery::opensearch::{ConfigError, OpenSearchTarget, PushTarget};
use crate::int64::Int64;
use crate::network::HostPolicy;
use crate::store::{DeadLetter, SourceTable, SubscriptionState};

/// Dead letters per page by default, and at most.
const DEAD_LETTER_LIMITS: (u32, u32) = (100, 1000);

/// Checks the kind and target of a new subscription, its endpoints' hosts by `hosts`;
/// the target to store, if any.
pub(super) async fn check_target(
    request: &CreateSubscription,
    tables: &[SourceTable],
    hosts: &HostPolicy,
) -> Result<Option<serde_json::Value>, ApiError> {
    let kind = request.kind.unwrap_or_default();
    let target = match (kind, &request.target) {
        (SubscriptionKind::Pull, None) => return Ok(None),
        (SubscriptionKind::Pull, Some(_)) => {
            return Err(ApiError::new(
                ProblemCode::TargetNotAllowed,
                "a pull subscription has no target; set \"kind\": \"opensearch\" to push",
            ));
        }
        (SubscriptionKind::Opensearch, None) => {
            return Err(ApiError::new(
                ProblemCode::TargetRequired,
                "an opensearch subscription needs a `target`: endpoints and index at least",
            ));
        }
        (SubscriptionKind::Opensearch, Some(target)) => target,
    };
    let checked = PushTarget::new(target.clone()).map_err(|e| {
        let field = match &e {
            ConfigError::Invalid { field, .. } => Some(format!("target.{field}")),
            ConfigError::Malformed(_) => None,
        };
        let problem = ApiError::new(ProblemCode::InvalidTarget, e.to_string());
        match field {
            Some(field) => problem.with("field", field),
            None => problem,
        }
    })?;
    for endpoint in &checked.endpoints {
        hosts
            .check_url("target.endpoints", endpoint.as_str())
            .await?;
    }
    for table in tables {
        if checked.config.document_id.is_none() && table.identifier_columns.is_empty() {
            return Err(ApiError::new(
                ProblemCode::DocumentIdRequired,
                format!(
                    "table {} has no identifier columns, so documents have no natural id; \
                     give `target.document_id`, or register the table with identifier_columns",
                    table.table_name
                ),
            ));
        }
        if table.checkpoint_sequence_number == Some(0) {
            return Err(ApiError::new(
                ProblemCode::UnsupportedTableFormat,
                format!(
                    "table {} is in Iceberg format v1 (sequence number 0): external versions \
                     cannot order its changes; upgrade it to format v2 to push it",
                    table.table_name
                ),
            ));
        }
    }
    Ok(Some(
        serde_json::to_value(&checked.config).expect("targets serialize"),
    ))
}

/// The redacted target and progress of a push subscription.
pub(super) async fn status(
    state: &AppState,
    loaded: &Loaded,
) -> Result<Option<(OpenSearchTarget, PushStatus)>, ApiError> {
    let s = &loaded.subscription;
    if SubscriptionKind::from_stored(&s.kind) != SubscriptionKind::Opensearch {
        return Ok(None);
    }
    let record = state.store.push_record(s.id).await?;
    let target: OpenSearchTarget = serde_json::from_value(record.target)
        .map_err(|e| ApiError::internal(&format!("stored target unreadable: {e}")))?;
    let (node, dead_letters) = state.store.push_holder_and_dead_letters(s.id).await?;
    let push_state = match s.state {
        SubscriptionState::Active => PushState::Running,
        SubscriptionState::BackingOff => PushState::BackingOff,
        SubscriptionState::Paused => PushState::Paused,
        SubscriptionState::Failed => PushState::Failed,
    };
    Ok(Some((
        target.redacted(),
        PushStatus {
            state: push_state,
            node,
            documents_indexed: record.documents_indexed,
            documents_deleted: record.documents_deleted,
            documents_skipped: record.documents_skipped,
            documents_rejected: record.documents_rejected,
            dead_letters,
            last_error: record.last_error,
            last_error_at: record.last_error_at,
            retry_at: record.retry_at,
            last_pushed_at: record.last_pushed_at,
        },
    )))
}

/// Refuses pages and acks of a push subscription: the push worker reads it.
pub(super) fn ensure_pull(loaded: &Loaded) -> Result<(), ApiError> {
    if SubscriptionKind::from_stored(&loaded.subscription.kind) == SubscriptionKind::Pull {
        return Ok(());
    }
    Err(ApiError::new(
        ProblemCode::PushSubscription,
        format!(
            "subscription {} pushes into OpenSearch; its events are read by the push worker, \
             not pulled. GET /v1/subscriptions/{} shows its progress",
            loaded.subscription.name, loaded.subscription.id
        ),
    ))
}

fn ensure_push(loaded: &Loaded) -> Result<(), ApiError> {
    match ensure_pull(loaded) {
        Ok(()) => Err(ApiError::new(
            ProblemCode::NotAPushSubscription,
            format!(
                "subscription {} is a pull subscription; it has no dead letters",
                loaded.subscription.name
            ),
        )),
        Err(_) => Ok(()),
    }
}

problems! {
    /// What `rewindSubscription` answers besides success.
    RewindSubscriptionProblems = [
        SUBSCRIPTION,
        JSON_BODY,
        CURSOR,
        &[
            InvalidRewind,
            TimestampOutOfRange,
            PositionNotFound,
            SnapshotNotPublished,
            RewindForward,
            PositionExpired,
        ],
    ];
}

/// Rewind a subscription.
///
/// Moves the committed position back, to a cursor of the subscription, a snapshot, a
/// time, or the earliest retained event. A push subscription re-sends from there: the
/// external versions keep documents from moving backwards, except that a document whose
/// delete OpenSearch already forgot (`index.gc_deletes`) reappears until the replay
/// reaches that delete again.
#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/rewind", tag = TAG, operation_id = "rewindSubscription",
    params(("id" = String, Path, description = "Subscription id or name")),
    request_body = Rewind,
    responses(
        (status = 200, description = "The subscription with its new committed position", body = SubscriptionView),
        RewindSubscriptionProblems,
    )
)]
pub async fn rewind_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(rewind): Json<Rewind>,
) -> Result<axum::Json<SubscriptionView>, ApiError> {
    let loaded = load(&state, &id).await?;
    let given = [
        rewind.position.is_some(),
        rewind.snapshot_id.is_some(),
        rewind.timestamp.is_some(),
        rewind.earliest == Some(true),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(ApiError::new(
            ProblemCode::InvalidRewind,
            "give exactly one of position, snapshot_id, timestamp or \"earliest\": true",
        ));
    }
    if let Some(timestamp) = &rewind.timestamp {
        limits::check_timestamp("timestamp", timestamp)?;
    }
    let mut positions = Vec::with_capacity(loaded.tables.len());
    if let Some(cursor) = &rewind.position {
        for (table, p) in loaded.tables.iter().zip(loaded.decode(cursor)?) {
            let canonical = state.store.canonical_position(table.id, p).await?;
            positions.push(canonical.ok_or_else(|| {
                ApiError::new(
                    ProblemCode::PositionNotFound,
                    "the cursor points past the end of a table's feed",
                )
            })?);
        }
    } else {
        let start = match (rewind.snapshot_id, rewind.timestamp) {
            (Some(snapshot_id), _) => SubscriptionStart::SnapshotId { snapshot_id },
            (_, Some(timestamp)) => SubscriptionStart::Timestamp { timestamp },
            _ => SubscriptionStart::Named(SubscriptionStartName::Earliest),
        };
        for table in &loaded.tables {
            positions.push(start::resolve(&state, &start, table, loaded.tables.len()).await?);
        }
    }
    for ((slot, table), p) in loaded.slots.iter().zip(&loaded.tables).zip(&positions) {
        let committed = state
            .store
            .canonical_position(table.id, slot.committed)
            .await?
            .unwrap_or(slot.committed);
        if *p > committed {
            return Err(ApiError::new(
                ProblemCode::RewindForward,
                format!(
                    "the position is after the committed position on table {}; a rewind only \
                     moves back",
                    table.table_name
                ),
            ));
        }
    }
    loaded.ensure_retained(&state, &positions).await?;
    state
        .store
        .rewind_subscription(loaded.subscription.id, &positions)
        .await?;
    let loaded = load(&state, &id).await?;
    Ok(axum::Json(view(&state, &loaded).await?))
}

/// Query parameters of a dead-letter page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterQuery {
    /// Continue after this dead letter id (a page's `next`).
    pub after: Option<Int64>,
    /// Dead letters per page: 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

fn dead_letter_view(d: DeadLetter) -> DeadLetterView {
    DeadLetterView {
        id: Int64(d.id),
        position: d.position,
        event: d.event,
        index: d.index_name,
        document_id: d.document_id,
        version: Int64(d.version),
        error_type: d.error_type,
        reason: d.reason,
        created_at: d.created_at,
        queued_at: d.queued_at,
    }
}

problems! {
    /// What `listDeadLetters` answers besides success.
    ListDeadLettersProblems = [SUBSCRIPTION, QUERY, &[LimitOutOfRange], PUSH_ONLY];
}

/// List a push subscription's dead letters.
#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/dead-letters", tag = TAG, operation_id = "listDeadLetters",
    params(("id" = String, Path, description = "Subscription id or name"), DeadLetterQuery),
    responses(
        (status = 200, description = "A page of dead letters", body = DeadLetterPage),
        ListDeadLettersProblems,
    )
)]
pub async fn list_dead_letters(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<DeadLetterQuery>,
) -> Result<axum::Json<DeadLetterPage>, ApiError> {
    let loaded = load(&state, &id).await?;
    ensure_push(&loaded)?;
    let limit = checked_limit(query.limit)?;
    let rows = state
        .store
        .dead_letters(
            loaded.subscription.id,
            query.after.map_or(0, i64::from),
            limit as i64,
        )
        .await?;
    let next = page_next(&rows, limit);
    Ok(axum::Json(DeadLetterPage {
        dead_letters: rows.into_iter().map(dead_letter_view).collect(),
        next,
    }))
}

problems! {
    /// What `redriveDeadLetters` answers besides success.
    RedriveDeadLettersProblems = [
        SUBSCRIPTION,
        JSON_BODY,
        &[InvalidRedrive, LimitOutOfRange],
        PUSH_ONLY,
    ];
}

/// Send dead letters again.
///
/// Queues the listed dead letters (or, without `ids`, a page of them: `after`, `limit`,
/// `next`) to be sent again, each rebuilt from its event with its original version, by
/// the node pushing the subscription, between its batches. Those that go through (or
/// that OpenSearch already has in a newer version) disappear from the dead letters;
/// those refused again stay with the new reason and without `queued_at`. A paused or
/// failed subscription sends them once it pushes again.
#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/dead-letters/redrive", tag = TAG, operation_id = "redriveDeadLetters",
    params(("id" = String, Path, description = "Subscription id or name")),
    request_body = Redrive,
    responses(
        (status = 202, description = "The dead letters are queued", body = RedriveQueued),
        RedriveDeadLettersProblems,
    )
)]
pub async fn redrive_dead_letters(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(redrive): Json<Redrive>,
) -> Result<(StatusCode, axum::Json<RedriveQueued>), ApiError> {
    let loaded = load(&state, &id).await?;
    ensure_push(&loaded)?;
    let sub = loaded.subscription.id;
    let (_, max) = DEAD_LETTER_LIMITS;
    let (ids, next) = match (&redrive.ids, redrive.after, redrive.limit) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ApiError::new(
                ProblemCode::InvalidRedrive,
                "give either ids, or after and limit, not both",
            ));
        }
        (Some(ids), None, None) => {
            if ids.is_empty() || ids.len() > max as usize {
                return Err(limits::out_of_range(
                    ProblemCode::LimitOutOfRange,
                    "ids",
                    1,
                    max,
                    " dead letters",
                    format!("{} ids", ids.len()),
                ));
            }
            (ids.iter().map(|&id| id.into()).collect(), None)
        }
        (None, after, limit) => {
            let limit = checked_limit(limit)?;
            let rows = state
                .store
                .dead_letters(sub, after.map_or(0, i64::from), limit as i64)
                .await?;
            let next = page_next(&rows, limit);
            (rows.iter().map(|d| d.id).collect::<Vec<i64>>(), next)
        }
    };
    let queued = state.store.queue_redrive(sub, &ids).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(RedriveQueued {
            queued: queued as usize,
            next,
        }),
    ))
}

/// A page size of dead letters: the default when absent, else checked against the maximum.
fn checked_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    let (default, max) = DEAD_LETTER_LIMITS;
    limits::check(
        ProblemCode::LimitOutOfRange,
        "limit",
        limit.unwrap_or(default),
        1,
        max,
    )
}

/// The `next` of a page of `limit` dead letters: its last id when the page is full.
fn page_next(rows: &[DeadLetter], limit: u32) -> Option<Int64> {
    (rows.len() == limit as usize)
        .then(|| rows.last().map(|d| Int64(d.id)))
        .flatten()
}
