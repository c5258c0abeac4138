//! Unit tests of the JSON encoder: the type mapping, value by value.
//! Must not reach: the rest of the crate.

use std::sync::Arc;

use arrow::array::*;
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, TimeUnit, i256};
use chrono::{DateTime, NaiveDate};
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType as P, Schema, StructType, Type};
use serde_json::Value;

use super::*;

fn field(id: i32, name: &str, ty: Type) -> NestedFieldRef {
    Arc::new(NestedField::optional(id, name, ty))
}

fn prim(p: P) -> Type {
    Type::Primitive(p)
}

fn arrow_fields(fields: &[NestedFieldRef], columns: &[ArrayRef]) -> Fields {
    let fields = fields.iter().zip(columns);
    fields
        .map(|(f, c)| Field::new(&f.name, c.data_type().clone(), true))
        .collect()
}

/// Encodes every row and checks that each parses as JSON.
fn encode_with(
    fields: &[NestedFieldRef],
    columns: &[ArrayRef],
    options: JsonOptions,
) -> Vec<String> {
    let encoder = RecordEncoder::try_new(fields, &arrow_fields(fields, columns), &options).unwrap();
    let bound = encoder.bind(columns).unwrap();
    (0..bound.num_rows())
        .map(|row| {
            let mut out = Vec::new();
            bound.write_row(row, &mut out);
            serde_json::from_slice::<Value>(&out)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
            String::from_utf8(out).unwrap()
        })
        .collect()
}

