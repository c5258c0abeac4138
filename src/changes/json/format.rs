//! Scalar formatting for the JSON encoder: integers, floats, decimals,
//! dates and times, UUIDs, base64 and string escaping, written straight into
//! a `Vec<u8>` without allocating.

use std::io::Write as _;

use super::LongMode;

const DIGITS2: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes the decimal digits of `n` right-aligned into `buf`; returns the start.
#[inline]
pub(super) fn digits_u64(mut n: u64, buf: &mut [u8]) -> usize {
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

pub(super) fn digits_u128(mut n: u128, buf: &mut [u8; 40]) -> usize {
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

#[inline]
pub(super) fn write_u64(n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let start = digits_u64(n, &mut buf);
    out.extend_from_slice(&buf[start..]);
}

#[inline]
pub(super) fn write_i64(n: i64, out: &mut Vec<u8>) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(n.unsigned_abs(), out);
}

#[inline]
pub(super) fn write_long(v: i64, mode: LongMode, out: &mut Vec<u8>) {
    const MAX_EXACT: i64 = 1 << 53;
    if mode == LongMode::Number || (-MAX_EXACT..=MAX_EXACT).contains(&v) {
        write_i64(v, out);
    } else {
        out.push(b'"');
        write_i64(v, out);
        out.push(b'"');
    }
}

macro_rules! write_float {
    ($name:ident, $t:ty) => {
        /// Shortest round-trip form; exponent form outside [1e-6, 1e21) like
        /// ECMAScript; non-finite values as strings.
        pub(super) fn $name(v: $t, out: &mut Vec<u8>) {
            if v.is_finite() {
                let a = v.abs();
                // Writing to a Vec cannot fail.
                let _ = if a != 0.0 && !(1e-6..1e21).contains(&a) {
                    write!(out, "{v:e}")
                } else {
                    write!(out, "{v}")
                };
            } else if v.is_nan() {
                out.extend_from_slice(b"\"NaN\"");
            } else if v > 0.0 {
                out.extend_from_slice(b"\"Infinity\"");
            } else {
                out.extend_from_slice(b"\"-Infinity\"");
            }
        }
    };
}
write_float!(write_f32, f32);
write_float!(write_f64, f64);

pub(super) fn write_decimal(v: i128, scale: usize, out: &mut Vec<u8>) {
    let mut buf = [0u8; 40];
    let start = digits_u128(v.unsigned_abs(), &mut buf);
    write_decimal_digits(v < 0, &buf[start..], scale, out);
}

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

#[inline]
pub(super) fn push2(out: &mut Vec<u8>, n: u32) {
    let r = n as usize * 2;
    out.extend_from_slice(&DIGITS2[r..r + 2]);
}

/// Writes `n` zero-padded to exactly `width` digits (`n < 10^width`).
#[inline]
pub(super) fn push_fixed(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    digits_u64(n, &mut buf[20 - width..]);
    out.extend_from_slice(&buf[20 - width..]);
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
#[inline]
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

pub(super) fn write_date(days: i64, out: &mut Vec<u8>) {
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        push2(out, (year / 100) as u32);
        push2(out, (year % 100) as u32);
    } else if year > 9999 {
        out.push(b'+');
        write_u64(year as u64, out);
    } else {
        out.push(b'-');
        let abs = year.unsigned_abs();
        if abs < 10_000 {
            push_fixed(out, abs, 4);
        } else {
            write_u64(abs, out);
        }
    }
    out.push(b'-');
    push2(out, month);
    out.push(b'-');
    push2(out, day);
}

#[inline]
pub(super) fn write_hms(secs: u32, out: &mut Vec<u8>) {
    push2(out, secs / 3600);
    out.push(b':');
    push2(out, secs / 60 % 60);
    out.push(b':');
    push2(out, secs % 60);
}

/// `"HH:MM:SS.ffffff"`; out-of-range values (not valid Iceberg times) keep
/// their sign and write all hours rather than wrapping.
pub(super) fn write_time(v: i64, per_sec: i64, out: &mut Vec<u8>) {
    let per_sec = per_sec as u64;
    let abs = v.unsigned_abs();
    let (secs, micros) = (abs / per_sec, abs % per_sec * 1_000_000 / per_sec);
    out.push(b'"');
    if v < 0 {
        out.push(b'-');
    }
    if secs < 86_400 {
        write_hms(secs as u32, out);
    } else {
        write_u64(secs / 3600, out);
        out.push(b':');
        push2(out, (secs / 60 % 60) as u32);
        out.push(b':');
        push2(out, (secs % 60) as u32);
    }
    out.push(b'.');
    push_fixed(out, micros, 6);
    out.push(b'"');
}

#[inline]
pub(super) fn write_timestamp(v: i64, per_sec: i64, nanos: bool, zulu: bool, out: &mut Vec<u8>) {
    let secs = v.div_euclid(per_sec);
    let frac_nanos = v.rem_euclid(per_sec) as u64 * (1_000_000_000 / per_sec) as u64;
    out.push(b'"');
    write_date(secs.div_euclid(86_400), out);
    out.push(b'T');
    write_hms(secs.rem_euclid(86_400) as u32, out);
    out.push(b'.');
    if nanos {
        push_fixed(out, frac_nanos, 9);
    } else {
        push_fixed(out, frac_nanos / 1000, 6);
    }
    if zulu {
        out.extend_from_slice(b"Z\"");
    } else {
        out.push(b'"');
    }
}

pub(super) fn write_uuid(bytes: &[u8], out: &mut Vec<u8>) {
    let mut buf = [b'-'; 38];
    buf[0] = b'"';
    buf[37] = b'"';
    let mut at = 1;
    for (i, &b) in bytes.iter().take(16).enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        buf[at] = HEX[(b >> 4) as usize];
        buf[at + 1] = HEX[(b & 0xf) as usize];
        at += 2;
    }
    out.extend_from_slice(&buf);
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
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPE[b as usize];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}
