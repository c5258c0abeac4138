//! Canonical JSON encoding of Iceberg rows held in Arrow arrays.
//!
//! This is the hot path of the pull API: values are written straight into a
//! `Vec<u8>`, arrays are downcast once per batch ([`RecordEncoder::bind`]) and
//! nothing is allocated per value.
//!
//! # Type mapping (the service's contract)
//!
//! | Iceberg            | JSON                                                            |
//! |--------------------|-----------------------------------------------------------------|
//! | boolean            | `true` / `false`                                                |
//! | int                | number                                                          |
//! | long               | number; with [`LongMode::Auto`] a string when `abs(v) > 2^53`   |
//! | float, double      | shortest round-trip number (`1`, `0.1`, `1e21`, `1.5e-7`); NaN and infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | decimal(p, s)      | string with exactly `s` fractional digits: `"19.90"`, `"-0.05"`, `"1234"` |
//! | date               | `"2026-07-13"`                                                  |
//! | time               | `"08:00:00.123456"` (always 6 fractional digits)                |
//! | timestamp          | `"2026-07-13T08:00:00.123456"` (6 digits, no offset)            |
//! | timestamptz        | `"2026-07-13T08:00:00.123456Z"` (UTC)                           |
//! | timestamp_ns       | `"2026-07-13T08:00:00.123456789"`                               |
//! | timestamptz_ns     | `"2026-07-13T08:00:00.123456789Z"`                              |
//! | string             | string (RFC 8259 escaping; non-ASCII kept as UTF-8)             |
//! | uuid               | `"f81d4fae-7dec-11d0-a765-00a0c91e6bf6"` (lowercase, hyphenated)|
//! | fixed(n), binary   | standard base64 with padding                                    |
//! | struct             | object keyed by the Iceberg field names, in schema order        |
//! | list               | array                                                           |
//! | map, string keys   | object `{"k": v, ...}` (a null key, invalid in Iceberg, is written as `""`) |
//! | map, other keys    | array of `{"key": k, "value": v}` objects                       |
//!
//! Null values, at any depth, are written as `null`. Years outside 0000–9999
//! use the ISO 8601 expanded form: `"+10000-01-01"`, `"-0001-12-31"`.
//! Exponents are written as `1e21` (no `+`).
//!
//! Accepted Arrow representations: those produced by the `iceberg` crate and
//! Parquet readers (`Utf8`/`LargeUtf8`/`Utf8View`, `Binary`/`LargeBinary`/
//! `BinaryView`, `List`/`LargeList`/`FixedSizeList`, `Map`, `Struct`,
//! `Timestamp` of any unit, `Date32`, `Time64`, `Decimal32..256`,
//! `FixedSizeBinary`, integers and floats), plus `Dictionary` encoding of any
//! of them and the `Null` type (an all-null column). Iceberg type promotions
//! are accepted (int columns for long, float columns for double). Arrow fields
//! carrying a `PARQUET:field_id` must match the Iceberg field id. Fields are
//! matched by position, names come from the Iceberg schema.
//! Must not reach: the rest of the crate (Arrow arrays in, bytes out).

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, FixedSizeBinaryArray, new_empty_array};
use arrow::array::{BinaryArray, BinaryViewArray, LargeBinaryArray};
use arrow::array::{LargeStringArray, StringArray, StringViewArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::*;
use iceberg::spec::{NestedFieldRef, PrimitiveType, Type};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

mod format;
#[cfg(test)]
mod tests;

pub use format::write_json_string;
use format::*;

/// How 64-bit integers outside ±(2^53) are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LongMode {
    /// Numbers when exactly representable in an IEEE double (`|v| <= 2^53`),
    /// else strings (`"9007199254740993"`).
    #[default]
    Auto,
    /// Always numbers.
    Number,
}

/// Encoding options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct JsonOptions {
    pub longs: LongMode,
}

