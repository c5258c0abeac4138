//! Resolving a new subscription's start into a canonical position per table.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use super::model::{SubscriptionStart, SubscriptionStartName};
use crate::api::AppState;
use crate::api::error::{ApiError, ProblemCode};
use crate::changes::Position;
use crate::store::SourceTable;

/// The position `start` means in `table`'s feed.
pub async fn resolve(
    state: &AppState,
    start: &SubscriptionStart,
    table: &SourceTable,
    tables: usize,
) -> Result<Position, ApiError> {
    let store = &state.store;
    let before = |ordinal| Position {
        ordinal,
        consumed: 0,
    };
    let position = match start {
        SubscriptionStart::Named(SubscriptionStartName::Earliest) => {
            before(store.first_retained_ordinal(table.id).await?)
        }
        SubscriptionStart::Named(SubscriptionStartName::Latest) => before(table.last_ordinal + 1),
        SubscriptionStart::Cursor { cursor } => {
            if tables != 1 {
                return Err(ApiError::new(
                    ProblemCode::CursorStartNeedsOneTable,
                    "a table cursor can only start a subscription of that one table; use \
                     earliest, latest, a snapshot id or a timestamp for several tables",
                ));
            }
            Position::from_cursor(cursor, table.id)?
        }
        SubscriptionStart::SnapshotId { snapshot_id } => {
            match store.ordinal_of_snapshot(table.id, snapshot_id.0).await? {
                Some(ordinal) => before(ordinal + 1),
                None => {
                    return Err(ApiError::new(
                        ProblemCode::SnapshotNotPublished,
                        format!(
                            "table {} has no published change set for snapshot {snapshot_id}; \
                             GET /v1/tables/{}/changes shows the published snapshots",
                            table.table_name, table.id
                        ),
                    ));
                }
            }
        }
        SubscriptionStart::Timestamp { timestamp } => {
            match store.first_ordinal_since(table.id, *timestamp).await? {
                Some(ordinal) => before(ordinal),
                None => before(table.last_ordinal + 1),
            }
        }
    };
    store
        .canonical_position(table.id, position)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                ProblemCode::PositionNotFound,
                "the cursor points past the end of the table's feed",
            )
        })
}
