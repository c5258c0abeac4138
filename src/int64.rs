//! 64-bit ids in JSON: decimal strings in every answer, because browsers (and every
//! JSON parser that reads numbers as doubles) round integers past 2^53, and strings or
//! numbers in requests, so clients that kept a number can pass it back.
//! Must not reach: the rest of the crate.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};

/// A snapshot id, sequence number or other 64-bit id, written as a decimal string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Int64(pub i64);

impl From<i64> for Int64 {
    fn from(n: i64) -> Self {
        Self(n)
    }
}

impl From<Int64> for i64 {
    fn from(n: Int64) -> Self {
        n.0
    }
}

impl fmt::Display for Int64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Int64 {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

impl Serialize for Int64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Int64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Int64Visitor)
    }
}

struct Int64Visitor;

impl Visitor<'_> for Int64Visitor {
    type Value = Int64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 64-bit integer, as a string of digits or a number")
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Int64, E> {
        Ok(Int64(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Int64, E> {
        i64::try_from(n)
            .map(Int64)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Int64, E> {
        s.parse()
            .map_err(|_| E::invalid_value(de::Unexpected::Str(s), &self))
    }
}

impl utoipa::PartialSchema for Int64 {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .pattern(Some(r"^-?[0-9]{1,19}$"))
            .description(Some(
                "A 64-bit integer as a string of decimal digits (JSON numbers lose precision \
                 past 2^53). Requests also accept a JSON number.",
            ))
            .examples([serde_json::json!("8342078109123456789")])
            .into()
    }
}

impl utoipa::ToSchema for Int64 {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_strings_and_requests_take_strings_or_numbers() {
        let id = Int64(8_342_078_109_123_456_789);
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"8342078109123456789\""
        );
        for text in ["\"8342078109123456789\"", "8342078109123456789"] {
            assert_eq!(serde_json::from_str::<Int64>(text).unwrap(), id, "{text}");
        }
        let value: serde_json::Value = serde_json::from_str("-7").unwrap();
        assert_eq!(serde_json::from_value::<Int64>(value).unwrap(), Int64(-7));
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        for text in [
            "\"12a\"",
            "\"\"",
            "1.5",
            "18446744073709551615",
            "true",
            "null",
        ] {
            let err = serde_json::from_str::<Int64>(text).unwrap_err().to_string();
            assert!(err.contains("64-bit integer"), "{text}: {err}");
        }
    }
}
