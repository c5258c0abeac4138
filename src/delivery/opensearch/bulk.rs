//! `_bulk` request bodies: one action line per change, followed by the document for
//! index actions, each version external so that OpenSearch keeps the newest.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;

use super::config::BatchLimits;

/// What a change does to its document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BulkAction {
    /// Insert or update: the row after the change, as one line of JSON.
    Index(Bytes),
    /// Delete.
    Delete,
}

/// One change to send, as the caller computed it from an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkItem {
    /// Target index.
    pub index: String,
    /// Document id.
    pub id: String,
    /// Custom routing value.
    pub routing: Option<String>,
    /// External version: the change's sequence number; OpenSearch applies a change
    /// only if its version is higher than the document's.
    pub version: i64,
    /// Index or delete.
    pub action: BulkAction,
}

/// An item that cannot be put in a `_bulk` body; sending it would fail the whole request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// External versions are non-negative.
    #[error("document {id:?}: version {version} is negative; external versions start at 0")]
    NegativeVersion {
        /// Document id.
        id: String,
        /// The version given.
        version: i64,
    },
    /// A document must be one line of NDJSON.
    #[error("document {id:?} contains a line break; documents must be compact JSON")]
    LineBreak {
        /// Document id.
        id: String,
    },
}

#[derive(Serialize)]
struct Meta<'a> {
    _index: &'a str,
    _id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    routing: Option<&'a str>,
    version: i64,
    version_type: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum ActionLine<'a> {
    Index(Meta<'a>),
    Delete(Meta<'a>),
}

impl BulkItem {
    /// The action line, without its line break.
    fn action_line(&self) -> Vec<u8> {
        let meta = Meta {
            _index: &self.index,
            _id: &self.id,
            routing: self.routing.as_deref(),
            version: self.version,
            version_type: "external",
        };
        let line = match self.action {
            BulkAction::Index(_) => ActionLine::Index(meta),
            BulkAction::Delete => ActionLine::Delete(meta),
        };
        serde_json::to_vec(&line).expect("serializing strings and numbers cannot fail")
    }

    fn document(&self) -> Option<&Bytes> {
        match &self.action {
            BulkAction::Index(document) => Some(document),
            BulkAction::Delete => None,
        }
    }

    /// Bytes the item takes in a body.
    fn encoded_len(&self) -> usize {
        self.action_line().len() + 1 + self.document().map_or(0, |d| d.len() + 1)
    }
}

/// The `_bulk` body (NDJSON) for `items`, in order.
pub fn encode(items: &[BulkItem]) -> Result<Bytes, EncodeError> {
    let mut body = Vec::with_capacity(
        items
            .iter()
            .map(|i| i.document().map_or(0, Bytes::len) + 128)
            .sum(),
    );
    for item in items {
        if item.version < 0 {
            return Err(EncodeError::NegativeVersion {
                id: item.id.clone(),
                version: item.version,
            });
        }
        body.extend_from_slice(&item.action_line());
        body.push(b'\n');
        if let Some(document) = item.document() {
            if document.contains(&b'\n') {
                return Err(EncodeError::LineBreak {
                    id: item.id.clone(),
                });
            }
            body.extend_from_slice(document);
            body.push(b'\n');
        }
    }
    Ok(body.into())
}

/// Cuts `items` into consecutive runs that each fit in one request. An item larger than
/// `max_bytes` goes alone, for OpenSearch to accept or reject it by itself.
pub fn split(items: &[BulkItem], limits: &BatchLimits) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let len = item.encoded_len();
        if i > start && (i - start == limits.max_documents || bytes + len > limits.max_bytes) {
            batches.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < items.len() {
        batches.push(start..items.len());
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(id: &str, version: i64, doc: &str) -> BulkItem {
        BulkItem {
            index: "orders".into(),
            id: id.into(),
            routing: None,
            version,
            action: BulkAction::Index(Bytes::copy_from_slice(doc.as_bytes())),
        }
    }

    fn delete(id: &str, version: i64) -> BulkItem {
        BulkItem {
            action: BulkAction::Delete,
            ..index(id, version, "")
        }
    }

    #[test]
    fn index_and_delete_lines_carry_external_versions() {
        let mut routed = delete("a\"b", 8);
        routed.routing = Some("eu".into());
        let body = encode(&[index("1", 7, r#"{"id":1,"s":"x\ny"}"#), routed]).unwrap();
        let want = concat!(
            r#"{"index":{"_index":"orders","_id":"1","version":7,"version_type":"external"}}"#,
            "\n",
            r#"{"id":1,"s":"x\ny"}"#,
            "\n",
            r#"{"delete":{"_index":"orders","_id":"a\"b","routing":"eu","version":8,"version_type":"external"}}"#,
            "\n",
        );
        assert_eq!(std::str::from_utf8(&body).unwrap(), want);
        assert!(encode(&[]).unwrap().is_empty());
    }

    #[test]
    fn items_that_would_break_the_request_are_refused() {
        assert_eq!(
            encode(&[index("1", 0, "{}"), delete("2", -1)]).unwrap_err(),
            EncodeError::NegativeVersion {
                id: "2".into(),
                version: -1
            }
        );
        assert_eq!(
            encode(&[index("1", 1, "{\n}")]).unwrap_err(),
            EncodeError::LineBreak { id: "1".into() }
        );
    }

    #[test]
    fn batches_respect_document_and_byte_limits() {
        let items: Vec<_> = (0..10).map(|i| index(&i.to_string(), 1, "{}")).collect();
        let by_count = BatchLimits {
            max_documents: 4,
            max_bytes: 1 << 20,
        };
        assert_eq!(split(&items, &by_count), [0..4, 4..8, 8..10]);

        let one = items[0].encoded_len();
        let by_bytes = BatchLimits {
            max_documents: 100,
            max_bytes: 3 * one,
        };
        assert_eq!(split(&items, &by_bytes), [0..3, 3..6, 6..9, 9..10]);
        // Each batch's body really is within the limit.
        for range in split(&items, &by_bytes) {
            assert!(encode(&items[range]).unwrap().len() <= 3 * one);
        }
        assert!(split(&[], &by_bytes).is_empty());
    }

    #[test]
    fn an_oversized_item_goes_alone() {
        let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(2000));
        let items = [
            index("1", 1, "{}"),
            index("2", 1, &big),
            index("3", 1, "{}"),
            index("4", 1, "{}"),
        ];
        let limits = BatchLimits {
            max_documents: 100,
            max_bytes: 1024,
        };
        assert_eq!(split(&items, &limits), [0..1, 1..2, 2..4]);
    }
}