/// The encoded values of a single column named `v`.
fn values_with(ty: Type, column: ArrayRef, options: JsonOptions) -> Vec<String> {
    let rows = encode_with(&[field(1, "v", ty)], &[column], options);
    rows.into_iter()
        .map(|r| {
            r.strip_prefix("{\"v\":")
                .unwrap()
                .strip_suffix('}')
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn values(ty: Type, column: ArrayRef) -> Vec<String> {
    values_with(ty, column, JsonOptions::default())
}

fn error(ty: Type, data_type: DataType) -> String {
    let fields = [field(1, "v", ty)];
    let arrow = Fields::from(vec![Field::new("v", data_type, true)]);
    RecordEncoder::try_new(&fields, &arrow, &JsonOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn booleans_and_ints() {
    let bools = Arc::new(BooleanArray::from(vec![Some(true), Some(false), None]));
    assert_eq!(values(prim(P::Boolean), bools), ["true", "false", "null"]);
    let ints = Arc::new(Int32Array::from(vec![
        Some(1),
        Some(-20),
        None,
        Some(i32::MIN),
        Some(i32::MAX),
    ]));
    assert_eq!(
        values(prim(P::Int), ints),
        ["1", "-20", "null", "-2147483648", "2147483647"]
    );
    let small = Arc::new(Int16Array::from(vec![-7, 300]));
    assert_eq!(values(prim(P::Long), small), ["-7", "300"]);
}

#[test]
fn longs_of_every_digit_count() {
    let mut longs = vec![0, i64::MIN, i64::MAX];
    for digits in 1..19 {
        let p = 10i64.pow(digits);
        longs.extend([p - 1, p, p + 1, -(p - 1), -p, -(p + 1)]);
    }
    let expected: Vec<String> = longs.iter().map(|n| n.to_string()).collect();
    let column = Arc::new(Int64Array::from(longs));
    let number = JsonOptions {
        longs: LongMode::Number,
    };
    assert_eq!(values_with(prim(P::Long), column, number), expected);
}

#[test]
fn field_names_of_every_length_are_written_whole() {
    // Names whose `"name":` fits a key's block, fills it, and outgrows it.
    let names: Vec<String> = (26..=34).map(|len| "n".repeat(len - 1) + "\"").collect();
    let fields: Vec<NestedFieldRef> = (0..names.len())
        .map(|i| field(i as i32 + 1, &names[i], prim(P::Int)))
        .collect();
    let columns: Vec<ArrayRef> = (0..names.len())
        .map(|i| Arc::new(Int32Array::from(vec![i as i32])) as ArrayRef)
        .collect();
    let row = &encode_with(&fields, &columns, JsonOptions::default())[0];
    let parsed: serde_json::Map<String, Value> = serde_json::from_str(row).unwrap();
    assert_eq!(parsed.len(), names.len());
    for (i, name) in names.iter().enumerate() {
        assert_eq!(parsed[name], i);
    }
}

#[test]
fn long_boundaries_in_both_modes() {
    let exact = 1i64 << 53;
    let column: ArrayRef = Arc::new(Int64Array::from(vec![
        Some(exact),
        Some(-exact),
        Some(exact + 1),
        Some(-exact - 1),
        Some(i64::MIN),
        Some(i64::MAX),
        Some(0),
        None,
    ]));
    let auto = [
        "9007199254740992",
        "-9007199254740992",
        "\"9007199254740993\"",
        "\"-9007199254740993\"",
        "\"-9223372036854775808\"",
        "\"9223372036854775807\"",
        "0",
        "null",
    ];
    assert_eq!(values(prim(P::Long), column.clone()), auto);
    let numbers = JsonOptions {
        longs: LongMode::Number,
    };
    let plain: Vec<_> = auto.iter().map(|s| s.trim_matches('"')).collect();
    assert_eq!(values_with(prim(P::Long), column, numbers), plain);
}

#[test]
fn floats_and_doubles() {
    let doubles = Float64Array::from(vec![
        1.0,
        0.1,
        -0.0,
        1e20,
        1e21,
        1.5e-7,
        1e-6,
        -2.5,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]);
    let expected = [
        "1",
        "0.1",
        "-0",
        "100000000000000000000",
        "1e21",
        "1.5e-7",
        "0.000001",
        "-2.5",
        "1.7976931348623157e308",
        "2.2250738585072014e-308",
        "\"NaN\"",
        "\"Infinity\"",
        "\"-Infinity\"",
    ];
    assert_eq!(values(prim(P::Double), Arc::new(doubles)), expected);
    let floats = Float32Array::from(vec![
        Some(0.1),
        Some(16777216.0),
        Some(f32::MAX),
        None,
        Some(f32::NAN),
    ]);
    let expected = ["0.1", "16777216", "3.4028235e38", "null", "\"NaN\""];
    assert_eq!(values(prim(P::Float), Arc::new(floats.clone())), expected);
    // A float column read for a promoted double keeps the f32 shortest form.
    assert_eq!(values(prim(P::Double), Arc::new(floats)), expected);
}

#[test]
fn decimals_signs_and_scales() {
    let dec = |p: u32, s: u32| {
        prim(P::Decimal {
            precision: p,
            scale: s,
        })
    };
    let cents = Decimal128Array::from(vec![
        Some(1990),
        Some(-5),
        Some(0),
        Some(5),
        Some(-123456),
        None,
    ])
    .with_precision_and_scale(10, 2)
    .unwrap();
    let expected = [
        "\"19.90\"",
        "\"-0.05\"",
        "\"0.00\"",
        "\"0.05\"",
        "\"-1234.56\"",
        "null",
    ];
    assert_eq!(values(dec(10, 2), Arc::new(cents)), expected);
    let whole = Decimal128Array::from(vec![1234, -1234, 0])
        .with_precision_and_scale(9, 0)
        .unwrap();
    assert_eq!(
        values(dec(9, 0), Arc::new(whole)),
        ["\"1234\"", "\"-1234\"", "\"0\""]
    );
    let max = 10i128.pow(38) - 1;
    let wide = Decimal128Array::from(vec![max, -max, i128::MIN])
        .with_precision_and_scale(38, 38)
        .unwrap();
    let nines = format!("0.{}", "9".repeat(38));
    let expected = [
        format!("\"{nines}\""),
        format!("\"-{nines}\""),
        "\"-1.70141183460469231731687303715884105728\"".to_owned(),
    ];
    assert_eq!(values(dec(38, 38), Arc::new(wide)), expected);
    let big = i256::from_i128(i128::MAX).wrapping_mul(i256::from_i128(-10));
    let d256 = Decimal256Array::from(vec![i256::from_i128(-1990), big])
        .with_precision_and_scale(76, 2)
        .unwrap();
    let expected = [
        "\"-19.90\"",
        "\"-17014118346046923173168730371588410572.70\"",
    ];
    assert_eq!(values(dec(38, 2), Arc::new(d256)), expected);
    let d32 = Decimal32Array::from(vec![-1])
        .with_precision_and_scale(9, 3)
        .unwrap();
    assert_eq!(values(dec(9, 3), Arc::new(d32)), ["\"-0.001\""]);
    let d64 = Decimal64Array::from(vec![12345])
        .with_precision_and_scale(18, 1)
        .unwrap();
    assert_eq!(values(dec(18, 1), Arc::new(d64)), ["\"1234.5\""]);
    // The scale is part of the value: a different Arrow scale is refused.
    assert!(error(dec(10, 2), DataType::Decimal128(10, 3)).contains("decimal(10, 2)"));
}

#[test]
fn dates_match_chrono() {
    let days: Vec<i32> = (-800_000..3_000_000)
        .step_by(997)
        .chain([0, -1, 20_647, -719_528, -719_529])
        .collect();
    let encoded = values(prim(P::Date), Arc::new(Date32Array::from(days.clone())));
    for (d, text) in days.iter().zip(&encoded) {
        let date = NaiveDate::from_num_days_from_ce_opt(d + 719_163).unwrap();
        assert_eq!(*text, format!("\"{}\"", date.format("%Y-%m-%d")), "day {d}");
    }
    assert_eq!(encoded[encoded.len() - 3], "\"2026-07-13\"");
    assert_eq!(encoded[encoded.len() - 2], "\"0000-01-01\"");
    assert_eq!(encoded[encoded.len() - 1], "\"-0001-12-31\"");
    let extremes = Date32Array::from(vec![Some(i32::MIN), Some(i32::MAX), None]);
    let encoded = values(prim(P::Date), Arc::new(extremes));
    assert_eq!(
        encoded,
        ["\"-5877641-06-23\"", "\"+5881580-07-11\"", "null"]
    );
}

#[test]
fn times() {
    let micros = Time64MicrosecondArray::from(vec![
        Some(28_800_123_456),
        Some(0),
        Some(86_399_999_999),
        None,
    ]);
    let expected = [
        "\"08:00:00.123456\"",
        "\"00:00:00.000000\"",
        "\"23:59:59.999999\"",
        "null",
    ];
    assert_eq!(values(prim(P::Time), Arc::new(micros)), expected);
    let nanos = Time64NanosecondArray::from(vec![1, 3_723_000_001_999]);
    assert_eq!(
        values(prim(P::Time), Arc::new(nanos)),
        ["\"00:00:00.000000\"", "\"01:02:03.000001\""]
    );
    // Invalid times do not panic.
    let odd = Time64MicrosecondArray::from(vec![-1, i64::MAX, i64::MIN]);
    assert_eq!(
        values(prim(P::Time), Arc::new(odd))[0],
        "\"-00:00:00.000001\""
    );
}

#[test]
fn timestamps_pre_1970_and_nanoseconds() {
    let micros = vec![1_783_929_600_123_456, -1, -1_500_000, 0, i64::MIN, i64::MAX];
    let ts = TimestampMicrosecondArray::from(micros.clone());
    let encoded = values(prim(P::Timestamp), Arc::new(ts.clone()));
    assert_eq!(
        encoded[..4],
        [
            "\"2026-07-13T08:00:00.123456\"",
            "\"1969-12-31T23:59:59.999999\"",
            "\"1969-12-31T23:59:58.500000\"",
            "\"1970-01-01T00:00:00.000000\"",
        ]
    );
    assert_eq!(encoded[4], "\"-290308-12-21T19:59:05.224192\"");
    for tz in ["+00:00", "UTC"] {
        let tz_array = Arc::new(ts.clone().with_timezone(tz));
        let encoded = values(prim(P::Timestamptz), tz_array);
        assert_eq!(encoded[0], "\"2026-07-13T08:00:00.123456Z\"");
        assert_eq!(encoded[1], "\"1969-12-31T23:59:59.999999Z\"");
    }
    let nanos =
        TimestampNanosecondArray::from(vec![Some(1_783_929_600_123_456_789), Some(-1), None]);
    let expected = [
        "\"2026-07-13T08:00:00.123456789\"",
        "\"1969-12-31T23:59:59.999999999\"",
        "null",
    ];
    assert_eq!(
        values(prim(P::TimestampNs), Arc::new(nanos.clone())),
        expected
    );
    let utc = Arc::new(nanos.with_timezone("+00:00"));
    assert_eq!(
        values(prim(P::TimestamptzNs), utc)[0],
        "\"2026-07-13T08:00:00.123456789Z\""
    );
    // Other units convert to the Iceberg precision.
    let millis = Arc::new(TimestampMillisecondArray::from(vec![-1]));
    assert_eq!(
        values(prim(P::TimestampNs), millis),
        ["\"1969-12-31T23:59:59.999000000\""]
    );
    // Agrees with chrono over a wide range.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let sample: Vec<i64> = (0..2000)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x as i64) % 200_000_000_000_000_000
        })
        .collect();
    let encoded = values(
        prim(P::Timestamp),
        Arc::new(TimestampMicrosecondArray::from(sample.clone())),
    );
    for (v, text) in sample.iter().zip(encoded) {
        let expected = DateTime::from_timestamp_micros(*v)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.6f");
        assert_eq!(text, format!("\"{expected}\""));
    }
}

#[test]
fn timestamp_zone_mismatches_are_errors() {
    let us = TimeUnit::Microsecond;
    assert!(error(prim(P::Timestamptz), DataType::Timestamp(us, None)).contains("field `v`"));
    assert!(
        RecordEncoder::try_new(
            &[field(1, "v", prim(P::Timestamp))],
            &Fields::from(vec![Field::new(
                "v",
                DataType::Timestamp(us, Some("UTC".into())),
                true
            )]),
            &JsonOptions::default()
        )
        .is_err()
    );
    error(
        prim(P::Timestamptz),
        DataType::Timestamp(us, Some("America/New_York".into())),
    );
}

#[test]
fn strings_are_escaped() {
    let text = "q\"b\\s/n\nu\u{1}t\t\u{1f}é€😀\u{7f}";
    let expected = r#""q\"b\\s/n\nu\u0001t\t\u001fé€😀"#.to_owned() + "\u{7f}\"";
    let mut out = Vec::new();
    write_json_string(text, &mut out);
    assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
    assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), text);
    let all: String = (0u8..0x80).map(char::from).collect();
    let mut out = Vec::new();
    write_json_string(&all, &mut out);
    assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), all);

    let list = vec![Some(text), None, Some("")];
    let expected = [expected.as_str(), "null", "\"\""];
    let string = prim(P::String);
    assert_eq!(
        values(string.clone(), Arc::new(StringArray::from(list.clone()))),
        expected
    );
    assert_eq!(
        values(
            string.clone(),
            Arc::new(LargeStringArray::from(list.clone()))
        ),
        expected
    );
    assert_eq!(
        values(
            string.clone(),
            Arc::new(StringViewArray::from(list.clone()))
        ),
        expected
    );
    let dict: DictionaryArray<Int8Type> = list.into_iter().collect();
    assert_eq!(values(string, Arc::new(dict)), expected);
}

