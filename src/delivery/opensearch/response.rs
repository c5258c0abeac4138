//! Reading OpenSearch's answers: what became of each item of a `_bulk` request, and
//! whether a failed request is worth sending again.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use std::collections::HashMap;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

/// The error type of a write older than the document's version: already applied.
const VERSION_CONFLICT: &str = "version_conflict_engine_exception";

/// Error types worth retrying whatever their status says (a full write queue).
const RETRYABLE_TYPES: &[&str] = &["es_rejected_execution_exception"];

/// An error OpenSearch reported for an item or a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenSearchError {
    /// HTTP status.
    pub status: u16,
    /// OpenSearch's error type, e.g. `mapper_parsing_exception`.
    pub error_type: String,
    /// Its reason, with the reasons it was caused by.
    pub reason: String,
}

/// What became of one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemStatus {
    /// Written (or, for a delete, the document was not there).
    Applied,
    /// The document already has this version or a newer one: a replay.
    AlreadyApplied,
    /// Failed for now (overload, unavailable shard): send it again later.
    Retryable(OpenSearchError),
    /// Refused for good (mapping error, document too large, …): sending it again fails again.
    Rejected(OpenSearchError),
}

/// A parsed `_bulk` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkOutcome {
    /// One status per item sent, in order.
    pub items: Vec<ItemStatus>,
}

/// A `_bulk` answer that does not say what became of the items.
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    /// Not the JSON of a bulk response.
    #[error("unreadable bulk response: {0}")]
    Unreadable(#[from] serde_json::Error),
    /// The answer has a different number of items than the request.
    #[error("the bulk response has {got} items for {sent} sent")]
    ItemCount {
        /// Items sent.
        sent: usize,
        /// Items answered.
        got: usize,
    },
    /// An item is not `{"<action>": {...}}`.
    #[error("item {0} of the bulk response is not a single action")]
    Shape(usize),
}

#[derive(Deserialize)]
struct RawResponse {
    items: Vec<HashMap<String, RawItem>>,
}

/// A bulk answer read only as far as whether any item failed, and how many there are.
#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    errors: Option<bool>,
    items: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
struct RawItem {
    status: u16,
    #[serde(default)]
    error: Option<Value>,
}

/// Whether a request that failed with this HTTP status is worth sending again.
pub fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// Parses a `_bulk` answer to a request of `sent` items and classifies each item.
pub fn parse_bulk(body: &[u8], sent: usize) -> Result<BulkOutcome, ResponseError> {
    // The usual answer: `"errors": false` says every item went through, so the items
    // need only be counted, not taken apart (a thousand maps per batch otherwise).
    let summary: Summary = serde_json::from_slice(body)?;
    if summary.items.len() != sent {
        return Err(ResponseError::ItemCount {
            sent,
            got: summary.items.len(),
        });
    }
    if summary.errors == Some(false) {
        return Ok(BulkOutcome {
            items: vec![ItemStatus::Applied; sent],
        });
    }
    let raw: RawResponse = serde_json::from_slice(body)?;
    if raw.items.len() != sent {
        return Err(ResponseError::ItemCount {
            sent,
            got: raw.items.len(),
        });
    }
    let items = raw
        .items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let mut actions = item.into_values();
            match (actions.next(), actions.next()) {
                (Some(item), None) => Ok(classify(item)),
                _ => Err(ResponseError::Shape(i)),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(BulkOutcome { items })
}

fn classify(item: RawItem) -> ItemStatus {
    let status = item.status;
    let Some(error) = item.error else {
        // A delete of a missing document answers 404 without an error: nothing to delete.
        return match status {
            200..=299 | 404 => ItemStatus::Applied,
            _ => ItemStatus::Rejected(OpenSearchError {
                status,
                error_type: "unknown".into(),
                reason: format!("status {status} without an error"),
            }),
        };
    };
    let error = describe(status, &error);
    if status == 409 && error.error_type == VERSION_CONFLICT {
        ItemStatus::AlreadyApplied
    } else if is_retryable_status(status) || RETRYABLE_TYPES.contains(&error.error_type.as_str()) {
        ItemStatus::Retryable(error)
    } else {
        ItemStatus::Rejected(error)
    }
}

/// Type and reason of an OpenSearch error object (`{"type", "reason", "caused_by"}`).
fn describe(status: u16, error: &Value) -> OpenSearchError {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let Some(error_type) = text(error, "type") else {
        return OpenSearchError {
            status,
            error_type: "unknown".into(),
            reason: error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_string),
        };
    };
    let mut reason = text(error, "reason").unwrap_or_default();
    let mut cause = error.get("caused_by");
    while let Some(c) = cause {
        reason.push_str(&format!(
            " (caused by {}: {})",
            text(c, "type").unwrap_or_default(),
            text(c, "reason").unwrap_or_default()
        ));
        cause = c.get("caused_by");
    }
    OpenSearchError {
        status,
        error_type,
        reason,
    }
}

