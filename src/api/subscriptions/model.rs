//! Request and response bodies of the subscription resource.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

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
        snapshot_id: i64,
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
}

impl SubscriptionKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pull => "pull",
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
