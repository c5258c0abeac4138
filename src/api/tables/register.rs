//! Turning a registration request into a stored source table: every check that can be
//! made against the live table is made here, so a bad registration never gets stored.
//! Must not reach: `changelog`, `delivery`
//! (registering reads a table's metadata, not its changes).

use std::time::Duration;

use iceberg::spec::TableMetadataRef;
use iceberg::util::snapshot::ancestors_of;

use super::model::{RegisterTable, StartName, StartPosition};
use crate::api::error::{ApiError, ProblemCode};
use crate::api::limits;
use crate::catalog::{CatalogConfig, REDACTED, Reach, display_ident, parse_ident};
use crate::int64::Int64;
use crate::store::{NewSourceTable, Retention, SourceTable, TableId};
use crate::workers::committed_at;

const MIN_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(86_400);

/// Validates `request` against the catalog and resolves its start position.
pub async fn prepare(
    request: RegisterTable,
    default_poll: Duration,
    catalog_timeout: Duration,
    reach: &Reach,
) -> Result<NewSourceTable, ApiError> {
    let poll = match request.poll_interval_ms {
        Some(ms) => validate_poll_interval(ms)?,
        None => default_poll,
    };
    let retention = validate_retention(request.retention.unwrap_or_default())?;
    if let Some(StartPosition::Timestamp { timestamp }) = &request.start {
        limits::check_timestamp("start.timestamp", timestamp)?;
    }
    let catalog = CatalogConfig::from_json(&request.catalog)?;
    let ident = parse_ident(&request.table)
        .map_err(|e| ApiError::new(ProblemCode::InvalidTableIdentifier, e.to_string()))?;
    let table = catalog.load_checked(&ident, catalog_timeout, reach).await?;
    let metadata = table.metadata_ref();

    let identifier_columns = resolve_identifier_columns(&metadata, request.identifier_columns)?;
    let identifier_field_ids = identifier_columns
        .iter()
        .filter_map(|name| metadata.current_schema().field_id_by_name(name))
        .collect();
    let branch = request.branch.unwrap_or_else(|| "main".to_string());
    let head = metadata.snapshot_for_ref(&branch).map(|s| s.snapshot_id());
    if head.is_none() && !(branch == "main" && metadata.snapshots().len() == 0) {
        return Err(ApiError::new(
            ProblemCode::BranchNotFound,
            format!("table {} has no branch {branch:?}", request.table),
        ));
    }

    let start = request
        .start
        .unwrap_or(StartPosition::Named(StartName::Snapshot));
    let (export, checkpoint) = resolve_start(&metadata, head, &start)?;
    let checkpoint_snapshot = checkpoint.and_then(|id| metadata.snapshot_by_id(id).cloned());
    let schema = metadata.current_schema();
    Ok(NewSourceTable {
        id: TableId::new(),
        namespace: ident.namespace().clone().inner(),
        name: ident.name().to_string(),
        catalog_key: catalog.key(),
        catalog: request.catalog,
        branch,
        identifier_columns,
        identifier_field_ids,
        start_position: serde_json::to_value(&start).expect("start position serializes"),
        poll_interval_ms: poll.as_millis() as i64,
        export,
        checkpoint_snapshot_id: checkpoint,
        checkpoint_sequence_number: checkpoint_snapshot.as_ref().map(|s| s.sequence_number()),
        checkpoint_committed_at: checkpoint_snapshot.as_ref().map(committed_at),
        retention,
        schema_id: schema.schema_id(),
        schema: serde_json::to_value(schema.as_ref()).map_err(|e| ApiError::internal(&e))?,
    })
    .inspect(|t| tracing::info!(table = %display_ident(&ident), id = %t.id, "registering table"))
}

/// New catalog settings for a registered table, checked to reach the same table (one
/// that holds the feed's checkpoint) with readable files; returns them with their key.
/// A secret property given as shown (`********`) keeps its stored value, so settings
/// read from `GET` can be edited and sent back.
pub async fn replacement_catalog(
    table: &SourceTable,
    mut catalog: serde_json::Value,
    catalog_timeout: Duration,
    reach: &Reach,
) -> Result<(serde_json::Value, String), ApiError> {
    keep_shown_secrets(&mut catalog, &table.catalog);
    let config = CatalogConfig::from_json(&catalog)?;
    let ident = parse_ident(&table.table_name)
        .map_err(|e| ApiError::new(ProblemCode::InvalidTableIdentifier, e.to_string()))?;
    let iceberg = config.load_checked(&ident, catalog_timeout, reach).await?;
    if let Some(checkpoint) = table.checkpoint_snapshot_id
        && iceberg.metadata().snapshot_by_id(checkpoint).is_none()
    {
        return Err(ApiError::new(
            ProblemCode::CatalogTableMismatch,
            format!(
                "the table {} these settings reach does not hold snapshot {checkpoint}, the \
                 feed's checkpoint: they reach another table, or one whose history was expired",
                table.table_name
            ),
        ));
    }
    Ok((catalog, config.key()))
}

