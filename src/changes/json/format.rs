//! Scalar formatting for the JSON encoder: integers, floats, decimals,
//! dates and times, UUIDs, base64 and string escaping, written straight into
//! a `Vec<u8>` without allocating.
//! Must not reach: the rest of the crate (Arrow arrays in, bytes out).

use super::LongMode;

const DIGITS2: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes the decimal digits of `n` right-aligned into `buf`; returns the start.
#[inline]
fn digits_u64(mut n: u64, buf: &mut [u8]) -> usize {
    let mut i = buf.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS2[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS2[r..r + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    i
}

fn digits_u128(mut n: u128, buf: &mut [u8; 40]) -> usize {
    const E19: u128 = 10_000_000_000_000_000_000;
    let mut end = buf.len();
    while n > u64::MAX as u128 {
        let low = (n % E19) as u64;
        n /= E19;
        let start = digits_u64(low, &mut buf[end - 19..end]) + end - 19;
        buf[end - 19..start].fill(b'0');
        end -= 19;
    }
    digits_u64(n as u64, &mut buf[..end])
}

/// A small stack buffer: values are assembled here and copied into the
/// output with a single `extend_from_slice`.
struct Buf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    #[inline]
    fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    #[inline]
    fn extend(&mut self, s: &[u8]) {
        self.bytes[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    /// `n` zero-padded to exactly `width` digits (`n < 10^width`, `width <= 20`).
    #[inline]
    fn fixed(&mut self, n: u64, width: usize) {
        let end = self.len + width;
        self.bytes[self.len..end].fill(b'0');
        digits_u64(n, &mut self.bytes[self.len..end]);
        self.len = end;
    }

    #[inline]
    fn zeros(&mut self, n: usize) {
        self.bytes[self.len..self.len + n].fill(b'0');
        self.len += n;
    }

    #[inline]
    fn uint(&mut self, n: u64) {
        let end = self.len + decimal_len(n);
        digits_u64(n, &mut self.bytes[self.len..end]);
        self.len = end;
    }

    /// Appends what the buffer holds: all `N` bytes copied and the rest cut back, since
    /// a copy whose size is known when compiling is a few moves where one of `len` bytes
    /// calls `memmove`, which costs more than copying a number's digits.
    #[inline]
    fn flush(&self, out: &mut Vec<u8>) {
        append_cut(out, &self.bytes, self.len);
    }
}

/// Appends the first `len` bytes of `block` by copying all of it and cutting back
/// (see [`Buf::flush`]).
#[inline(always)]
pub(super) fn append_cut<const N: usize>(out: &mut Vec<u8>, block: &[u8; N], len: usize) {
    let at = out.len();
    out.extend_from_slice(block);
    out.truncate(at + len);
}

/// Decimal digits of `n`.
#[inline]
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

impl<const N: usize> std::fmt::Write for Buf<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.len + s.len() > N {
            return Err(std::fmt::Error);
        }
        self.extend(s.as_bytes());
        Ok(())
    }
}

#[inline]
pub(super) fn write_i64(n: i64, out: &mut Vec<u8>) {
    let mut buf = Buf::<24>::new();
    if n < 0 {
        buf.push(b'-');
    }
    buf.uint(n.unsigned_abs());
    buf.flush(out);
}

#[inline]
pub(super) fn write_long(v: i64, mode: LongMode, out: &mut Vec<u8>) {
    const MAX_EXACT: i64 = 1 << 53;
    if mode == LongMode::Number || (-MAX_EXACT..=MAX_EXACT).contains(&v) {
        return write_i64(v, out);
    }
    let mut buf = Buf::<24>::new();
    buf.push(b'"');
    if v < 0 {
        buf.push(b'-');
    }
    buf.uint(v.unsigned_abs());
    buf.push(b'"');
    buf.flush(out);
}

macro_rules! write_float {
    ($name:ident, $t:ty) => {
        /// Shortest round-trip form; exponent form outside [1e-6, 1e21) like
        /// ECMAScript; non-finite values as strings.
        fn $name(v: $t, out: &mut Vec<u8>) {
            use std::fmt::Write as _;
            let a = v.abs();
            if a < 1e15 && v.fract() == 0.0 && !(v == 0.0 && v.is_sign_negative()) {
                return write_i64(v as i64, out); // exact: same digits as Display
            }
            if !v.is_finite() {
                out.extend_from_slice(match v {
                    v if v.is_nan() => b"\"NaN\"",
                    v if v > 0.0 => b"\"Infinity\"",
                    _ => b"\"-Infinity\"",
                });
                return;
            }
            let mut buf = Buf::<40>::new();
            let written = if a != 0.0 && !(1e-6..1e21).contains(&a) {
                write!(buf, "{v:e}")
            } else {
                write!(buf, "{v}")
            };
            match written {
                Ok(()) => buf.flush(out),
                // Longer than any shortest form; kept for robustness.
                Err(_) => out.extend_from_slice(v.to_string().as_bytes()),
            }
        }
    };
}
write_float!(display_f32, f32);
write_float!(display_f64, f64);

#[inline]
pub(super) fn write_f32(v: f32, out: &mut Vec<u8>) {
    display_f32(v, out);
}

#[inline]
pub(super) fn write_f64(v: f64, out: &mut Vec<u8>) {
    if v == 0.0 {
        // Common in data (amounts, fees); `Display` writes the sign of -0.
        out.extend_from_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    if !short_f64(v, out) {
        display_f64(v, out);
    }
}

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Fast path for doubles in [1e-6, 1e15) whose shortest form has at most 15
/// significant digits (prices, measurements): writes exactly what `Display`
/// writes and returns true, or writes nothing and returns false.
///
/// With `m = round(|v| * 10^k) <= 10^15`, `|v| * 10^k` is within 0.12 of the
/// 15-digit candidate, so `m` is that candidate and it is the only one of
/// its length; `m / 10^k == |v|` (both exact, one correctly rounded division)
/// proves it parses back to `v`. Stripping trailing zeros gives the shortest.
#[inline]
fn short_f64(v: f64, out: &mut Vec<u8>) -> bool {
    let a = v.abs();
    if !(1e-6..1e15).contains(&a) {
        return false;
    }
    // Most values (amounts, counts) have at most two decimals. Any decimal of at most
    // 15 significant digits that parses back to `v` is its shortest form, as above,
    // so when `m / 100` is one (`m <= 10^15`), it is the answer.
    if a < 1e13 {
        let m = (a * 100.0).round();
        if m / 100.0 == a {
            let m = m as u64;
            let (m, k) = match (m % 10, m % 100) {
                (_, 0) => (m / 100, 0),
                (0, _) => (m / 10, 1),
                _ => (m, 2),
            };
            write_scaled(v < 0.0, m, k, out);
            return true;
        }
    }
    // floor(log10 a) or one less; a >= 1e-6 is normal.
    let e2 = ((a.to_bits() >> 52) as i32) - 1023;
    let mut k = (14 - ((e2 * 1233) >> 12)) as usize; // 0..=21
    let mut scaled = a * POW10[k];
    if scaled >= 1e15 {
        k -= 1;
        scaled = a * POW10[k];
    }
    let m = scaled.round();
    if m > 1e15 || m / POW10[k] != a {
        return false;
    }
    let mut m = m as u64;
    while k >= 4 && m.is_multiple_of(10_000) {
        m /= 10_000;
        k -= 4;
    }
    while k > 0 && m.is_multiple_of(10) {
        m /= 10;
        k -= 1;
    }
    write_scaled(v < 0.0, m, k, out);
    true
}

/// Writes `m / 10^k` (`m` without trailing zeros when `k > 0`) in positional notation.
#[inline]
fn write_scaled(negative: bool, m: u64, k: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let start = digits_u64(m, &mut digits);
    let digits = &digits[start..];
    let mut buf = Buf::<40>::new();
    if negative {
        buf.push(b'-');
    }
    if k == 0 {
        buf.extend(digits);
    } else if digits.len() <= k {
        buf.extend(b"0.");
        buf.zeros(k - digits.len());
        buf.extend(digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - k);
        buf.extend(int);
        buf.push(b'.');
        buf.extend(frac);
    }
    buf.flush(out);
}

#[inline]
pub(super) fn write_decimal(v: i128, scale: usize, out: &mut Vec<u8>) {
    const POW10_U64: [u64; 20] = {
        let mut table = [1u64; 20];
        let mut i = 1;
        while i < 20 {
            table[i] = table[i - 1] * 10;
            i += 1;
        }
        table
    };
    let Ok(abs) = u64::try_from(v.unsigned_abs()) else {
        let mut digits = [0u8; 40];
        let start = digits_u128(v.unsigned_abs(), &mut digits);
        return write_decimal_digits(v < 0, &digits[start..], scale, out);
    };
    if scale >= 20 {
        let mut digits = [0u8; 20];
        let start = digits_u64(abs, &mut digits);
        return write_decimal_digits(v < 0, &digits[start..], scale, out);
    }
    // Right to left: closing quote, fraction, point, integer part, sign, quote.
    let mut b = [b'0'; 48];
    b[47] = b'"';
    let mut start = if scale == 0 {
        digits_u64(abs, &mut b[..47])
    } else {
        let (int, frac) = (abs / POW10_U64[scale], abs % POW10_U64[scale]);
        digits_u64(frac, &mut b[47 - scale..47]); // zero-padded on the left
        b[46 - scale] = b'.';
        digits_u64(int, &mut b[..46 - scale])
    };
    if v < 0 {
        start -= 1;
        b[start] = b'-';
    }
    start -= 1;
    b[start] = b'"';
    out.extend_from_slice(&b[start..]);
}

/// The general (slow) form of [`write_decimal`], for any digits and scale.
pub(super) fn write_decimal_digits(negative: bool, digits: &[u8], scale: usize, out: &mut Vec<u8>) {
    out.push(b'"');
    if negative {
        out.push(b'-');
    }
    if scale == 0 {
        out.extend_from_slice(digits);
    } else if digits.len() <= scale {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + scale - digits.len(), b'0');
        out.extend_from_slice(digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(int);
        out.push(b'.');
        out.extend_from_slice(frac);
    }
    out.push(b'"');
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
#[inline]
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[inline(always)]
fn put2(b: &mut [u8], at: usize, n: u32) {
    let r = n as usize * 2;
    b[at..at + 2].copy_from_slice(&DIGITS2[r..r + 2]);
}

/// Fills `YYYY-MM-DD` at `b[at..at + 10]`, or returns false for years
/// outside 0000–9999 (see [`date_slow`]).
#[inline(always)]
fn put_date(b: &mut [u8], at: usize, days: i64) -> bool {
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return false;
    }
    put2(b, at, (year / 100) as u32);
    put2(b, at + 2, (year % 100) as u32);
    put2(b, at + 5, month);
    put2(b, at + 8, day);
    true
}

/// Fills `HH:MM:SS` at `b[at..at + 8]` (`secs < 86400`).
#[inline(always)]
fn put_hms(b: &mut [u8], at: usize, secs: u32) {
    put2(b, at, secs / 3600);
    put2(b, at + 3, secs / 60 % 60);
    put2(b, at + 6, secs % 60);
}

/// Fills 6 digits (`micros < 10^6`).
#[inline(always)]
fn put_micros(b: &mut [u8], at: usize, micros: u32) {
    put2(b, at, micros / 10_000);
    put2(b, at + 2, micros / 100 % 100);
    put2(b, at + 4, micros % 100);
}

/// Fills 9 digits (`nanos < 10^9`).
#[inline(always)]
fn put_nanos(b: &mut [u8], at: usize, nanos: u32) {
    b[at] = b'0' + (nanos / 100_000_000) as u8;
    put2(b, at + 1, nanos / 1_000_000 % 100);
    put_micros(b, at + 3, nanos % 1_000_000);
}

/// `YYYY-MM-DD` for any year, with ISO 8601 expanded years (`+10000`,
/// `-0001`) outside 0000–9999.
fn date_slow<const N: usize>(buf: &mut Buf<N>, days: i64) {
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        buf.fixed(year as u64, 4);
    } else if year > 9999 {
        buf.push(b'+');
        buf.uint(year as u64);
    } else {
        buf.push(b'-');
        match year.unsigned_abs() {
            abs @ 0..10_000 => buf.fixed(abs, 4),
            abs => buf.uint(abs),
        }
    }
    buf.push(b'-');
    buf.fixed(month.into(), 2);
    buf.push(b'-');
    buf.fixed(day.into(), 2);
}

#[inline]
pub(super) fn write_date(days: i64, out: &mut Vec<u8>) {
    let mut b = *b"\"0000-00-00\"";
    if put_date(&mut b, 1, days) {
        return out.extend_from_slice(&b);
    }
    let mut buf = Buf::<32>::new();
    buf.push(b'"');
    date_slow(&mut buf, days);
    buf.push(b'"');
    buf.flush(out);
}

/// `"HH:MM:SS.ffffff"` from a count of `1/per_sec` seconds.
#[inline]
pub(super) fn write_time(v: i64, per_sec: i64, out: &mut Vec<u8>) {
    match per_sec {
        1_000_000 => time::<1_000_000>(v, out),
        _ => time::<1_000_000_000>(v, out),
    }
}

#[inline]
fn time<const PER_SEC: u64>(v: i64, out: &mut Vec<u8>) {
    let abs = v.unsigned_abs();
    let (secs, micros) = (abs / PER_SEC, abs % PER_SEC * 1_000_000 / PER_SEC);
    if v >= 0 && secs < 86_400 {
        let mut b = *b"\"00:00:00.000000\"";
        put_hms(&mut b, 1, secs as u32);
        put_micros(&mut b, 10, micros as u32);
        return out.extend_from_slice(&b);
    }
    // Not a valid Iceberg time: keep the sign and all the hours.
    let mut buf = Buf::<48>::new();
    buf.push(b'"');
    if v < 0 {
        buf.push(b'-');
    }
    match secs / 3600 {
        hours @ 0..100 => buf.fixed(hours, 2),
        hours => buf.uint(hours),
    }
    buf.push(b':');
    buf.fixed(secs / 60 % 60, 2);
    buf.push(b':');
    buf.fixed(secs % 60, 2);
    buf.push(b'.');
    buf.fixed(micros, 6);
    buf.push(b'"');
    buf.flush(out);
}

/// `"YYYY-MM-DDTHH:MM:SS.ffffff[fff][Z]"` from a count of `1/per_sec` seconds.
#[inline]
pub(super) fn write_timestamp(v: i64, per_sec: i64, nanos: bool, zulu: bool, out: &mut Vec<u8>) {
    match per_sec {
        1_000_000 => timestamp::<1_000_000>(v, nanos, zulu, out),
        1_000_000_000 => timestamp::<1_000_000_000>(v, nanos, zulu, out),
        1_000 => timestamp::<1_000>(v, nanos, zulu, out),
        _ => timestamp::<1>(v, nanos, zulu, out),
    }
}

#[inline]
fn timestamp<const PER_SEC: i64>(v: i64, nanos: bool, zulu: bool, out: &mut Vec<u8>) {
    let secs = v.div_euclid(PER_SEC);
    let frac = (v.rem_euclid(PER_SEC) * (1_000_000_000 / PER_SEC)) as u32;
    let (days, time) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    let mut b = *b"\"0000-00-00T00:00:00.000000000Z\"";
    put_hms(&mut b, 12, time);
    let mut len = if nanos {
        put_nanos(&mut b, 21, frac);
        30
    } else {
        put_micros(&mut b, 21, frac / 1000);
        27
    };
    if zulu {
        b[len] = b'Z';
        len += 1;
    }
    b[len] = b'"';
    len += 1;
    if put_date(&mut b, 1, days) {
        return out.extend_from_slice(&b[..len]);
    }
    let mut buf = Buf::<48>::new();
    buf.push(b'"');
    date_slow(&mut buf, days);
    buf.extend(&b[11..len]);
    buf.flush(out);
}

pub(super) fn write_uuid(bytes: &[u8], out: &mut Vec<u8>) {
    let Ok(bytes) = <&[u8; 16]>::try_from(bytes) else {
        return write_base64(bytes, out); // unreachable: bound to FixedSizeBinary(16)
    };
    let mut hex = [0u8; 32];
    for (i, &byte) in bytes.iter().enumerate() {
        hex[2 * i] = HEX[(byte >> 4) as usize];
        hex[2 * i + 1] = HEX[(byte & 0xf) as usize];
    }
    let mut b = *b"\"00000000-0000-0000-0000-000000000000\"";
    b[1..9].copy_from_slice(&hex[..8]);
    b[10..14].copy_from_slice(&hex[8..12]);
    b[15..19].copy_from_slice(&hex[12..16]);
    b[20..24].copy_from_slice(&hex[16..20]);
    b[25..37].copy_from_slice(&hex[20..]);
    out.extend_from_slice(&b);
}

pub(super) fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    out.push(b'"');
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true).expect("base64 length overflows usize");
    out.resize(start + len, 0);
    let written = STANDARD
        .encode_slice(bytes, &mut out[start..])
        .expect("buffer sized by encoded_len");
    out.truncate(start + written);
    out.push(b'"');
}

