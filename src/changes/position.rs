//! Positions in a table's feed and the opaque cursors that carry them over the API.
//! Must not reach: `store`.
//!
//! A position is "after `consumed` events of change set `ordinal`"; the start of the
//! feed is (0, 0). A cursor is `base64url(version | table id | ordinal | consumed)`:
//! versioned so the format can change, and bound to its table so that a cursor of one
//! table is refused by another instead of silently pointing somewhere. A position in
//! the net changes of a range ([`NetPosition`]) is a cursor of its own version, with the
//! range's id in place of the ordinal.

use std::cell::Cell;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

use crate::ids::TableId;

const VERSION: u8 = 1;
/// The version of cursors into the net changes of a range (2 is subscriptions').
const NET_VERSION: u8 = 3;
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

/// Where a consumer stands in the net changes of one range of a table's feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetPosition {
    /// The range's id.
    pub range: i64,
    /// Events of its net changes already consumed.
    pub consumed: i64,
}

/// A cursor of either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cursor {
    Feed(Position),
    Net(NetPosition),
}

impl Cursor {
    /// Decodes a cursor issued for `table`, of either kind.
    pub fn parse(cursor: &str, table: TableId) -> Result<Self, CursorError> {
        let (version, a, b) = decode(cursor, table, &[VERSION, NET_VERSION])?;
        Ok(if version == NET_VERSION {
            Cursor::Net(NetPosition {
                range: a,
                consumed: b,
            })
        } else {
            Cursor::Feed(Position {
                ordinal: a,
                consumed: b,
            })
        })
    }
}

impl NetPosition {
    /// Whether `cursor` is one into net changes (of any table): it says so first.
    pub fn is_net_cursor(cursor: &str) -> bool {
        let head: String = cursor.trim().chars().take(4).collect();
        URL_SAFE_NO_PAD
            .decode(head)
            .is_ok_and(|bytes| bytes.first() == Some(&NET_VERSION))
    }

    /// The opaque cursor of this position of `table`'s range.
    pub fn to_cursor(self, table: TableId) -> String {
        encode(NET_VERSION, table, self.range, self.consumed)
    }

    /// Appends [`Self::to_cursor`] to `out`.
    pub fn write_cursor(self, table: TableId, out: &mut Vec<u8>) {
        write_encoded(NET_VERSION, table, self.range, self.consumed, out);
    }
}

/// Characters of an encoded cursor.
pub const CURSOR_LEN: usize = ENCODED_LEN.div_ceil(3) * 4;

fn encode(version: u8, table: TableId, a: i64, b: i64) -> String {
    let mut out = Vec::with_capacity(CURSOR_LEN);
    write_encoded(version, table, a, b, &mut out);
    String::from_utf8(out).expect("base64 is ASCII")
}

/// Bytes of a cursor that the events of one change set share: the version, the table
/// and all but the last byte of the first number, whole groups of base64's 3 bytes.
const SHARED_LEN: usize = 24;

thread_local! {
    /// The last shared bytes a thread encoded, and their text.
    static SHARED: Cell<Option<([u8; SHARED_LEN], [u8; SHARED_LEN / 3 * 4])>> =
        const { Cell::new(None) };
}

/// Appends a cursor to `out` without allocating: pages write one per event, and the
/// events of a page mostly share their first [`SHARED_LEN`] bytes, encoded once.
fn write_encoded(version: u8, table: TableId, a: i64, b: i64, out: &mut Vec<u8>) {
    let mut bytes = [0u8; ENCODED_LEN];
    bytes[0] = version;
    bytes[1..17].copy_from_slice(table.0.as_bytes());
    bytes[17..25].copy_from_slice(&a.to_be_bytes());
    bytes[25..33].copy_from_slice(&b.to_be_bytes());
    let (shared, rest) = bytes.split_at(SHARED_LEN);
    let text = match SHARED.get() {
        Some((last, text)) if last == shared => text,
        _ => {
            let mut text = [0u8; SHARED_LEN / 3 * 4];
            URL_SAFE_NO_PAD
                .encode_slice(shared, &mut text)
                .expect("room for a cursor's start");
            SHARED.set(Some((shared.try_into().expect("SHARED_LEN bytes"), text)));
            text
        }
    };
    out.extend_from_slice(&text);
    let mut tail = [0u8; CURSOR_LEN - SHARED_LEN / 3 * 4];
    let len = URL_SAFE_NO_PAD
        .encode_slice(rest, &mut tail)
        .expect("room for a cursor's end");
    out.extend_from_slice(&tail[..len]);
}