/// Puts stored values back for properties sent as the redaction mask.
fn keep_shown_secrets(catalog: &mut serde_json::Value, stored: &serde_json::Value) {
    let (Some(new), Some(old)) = (
        catalog
            .get_mut("properties")
            .and_then(|p| p.as_object_mut()),
        stored.get("properties").and_then(|p| p.as_object()),
    ) else {
        return;
    };
    for (key, value) in new.iter_mut() {
        if value.as_str() == Some(REDACTED)
            && let Some(kept) = old.get(key)
        {
            *value = kept.clone();
        }
    }
}

/// Checks a poll interval in milliseconds.
pub fn validate_poll_interval(ms: u64) -> Result<Duration, ApiError> {
    let (min, max) = (MIN_POLL.as_millis() as u64, MAX_POLL.as_millis() as u64);
    limits::check(
        ProblemCode::InvalidPollInterval,
        "poll_interval_ms",
        ms,
        min,
        max,
    )?;
    Ok(Duration::from_millis(ms))
}

/// Checks retention limits: every one given must be positive, ages at most 100 years
/// (what PostgreSQL intervals and chrono durations hold) and the count at most 2^53 − 1.
pub fn validate_retention(r: Retention) -> Result<Retention, ApiError> {
    let bounds = [
        ("max_age_ms", r.max_age_ms, limits::MAX_DURATION_MS),
        ("max_change_sets", r.max_change_sets, limits::MAX_COUNT),
        (
            "hard_max_age_ms",
            r.hard_max_age_ms,
            limits::MAX_DURATION_MS,
        ),
    ];
    for (name, value, max) in bounds {
        if let Some(value) = value {
            let field = format!("retention.{name}");
            limits::check(ProblemCode::InvalidRetention, &field, value, 1, max)?;
        }
    }
    Ok(r)
}

/// The given identifier columns, checked against the current schema, or the table's
/// Iceberg identifier fields.
fn resolve_identifier_columns(
    metadata: &TableMetadataRef,
    given: Option<Vec<String>>,
) -> Result<Vec<String>, ApiError> {
    let schema = metadata.current_schema();
    let top_level: Vec<&str> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    match given {
        Some(columns) => {
            if let Some(unknown) = columns.iter().find(|c| !top_level.contains(&c.as_str())) {
                return Err(ApiError::new(
                    ProblemCode::UnknownIdentifierColumn,
                    format!(
                        "identifier column {unknown:?} is not a top-level column of the table; \
                         its columns are: {}",
                        top_level.join(", ")
                    ),
                )
                .with("columns", top_level));
            }
            let mut unique = columns.clone();
            unique.sort();
            unique.dedup();
            if unique.len() != columns.len() {
                return Err(ApiError::new(
                    ProblemCode::DuplicateIdentifierColumn,
                    "identifier_columns names a column twice",
                ));
            }
            Ok(columns)
        }
        None => Ok(schema
            .identifier_field_ids()
            .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
            .collect()),
    }
}

/// (export first?, checkpoint to follow from) for a start position.
fn resolve_start(
    metadata: &TableMetadataRef,
    head: Option<i64>,
    start: &StartPosition,
) -> Result<(bool, Option<i64>), ApiError> {
    match start {
        StartPosition::Named(StartName::Snapshot) => Ok((true, None)),
        StartPosition::Named(StartName::Latest) => Ok((false, head)),
        StartPosition::Named(StartName::Earliest) => Ok((false, None)),
        &StartPosition::SnapshotId {
            snapshot_id: Int64(snapshot_id),
        } => {
            let on_branch = head
                .map(|h| ancestors_of(metadata, h).any(|s| s.snapshot_id() == snapshot_id))
                .unwrap_or(false);
            if !on_branch {
                return Err(ApiError::new(
                    ProblemCode::UnknownSnapshot,
                    format!(
                        "snapshot {snapshot_id} is not in the table's retained history of the branch"
                    ),
                ));
            }
            Ok((false, Some(snapshot_id)))
        }
        StartPosition::Timestamp { timestamp } => {
            let ms = timestamp.timestamp_millis();
            // Follow from the newest snapshot committed before the time (exclusive), so
            // a snapshot committed exactly at it is included.
            let before = head.and_then(|h| {
                ancestors_of(metadata, h)
                    .find(|s| s.timestamp_ms() < ms)
                    .map(|s| s.snapshot_id())
            });
            Ok((false, before))
        }
    }
}
