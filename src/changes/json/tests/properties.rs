//! Property-style checks against reference implementations, and the
//! (ignored) throughput check.
//! Must not reach: the rest of the crate (Arrow arrays in, bytes out).

use super::*;

/// A deterministic xorshift generator.
fn rng(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// The fast path for short doubles writes exactly what `Display` writes.
#[test]
fn doubles_match_display() {
    let mut next = rng(7);
    let check = |v: f64| {
        if !v.is_finite() {
            return;
        }
        let mut out = Vec::new();
        format::write_f64(v, &mut out);
        let a = v.abs();
        let expected = if a != 0.0 && !(1e-6..1e21).contains(&a) {
            format!("{v:e}")
        } else {
            format!("{v}")
        };
        assert_eq!(String::from_utf8(out).unwrap(), expected, "{v:?}");
    };
    for _ in 0..300_000 {
        let m = next() % 10u64.pow((next() % 17) as u32 + 1);
        let scale = 10f64.powi((next() % 24) as i32);
        check(m as f64 / scale);
        check(-(m as f64) / scale);
        let exponent = (next() % 72) + 1003; // 2^-20 ..= 2^51
        check(f64::from_bits(exponent << 52 | next() >> 12));
        check(f64::from_bits(next()));
    }
    for e in -8..17 {
        let p = 10f64.powi(e).to_bits();
        (p - 3..p + 3).map(f64::from_bits).for_each(check);
    }
}

/// Byte-identical to serde_json's escaping, wherever the escapes fall.
#[test]
fn strings_match_serde_json() {
    let mut next = rng(99);
    let alphabet: Vec<char> = "ab\"\\\n\t\u{0}\u{1f}\u{7f}é€😀 ".chars().collect();
    for _ in 0..20_000 {
        let state = next();
        let len = (state % 40) as usize;
        let text: String = (0..len)
            .map(|i| {
                let pick = (state >> (i % 60)) as usize;
                if pick.is_multiple_of(3) {
                    alphabet[pick % alphabet.len()]
                } else {
                    'x'
                }
            })
            .collect();
        let mut out = Vec::new();
        write_json_string(&text, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            serde_json::to_string(&text).unwrap()
        );
    }
}

/// Deterministic pseudo-random rows over mixed columns: every row parses and
/// strings, longs and doubles read back exactly.
#[test]
fn random_rows_parse_and_round_trip() {
    let mut next = rng(42);
    let n = 3000;
    let mut strings = Vec::new();
    let mut longs = Vec::new();
    let mut doubles = Vec::new();
    let mut floats = Vec::new();
    let mut decimals = Vec::new();
    for _ in 0..n {
        let len = (next() % 12) as usize;
        let s: String = (0..len)
            .map(|_| match next() % 4 {
                0 => char::from((next() % 0x80) as u8),
                1 => char::from_u32((next() % 0x11_0000) as u32).unwrap_or('\u{fffd}'),
                _ => ['"', '\\', '\n', '\u{1}', 'a'][(next() % 5) as usize],
            })
            .collect();
        strings.push((!next().is_multiple_of(7)).then_some(s));
        longs.push(next() as i64 >> (next() % 64));
        doubles.push(f64::from_bits(next()));
        floats.push(f32::from_bits(next() as u32));
        decimals.push(next() as i64 as i128);
    }
    let fields = [
        field(1, "s", prim(P::String)),
        field(2, "l", prim(P::Long)),
        field(3, "d", prim(P::Double)),
        field(4, "f", prim(P::Float)),
        field(
            5,
            "n",
            prim(P::Decimal {
                precision: 38,
                scale: 4,
            }),
        ),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(strings.clone())),
        Arc::new(Int64Array::from(longs.clone())),
        Arc::new(Float64Array::from(doubles.clone())),
        Arc::new(Float32Array::from(floats.clone())),
        Arc::new(
            Decimal128Array::from(decimals.clone())
                .with_precision_and_scale(38, 4)
                .unwrap(),
        ),
    ];
    for options in [
        JsonOptions::default(),
        JsonOptions {
            longs: LongMode::Number,
        },
    ] {
        for (i, row) in encode_with(&fields, &columns, options).iter().enumerate() {
            let row: Value = serde_json::from_str(row).unwrap();
            assert_eq!(row["s"].as_str(), strings[i].as_deref());
            let long = match &row["l"] {
                Value::String(s) => s.parse::<i64>().unwrap(),
                number => number.as_i64().unwrap(),
            };
            assert_eq!(long, longs[i]);
            assert_eq!(
                row["l"].is_string(),
                options.longs == LongMode::Auto && longs[i].unsigned_abs() > 1 << 53
            );
            if doubles[i].is_finite() {
                assert_eq!(
                    row["d"].as_f64().unwrap().to_bits(),
                    doubles[i].to_bits(),
                    "{}",
                    row["d"]
                );
            }
            if floats[i].is_finite() {
                let text = row["f"].to_string();
                assert_eq!(
                    text.parse::<f32>().unwrap().to_bits(),
                    floats[i].to_bits(),
                    "{text}"
                );
            }
            let decimal = row["n"].as_str().unwrap().replace('.', "");
            assert_eq!(decimal.parse::<i128>().unwrap(), decimals[i]);
        }
    }
}