/// The error in a failed request's answer (`{"error": {...}, "status": N}`), or the body
/// as text when it is something else (a proxy's page, say).
pub fn parse_error(status: u16, body: &[u8]) -> OpenSearchError {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) if value.get("error").is_some() => describe(status, &value["error"]),
        _ => OpenSearchError {
            status,
            error_type: "http".into(),
            reason: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(action: &str, body: Value) -> Value {
        json!({ action: body })
    }

    fn error(kind: &str, reason: &str) -> Value {
        json!({"type": kind, "reason": reason, "index": "orders"})
    }

    #[test]
    fn items_are_classified() {
        let body = json!({"took": 3, "errors": true, "items": [
            item("index", json!({"_id": "1", "status": 201, "result": "created"})),
            item("index", json!({"_id": "2", "status": 200, "result": "updated"})),
            item("delete", json!({"_id": "3", "status": 404, "result": "not_found"})),
            item("index", json!({"_id": "4", "status": 409, "error": error(VERSION_CONFLICT, "current version [5] is higher")})),
            item("index", json!({"_id": "5", "status": 429, "error": error("circuit_breaking_exception", "too big")})),
            item("index", json!({"_id": "6", "status": 503, "error": error("unavailable_shards_exception", "primary shard is not active")})),
            item("index", json!({"_id": "7", "status": 400, "error": error("es_rejected_execution_exception", "queue full")})),
            item("index", json!({"_id": "8", "status": 400, "error": {"type": "mapper_parsing_exception",
                "reason": "failed to parse field [n] of type [long]",
                "caused_by": {"type": "illegal_argument_exception", "reason": "For input string: \"abc\""}}})),
            item("index", json!({"_id": "9", "status": 409, "error": error("other_conflict", "x")})),
            item("delete", json!({"_id": "10", "status": 404, "error": error("index_not_found_exception", "no such index")})),
            item("create", json!({"_id": "11", "status": 413, "error": "too large"})),
        ]});
        let outcome = parse_bulk(body.to_string().as_bytes(), 11).unwrap();
        let kinds: Vec<&str> = outcome
            .items
            .iter()
            .map(|s| match s {
                ItemStatus::Applied => "applied",
                ItemStatus::AlreadyApplied => "already",
                ItemStatus::Retryable(_) => "retry",
                ItemStatus::Rejected(_) => "rejected",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "applied", "applied", "applied", "already", "retry", "retry", "retry", "rejected",
                "rejected", "rejected", "rejected"
            ]
        );
        assert_eq!(
            outcome.items[7],
            ItemStatus::Rejected(OpenSearchError {
                status: 400,
                error_type: "mapper_parsing_exception".into(),
                reason: "failed to parse field [n] of type [long] (caused by illegal_argument_exception: For input string: \"abc\")".into(),
            })
        );
        let ItemStatus::Rejected(e) = &outcome.items[10] else {
            unreachable!()
        };
        assert_eq!(
            (e.status, e.error_type.as_str(), e.reason.as_str()),
            (413, "unknown", "too large")
        );
    }

    #[test]
    fn answers_without_errors_apply_every_item() {
        let body = json!({"took": 3, "errors": false, "items": [
            item("index", json!({"_id": "1", "status": 201, "result": "created"})),
            item("delete", json!({"_id": "2", "status": 404, "result": "not_found"})),
            item("delete", json!({"_id": "3", "status": 200, "result": "deleted"})),
        ]});
        let outcome = parse_bulk(body.to_string().as_bytes(), 3).unwrap();
        assert_eq!(outcome.items, vec![ItemStatus::Applied; 3]);
    }

    #[test]
    fn answers_that_do_not_match_the_request_are_errors() {
        let one =
            json!({"errors": false, "items": [item("index", json!({"status": 201}))]}).to_string();
        assert!(matches!(
            parse_bulk(one.as_bytes(), 2),
            Err(ResponseError::ItemCount { sent: 2, got: 1 })
        ));
        let two_actions =
            json!({"items": [{"index": {"status": 201}, "delete": {"status": 200}}]}).to_string();
        assert!(matches!(
            parse_bulk(two_actions.as_bytes(), 1),
            Err(ResponseError::Shape(0))
        ));
        assert!(matches!(
            parse_bulk(b"<html>", 1),
            Err(ResponseError::Unreadable(_))
        ));
    }

    #[test]
    fn request_statuses_are_classified() {
        for status in [429, 500, 502, 503, 504] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 409, 413] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn request_errors_are_described() {
        let body = json!({"error": {"type": "resource_already_exists_exception", "reason": "index [x] already exists"}, "status": 400});
        let e = parse_error(400, body.to_string().as_bytes());
        assert_eq!(e.error_type, "resource_already_exists_exception");
        assert_eq!(e.reason, "index [x] already exists");
        let e = parse_error(502, b"Bad Gateway");
        assert_eq!(
            (e.status, e.error_type.as_str(), e.reason.as_str()),
            (502, "http", "Bad Gateway")
        );
    }
}
