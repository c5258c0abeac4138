//! Request and response bodies of the subscription resource.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::delivery::opensearch::OpenSearchTarget;
use crate::int64::Int64;
use crate::store::SubscriptionState;

/// Where a new subscription starts reading each of its tables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SubscriptionStart {
    /// `earliest` (default: every retained event) or `latest` (only events published
    /// after the subscription is created).
    Named(SubscriptionStartName),
    /// After this cursor of the table's feed (`GET /v1/tables/{id}/changes`); only for
    /// subscriptions of one table.
    #[schema(title = "SubscriptionCursorStart")]
    Cursor {
        /// A cursor the table's feed returned.
        cursor: String,
    },
    /// After the change set of this snapshot (exclusive); it must be published.
    #[schema(title = "SubscriptionSnapshotStart")]
    SnapshotId {
        /// A snapshot whose change set is published.
        snapshot_id: Int64,
    },
    /// With the first change set committed at or after this time.
    #[schema(title = "SubscriptionTimestampStart")]
    Timestamp {
        /// RFC 3339 time, e.g. `2026-07-13T08:00:00Z`.
        timestamp: DateTime<Utc>,
    },
}

/// The named start positions of a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStartName {
    /// The oldest retained event.
    Earliest,
    /// After the newest published event.
    Latest,
}

/// How a subscription delivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionKind {
    /// The consumer pulls pages or opens a stream, and acknowledges positions.
    #[default]
    Pull,
    /// icefeed pushes the events into an OpenSearch index (see `target`).
    Opensearch,
}

impl SubscriptionKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pull => "pull",
            Self::Opensearch => "opensearch",
        }
    }

    /// The kind of a stored name.
    pub fn from_stored(name: &str) -> Self {
        match name {
            "opensearch" => Self::Opensearch,
            _ => Self::Pull,
        }
    }
}

/// Body of `POST /v1/subscriptions`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    /// Unique name: 1 to 128 letters, digits, `.`, `_` or `-`. Usable in paths in
    /// place of the id.
    #[schema(example = "orders-to-warehouse")]
    pub name: String,
    /// Ids of the tables to read (at least one, each once).
    #[schema(min_items = 1, max_items = 64)]
    pub tables: Vec<Uuid>,
    /// Where reading starts; default `earliest`.
    #[serde(default)]
    pub start: Option<SubscriptionStart>,
    /// Operations delivered (`insert`, `update`, `delete`); default all.
    #[serde(default)]
    #[schema(value_type = Option<Vec<crate::api::pages::Operation>>)]
    pub ops: Option<Vec<String>>,
    /// Top-level columns of `before`/`after` (and Arrow rows); default whole rows.
    /// `key` always carries the identifier columns.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Delivery kind; default `pull`.
    #[serde(default)]
    pub kind: Option<SubscriptionKind>,
    /// Where an `opensearch` subscription writes (required for that kind, refused for
    /// `pull`). Secrets are stored but never shown back.
    #[serde(default)]
    pub target: Option<OpenSearchTarget>,
}

/// Body of `PATCH /v1/subscriptions/{id}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSubscription {
    /// `true` pauses the subscription (its pages and streams answer 409); `false` resumes it.
    pub paused: bool,
}

/// Body of `POST /v1/subscriptions/{id}/ack`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    /// A cursor this subscription handed out: an event's `position` or a page's `next`.
    /// Everything up to it is committed.
    pub position: String,
}

/// How far a consumer is behind.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct SubscriptionLag {
    /// Published events after the committed position.
    pub events: i64,
    /// Snapshots after the committed position: published change sets not consumed plus
    /// snapshots the table has that are not yet published.
    pub snapshots: i64,
    /// Age in seconds of the oldest change not consumed (0 when caught up).
    pub seconds: f64,
}

/// One table of a subscription.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SubscribedTableView {
    /// Table id.
    pub table_id: Uuid,
    /// The Iceberg table, `namespace.table`.
    pub table: String,
    /// Lag on this table.
    pub lag: SubscriptionLag,
}

