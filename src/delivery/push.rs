//! Turning change events into OpenSearch bulk items, and sending them: shared by the push
//! worker (events just read from the feed) and redrives (events kept as dead letters).
//!
//! Events are rendered once by [`super::JsonSink`] as canonical JSON lines, the form a
//! dead letter keeps; the document is the event's `after` object taken verbatim from
//! that line, so a redrive rebuilds exactly the item the worker sent.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::opensearch::{
    BulkAction, BulkItem, DocumentId, ItemOutcome, OpenSearchClient, PushTarget, RenderError,
    RetryPolicy, SendError, retry, split,
};
use crate::int64::Int64;
use crate::store::SourceTable;

/// Why an event cannot become a bulk item.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    /// This event has no valid document id, index or routing; it goes to the dead letters.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The table is in format v1: every change has sequence number 0, so external
    /// versions cannot order them. The subscription cannot push it.
    #[error(
        "table {0} has sequence number 0 (Iceberg format v1): external versions cannot order \
         its changes; upgrade the table to format v2 to push it"
    )]
    FormatV1(String),
    /// The line is not an event as icefeed renders them.
    #[error("unreadable event: {0}")]
    Malformed(String),
}

/// The fields of a rendered event that make the item; strings borrowed where possible.
#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow)]
    table: Cow<'a, str>,
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    sequence_number: Int64,
    committed_at: DateTime<Utc>,
}

/// The parts of an event an item is made of: raw JSON, borrowed from the rendered line.
pub struct EventParts<'a> {
    pub delete: bool,
    pub key: Option<&'a [u8]>,
    pub before: Option<&'a [u8]>,
    pub after: Option<&'a [u8]>,
    pub sequence_number: i64,
    /// The external version of its change set (see `store::change_sets`).
    pub version: i64,
    pub committed_at: DateTime<Utc>,
}

fn object(raw: Option<&[u8]>) -> Result<Map<String, Value>, ItemError> {
    match raw {
        None => Ok(Map::new()),
        Some(raw) => serde_json::from_slice(raw).map_err(|e| ItemError::Malformed(e.to_string())),
    }
}

