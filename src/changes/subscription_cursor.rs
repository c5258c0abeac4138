//! Cursors of subscription feeds: one position per table of the subscription.
//! Must not reach: `store`.
//!
//! `base64url(version | subscription id | table count | (ordinal, consumed) per table)`,
//! bound to its subscription like table cursors are bound to their table. A cursor into
//! the net changes of one of its tables ([`NetAt`]) is of its own version and appends
//! the table's slot, the range and the events of it consumed; its positions are what
//! acknowledging it commits (the ends of the ranges read through, the starts of the
//! others).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

use super::Position;
use super::position::{CursorError, foreign_version};

const VERSION: u8 = 2;
/// The version of cursors into the net changes of one of the subscription's tables.
const NET_VERSION: u8 = 4;
const HEADER_LEN: usize = 1 + 16 + 2;
const SLOT_LEN: usize = 16;
const NET_LEN: usize = 2 + 8 + 8;

/// Where a subscription's net read stands: in the range `range` of the table in slot
/// `slot`, after `consumed` of its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetAt {
    pub slot: usize,
    pub range: i64,
    pub consumed: i64,
}

/// Encodes the positions (one per table slot) of subscription `id`.
pub fn encode(id: Uuid, positions: &[Position]) -> String {
    URL_SAFE_NO_PAD.encode(header(VERSION, id, positions))
}

/// Encodes the positions of subscription `id` and where its net read stands.
pub fn encode_net(id: Uuid, positions: &[Position], at: NetAt) -> String {
    let mut bytes = header(NET_VERSION, id, positions);
    bytes.extend_from_slice(&(at.slot as u16).to_be_bytes());
    bytes.extend_from_slice(&at.range.to_be_bytes());
    bytes.extend_from_slice(&at.consumed.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

fn header(version: u8, id: Uuid, positions: &[Position]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + SLOT_LEN * positions.len() + NET_LEN);
    bytes.push(version);
    bytes.extend_from_slice(id.as_bytes());
    bytes.extend_from_slice(&(positions.len() as u16).to_be_bytes());
    for p in positions {
        bytes.extend_from_slice(&p.ordinal.to_be_bytes());
        bytes.extend_from_slice(&p.consumed.to_be_bytes());
    }
    bytes
}

/// Whether `cursor` is a subscription's cursor into net changes: it says so first.
pub fn is_net(cursor: &str) -> bool {
    let head: String = cursor.trim().chars().take(4).collect();
    URL_SAFE_NO_PAD
        .decode(head)
        .is_ok_and(|bytes| bytes.first() == Some(&NET_VERSION))
}

/// Decodes a cursor of subscription `id` with `slots` tables: the positions it commits.
pub fn decode(cursor: &str, id: Uuid, slots: usize) -> Result<Vec<Position>, CursorError> {
    Ok(decode_net(cursor, id, slots)?.0)
}

/// Decodes a cursor of subscription `id` with `slots` tables: its positions, and where
/// its net read stands if it is a cursor into net changes.
pub fn decode_net(
    cursor: &str,
    id: Uuid,
    slots: usize,
) -> Result<(Vec<Position>, Option<NetAt>), CursorError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| CursorError::Malformed("not base64url"))?;
    let net = match bytes.first() {
        None => return Err(CursorError::Malformed("empty")),
        Some(&VERSION) => false,
        Some(&NET_VERSION) => true,
        Some(1 | 3) => {
            return Err(CursorError::Malformed(
                "a table cursor, not a subscription cursor",
            ));
        }
        Some(&v) => return Err(foreign_version(v)),
    };
    if bytes.len() < HEADER_LEN {
        return Err(CursorError::Malformed("wrong length"));
    }
    let owner = Uuid::from_slice(&bytes[1..17]).expect("16 bytes");
    if owner != id {
        return Err(CursorError::ForeignSubscription(owner));
    }
    let n = u16::from_be_bytes([bytes[17], bytes[18]]) as usize;
    let trailer = if net { NET_LEN } else { 0 };
    if n != slots || bytes.len() != HEADER_LEN + SLOT_LEN * n + trailer {
        return Err(CursorError::Malformed("wrong length"));
    }
    let end = HEADER_LEN + SLOT_LEN * n;
    let at = if net {
        let t = &bytes[end..];
        let at = NetAt {
            slot: u16::from_be_bytes([t[0], t[1]]) as usize,
            range: i64::from_be_bytes(t[2..10].try_into().expect("8 bytes")),
            consumed: i64::from_be_bytes(t[10..18].try_into().expect("8 bytes")),
        };
        if at.slot >= n || at.range < 0 || at.consumed < 0 {
            return Err(CursorError::Malformed("no such position"));
        }
        Some(at)
    } else {
        None
    };
    let positions = decode_positions(&bytes[HEADER_LEN..end])?;
    Ok((positions, at))
}

fn decode_positions(bytes: &[u8]) -> Result<Vec<Position>, CursorError> {
    bytes
        .chunks_exact(SLOT_LEN)
        .map(|slot| {
            let ordinal = i64::from_be_bytes(slot[..8].try_into().expect("8 bytes"));
            let consumed = i64::from_be_bytes(slot[8..].try_into().expect("8 bytes"));
            if ordinal < 0 || consumed < 0 {
                return Err(CursorError::Malformed("negative position"));
            }
            Ok(Position { ordinal, consumed })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_bound_to_their_subscription() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let positions = vec![
            Position::START,
            Position {
                ordinal: 9,
                consumed: 41_000_000,
            },
        ];
        let cursor = encode(a, &positions);
        assert!(
            cursor
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_eq!(decode(&cursor, a, 2), Ok(positions));
        assert_eq!(
            decode(&cursor, b, 2),
            Err(CursorError::ForeignSubscription(a))
        );
        assert!(matches!(
            decode(&cursor, a, 1),
            Err(CursorError::Malformed(_))
        ));
        assert!(matches!(decode("", a, 1), Err(CursorError::Malformed(_))));
        let table_cursor = Position::START.to_cursor(crate::ids::TableId(a));
        assert!(matches!(
            decode(&table_cursor, a, 1),
            Err(CursorError::Malformed(_))
        ));
    }

    #[test]
    fn net_cursors_carry_their_range_and_commit_their_positions() {
        let id = Uuid::now_v7();
        let positions = vec![
            Position {
                ordinal: 4,
                consumed: 2,
            },
            Position::START,
        ];
        let at = NetAt {
            slot: 1,
            range: 77,
            consumed: 5,
        };
        let cursor = encode_net(id, &positions, at);
        assert_eq!(
            decode_net(&cursor, id, 2),
            Ok((positions.clone(), Some(at)))
        );
        assert_eq!(decode(&cursor, id, 2), Ok(positions.clone()));
        assert!(is_net(&cursor));
        assert!(!is_net(&encode(id, &positions)));
        assert_eq!(
            decode_net(&encode(id, &positions), id, 2),
            Ok((positions.clone(), None))
        );
        let beyond = encode_net(id, &positions, NetAt { slot: 2, ..at });
        assert!(matches!(
            decode_net(&beyond, id, 2),
            Err(CursorError::Malformed(_))
        ));
        let table = crate::ids::TableId(id);
        let net_table_cursor = crate::changes::NetPosition {
            range: 1,
            consumed: 0,
        }
        .to_cursor(table);
        assert!(matches!(
            decode(&net_table_cursor, id, 1),
            Err(CursorError::Malformed(_))
        ));
    }
}