/// A subscription.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    /// Id.
    pub id: Uuid,
    /// Unique name.
    pub name: String,
    /// Delivery kind.
    pub kind: SubscriptionKind,
    /// `active`, `paused` or `failed`.
    pub state: SubscriptionState,
    /// Operations delivered.
    #[schema(value_type = Vec<crate::api::pages::Operation>)]
    pub ops: Vec<String>,
    /// Projected columns; absent for whole rows.
    pub columns: Option<Vec<String>>,
    /// The start position given at creation.
    #[schema(value_type = SubscriptionStart)]
    pub start: serde_json::Value,
    /// The committed position (a cursor; pass it as `after` to read from there).
    pub committed: String,
    /// Lag over all tables.
    pub lag: SubscriptionLag,
    /// Per table.
    pub tables: Vec<SubscribedTableView>,
    /// Why the subscription failed, if it did.
    pub last_error: Option<String>,
    /// The OpenSearch target of a push subscription, secrets shown as `********`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<OpenSearchTarget>,
    /// Progress of a push subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushStatus>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change of the subscription or its state.
    pub updated_at: DateTime<Utc>,
}

/// A list of subscriptions.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    /// The subscriptions, oldest first.
    pub subscriptions: Vec<SubscriptionView>,
}

/// What a push worker is doing with a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PushState {
    /// Pushing, or waiting for new events (caught up).
    Running,
    /// OpenSearch kept failing through every retry; trying again at `retry_at`.
    BackingOff,
    /// Paused by an operator.
    Paused,
    /// Stopped; `last_error` says why. Resume with `PATCH {"paused": false}`.
    Failed,
}

/// Progress of a push subscription.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PushStatus {
    /// What the worker is doing.
    pub state: PushState,
    /// The node pushing it now, if any.
    pub node: Option<String>,
    /// Documents written (inserts and updates).
    pub documents_indexed: i64,
    /// Documents deleted.
    pub documents_deleted: i64,
    /// Changes OpenSearch already had at that version or newer (replays).
    pub documents_skipped: i64,
    /// Events sent to the dead letters.
    pub documents_rejected: i64,
    /// Dead letters waiting now (redriven and superseded ones are gone).
    pub dead_letters: i64,
    /// The last failure, retried or not.
    pub last_error: Option<String>,
    /// When it happened.
    pub last_error_at: Option<DateTime<Utc>>,
    /// While backing off: the next attempt.
    pub retry_at: Option<DateTime<Utc>>,
    /// The last batch committed.
    pub last_pushed_at: Option<DateTime<Utc>>,
}

/// Body of `POST /v1/subscriptions/{id}/rewind`: exactly one of the fields.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewind {
    /// A cursor of this subscription (an event's `position`, a dead letter's, or an
    /// earlier `committed`): continue after it.
    #[serde(default)]
    pub position: Option<String>,
    /// Continue after this snapshot's change set (as `start` does).
    #[serde(default)]
    pub snapshot_id: Option<Int64>,
    /// Continue with the first change set committed at or after this time.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
    /// `true`: continue with the oldest retained event.
    #[serde(default)]
    pub earliest: Option<bool>,
}

/// An event the index refused for good, or that could not be made into a document.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DeadLetterView {
    /// Id, for `redrive`.
    pub id: Int64,
    /// The subscription cursor just after the event.
    pub position: String,
    /// The event, as `GET …/events` renders it.
    #[schema(value_type = Object)]
    pub event: serde_json::Value,
    /// The target index; absent when it could not be computed.
    pub index: Option<String>,
    /// The document id; absent when it could not be computed.
    pub document_id: Option<String>,
    /// The external version sent (the change's sequence number).
    pub version: Int64,
    /// OpenSearch's error type (e.g. `mapper_parsing_exception`), or
    /// `icefeed_unrenderable_event` when no id, index or routing could be computed.
    pub error_type: String,
    /// Why.
    pub reason: String,
    /// When it was refused (last).
    pub created_at: DateTime<Utc>,
    /// When a redrive of it was asked for; absent once it was sent and refused again
    /// (a dead letter that went through is gone).
    pub queued_at: Option<DateTime<Utc>>,
}

/// A page of dead letters.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DeadLetterPage {
    /// Oldest first.
    pub dead_letters: Vec<DeadLetterView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<Int64>,
}

/// Body of `POST /v1/subscriptions/{id}/dead-letters/redrive`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Redrive {
    /// Dead letters to send again (at most 1000). Without it, the oldest `limit` dead
    /// letters after `after` are sent.
    #[serde(default)]
    #[schema(min_items = 1, max_items = 1000)]
    pub ids: Option<Vec<Int64>>,
    /// Without `ids`: start after this dead letter id (a `next` of an earlier answer).
    #[serde(default)]
    pub after: Option<Int64>,
    /// Without `ids`: how many to send, 1 to 1000; default 100.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// What a redrive queued.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RedriveQueued {
    /// Dead letters queued to be sent again (those listed that exist).
    pub queued: usize,
    /// Without `ids`: more dead letters follow; pass this as `after` to queue them.
    pub next: Option<Int64>,
}
