//! `/v1/subscriptions`: named consumers with committed positions, their pages and acks.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

pub mod model;
mod net;
pub mod push;
mod start;
pub mod stream;

use std::collections::BTreeSet;

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::AppState;
use super::auth::Access;
use super::error::{ApiError, ProblemCode};
use super::extract::{Json, Path, Query};
use super::pages::{Format, Longs, PageSink, PageTail, long_poll_wait, page_limit};
use crate::api::problem::problems;
use crate::changes::{Position, subscription_cursor};
use crate::delivery::{FeedError, Positions, Selection};
use crate::store::{
    Lag, NewSubscription, SourceTable, StoreError, SubscribedTable, Subscription,
    SubscriptionState, TableId,
};
use model::{
    Ack, CreateSubscription, SubscribedTableView, SubscriptionKind, SubscriptionLag,
    SubscriptionList, SubscriptionStart, SubscriptionStartName, SubscriptionView,
    UpdateSubscription,
};

pub(crate) const TAG: &str = "subscriptions";
const MAX_NAME: usize = 128;
const MAX_TABLES: usize = 64;

/// A subscription with its tables, loaded for one request.
pub(crate) struct Loaded {
    pub subscription: Subscription,
    pub slots: Vec<SubscribedTable>,
    pub tables: Vec<SourceTable>,
}

impl Loaded {
    /// The operations and columns the subscription delivers.
    pub fn selection(&self) -> Result<Selection, ApiError> {
        // Checked at creation; columns a later schema dropped are simply absent.
        let all: BTreeSet<String> = self
            .subscription
            .columns
            .iter()
            .flatten()
            .cloned()
            .collect();
        Ok(Selection::new(
            Some(&self.subscription.ops),
            self.subscription.columns.as_deref(),
            &all,
        )?)
    }

    /// Decodes a cursor of this subscription.
    pub fn decode(&self, cursor: &str) -> Result<Vec<Position>, ApiError> {
        Ok(subscription_cursor::decode(
            cursor,
            self.subscription.id,
            self.slots.len(),
        )?)
    }

    /// The cursor of `positions`.
    pub fn encode(&self, positions: &[Position]) -> String {
        subscription_cursor::encode(self.subscription.id, positions)
    }

    pub(crate) fn committed(&self) -> Vec<Position> {
        self.slots.iter().map(|s| s.committed).collect()
    }

    /// Where reading starts: after `cursor`, or after the committed position. A cursor
    /// beyond what a table's feed published answers `400 cursor_ahead`.
    pub async fn start(
        &self,
        state: &AppState,
        cursor: Option<&str>,
    ) -> Result<Vec<Position>, ApiError> {
        match cursor {
            None | Some("") => Ok(self.committed()),
            Some(cursor) => {
                let positions = self.decode(cursor)?;
                for (table, p) in self.tables.iter().zip(&positions) {
                    super::pages::ensure_published(state, table, *p).await?;
                }
                Ok(positions)
            }
        }
    }

    /// The answer to a failed read from `positions`: a table whose retention pruned what
    /// the read was after answers 410 with a cursor of this subscription.
    pub async fn read_failed(
        &self,
        state: &AppState,
        positions: &[Position],
        e: FeedError,
    ) -> ApiError {
        if let FeedError::Expired { .. } = e
            && let Err(answer) = self.ensure_retained(state, positions).await
        {
            return answer;
        }
        e.into()
    }

    /// Answers 410 when retention removed events after any of `positions` (checked after
    /// reading: a read skips the tables that published nothing after their position).
    pub async fn ensure_retained(
        &self,
        state: &AppState,
        positions: &[Position],
    ) -> Result<(), ApiError> {
        let mut earliest = positions.to_vec();
        let mut gone = false;
        for (slot, table) in self.tables.iter().enumerate() {
            let floor = state.store.floor(table.id).await?;
            if floor.is_gone(positions[slot]) {
                earliest[slot] = floor.earliest();
                gone = true;
            }
        }
        if gone {
            return Err(ApiError::position_expired(self.encode(&earliest)));
        }
        Ok(())
    }