#[test]
fn uuid_fixed_and_binary() {
    let id = uuid::Uuid::parse_str("F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6").unwrap();
    let uuids = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        [Some(id.as_bytes().to_vec()), None, Some(vec![0xff; 16])].into_iter(),
        16,
    )
    .unwrap();
    let expected = [
        format!("\"{id}\""),
        "null".into(),
        "\"ffffffff-ffff-ffff-ffff-ffffffffffff\"".into(),
    ];
    assert_eq!(values(prim(P::Uuid), Arc::new(uuids)), expected);
    let fixed = FixedSizeBinaryArray::try_from_iter([b"abc", b"\0\xff\x10"].into_iter()).unwrap();
    assert_eq!(
        values(prim(P::Fixed(3)), Arc::new(fixed)),
        ["\"YWJj\"", "\"AP8Q\""]
    );
    assert!(error(prim(P::Fixed(4)), DataType::FixedSizeBinary(3)).contains("fixed(4)"));
    let bytes: Vec<Option<&[u8]>> = vec![Some(b"hello"), Some(b""), None, Some(b"ab")];
    let expected = ["\"aGVsbG8=\"", "\"\"", "null", "\"YWI=\""];
    let binary = prim(P::Binary);
    assert_eq!(
        values(binary.clone(), Arc::new(BinaryArray::from(bytes.clone()))),
        expected
    );
    assert_eq!(
        values(
            binary.clone(),
            Arc::new(LargeBinaryArray::from(bytes.clone()))
        ),
        expected
    );
    assert_eq!(
        values(binary, Arc::new(BinaryViewArray::from(bytes))),
        expected
    );
}

