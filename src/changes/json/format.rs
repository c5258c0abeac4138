//! Scalar formatting for the JSON encoder: integers, floats, decimals,
//! dates and times, UUIDs, base64 and string escaping, written straight into
//! a `Vec<u8>` without allocating.

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

/// A small stack buffer: values are assembled here and copied into the
/// output with a single `extend_from_slice`.
pub(super) struct Buf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    #[inline]
    pub(super) fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
        }
    }

    #[inline]
    pub(super) fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    #[inline]
    pub(super) fn extend(&mut self, s: &[u8]) {
        self.bytes[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    #[inline]
    fn push2(&mut self, n: u32) {
        let r = n as usize * 2;
        self.extend(&DIGITS2[r..r + 2]);
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
        let mut digits = [0u8; 20];
        let start = digits_u64(n, &mut digits);
        self.extend(&digits[start..]);
    }

    #[inline]
    fn int(&mut self, n: i64) {
        if n < 0 {
            self.push(b'-');
        }
        self.uint(n.unsigned_abs());
    }

    #[inline]
    pub(super) fn flush(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes[..self.len]);
    }
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
    buf.int(n);
    buf.flush(out);
}

#[inline]
pub(super) fn write_long(v: i64, mode: LongMode, out: &mut Vec<u8>) {
    const MAX_EXACT: i64 = 1 << 53;
    let mut buf = Buf::<24>::new();
    if mode == LongMode::Number || (-MAX_EXACT..=MAX_EXACT).contains(&v) {
        buf.int(v);
    } else {
        buf.push(b'"');
        buf.int(v);
        buf.push(b'"');
    }
    buf.flush(out);
}

macro_rules! write_float {
    ($name:ident, $t:ty) => {
        /// Shortest round-trip form; exponent form outside [1e-6, 1e21) like
        /// ECMAScript; non-finite values as strings.
        #[inline]
        pub(super) fn $name(v: $t, out: &mut Vec<u8>) {
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
write_float!(write_f32, f32);
write_float!(write_f64, f64);

#[inline]
pub(super) fn write_decimal(v: i128, scale: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 40];
    let start = if let Ok(small) = u64::try_from(v.unsigned_abs()) {
        digits_u64(small, &mut digits)
    } else {
        digits_u128(v.unsigned_abs(), &mut digits)
    };
    let digits = &digits[start..];
    if scale > 64 {
        return write_decimal_digits(v < 0, digits, scale, out);
    }
    // At most 2 quotes, a sign, "0." and 64 digits.
    let mut buf = Buf::<72>::new();
    buf.push(b'"');
    if v < 0 {
        buf.push(b'-');
    }
    if scale == 0 {
        buf.extend(digits);
    } else if digits.len() <= scale {
        buf.extend(b"0.");
        buf.zeros(scale - digits.len());
        buf.extend(digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        buf.extend(int);
        buf.push(b'.');
        buf.extend(frac);
    }
    buf.push(b'"');
    buf.flush(out);
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

/// `YYYY-MM-DD`, with ISO 8601 expanded years (`+10000`, `-0001`) outside 0–9999.
#[inline]
fn date<const N: usize>(buf: &mut Buf<N>, days: i64) {
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        buf.push2((year / 100) as u32);
        buf.push2((year % 100) as u32);
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
    buf.push2(month);
    buf.push(b'-');
    buf.push2(day);
}

#[inline]
fn hms<const N: usize>(buf: &mut Buf<N>, secs: u32) {
    buf.push2(secs / 3600);
    buf.push(b':');
    buf.push2(secs / 60 % 60);
    buf.push(b':');
    buf.push2(secs % 60);
}

#[inline]
pub(super) fn write_date(days: i64, out: &mut Vec<u8>) {
    let mut buf = Buf::<32>::new();
    buf.push(b'"');
    date(&mut buf, days);
    buf.push(b'"');
    buf.flush(out);
}

/// `"HH:MM:SS.ffffff"`; out-of-range values (not valid Iceberg times) keep
/// their sign and write all hours rather than wrapping.
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
    let mut buf = Buf::<48>::new();
    buf.push(b'"');
    if v < 0 {
        buf.push(b'-');
    }
    if secs < 86_400 {
        hms(&mut buf, secs as u32);
    } else {
        buf.uint(secs / 3600);
        buf.push(b':');
        buf.push2((secs / 60 % 60) as u32);
        buf.push(b':');
        buf.push2((secs % 60) as u32);
    }
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
    let frac_nanos = v.rem_euclid(PER_SEC) as u64 * (1_000_000_000 / PER_SEC) as u64;
    let mut buf = Buf::<48>::new();
    buf.push(b'"');
    date(&mut buf, secs.div_euclid(86_400));
    buf.push(b'T');
    hms(&mut buf, secs.rem_euclid(86_400) as u32);
    buf.push(b'.');
    if nanos {
        buf.fixed(frac_nanos, 9);
    } else {
        buf.fixed(frac_nanos / 1000, 6);
    }
    if zulu {
        buf.push(b'Z');
    }
    buf.push(b'"');
    buf.flush(out);
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