    /// Refuses to deliver while paused.
    pub fn ensure_active(&self) -> Result<(), ApiError> {
        match self.subscription.state {
            SubscriptionState::Active => Ok(()),
            state => Err(ApiError::new(
                ProblemCode::SubscriptionNotActive,
                format!(
                    "subscription {} is {}; resume it with PATCH {{\"paused\": false}}",
                    self.subscription.name,
                    serde_json::to_value(state)
                        .expect("state serializes")
                        .as_str()
                        .unwrap_or("inactive")
                ),
            )),
        }
    }
}

/// Loads a subscription by id or name, answering 404 `subscription_not_found`.
pub(crate) async fn load(state: &AppState, id_or_name: &str) -> Result<Loaded, ApiError> {
    let subscription = state
        .store
        .find_subscription(id_or_name)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::new(
                ProblemCode::SubscriptionNotFound,
                format!("no subscription has the id or name {id_or_name:?}"),
            ),
            other => other.into(),
        })?;
    let slots = state.store.subscribed_tables(subscription.id).await?;
    let mut tables = Vec::with_capacity(slots.len());
    for slot in &slots {
        tables.push(state.store.get_table(slot.table_id).await?);
    }
    Ok(Loaded {
        subscription,
        slots,
        tables,
    })
}

pub(crate) async fn view(state: &AppState, loaded: &Loaded) -> Result<SubscriptionView, ApiError> {
    let mut total = Lag::default();
    let mut tables = Vec::with_capacity(loaded.slots.len());
    // Shown canonical, so that the same point always reads as the same cursor.
    let mut canonical = Vec::with_capacity(loaded.slots.len());
    for (slot, table) in loaded.slots.iter().zip(&loaded.tables) {
        let (committed, lag) = state.store.subscription_lag(table, slot.committed).await?;
        canonical.push(committed);
        total.add(&lag);
        tables.push(SubscribedTableView {
            table_id: table.id.0,
            table: table.table_name.clone(),
            lag: view_lag(&lag),
        });
    }
    let s = &loaded.subscription;
    let (target, push) = push::status(state, loaded).await?.unzip();
    Ok(SubscriptionView {
        id: s.id,
        name: s.name.clone(),
        kind: SubscriptionKind::from_stored(&s.kind),
        state: s.state,
        ops: s.ops.clone(),
        columns: s.columns.clone(),
        start: s.start_position.clone(),
        committed: loaded.encode(&canonical),
        lag: view_lag(&total),
        tables,
        last_error: s.last_error.clone(),
        target,
        push,
        created_at: s.created_at,
        updated_at: s.updated_at,
    })
}

fn view_lag(lag: &Lag) -> SubscriptionLag {
    SubscriptionLag {
        events: lag.events,
        snapshots: lag.snapshots,
        seconds: lag.seconds(),
    }
}

fn validate_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && Uuid::parse_str(name).is_err();
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ProblemCode::InvalidSubscriptionName,
            format!(
                "subscription names are 1 to {MAX_NAME} letters, digits, '.', '_' or '-' and \
                 not a UUID; got {name:?}"
            ),
        ))
    }
}

problems! {
    /// What `createSubscription` answers besides success.
    CreateSubscriptionProblems = [
        JSON_BODY,
        CURSOR,
        &[
            InvalidSubscriptionName,
            InvalidTables,
            TableNotFound,
            TimestampOutOfRange,
            CursorStartNeedsOneTable,
            PositionNotFound,
            SnapshotNotPublished,
            UnknownOperation,
            UnknownColumn,
            InvalidColumns,
            TargetRequired,
            TargetNotAllowed,
            InvalidTarget,
            DocumentIdRequired,
            UnsupportedTableFormat,
            HostNotAllowed,
            SubscriptionExists,
        ],
    ];
}