fn struct_type(base: i32) -> Type {
    Type::Struct(StructType::new(vec![
        field(base + 1, "street", prim(P::String)),
        field(base + 2, "zip", prim(P::Int)),
    ]))
}

#[test]
fn nested_struct_list_map() {
    let street = Arc::new(StringArray::from(vec![Some("Main \"1\""), None, Some("x")])) as ArrayRef;
    let zip = Arc::new(Int32Array::from(vec![Some(1000), Some(2000), None])) as ArrayRef;
    let struct_fields = Fields::from(vec![
        Field::new("a", DataType::Utf8, true),
        Field::new("b", DataType::Int32, true),
    ]);
    let nulls = NullBuffer::from(vec![true, true, false]);
    let address =
        Arc::new(StructArray::try_new(struct_fields, vec![street, zip], Some(nulls)).unwrap());

    let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
        Some(vec![]),
    ]);

    let mut strings = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    strings.keys().append_value("a\nb");
    strings.values().append_value(1);
    strings.keys().append_value("c");
    strings.values().append_null();
    strings.append(true).unwrap();
    strings.append(false).unwrap();
    strings.append(true).unwrap();
    let mut ints = MapBuilder::new(None, Int32Builder::new(), StringBuilder::new());
    ints.keys().append_value(7);
    ints.values().append_value("seven");
    ints.append(true).unwrap();
    ints.append(true).unwrap();
    ints.keys().append_value(-1);
    ints.values().append_null();
    ints.keys().append_value(2);
    ints.values().append_value("two");
    ints.append(true).unwrap();

    let fields = [
        field(1, "address", struct_type(10)),
        field(
            2,
            "tags",
            Type::List(ListType::new(field(21, "element", prim(P::Long)))),
        ),
        field(
            3,
            "attrs",
            Type::Map(MapType::new(
                field(31, "key", prim(P::String)),
                field(32, "value", prim(P::Int)),
            )),
        ),
        field(
            4,
            "names",
            Type::Map(MapType::new(
                field(41, "key", prim(P::Int)),
                field(42, "value", prim(P::String)),
            )),
        ),
    ];
    let columns: Vec<ArrayRef> = vec![
        address,
        Arc::new(lists),
        Arc::new(strings.finish()),
        Arc::new(ints.finish()),
    ];
    let rows = encode_with(&fields, &columns, JsonOptions::default());
    assert_eq!(
        rows,
        [
            r#"{"address":{"street":"Main \"1\"","zip":1000},"tags":[1,null],"attrs":{"a\nb":1,"c":null},"names":[{"key":7,"value":"seven"}]}"#,
            r#"{"address":{"street":null,"zip":2000},"tags":null,"attrs":null,"names":[]}"#,
            r#"{"address":null,"tags":[],"attrs":{},"names":[{"key":-1,"value":null},{"key":2,"value":"two"}]}"#,
        ]
    );

    // Sliced batches keep their offsets and null bitmaps straight.
    let sliced: Vec<ArrayRef> = columns.iter().map(|c| c.slice(1, 2)).collect();
    assert_eq!(
        encode_with(&fields, &sliced, JsonOptions::default()),
        rows[1..]
    );

    let encoder = RecordEncoder::try_new(
        &fields,
        &arrow_fields(&fields, &columns),
        &JsonOptions::default(),
    )
    .unwrap();
    let bound = encoder.bind(&columns).unwrap();
    let mut key = Vec::new();
    bound.write_fields(0, &[1, 0], &mut key);
    assert_eq!(
        key,
        br#"{"tags":[1,null],"address":{"street":"Main \"1\"","zip":1000}}"#
    );
    key.clear();
    bound.write_fields(0, &[], &mut key);
    assert_eq!(key, b"{}");
}

