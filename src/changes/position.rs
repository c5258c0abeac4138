//! Positions in a table's feed and the opaque cursors that carry them over the API.
//!
//! A position is "after `consumed` events of change set `ordinal`"; the start of the
//! feed is (0, 0). A cursor is `base64url(version | table id | ordinal | consumed)`:
//! versioned so the format can change, and bound to its table so that a cursor of one
//! table is refused by another instead of silently pointing somewhere.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

use crate::ids::TableId;

const VERSION: u8 = 1;
const ENCODED_LEN: usize = 1 + 16 + 8 + 8;

/// Where a consumer stands in one table's feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Ordinal of the change set (1 is the first published; 0 is before all).
    pub ordinal: i64,
    /// Events of that change set already consumed.
    pub consumed: i64,
}

/// Why a cursor was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Not a cursor icefeed issued (bad encoding or length).
    #[error("malformed cursor: {0}")]
    Malformed(&'static str),
    /// Issued by a version of icefeed this one cannot read.
    #[error("unsupported cursor version {0}")]
    UnsupportedVersion(u8),
    /// A valid cursor of a different table.
    #[error("the cursor belongs to table {0}, not to this one")]
    Foreign(TableId),
    /// A valid cursor of a different subscription.
    #[error("the cursor belongs to subscription {0}, not to this one")]
    ForeignSubscription(Uuid),
}

/// The error for a cursor whose first byte is not the expected version: a version of
/// icefeed's (a small number) is unsupported, anything else is not a cursor at all.
pub(crate) fn foreign_version(byte: u8) -> CursorError {
    const MAX_VERSION: u8 = 15;
    if (1..=MAX_VERSION).contains(&byte) {
        CursorError::UnsupportedVersion(byte)
    } else {
        CursorError::Malformed("not a cursor")
    }
}

impl Position {
    /// The start of a feed, before any event.
    pub const START: Position = Position {
        ordinal: 0,
        consumed: 0,
    };

    /// The opaque cursor of this position in `table`'s feed.
    pub fn to_cursor(self, table: TableId) -> String {
        let mut bytes = [0u8; ENCODED_LEN];
        bytes[0] = VERSION;
        bytes[1..17].copy_from_slice(table.0.as_bytes());
        bytes[17..25].copy_from_slice(&self.ordinal.to_be_bytes());
        bytes[25..33].copy_from_slice(&self.consumed.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Decodes a cursor issued for `table`.
    pub fn from_cursor(cursor: &str, table: TableId) -> Result<Self, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor.trim())
            .map_err(|_| CursorError::Malformed("not base64url"))?;
        if bytes.is_empty() {
            return Err(CursorError::Malformed("empty"));
        }
        if bytes[0] != VERSION {
            return Err(foreign_version(bytes[0]));
        }
        if bytes.len() != ENCODED_LEN {
            return Err(CursorError::Malformed("wrong length"));
        }
        let owner = TableId(Uuid::from_slice(&bytes[1..17]).expect("16 bytes"));
        if owner != table {
            return Err(CursorError::Foreign(owner));
        }
        let ordinal = i64::from_be_bytes(bytes[17..25].try_into().expect("8 bytes"));
        let consumed = i64::from_be_bytes(bytes[25..33].try_into().expect("8 bytes"));
        if ordinal < 0 || consumed < 0 {
            return Err(CursorError::Malformed("negative position"));
        }
        Ok(Position { ordinal, consumed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_url_safe() {
        let table = TableId::new();
        for pos in [
            Position::START,
            Position {
                ordinal: 1,
                consumed: 0,
            },
            Position {
                ordinal: 7,
                consumed: 41_000_000,
            },
            Position {
                ordinal: i64::MAX,
                consumed: i64::MAX,
            },
        ] {
            let cursor = pos.to_cursor(table);
            assert!(
                cursor
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            );
            assert_eq!(Position::from_cursor(&cursor, table), Ok(pos));
        }
    }

    #[test]
    fn foreign_and_malformed_cursors_are_refused() {
        let (a, b) = (TableId::new(), TableId::new());
        let cursor = Position {
            ordinal: 3,
            consumed: 1,
        }
        .to_cursor(a);
        assert_eq!(
            Position::from_cursor(&cursor, b),
            Err(CursorError::Foreign(a))
        );
        assert!(matches!(
            Position::from_cursor("!!", a),
            Err(CursorError::Malformed(_))
        ));
        assert!(matches!(
            Position::from_cursor("", a),
            Err(CursorError::Malformed(_))
        ));
        assert!(matches!(
            Position::from_cursor(&cursor[..20], a),
            Err(CursorError::Malformed(_))
        ));
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        bytes[0] = 9;
        assert_eq!(
            Position::from_cursor(&URL_SAFE_NO_PAD.encode(bytes), a),
            Err(CursorError::UnsupportedVersion(9))
        );
    }

    #[test]
    fn positions_order_by_change_set_then_event() {
        let p = |ordinal, consumed| Position { ordinal, consumed };
        assert!(p(1, 5) < p(2, 0));
        assert!(p(2, 0) < p(2, 1));
    }
}
