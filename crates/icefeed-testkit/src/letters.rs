//! Text that no codec compresses much, for tables of wide rows (documents, blobs).
//! Must not reach: [`crate::writer`] (text only, written by whoever uses it).

/// `bytes` lowercase letters of a xorshift64 sequence seeded by `seed` (through splitmix64,
/// so that neighbouring seeds give unrelated text).
pub fn letters(seed: u64, bytes: usize) -> String {
    let mut state = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    state = (state ^ (state >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    state = (state ^ (state >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    state = (state ^ (state >> 31)) | 1;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}