/// The names in an event's `key`, in key order (the order they are written in): the
/// names of the event's schema, which a rename may have changed since registration.
fn key_columns(raw: Option<&[u8]>) -> Result<Vec<String>, ItemError> {
    struct Names(Vec<String>);
    impl<'de> Deserialize<'de> for Names {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Names;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a key object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Names, A::Error> {
                    let mut names = Vec::new();
                    while let Some((name, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                        names.push(name);
                    }
                    Ok(Names(names))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    match raw {
        None => Ok(Vec::new()),
        Some(raw) => serde_json::from_slice::<Names>(raw)
            .map(|n| n.0)
            .map_err(|e| ItemError::Malformed(e.to_string())),
    }
}

/// Builds the bulk items of one event (a line of [`super::JsonSink`] JSON) of `tables`,
/// whose change set pushes external version `version` (see [`items_for_parts`]).
pub fn items_for_event(
    line: &[u8],
    version: i64,
    target: &PushTarget,
    tables: &[SourceTable],
) -> Result<Vec<BulkItem>, ItemError> {
    let event: EventView =
        serde_json::from_slice(line).map_err(|e| ItemError::Malformed(e.to_string()))?;
    let table = tables
        .iter()
        .find(|t| t.table_name == event.table)
        .ok_or_else(|| ItemError::Malformed(format!("unknown table {}", event.table)))?;
    let parts = EventParts {
        delete: event.op == "delete",
        key: raw(event.key),
        before: raw(event.before),
        after: raw(event.after),
        sequence_number: event.sequence_number.0,
        version,
        committed_at: event.committed_at,
    };
    items_for_parts(&parts, target, table)
}

fn raw(value: Option<&RawValue>) -> Option<&[u8]> {
    value.map(|v| v.get().as_bytes())
}

/// Builds the bulk items of an event of `table` from its parts: one, or two for an update
/// that moves its document (a template id or routing that renders differently from the
/// row before and the row after): the old document is deleted, the new one indexed, both
/// at the event's version.
pub fn items_for_parts(
    event: &EventParts<'_>,
    target: &PushTarget,
    table: &SourceTable,
) -> Result<Vec<BulkItem>, ItemError> {
    if event.sequence_number <= 0 {
        return Err(ItemError::FormatV1(table.table_name.clone()));
    }
    let index = target
        .index
        .render(&table.namespace.join("."), &table.name, event.committed_at)?;
    let item = |row: Option<&[u8]>, action: BulkAction| -> Result<BulkItem, ItemError> {
        let (id, routing) = document_of(event, row, target)?;
        Ok(BulkItem {
            index: index.clone(),
            id,
            routing,
            version: event.version,
            action,
        })
    };
    if event.delete {
        return Ok(vec![item(event.before, BulkAction::Delete)?]);
    }
    let after = event
        .after
        .ok_or_else(|| ItemError::Malformed("an insert or update without `after`".into()))?;
    let indexed = item(
        event.after,
        BulkAction::Index(Bytes::copy_from_slice(after)),
    )?;
    let moved = match event.before {
        Some(before) if target.renders_rows() => Some(item(Some(before), BulkAction::Delete)?)
            .filter(|old| (&old.id, &old.routing) != (&indexed.id, &indexed.routing)),
        _ => None,
    };
    Ok(moved.into_iter().chain([indexed]).collect())
}

/// The document id and routing of `row` (the row before or after) of `event`.
fn document_of(
    event: &EventParts<'_>,
    row: Option<&[u8]>,
    target: &PushTarget,
) -> Result<(String, Option<String>), ItemError> {
    let row_map = || object(row);
    let id = match &target.document_id {
        DocumentId::IdentifierColumns => {
            let columns = key_columns(event.key)?;
            target.document_id.render(&columns, &object(event.key)?)?
        }
        DocumentId::Template(_) => target.document_id.render(&[], &row_map()?)?,
    };
    let routing = match &target.routing {
        Some(template) => Some(template.render(&row_map()?)?),
        None => None,
    };
    Ok((id, routing))
}

/// Creates the indices `items` go to (once per client), then sends `items` in runs
/// within the target's batch limits; one outcome per item, in order.
pub async fn send_items(
    client: &OpenSearchClient,
    target: &PushTarget,
    items: &[BulkItem],
    policy: &RetryPolicy,
    cancel: &CancellationToken,
) -> Result<Vec<ItemOutcome>, SendError> {
    let mut created: Vec<&str> = Vec::new();
    for item in items {
        if !created.contains(&item.index.as_str()) {
            let (settings, mappings) = (
                target.config.index_settings.as_ref(),
                target.config.mappings.as_ref(),
            );
            retry(policy, cancel, || {
                client.ensure_index(&item.index, settings, mappings)
            })
            .await?;
            created.push(&item.index);
        }
    }
    let mut outcomes = Vec::with_capacity(items.len());
    for run in split(items, &target.config.batch) {
        let Range { start, end } = run;
        outcomes.extend(
            client
                .send_batch(&items[start..end], policy, cancel)
                .await?,
        );
    }
    Ok(outcomes)
}

/// The error type recorded for an event that could not be made into a document.
pub const UNRENDERABLE: &str = "icefeed_unrenderable_event";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_columns_keep_the_order_of_the_key() {
        let key = br#"{"zone": "eu", "id": 7, "at": null}"#;
        assert_eq!(key_columns(Some(key)).unwrap(), ["zone", "id", "at"]);
        assert!(key_columns(None).unwrap().is_empty());
        assert!(matches!(
            key_columns(Some(b"[1]")),
            Err(ItemError::Malformed(_))
        ));
    }
}