/// An Arrow layout that cannot be encoded as the Iceberg schema says.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error(
        "field `{field}`: Iceberg type `{iceberg}` cannot be encoded from Arrow type `{arrow}`"
    )]
    TypeMismatch {
        field: String,
        iceberg: String,
        arrow: DataType,
    },
    #[error("struct `{field}`: expected {expected} Arrow fields or columns, found {found}")]
    FieldCount {
        field: String,
        expected: usize,
        found: usize,
    },
    #[error(
        "field `{field}`: Arrow field id {arrow_id} does not match Iceberg field id {iceberg_id}"
    )]
    FieldId {
        field: String,
        iceberg_id: i32,
        arrow_id: i32,
    },
    #[error("column `{field}` has {found} rows, expected {expected}")]
    ColumnLength {
        field: String,
        expected: usize,
        found: usize,
    },
}

const ROOT: &str = "<record>";

/// Encodes rows of one Iceberg struct (a table schema's top-level fields)
/// from matching Arrow columns. Build once per schema, [`bind`](Self::bind)
/// once per batch.
#[derive(Debug)]
pub struct RecordEncoder {
    root: StructPlan,
    longs: LongMode,
}

/// One batch's columns, downcast and ready for row-by-row encoding.
pub struct BoundRecord<'a> {
    keys: &'a [Key],
    columns: Vec<Bound<'a>>,
    rows: usize,
}

#[derive(Debug)]
struct Node {
    field: NestedFieldRef,
    path: String,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Prim(PrimitiveType),
    Struct(StructPlan),
    List(Box<Node>),
    Map(Box<Node>, Box<Node>),
}

#[derive(Debug)]
struct StructPlan {
    /// Pre-escaped `"name":` per field.
    keys: Vec<Key>,
    children: Vec<Node>,
}

/// A field's pre-escaped `"name":`, held in a block of fixed size when it fits: every
/// event writes each of its fields' names, and a copy of a size known when compiling is a
/// few moves where one of the name's length calls `memmove`.
#[derive(Debug)]
enum Key {
    Short([u8; KEY_BLOCK], u8),
    Long(Box<[u8]>),
}

/// Bytes of a [`Key::Short`]'s block: most names with their quotes and colon.
const KEY_BLOCK: usize = 32;

impl Key {
    fn new(bytes: Vec<u8>) -> Self {
        match bytes.len() {
            len @ ..=KEY_BLOCK => {
                let mut block = [0; KEY_BLOCK];
                block[..len].copy_from_slice(&bytes);
                Self::Short(block, len as u8)
            }
            _ => Self::Long(bytes.into_boxed_slice()),
        }
    }

    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Short(block, len) => append_cut(out, block, usize::from(*len)),
            Self::Long(bytes) => out.extend_from_slice(bytes),
        }
    }
}

fn plan_struct(fields: &[NestedFieldRef], prefix: &str) -> StructPlan {
    let mut keys = Vec::with_capacity(fields.len());
    let mut children = Vec::with_capacity(fields.len());
    for field in fields {
        let mut key = Vec::with_capacity(field.name.len() + 3);
        write_json_string(&field.name, &mut key);
        key.push(b':');
        keys.push(Key::new(key));
        let path = if prefix.is_empty() {
            field.name.clone()
        } else {
            format!("{prefix}.{}", field.name)
        };
        children.push(plan(field, path));
    }
    StructPlan { keys, children }
}

fn plan(field: &NestedFieldRef, path: String) -> Node {
    let kind = match field.field_type.as_ref() {
        Type::Primitive(p) => Kind::Prim(p.clone()),
        Type::Struct(s) => Kind::Struct(plan_struct(s.fields(), &path)),
        Type::List(l) => Kind::List(Box::new(plan(&l.element_field, format!("{path}.element")))),
        Type::Map(m) => Kind::Map(
            Box::new(plan(&m.key_field, format!("{path}.key"))),
            Box::new(plan(&m.value_field, format!("{path}.value"))),
        ),
    };
    Node {
        field: field.clone(),
        path,
        kind,
    }
}