/// Create a subscription.
///
/// A subscription reads one or more tables from a start position, delivers the chosen
/// operations and columns, and keeps the position its consumer acknowledged, so that
/// `GET …/events` always continues after the last ack.
#[utoipa::path(
    post, path = "/v1/subscriptions", tag = TAG, operation_id = "createSubscription",
    request_body = CreateSubscription,
    responses(
        (status = 201, description = "Created", body = SubscriptionView,
         headers(("Location" = String, description = "URL of the new subscription"))),
        CreateSubscriptionProblems,
    )
)]
pub async fn create_subscription(
    State(state): State<AppState>,
    Json(request): Json<CreateSubscription>,
) -> Result<Response, ApiError> {
    validate_name(&request.name)?;
    if let Some(SubscriptionStart::Timestamp { timestamp }) = &request.start {
        super::limits::check_timestamp("start.timestamp", timestamp)?;
    }
    if request.tables.is_empty() || request.tables.len() > MAX_TABLES {
        return Err(ApiError::new(
            ProblemCode::InvalidTables,
            format!("tables must name 1 to {MAX_TABLES} table ids"),
        ));
    }
    let mut tables = Vec::with_capacity(request.tables.len());
    let mut available = BTreeSet::new();
    for id in &request.tables {
        if request.tables.iter().filter(|t| *t == id).count() > 1 {
            return Err(ApiError::new(
                ProblemCode::InvalidTables,
                format!("table {id} is named twice"),
            ));
        }
        let table = state
            .store
            .get_table(TableId(*id))
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ApiError::new(
                    ProblemCode::TableNotFound,
                    format!("no table is registered with id {id}; GET /v1/tables lists them"),
                ),
                other => other.into(),
            })?;
        available.extend(state.store.table_column_names(table.id).await?);
        tables.push(table);
    }
    let selection = Selection::new(
        request.ops.as_deref(),
        request.columns.as_deref(),
        &available,
    )?;
    let target = push::check_target(&request, &tables, &state.reach.hosts).await?;
    let start = request
        .start
        .unwrap_or(SubscriptionStart::Named(SubscriptionStartName::Earliest));
    let mut positions = Vec::with_capacity(tables.len());
    for table in &tables {
        let position = start::resolve(&state, &start, table, tables.len()).await?;
        positions.push((table.id, position));
    }
    let new = NewSubscription {
        id: Uuid::now_v7(),
        name: request.name,
        kind: request.kind.unwrap_or_default().as_str(),
        ops: selection.ops.names(),
        columns: selection.columns,
        start_position: serde_json::to_value(&start).expect("start serializes"),
        tables: positions,
        target,
    };
    state
        .store
        .insert_subscription(&new)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => ApiError::new(
                ProblemCode::SubscriptionExists,
                format!(
                    "a subscription named {:?} exists; pick another name or delete it",
                    new.name
                ),
            ),
            other => other.into(),
        })?;
    let loaded = load(&state, &new.id.to_string()).await?;
    let body = view(&state, &loaded).await?;
    let location = format!("/v1/subscriptions/{}", new.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(body),
    )
        .into_response())
}

problems! {
    /// What `listSubscriptions` answers besides success.
    ListSubscriptionsProblems = [&[InternalError]];
}

/// List subscriptions.
#[utoipa::path(
    get, path = "/v1/subscriptions", tag = TAG, operation_id = "listSubscriptions",
    responses(
        (status = 200, description = "The subscriptions the token may consume", body = SubscriptionList),
        ListSubscriptionsProblems,
    )
)]
pub async fn list_subscriptions(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
) -> Result<axum::Json<SubscriptionList>, ApiError> {
    let mut subscriptions = Vec::new();
    let all = state.store.list_subscriptions().await?;
    for s in all.into_iter().filter(|s| access.consumes(s.id)) {
        let loaded = load(&state, &s.id.to_string()).await?;
        subscriptions.push(view(&state, &loaded).await?);
    }
    Ok(axum::Json(SubscriptionList { subscriptions }))
}

problems! {
    /// What `getSubscription` answers besides success.
    GetSubscriptionProblems = [SUBSCRIPTION];
}

/// Get a subscription with its committed position and lag.
#[utoipa::path(
    get, path = "/v1/subscriptions/{id}", tag = TAG, operation_id = "getSubscription",
    params(("id" = String, Path, description = "Subscription id or name")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        GetSubscriptionProblems,
    )
)]
pub async fn get_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<axum::Json<SubscriptionView>, ApiError> {
    let loaded = load(&state, &id).await?;
    Ok(axum::Json(view(&state, &loaded).await?))
}

problems! {
    /// What `updateSubscription` answers besides success.
    UpdateSubscriptionProblems = [SUBSCRIPTION, JSON_BODY];
}

