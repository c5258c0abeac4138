//! Deserializing request bodies strictly: a JSON array is never read as a struct.
//!
//! serde's derived structs accept a sequence of their fields in declaration order, so
//! through `serde_json` a body `[true]` reads as `{"paused": true}` and `{"retention":
//! [1]}` as `{"retention": {"max_age_ms": 1}}`. [`from_value`] reads a parsed body like
//! `serde_json::from_value` does, except that a struct must be a JSON object at every
//! depth; errors name the field they are about (`retention.max_age_ms: …`).
//!
//! Values buffered by untagged or internally tagged enums are read by serde itself and
//! keep its leniency; the enums of request bodies check their variants' shapes.
//! Must not reach: the rest of the crate.

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};
use serde_json::{Map, Value};

/// Why a body does not have the target's shape, and where.
#[derive(Debug)]
pub struct Error {
    /// Path segments, innermost first while the error travels outwards.
    path: Vec<Segment>,
    message: String,
}

#[derive(Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

impl Error {
    fn at(mut self, segment: Segment) -> Self {
        self.path.push(segment);
        self
    }

    /// Where in the body the error is, e.g. `retention.max_age_ms` or `tables[2]`;
    /// empty for the body itself.
    pub fn path(&self) -> String {
        let mut path = String::new();
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Key(key) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Segment::Index(i) => path.push_str(&format!("[{i}]")),
            }
        }
        path
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            path if path.is_empty() => f.write_str(&self.message),
            path => write!(f, "{path}: {}", self.message),
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self {
            path: Vec::new(),
            message: msg.to_string(),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        de::Error::custom(e)
    }
}

/// Reads `T` from `value`, refusing arrays where `T` has structs.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, Error> {
    T::deserialize(Strict(value))
}

/// A deserializer over a borrowed JSON value.
#[derive(Clone, Copy)]
struct Strict<'de>(&'de Value);

/// Leaf values are read by `serde_json` itself: numbers keep their exact behaviour.
macro_rules! forward_to_value {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match self.0 {
                    Value::Array(_) | Value::Object(_) => self.deserialize_any(visitor),
                    leaf => Ok(leaf.$method(visitor)?),
                }
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visit_array(items, visitor),
            Value::Object(map) => visit_object(map, visitor),
            leaf => Ok(leaf.deserialize_any(visitor)?),
        }
    }

    forward_to_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visit_array(items, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visit_object(map, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    /// The point of it all: only an object is a struct.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visit_object(map, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &"a JSON object")),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            // A unit variant by name, the only externally tagged enums of request bodies.
            Value::String(variant) => visitor.visit_enum(variant.as_str().into_deserializer()),
            other => Ok(other.deserialize_enum(name, variants, visitor)?),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn visit_array<'de, V: Visitor<'de>>(items: &'de [Value], visitor: V) -> Result<V::Value, Error> {
    let mut seq = Seq {
        items: items.iter(),
        index: 0,
    };
    let value = visitor.visit_seq(&mut seq)?;
    if seq.items.len() == 0 {
        Ok(value)
    } else {
        Err(de::Error::invalid_length(
            items.len(),
            &"fewer elements in array",
        ))
    }
}

fn visit_object<'de, V: Visitor<'de>>(
    map: &'de Map<String, Value>,
    visitor: V,
) -> Result<V::Value, Error> {
    let mut access = Object {
        entries: map.iter(),
        value: None,
    };
    let value = visitor.visit_map(&mut access)?;
    if access.entries.len() == 0 {
        Ok(value)
    } else {
        Err(de::Error::invalid_length(
            map.len(),
            &"fewer elements in map",
        ))
    }
}

struct Seq<'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
}

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(Strict(item))
            .map(Some)
            .map_err(|e| e.at(Segment::Index(index)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Object<'de> {
    entries: serde_json::map::Iter<'de>,
    value: Option<(&'de String, &'de Value)>,
}

impl<'de> MapAccess<'de> for Object<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        // Keys are read like string values, so an unknown field is named like any other.
        seed.deserialize(Key(key))
            .map(Some)
            .map_err(|e| e.at(Segment::Key(key.clone())))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| <Error as de::Error>::custom("value asked for before its key"))?;
        seed.deserialize(Strict(value))
            .map_err(|e| e.at(Segment::Key(key.clone())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An object key: a string, or a number written as a string for maps with numeric keys.
struct Key<'de>(&'de str);

macro_rules! numeric_key {
    ($($method:ident => $visit:ident: $ty:ty),*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match self.0.parse::<$ty>() {
                    Ok(n) => visitor.$visit(n),
                    Err(_) => visitor.visit_borrowed_str(self.0),
                }
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Key<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0)
    }

    numeric_key! {
        deserialize_i8 => visit_i8: i8, deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32, deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8, deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32, deserialize_u64 => visit_u64: u64
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[serde(default)]
        a: Option<i64>,
        #[serde(default)]
        b: Option<u32>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default)]
        paused: Option<bool>,
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        any: Option<Value>,
        #[serde(default)]
        counts: BTreeMap<u32, String>,
        #[serde(default)]
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Pull,
        Push,
    }

    #[test]
    fn objects_read_as_serde_json_reads_them() {
        let value = json!({"paused": true, "inner": {"a": -1, "b": 7}, "list": [{"a": 2}],
                           "any": [1, {"x": [null, 1.5, 123456789012345678901234567890u128]}],
                           "counts": {"3": "three"}, "kind": "push"});
        let strict: Outer = from_value(&value).unwrap();
        let lenient: Outer = serde_json::from_value(value).unwrap();
        assert_eq!(strict, lenient);
        assert_eq!(strict.kind, Some(Kind::Push));
        assert_eq!(strict.counts[&3], "three");
    }

    #[test]
    fn arrays_are_not_structs_at_any_depth() {
        for (value, path) in [
            (json!([true]), ""),
            (json!({"inner": [1, 2]}), "inner"),
            (json!({"list": [{"a": 1}, [2]]}), "list[1]"),
        ] {
            let lenient = serde_json::from_value::<Outer>(value.clone());
            assert!(lenient.is_ok(), "serde_json itself takes {value}");
            let e = from_value::<Outer>(&value).unwrap_err();
            assert_eq!(e.path(), path, "{e}");
            assert!(e.to_string().contains("a JSON object"), "{e}");
        }
    }

    #[test]
    fn errors_name_their_field() {
        let e = from_value::<Outer>(&json!({"inner": {"b": -1}})).unwrap_err();
        assert_eq!(e.path(), "inner.b");
        let e = from_value::<Outer>(&json!({"inner": {"c": 1}})).unwrap_err();
        assert!(
            e.to_string().starts_with("inner.c: unknown field `c`"),
            "{e}"
        );
        let e = from_value::<Outer>(&json!({"kind": "poll"})).unwrap_err();
        assert_eq!(e.path(), "kind");
        assert!(from_value::<Outer>(&json!({"paused": "yes"})).is_err());
    }
}