#[test]
fn mismatches_name_the_field() {
    let fields = [field(1, "address", struct_type(10))];
    let inner = Fields::from(vec![
        Field::new("street", DataType::Utf8, true),
        Field::new("zip", DataType::Utf8, true),
    ]);
    let arrow = Fields::from(vec![Field::new("address", DataType::Struct(inner), true)]);
    let err = RecordEncoder::try_new(&fields, &arrow, &JsonOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "field `address.zip`: Iceberg type `int` cannot be encoded from Arrow type `Utf8`"
    );
    assert!(error(prim(P::Int), DataType::Int64).contains("field `v`"));
    assert!(error(prim(P::Uuid), DataType::Utf8).contains("field `v`"));
    assert!(error(prim(P::Long), DataType::UInt64).contains("field `v`"));
    let list = Type::List(ListType::new(field(21, "element", prim(P::Int))));
    let arrow_list = DataType::new_list(DataType::Utf8, true);
    assert!(error(list, arrow_list).contains("`v.element`"));

    // Field ids, when present, must agree.
    let ids = [("PARQUET:field_id".to_owned(), "9".to_owned())].into();
    let arrow = Fields::from(vec![
        Field::new("v", DataType::Int32, true).with_metadata(ids),
    ]);
    let err = RecordEncoder::try_new(
        &[field(1, "v", prim(P::Int))],
        &arrow,
        &JsonOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        JsonError::FieldId {
            iceberg_id: 1,
            arrow_id: 9,
            ..
        }
    ));

    // Counts and per-batch types are checked at bind time.
    let fields = [field(1, "v", prim(P::Int))];
    let arrow = Fields::from(vec![Field::new("v", DataType::Int32, true)]);
    let encoder = RecordEncoder::try_new(&fields, &arrow, &JsonOptions::default()).unwrap();
    assert!(matches!(
        encoder.bind(&[]),
        Err(JsonError::FieldCount { .. })
    ));
    let wrong: ArrayRef = Arc::new(StringArray::from(vec!["1"]));
    assert!(matches!(
        encoder.bind(&[wrong]),
        Err(JsonError::TypeMismatch { .. })
    ));
    let fields = [field(1, "a", prim(P::Int)), field(2, "b", prim(P::Int))];
    let short: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![1, 2])),
        Arc::new(Int32Array::from(vec![1])),
    ];
    let encoder = RecordEncoder::try_new(
        &fields,
        &arrow_fields(&fields, &short),
        &JsonOptions::default(),
    )
    .unwrap();
    assert!(matches!(
        encoder.bind(&short),
        Err(JsonError::ColumnLength { .. })
    ));
}