impl RecordEncoder {
    /// `fields`: the Iceberg fields, in the same order as `arrow_fields`.
    pub fn try_new(
        fields: &[NestedFieldRef],
        arrow_fields: &[FieldRef],
        options: &JsonOptions,
    ) -> Result<Self, JsonError> {
        count_check(ROOT, fields.len(), arrow_fields.len())?;
        let root = plan_struct(fields, "");
        for (node, arrow_field) in root.children.iter().zip(arrow_fields.iter()) {
            check_id(node, arrow_field)?;
            bind_node(
                node,
                new_empty_array(arrow_field.data_type()).as_ref(),
                options.longs,
            )?;
        }
        Ok(Self {
            root,
            longs: options.longs,
        })
    }

    /// Binds the columns of one batch (same order as the fields) for
    /// row-by-row encoding. Checks every column's type against the schema, so
    /// batches may differ in representation (e.g. dictionary or view arrays).
    pub fn bind<'a>(&'a self, columns: &'a [ArrayRef]) -> Result<BoundRecord<'a>, JsonError> {
        count_check(ROOT, self.root.children.len(), columns.len())?;
        let rows = columns.first().map_or(0, |c| c.len());
        let columns = self
            .root
            .children
            .iter()
            .zip(columns)
            .map(|(node, column)| {
                if column.len() != rows {
                    return Err(JsonError::ColumnLength {
                        field: node.path.clone(),
                        expected: rows,
                        found: column.len(),
                    });
                }
                bind_node(node, column.as_ref(), self.longs)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BoundRecord {
            keys: &self.root.keys,
            columns,
            rows,
        })
    }
}

impl BoundRecord<'_> {
    /// Number of rows in the bound batch.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Writes row `row` as a JSON object `{"name":value,...}` (all fields;
    /// null values written as null). Panics if `row >= num_rows()`.
    pub fn write_row(&self, row: usize, out: &mut Vec<u8>) {
        write_object(self.keys, &self.columns, row, out);
    }

    /// Writes only the fields at `indexes` (positions in the schema's
    /// top-level fields) as a JSON object, in the order given. Panics if an
    /// index or `row` is out of range.
    pub fn write_fields(&self, row: usize, indexes: &[usize], out: &mut Vec<u8>) {
        assert!(
            row < self.rows,
            "row {row} out of range ({} rows)",
            self.rows
        );
        out.push(b'{');
        for (n, &i) in indexes.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            self.keys[i].write(out);
            self.columns[i].write(row, out);
        }
        out.push(b'}');
    }
}

fn count_check(path: &str, expected: usize, found: usize) -> Result<(), JsonError> {
    if expected == found {
        return Ok(());
    }
    Err(JsonError::FieldCount {
        field: path.to_owned(),
        expected,
        found,
    })
}

fn check_id(node: &Node, field: &Field) -> Result<(), JsonError> {
    if let Some(id) = field.metadata().get(PARQUET_FIELD_ID_META_KEY)
        && let Ok(arrow_id) = id.parse::<i32>()
        && arrow_id != node.field.id
    {
        return Err(JsonError::FieldId {
            field: node.path.clone(),
            iceberg_id: node.field.id,
            arrow_id,
        });
    }
    Ok(())
}

struct Bound<'a> {
    nulls: Option<NullBuffer>,
    col: Col<'a>,
}