/// Pause or resume a subscription.
#[utoipa::path(
    patch, path = "/v1/subscriptions/{id}", tag = TAG, operation_id = "updateSubscription",
    params(("id" = String, Path, description = "Subscription id or name")),
    request_body = UpdateSubscription,
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        UpdateSubscriptionProblems,
    )
)]
pub async fn update_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(update): Json<UpdateSubscription>,
) -> Result<axum::Json<SubscriptionView>, ApiError> {
    let loaded = load(&state, &id).await?;
    state
        .store
        .set_subscription_paused(loaded.subscription.id, update.paused)
        .await?;
    let loaded = load(&state, &id).await?;
    Ok(axum::Json(view(&state, &loaded).await?))
}

problems! {
    /// What `deleteSubscription` answers besides success.
    DeleteSubscriptionProblems = [SUBSCRIPTION];
}

/// Delete a subscription.
#[utoipa::path(
    delete, path = "/v1/subscriptions/{id}", tag = TAG, operation_id = "deleteSubscription",
    params(("id" = String, Path, description = "Subscription id or name")),
    responses(
        (status = 204, description = "Deleted"),
        DeleteSubscriptionProblems,
    )
)]
pub async fn delete_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let loaded = load(&state, &id).await?;
    state
        .store
        .delete_subscription(loaded.subscription.id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Query parameters of a subscription page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionPageQuery {
    /// Continue after this cursor of the subscription instead of its committed position
    /// (to read ahead before acknowledging).
    pub after: Option<String>,
    /// Events per page (default 1000); at most `api.max_limit` (10000), or for Arrow
    /// pages `api.max_arrow_limit` (100000).
    #[param(minimum = 1)]
    pub limit: Option<u32>,
    /// How longs beyond ±2^53 are written: `auto` (default) or `number`.
    pub longs: Option<Longs>,
    /// `json`, `ndjson` or `arrow`; overrides the `Accept` header.
    pub format: Option<Format>,
    /// Seconds to wait for events when none are available (a long poll); 0 (default)
    /// answers at once; at most `api.max_wait` (60 s). With `net=true`: how long to wait
    /// for a range's net changes to be computed.
    #[param(minimum = 0)]
    pub wait: Option<i64>,
    /// `true`: the net changes of each table from the subscription's position to the
    /// table's head, table after table (see the table feed's `net`); a page ends where a
    /// range is still being computed, with `more`. Acknowledging a cursor commits the
    /// ends of the ranges read through. A cursor into net changes continues them
    /// without it.
    pub net: Option<bool>,
}

problems! {
    /// What `getSubscriptionEvents` answers besides success.
    GetSubscriptionEventsProblems = [
        SUBSCRIPTION,
        QUERY,
        CURSOR,
        &[
            LimitOutOfRange,
            WaitOutOfRange,
            PushSubscription,
            SubscriptionNotActive,
            PositionExpired,
        ],
        NET,
    ];
}

/// Read the next page of a subscription.
///
/// Starts after the committed position (or `after`); the same page is returned again
/// until it is acknowledged. Events carry subscription cursors as `position`; pass one
/// (or the page's `next`) to `POST …/ack`. Formats as for table pages; an Arrow page
/// holds events of one table and schema.
#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/events", tag = TAG, operation_id = "getSubscriptionEvents",
    params(("id" = String, Path, description = "Subscription id or name"), SubscriptionPageQuery),
    responses(
        (status = 200, description = "A page of events", content(
            (crate::api::changes::ChangePage = "application/json"),
            (crate::api::changes::ChangeEvent = "application/x-ndjson"),
            (super::pages::ArrowStream = "application/vnd.apache.arrow.stream"),
        ),
        headers(
            ("Icefeed-Next-Cursor" = String, description = "Cursor for the next page"),
            ("Icefeed-More" = bool, description = "Whether more events are available now"),
            ("Icefeed-Count" = u64, description = "Events in the page"),
        )),
        GetSubscriptionEventsProblems,
    )
)]
pub async fn get_subscription_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<SubscriptionPageQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let loaded = load(&state, &id).await?;
    push::ensure_pull(&loaded)?;
    loaded.ensure_active()?;
    if net::is_net(&query) {
        return net::net_events(&state, &loaded, &query, &headers).await;
    }
    let format = Format::negotiate(query.format, &headers);
    let limit = page_limit(&state, query.limit, format)?;
    let wait = long_poll_wait(&state, query.wait)?;
    let start = loaded.start(&state, query.after.as_deref()).await?;
    let selection = loaded.selection()?;
    let options = query.longs.unwrap_or_default().options();
    let ids: Vec<TableId> = loaded.tables.iter().map(|t| t.id).collect();
    let positions = Positions::new(loaded.subscription.id, ids.clone(), start.clone());
    let cursor = |t: TableId, p: Position, out: &mut Vec<u8>| positions.write_cursor(t, p, out);
    let (page, end) = state
        .notifier
        .long_poll(
            ids,
            wait,
            || async {
                positions.reset(start.clone());
                let mut page = PageSink::new(format, &options, &cursor, limit);
                let end = state
                    .feed
                    .read_subscription(&loaded.tables, &positions, limit, &selection, page.sink())
                    .await;
                match end {
                    Ok(end) => Ok((page, end)),
                    Err(e) => Err(loaded.read_failed(&state, &start, e).await),
                }
            },
            |(_, end)| end.count == 0 && !end.more,
        )
        .await?;
    loaded.ensure_retained(&state, &start).await?;
    record_delivered(&state, &loaded, &end.next).await?;
    let tail = PageTail {
        next: loaded.encode(&end.next),
        more: end.more,
    };
    page.respond(&state, tail, &loaded.tables[0], &selection)
        .await
}