/// Escape class per byte: 0 = literal, `u` = `\u00XX`, else the short escape.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Writes a JSON string literal with escaping (RFC 8259: `"`, `\`, and
/// control characters below U+0020; everything else, including non-ASCII,
/// is copied as UTF-8).
pub fn write_json_string(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut start, mut i) = (0, 0);
    // Whole 8-byte words are tested at once; only words with something to
    // escape are looked at byte by byte.
    while i + 8 <= bytes.len() {
        if needs_escape(word_at(bytes, i)) {
            escape_bytes(bytes, i, i + 8, &mut start, out);
        }
        i += 8;
    }
    // The tail: test the last 8 bytes (overlapping) if there are that many.
    if i < bytes.len() && (bytes.len() < 8 || needs_escape(word_at(bytes, bytes.len() - 8))) {
        escape_bytes(bytes, i, bytes.len(), &mut start, out);
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[inline(always)]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Escapes the bytes in `from..to` that need it; `start` is the first byte
/// not yet copied to `out`.
#[inline]
fn escape_bytes(bytes: &[u8], from: usize, to: usize, start: &mut usize, out: &mut Vec<u8>) {
    for (offset, &b) in bytes[from..to].iter().enumerate() {
        let escape = ESCAPE[b as usize];
        if escape == 0 {
            continue;
        }
        let i = from + offset;
        out.extend_from_slice(&bytes[*start..i]);
        if escape == b'u' {
            let (high, low) = (HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', high, low]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        *start = i + 1;
    }
}

/// Whether any of the 8 bytes is below 0x20, `"` or `\` (no false negatives).
#[inline(always)]
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let control = below(word, 0x20);
    let quote = below(word ^ (ONES * b'"' as u64), 1);
    let backslash = below(word ^ (ONES * b'\\' as u64), 1);
    control | quote | backslash != 0
}