/// The version and the two numbers of a cursor of `table` of one of `versions`.
fn decode(cursor: &str, table: TableId, versions: &[u8]) -> Result<(u8, i64, i64), CursorError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| CursorError::Malformed("not base64url"))?;
    if bytes.is_empty() {
        return Err(CursorError::Malformed("empty"));
    }
    if !versions.contains(&bytes[0]) {
        return Err(foreign_version(bytes[0]));
    }
    if bytes.len() != ENCODED_LEN {
        return Err(CursorError::Malformed("wrong length"));
    }
    let owner = TableId(Uuid::from_slice(&bytes[1..17]).expect("16 bytes"));
    if owner != table {
        return Err(CursorError::Foreign(owner));
    }
    let a = i64::from_be_bytes(bytes[17..25].try_into().expect("8 bytes"));
    let b = i64::from_be_bytes(bytes[25..33].try_into().expect("8 bytes"));
    if a < 0 || b < 0 {
        return Err(CursorError::Malformed("negative position"));
    }
    Ok((bytes[0], a, b))
}

impl Position {
    /// The start of a feed, before any event.
    pub const START: Position = Position {
        ordinal: 0,
        consumed: 0,
    };

    /// The opaque cursor of this position in `table`'s feed.
    pub fn to_cursor(self, table: TableId) -> String {
        encode(VERSION, table, self.ordinal, self.consumed)
    }

    /// Appends [`Self::to_cursor`] to `out`.
    pub fn write_cursor(self, table: TableId, out: &mut Vec<u8>) {
        write_encoded(VERSION, table, self.ordinal, self.consumed, out);
    }

    /// Decodes a cursor issued for `table`.
    pub fn from_cursor(cursor: &str, table: TableId) -> Result<Self, CursorError> {
        let (_, ordinal, consumed) = decode(cursor, table, &[VERSION])?;
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
            assert_eq!(cursor.len(), CURSOR_LEN);
            let mut out = b"id: ".to_vec();
            pos.write_cursor(table, &mut out);
            assert_eq!(out, [b"id: ", cursor.as_bytes()].concat());
        }
    }

    #[test]
    fn cursors_written_one_after_another_are_each_whole() {
        let (a, b) = (TableId::new(), TableId::new());
        let whole = |table: TableId, ordinal: i64, consumed: i64| {
            let mut bytes = vec![VERSION];
            bytes.extend_from_slice(table.0.as_bytes());
            bytes.extend_from_slice(&ordinal.to_be_bytes());
            bytes.extend_from_slice(&consumed.to_be_bytes());
            URL_SAFE_NO_PAD.encode(bytes)
        };
        // The shared start changes with the table and with all but the last byte of
        // the ordinal; the last byte is written with the consumed events.
        for (table, ordinal, consumed) in [
            (a, 1, 0),
            (a, 1, 1),
            (a, 256, 1),
            (a, 257, 1),
            (b, 257, 1),
            (a, 1, i64::MAX),
        ] {
            let mut out = b"x".to_vec();
            Position { ordinal, consumed }.write_cursor(table, &mut out);
            assert_eq!(out[1..], *whole(table, ordinal, consumed).as_bytes());
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
    fn net_cursors_round_trip_and_are_told_apart_from_feed_cursors() {
        let table = TableId::new();
        let net = NetPosition {
            range: 12,
            consumed: 3,
        };
        let cursor = net.to_cursor(table);
        assert_eq!(Cursor::parse(&cursor, table), Ok(Cursor::Net(net)));
        assert!(NetPosition::is_net_cursor(&cursor));
        assert!(!NetPosition::is_net_cursor(
            &Position::START.to_cursor(table)
        ));
        assert!(!NetPosition::is_net_cursor("!"));
        // Where only a feed cursor will do, a net cursor is a version of its own.
        assert_eq!(
            Position::from_cursor(&cursor, table),
            Err(CursorError::UnsupportedVersion(3))
        );
        let feed = Position {
            ordinal: 12,
            consumed: 3,
        };
        assert_eq!(
            Cursor::parse(&feed.to_cursor(table), table),
            Ok(Cursor::Feed(feed))
        );
        assert_eq!(
            Cursor::parse(&cursor, TableId::new()),
            Err(CursorError::Foreign(table))
        );
    }

    #[test]
    fn positions_order_by_change_set_then_event() {
        let p = |ordinal, consumed| Position { ordinal, consumed };
        assert!(p(1, 5) < p(2, 0));
        assert!(p(2, 0) < p(2, 1));
    }
}