/// Raises the subscription's delivered positions to `next`.
pub(crate) async fn record_delivered(
    state: &AppState,
    loaded: &Loaded,
    next: &[Position],
) -> Result<(), ApiError> {
    let mut canonical = Vec::with_capacity(next.len());
    for (table, p) in loaded.tables.iter().zip(next) {
        match state.store.canonical_position(table.id, *p).await? {
            Some(p) => canonical.push(p),
            // Read after a position the feed never had: nothing was delivered.
            None => return Ok(()),
        }
    }
    state
        .store
        .record_delivered(loaded.subscription.id, &canonical)
        .await?;
    Ok(())
}

problems! {
    /// What `ackSubscription` answers besides success.
    AckSubscriptionProblems = [
        SUBSCRIPTION,
        JSON_BODY,
        CURSOR,
        &[PushSubscription, AckBackwards, AckNotDelivered],
    ];
}

/// Acknowledge events: commit a position.
///
/// Everything up to `position` is committed; the next `GET …/events` continues after it.
/// Acks never move backwards, and only positions the subscription handed out can be
/// acknowledged. Acknowledging the committed position again is a no-op.
#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/ack", tag = TAG, operation_id = "ackSubscription",
    params(("id" = String, Path, description = "Subscription id or name")),
    request_body = Ack,
    responses(
        (status = 200, description = "The subscription with its new committed position", body = SubscriptionView),
        AckSubscriptionProblems,
    )
)]
pub async fn ack_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(ack): Json<Ack>,
) -> Result<axum::Json<SubscriptionView>, ApiError> {
    let loaded = load(&state, &id).await?;
    push::ensure_pull(&loaded)?;
    let acked = loaded.decode(&ack.position)?;
    let mut commit = Vec::with_capacity(acked.len());
    for ((slot, table), p) in loaded.slots.iter().zip(&loaded.tables).zip(acked) {
        let canonical = |p| state.store.canonical_position(table.id, p);
        let not_delivered = || {
            ApiError::new(
                ProblemCode::AckNotDelivered,
                format!(
                    "the position is beyond anything this subscription delivered on table {}; \
                     acknowledge positions its pages or streams returned",
                    table.table_name
                ),
            )
        };
        let p = canonical(p).await?.ok_or_else(not_delivered)?;
        let committed = canonical(slot.committed).await?.unwrap_or(slot.committed);
        if p < committed {
            return Err(ApiError::new(
                ProblemCode::AckBackwards,
                format!(
                    "the position is before the committed position on table {}; acks never \
                     move backwards",
                    table.table_name
                ),
            )
            .with("committed", loaded.encode(&loaded.committed())));
        }
        let delivered = canonical(slot.delivered).await?.unwrap_or(slot.delivered);
        if p > delivered {
            return Err(not_delivered());
        }
        commit.push(p);
    }
    state
        .store
        .record_committed(loaded.subscription.id, &commit)
        .await?;
    let loaded = load(&state, &id).await?;
    Ok(axum::Json(view(&state, &loaded).await?))
}
