//! Cursors of subscription feeds: one position per table of the subscription.
//!
//! `base64url(version | subscription id | table count | (ordinal, consumed) per table)`,
//! bound to its subscription like table cursors are bound to their table.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

use super::Position;
use super::position::{CursorError, foreign_version};

const VERSION: u8 = 2;
const HEADER_LEN: usize = 1 + 16 + 2;
const SLOT_LEN: usize = 16;

/// Encodes the positions (one per table slot) of subscription `id`.
pub fn encode(id: Uuid, positions: &[Position]) -> String {
    let mut bytes = Vec::with_capacity(HEADER_LEN + SLOT_LEN * positions.len());
    bytes.push(VERSION);
    bytes.extend_from_slice(id.as_bytes());
    bytes.extend_from_slice(&(positions.len() as u16).to_be_bytes());
    for p in positions {
        bytes.extend_from_slice(&p.ordinal.to_be_bytes());
        bytes.extend_from_slice(&p.consumed.to_be_bytes());
    }
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes a cursor of subscription `id` with `slots` tables.
pub fn decode(cursor: &str, id: Uuid, slots: usize) -> Result<Vec<Position>, CursorError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| CursorError::Malformed("not base64url"))?;
    match bytes.first() {
        None => return Err(CursorError::Malformed("empty")),
        Some(&VERSION) => {}
        Some(1) => {
            return Err(CursorError::Malformed(
                "a table cursor, not a subscription cursor",
            ));
        }
        Some(&v) => return Err(foreign_version(v)),
    }
    if bytes.len() < HEADER_LEN {
        return Err(CursorError::Malformed("wrong length"));
    }
    let owner = Uuid::from_slice(&bytes[1..17]).expect("16 bytes");
    if owner != id {
        return Err(CursorError::ForeignSubscription(owner));
    }
    let n = u16::from_be_bytes([bytes[17], bytes[18]]) as usize;
    if n != slots || bytes.len() != HEADER_LEN + SLOT_LEN * n {
        return Err(CursorError::Malformed("wrong length"));
    }
    bytes[HEADER_LEN..]
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
}