/// Release-mode throughput check: `cargo test --release --lib changes::json -- --ignored`.
#[test]
#[ignore]
fn throughput_one_million_rows() {
    let n = 1_000_000;
    let fields = [
        field(1, "id", prim(P::Long)),
        field(2, "name", prim(P::String)),
        field(
            3,
            "price",
            prim(P::Decimal {
                precision: 10,
                scale: 2,
            }),
        ),
        field(4, "ratio", prim(P::Double)),
        field(5, "at", prim(P::Timestamptz)),
        field(6, "day", prim(P::Date)),
        field(7, "ok", prim(P::Boolean)),
        field(8, "qty", prim(P::Int)),
        field(9, "uid", prim(P::Uuid)),
        field(10, "note", prim(P::String)),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values((0..n).map(|i| i * 7_919))),
        Arc::new(StringArray::from_iter_values(
            (0..n).map(|i| format!("customer {i}")),
        )),
        Arc::new(
            Decimal128Array::from_iter_values((0..n).map(|i| i as i128 * 13))
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ),
        Arc::new(Float64Array::from_iter_values((0..n).map(|i| {
            if i % 2 == 0 {
                i as f64 / 7.0
            } else {
                i as f64 / 100.0
            }
        }))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                (0..n).map(|i| 1_700_000_000_000_000 + i * 1_234_567),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(Date32Array::from_iter_values(
            (0..n).map(|i| (i % 40_000) as i32),
        )),
        Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 3 == 0)))),
        Arc::new(Int32Array::from_iter(
            (0..n).map(|i| (i % 5 != 0).then_some(i as i32)),
        )),
        Arc::new(
            FixedSizeBinaryArray::try_from_iter((0..n).map(|i| (i as u128).to_le_bytes())).unwrap(),
        ),
        Arc::new(StringArray::from_iter_values((0..n).map(|i| {
            if i % 10 == 0 {
                "line\n\"quoted\""
            } else {
                "plain text"
            }
        }))),
    ];
    let encoder = RecordEncoder::try_new(
        &fields,
        &arrow_fields(&fields, &columns),
        &JsonOptions::default(),
    )
    .unwrap();
    // Streams through a reused buffer, as the pull API does.
    // Thread CPU time where available: the build machine is shared.
    let cpu = || {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok();
        let nanos = stat.and_then(|s| s.split(' ').next()?.parse::<u64>().ok());
        nanos.map(std::time::Duration::from_nanos)
    };
    let encode = |fields: &[usize]| {
        let (start, cpu_start) = (std::time::Instant::now(), cpu());
        let bound = encoder.bind(&columns).unwrap();
        let (mut out, mut bytes) = (Vec::with_capacity(1 << 20), 0);
        for row in 0..n as usize {
            bound.write_fields(row, fields, &mut out);
            out.push(b'\n');
            if out.len() > (1 << 20) - 1024 {
                bytes += out.len();
                out.clear();
            }
        }
        let elapsed = match (cpu_start, cpu()) {
            (Some(a), Some(b)) => b - a,
            _ => start.elapsed(),
        };
        (elapsed, bytes + out.len())
    };
    for (column, field) in fields.iter().enumerate() {
        let (elapsed, _) = encode(&[column]);
        eprintln!(
            "{:>6}: {:>4} ns/value",
            field.name,
            elapsed.as_nanos() / n as u128
        );
    }
    let (elapsed, bytes) = encode(&(0..fields.len()).collect::<Vec<_>>());
    eprintln!("1M rows x 10 columns: {elapsed:?}, {} MB", bytes >> 20);
    assert!(elapsed.as_secs_f64() < 1.0);
}