fn every_type() -> Vec<NestedFieldRef> {
    let mut fields: Vec<_> = [
        P::Boolean,
        P::Int,
        P::Long,
        P::Float,
        P::Double,
        P::Decimal {
            precision: 9,
            scale: 2,
        },
        P::Date,
        P::Time,
        P::Timestamp,
        P::Timestamptz,
        P::TimestampNs,
        P::TimestamptzNs,
        P::String,
        P::Uuid,
        P::Fixed(5),
        P::Binary,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, p)| field(i as i32 + 1, &format!("c{i}"), prim(p)))
    .collect();
    fields.push(field(100, "s", struct_type(200)));
    fields.push(field(
        101,
        "l",
        Type::List(ListType::new(field(102, "element", struct_type(300)))),
    ));
    let map = MapType::new(
        field(103, "key", prim(P::Date)),
        field(104, "value", prim(P::Uuid)),
    );
    fields.push(field(105, "m", Type::Map(map)));
    fields
}

#[test]
fn iceberg_arrow_schemas_are_accepted_and_nulls_written() {
    let fields = every_type();
    let schema = Schema::builder()
        .with_fields(fields.clone())
        .build()
        .unwrap();
    let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).unwrap();
    let encoder = RecordEncoder::try_new(&fields, arrow.fields(), &JsonOptions::default()).unwrap();
    let columns: Vec<ArrayRef> = arrow
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), 2))
        .collect();
    let bound = encoder.bind(&columns).unwrap();
    let mut out = Vec::new();
    bound.write_row(1, &mut out);
    let row: serde_json::Map<String, Value> = serde_json::from_slice(&out).unwrap();
    assert_eq!(row.len(), fields.len());
    assert!(row.values().all(Value::is_null));
    // An all-null column of the Arrow `Null` type fits any field.
    let nulls: Vec<ArrayRef> = fields
        .iter()
        .map(|_| new_null_array(&DataType::Null, 1))
        .collect();
    assert!(encode_with(&fields, &nulls, JsonOptions::default())[0].ends_with(":null}"));
}

mod properties;
