//! Decoding a deletion vector: a Puffin `deletion-vector-v1` blob (Iceberg spec,
//! "Deletion Vectors"): a big-endian length of what follows up to the checksum, the
//! magic `D1 D3 39 64`, a portable 64-bit Roaring bitmap (a little-endian count of
//! 32-bit bitmaps, each after its key; keys strictly increasing), and a big-endian
//! CRC-32 of the magic and the bitmap. Every field is checked: a malformed vector must
//! stop the table, never delete the wrong rows.
//! Must not reach: the rest of the crate (bytes in, positions out).

use roaring::{RoaringBitmap, RoaringTreemap};

const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// Why a blob is not a valid deletion vector.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    #[error("the blob is {0} bytes, too short for a deletion vector")]
    Short(usize),
    #[error("its length field says {field} bytes but the blob holds {actual}")]
    Length { field: u64, actual: usize },
    #[error("its magic is {0:02X?}, not D1 D3 39 64")]
    Magic([u8; 4]),
    #[error("its CRC-32 is {stored:08x} but its content hashes to {computed:08x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("its bitmap is malformed: {0}")]
    Bitmap(String),
    #[error("its bitmap keys are not strictly increasing ({previous} then {key})")]
    KeyOrder { previous: u32, key: u32 },
    #[error("it holds {actual} positions but its manifest entry says {expected}")]
    Cardinality { expected: u64, actual: u64 },
}

/// The positions of a deletion vector blob that should hold `cardinality` of them.
pub fn decode(blob: &[u8], cardinality: u64) -> Result<RoaringTreemap, VectorError> {
    if blob.len() < 12 {
        return Err(VectorError::Short(blob.len()));
    }
    let field = u32::from_be_bytes(blob[..4].try_into().expect("4 bytes")) as u64;
    if field + 8 != blob.len() as u64 {
        return Err(VectorError::Length {
            field,
            actual: blob.len(),
        });
    }
    let (content, crc) = blob[4..].split_at(blob.len() - 8);
    let magic: [u8; 4] = content[..4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(VectorError::Magic(magic));
    }
    let stored = u32::from_be_bytes(crc.try_into().expect("4 bytes"));
    let computed = crc32fast::hash(content);
    if stored != computed {
        return Err(VectorError::Checksum { stored, computed });
    }
    let positions = portable_treemap(&content[4..])?;
    if positions.len() != cardinality {
        return Err(VectorError::Cardinality {
            expected: cardinality,
            actual: positions.len(),
        });
    }
    Ok(positions)
}

/// Reads the portable 64-bit Roaring format, checking the key order the spec requires
/// (the roaring crate's reader would merge repeated keys silently).
fn portable_treemap(mut bytes: &[u8]) -> Result<RoaringTreemap, VectorError> {
    let bad = |e: std::io::Error| VectorError::Bitmap(e.to_string());
    let mut count = [0u8; 8];
    std::io::Read::read_exact(&mut bytes, &mut count).map_err(bad)?;
    let mut bitmaps = Vec::new();
    let mut previous: Option<u32> = None;
    for _ in 0..u64::from_le_bytes(count) {
        let mut key = [0u8; 4];
        std::io::Read::read_exact(&mut bytes, &mut key).map_err(bad)?;
        let key = u32::from_le_bytes(key);
        if let Some(previous) = previous.filter(|&p| p >= key) {
            return Err(VectorError::KeyOrder { previous, key });
        }
        previous = Some(key);
        bitmaps.push((
            key,
            RoaringBitmap::deserialize_from(&mut bytes).map_err(bad)?,
        ));
    }
    if !bytes.is_empty() {
        return Err(VectorError::Bitmap(format!(
            "{} bytes follow its last bitmap",
            bytes.len()
        )));
    }
    Ok(RoaringTreemap::from_bitmaps(bitmaps))
}

/// Encodes positions as a deletion vector blob.
#[cfg(test)]
pub fn encode(positions: &RoaringTreemap) -> Vec<u8> {
    let mut content = MAGIC.to_vec();
    positions
        .serialize_into(&mut content)
        .expect("writing to memory");
    let mut blob = ((content.len()) as u32).to_be_bytes().to_vec();
    blob.extend_from_slice(&content);
    blob.extend_from_slice(&crc32fast::hash(&content).to_be_bytes());
    blob
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(values: &[u64]) -> RoaringTreemap {
        values.iter().copied().collect()
    }

    #[test]
    fn a_vector_round_trips_including_positions_past_four_billion() {
        let expected = positions(&[0, 1, 7, 65_536, 1 << 32, (1 << 32) + 5]);
        let blob = encode(&expected);
        assert_eq!(decode(&blob, 6).unwrap(), expected);
    }

    #[test]
    fn a_vector_with_a_wrong_cardinality_is_refused() {
        let blob = encode(&positions(&[1, 2, 3]));
        assert_eq!(
            decode(&blob, 2),
            Err(VectorError::Cardinality {
                expected: 2,
                actual: 3
            })
        );
    }

    #[test]
    fn a_corrupt_vector_is_refused() {
        let blob = encode(&positions(&[1, 2, 3]));
        let mut flipped = blob.clone();
        let last_content = flipped.len() - 5;
        flipped[last_content] ^= 0xFF;
        assert!(matches!(
            decode(&flipped, 3),
            Err(VectorError::Checksum { .. })
        ));

        let mut magic = blob.clone();
        magic[4] = 0;
        assert!(matches!(decode(&magic, 3), Err(VectorError::Magic(_))));

        assert!(matches!(
            decode(&blob[..blob.len() - 1], 3),
            Err(VectorError::Length { .. })
        ));
        assert_eq!(decode(&blob[..6], 3), Err(VectorError::Short(6)));
    }

    #[test]
    fn keys_out_of_order_are_refused() {
        // Two bitmaps, keys 1 then 0 (the roaring crate would accept and merge them).
        let mut vector = 2u64.to_le_bytes().to_vec();
        for key in [1u32, 0] {
            vector.extend_from_slice(&key.to_le_bytes());
            RoaringBitmap::from_iter([3u32])
                .serialize_into(&mut vector)
                .unwrap();
        }
        let mut content = MAGIC.to_vec();
        content.extend_from_slice(&vector);
        let mut blob = (content.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&content);
        blob.extend_from_slice(&crc32fast::hash(&content).to_be_bytes());
        assert_eq!(
            decode(&blob, 2),
            Err(VectorError::KeyOrder {
                previous: 1,
                key: 0
            })
        );
    }
}