enum Col<'a> {
    Null,
    Bool(&'a BooleanArray),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    I64(&'a [i64], LongMode),
    F32(&'a [f32]),
    F64(&'a [f64]),
    D32(&'a [i32], usize),
    D64(&'a [i64], usize),
    D128(&'a [i128], usize),
    D256(&'a [i256], usize),
    Date(&'a [i32]),
    /// Values and units per second.
    Time(&'a [i64], i64),
    Ts {
        values: &'a [i64],
        per_sec: i64,
        nanos: bool,
        zulu: bool,
    },
    Str(&'a StringArray),
    LargeStr(&'a LargeStringArray),
    StrView(&'a StringViewArray),
    Bin(&'a BinaryArray),
    LargeBin(&'a LargeBinaryArray),
    BinView(&'a BinaryViewArray),
    FixedBin(&'a FixedSizeBinaryArray),
    Uuid(&'a FixedSizeBinaryArray),
    Struct(&'a [Key], Vec<Bound<'a>>),
    List(&'a [i32], Box<Bound<'a>>),
    LargeList(&'a [i64], Box<Bound<'a>>),
    FixedList(usize, Box<Bound<'a>>),
    /// Offsets, keys, values, whether written as a JSON object.
    Map(&'a [i32], Box<Bound<'a>>, Box<Bound<'a>>, bool),
    Dict(Vec<usize>, Box<Bound<'a>>),
}

fn is_utc(tz: &str) -> bool {
    matches!(
        tz,
        "UTC" | "+00:00" | "Z" | "Etc/UTC" | "+0000" | "00:00" | "utc"
    )
}

fn bind_node<'a>(
    node: &'a Node,
    array: &'a dyn Array,
    longs: LongMode,
) -> Result<Bound<'a>, JsonError> {
    let dt = array.data_type();
    let mismatch = || JsonError::TypeMismatch {
        field: node.path.clone(),
        iceberg: node.field.field_type.to_string(),
        arrow: dt.clone(),
    };
    macro_rules! values {
        ($t:ty) => {
            &array.as_primitive::<$t>().values()[..]
        };
    }
    let col = match (&node.kind, dt) {
        (_, DataType::Null) => Col::Null,
        (_, DataType::Dictionary(..)) => {
            let dict = array.as_any_dictionary();
            let values = bind_node(node, dict.values().as_ref(), longs)?;
            let col = if dict.values().is_empty() {
                Col::Null // every key is null (or the array is invalid)
            } else {
                Col::Dict(dict.normalized_keys(), Box::new(values))
            };
            return Ok(Bound {
                nulls: dict.keys().nulls().cloned(),
                col,
            });
        }
        (Kind::Prim(p), dt) => {
            use PrimitiveType as P;
            match (p, dt) {
                (P::Boolean, DataType::Boolean) => Col::Bool(array.as_boolean()),
                (P::Int | P::Long, DataType::Int8) => Col::I8(values!(Int8Type)),
                (P::Int | P::Long, DataType::Int16) => Col::I16(values!(Int16Type)),
                (P::Int | P::Long, DataType::Int32) => Col::I32(values!(Int32Type)),
                (P::Int | P::Long, DataType::UInt8) => Col::U8(values!(UInt8Type)),
                (P::Int | P::Long, DataType::UInt16) => Col::U16(values!(UInt16Type)),
                (P::Long, DataType::UInt32) => Col::U32(values!(UInt32Type)),
                (P::Long, DataType::Int64) => Col::I64(values!(Int64Type), longs),
                (P::Float | P::Double, DataType::Float32) => Col::F32(values!(Float32Type)),
                (P::Double, DataType::Float64) => Col::F64(values!(Float64Type)),
                (P::Decimal { scale, .. }, DataType::Decimal32(_, s))
                    if *s as i64 == *scale as i64 =>
                {
                    Col::D32(values!(Decimal32Type), *scale as usize)
                }
                (P::Decimal { scale, .. }, DataType::Decimal64(_, s))
                    if *s as i64 == *scale as i64 =>
                {
                    Col::D64(values!(Decimal64Type), *scale as usize)
                }
                (P::Decimal { scale, .. }, DataType::Decimal128(_, s))
                    if *s as i64 == *scale as i64 =>
                {
                    Col::D128(values!(Decimal128Type), *scale as usize)
                }
                (P::Decimal { scale, .. }, DataType::Decimal256(_, s))
                    if *s as i64 == *scale as i64 =>
                {
                    Col::D256(values!(Decimal256Type), *scale as usize)
                }
                (P::Date, DataType::Date32) => Col::Date(values!(Date32Type)),
                (P::Time, DataType::Time64(TimeUnit::Microsecond)) => {
                    Col::Time(values!(Time64MicrosecondType), 1_000_000)
                }
                (P::Time, DataType::Time64(TimeUnit::Nanosecond)) => {
                    Col::Time(values!(Time64NanosecondType), 1_000_000_000)
                }
                (
                    P::Timestamp | P::TimestampNs | P::Timestamptz | P::TimestamptzNs,
                    DataType::Timestamp(unit, tz),
                ) => {
                    let zulu = matches!(p, P::Timestamptz | P::TimestamptzNs);
                    // Arrow stores instants for any zone; a zone-less column is
                    // only accepted for a zone-less Iceberg type.
                    if zulu != tz.is_some() || (zulu && !tz.as_deref().is_some_and(is_utc)) {
                        return Err(mismatch());
                    }
                    let (values, per_sec) = match unit {
                        TimeUnit::Second => (values!(TimestampSecondType), 1),
                        TimeUnit::Millisecond => (values!(TimestampMillisecondType), 1_000),
                        TimeUnit::Microsecond => (values!(TimestampMicrosecondType), 1_000_000),
                        TimeUnit::Nanosecond => (values!(TimestampNanosecondType), 1_000_000_000),
                    };
                    let nanos = matches!(p, P::TimestampNs | P::TimestamptzNs);
                    Col::Ts {
                        values,
                        per_sec,
                        nanos,
                        zulu,
                    }
                }
                (P::String, DataType::Utf8) => Col::Str(array.as_string()),
                (P::String, DataType::LargeUtf8) => Col::LargeStr(array.as_string()),
                (P::String, DataType::Utf8View) => Col::StrView(array.as_string_view()),
                (P::Uuid, DataType::FixedSizeBinary(16)) => Col::Uuid(array.as_fixed_size_binary()),
                (P::Fixed(n), DataType::FixedSizeBinary(w)) if *n == *w as u64 => {
                    Col::FixedBin(array.as_fixed_size_binary())
                }
                (P::Binary, DataType::FixedSizeBinary(_)) => {
                    Col::FixedBin(array.as_fixed_size_binary())
                }
                (P::Binary | P::Fixed(_), DataType::Binary) => Col::Bin(array.as_binary()),
                (P::Binary | P::Fixed(_), DataType::LargeBinary) => {
                    Col::LargeBin(array.as_binary())
                }
                (P::Binary | P::Fixed(_), DataType::BinaryView) => {
                    Col::BinView(array.as_binary_view())
                }
                _ => return Err(mismatch()),
            }
        }
        (Kind::Struct(plan), DataType::Struct(fields)) => {
            count_check(&node.path, plan.children.len(), fields.len())?;
            let array = array.as_struct();
            let children = plan
                .children
                .iter()
                .zip(fields.iter().zip(array.columns()))
                .map(|(child, (field, column))| {
                    check_id(child, field)?;
                    bind_node(child, column.as_ref(), longs)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Col::Struct(&plan.keys, children)
        }
        (Kind::List(element), DataType::List(field)) => {
            check_id(element, field)?;
            let array = array.as_list::<i32>();
            let child = bind_node(element, array.values().as_ref(), longs)?;
            Col::List(array.value_offsets(), Box::new(child))
        }
        (Kind::List(element), DataType::LargeList(field)) => {
            check_id(element, field)?;
            let array = array.as_list::<i64>();
            let child = bind_node(element, array.values().as_ref(), longs)?;
            Col::LargeList(array.value_offsets(), Box::new(child))
        }
        (Kind::List(element), DataType::FixedSizeList(field, size)) => {
            check_id(element, field)?;
            let array = array.as_fixed_size_list();
            let child = bind_node(element, array.values().as_ref(), longs)?;
            Col::FixedList(*size as usize, Box::new(child))
        }
        (Kind::Map(key, value), DataType::Map(..)) => {
            let array = array.as_map();
            let (key_field, value_field) = array.entries_fields();
            check_id(key, key_field)?;
            check_id(value, value_field)?;
            let keys = bind_node(key, array.keys().as_ref(), longs)?;
            let values = bind_node(value, array.values().as_ref(), longs)?;
            let object = matches!(key.kind, Kind::Prim(PrimitiveType::String));
            Col::Map(
                array.value_offsets(),
                Box::new(keys),
                Box::new(values),
                object,
            )
        }
        _ => return Err(mismatch()),
    };
    Ok(Bound {
        nulls: array.nulls().cloned(),
        col,
    })
}

fn write_object(keys: &[Key], children: &[Bound<'_>], row: usize, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (key, child)) in keys.iter().zip(children).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        key.write(out);
        child.write(row, out);
    }
    out.push(b'}');
}

fn write_elements(child: &Bound<'_>, start: usize, end: usize, out: &mut Vec<u8>) {
    out.push(b'[');
    for i in start..end {
        if i > start {
            out.push(b',');
        }
        child.write(i, out);
    }
    out.push(b']');
}

impl Bound<'_> {
    fn write(&self, row: usize, out: &mut Vec<u8>) {
        if let Some(nulls) = &self.nulls
            && nulls.is_null(row)
        {
            out.extend_from_slice(b"null");
            return;
        }
        match &self.col {
            Col::Null => out.extend_from_slice(b"null"),
            Col::Bool(a) => out.extend_from_slice(if a.value(row) { b"true" } else { b"false" }),
            Col::I8(v) => write_i64(v[row] as i64, out),
            Col::I16(v) => write_i64(v[row] as i64, out),
            Col::I32(v) => write_i64(v[row] as i64, out),
            Col::U8(v) => write_i64(v[row] as i64, out),
            Col::U16(v) => write_i64(v[row] as i64, out),
            Col::U32(v) => write_i64(v[row] as i64, out),
            Col::I64(v, mode) => write_long(v[row], *mode, out),
            Col::F32(v) => write_f32(v[row], out),
            Col::F64(v) => write_f64(v[row], out),
            Col::D32(v, s) => write_decimal(v[row] as i128, *s, out),
            Col::D64(v, s) => write_decimal(v[row] as i128, *s, out),
            Col::D128(v, s) => write_decimal(v[row], *s, out),
            Col::D256(v, s) => match v[row].to_i128() {
                Some(v) => write_decimal(v, *s, out),
                None => {
                    let text = v[row].to_string(); // beyond any Iceberg precision
                    let digits = text.trim_start_matches('-').as_bytes();
                    write_decimal_digits(text.starts_with('-'), digits, *s, out);
                }
            },
            Col::Date(v) => write_date(v[row] as i64, out),
            Col::Time(v, per_sec) => write_time(v[row], *per_sec, out),
            Col::Ts {
                values,
                per_sec,
                nanos,
                zulu,
            } => write_timestamp(values[row], *per_sec, *nanos, *zulu, out),
            Col::Str(a) => write_json_string(a.value(row), out),
            Col::LargeStr(a) => write_json_string(a.value(row), out),
            Col::StrView(a) => write_json_string(a.value(row), out),
            Col::Bin(a) => write_base64(a.value(row), out),
            Col::LargeBin(a) => write_base64(a.value(row), out),
            Col::BinView(a) => write_base64(a.value(row), out),
            Col::FixedBin(a) => write_base64(a.value(row), out),
            Col::Uuid(a) => write_uuid(a.value(row), out),
            Col::Struct(keys, children) => write_object(keys, children, row, out),
            Col::List(offsets, child) => {
                write_elements(child, offsets[row] as usize, offsets[row + 1] as usize, out)
            }
            Col::LargeList(offsets, child) => {
                write_elements(child, offsets[row] as usize, offsets[row + 1] as usize, out)
            }
            Col::FixedList(size, child) => write_elements(child, row * size, (row + 1) * size, out),
            Col::Map(offsets, keys, values, object) => {
                let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
                out.push(if *object { b'{' } else { b'[' });
                for i in start..end {
                    if i > start {
                        out.push(b',');
                    }
                    if *object {
                        let at = out.len();
                        keys.write(i, out);
                        if out[at..] == *b"null" {
                            out.truncate(at);
                            out.extend_from_slice(b"\"\"");
                        }
                        out.push(b':');
                        values.write(i, out);
                    } else {
                        out.extend_from_slice(b"{\"key\":");
                        keys.write(i, out);
                        out.extend_from_slice(b",\"value\":");
                        values.write(i, out);
                        out.push(b'}');
                    }
                }
                out.push(if *object { b'}' } else { b']' });
            }
            Col::Dict(keys, values) => values.write(keys[row], out),
        }
    }
}
