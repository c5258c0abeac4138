//! Names computed per event: the index name (from table and commit date), document ids
//! and routing values (from row columns).
//!
//! Templates are text with `{placeholder}`s; `{{` and `}}` stand for literal braces.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use std::fmt;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};

/// Longest `_id` OpenSearch accepts, in bytes; a longer one fails the whole `_bulk` request.
pub const MAX_ID_BYTES: usize = 512;

/// Longest index name OpenSearch accepts, in bytes.
const MAX_INDEX_BYTES: usize = 255;

/// Characters OpenSearch never allows in an index name.
const INDEX_FORBIDDEN: &[char] = &['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',', '#', ':'];

/// The date format of a bare `{date}`.
const DEFAULT_DATE_FORMAT: &str = "%Y.%m.%d";

/// Why a name could not be computed for one event; the event cannot be sent as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The row has no such column.
    #[error("the row has no column {0:?}")]
    MissingColumn(String),
    /// The column is null; ids and routing values must have a value.
    #[error("column {0:?} is null")]
    NullColumn(String),
    /// The document id came out empty.
    #[error("the document id is empty")]
    EmptyId,
    /// The document id is longer than OpenSearch allows.
    #[error("the document id is {0} bytes long; OpenSearch allows at most {MAX_ID_BYTES}")]
    IdTooLong(usize),
    /// The index name is not one OpenSearch accepts.
    #[error("index name {name:?} is invalid: {reason}")]
    IndexName {
        /// The rendered name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part<P> {
    Literal(String),
    Placeholder(P),
}

/// Splits `text` into literals and placeholders, resolving each placeholder with `resolve`.
fn parse<P>(
    text: &str,
    mut resolve: impl FnMut(&str) -> Result<P, String>,
) -> Result<Vec<Part<P>>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(format!("placeholder {{{name} is not closed"));
                        }
                        Some(c) => name.push(c),
                    }
                }
                if name.is_empty() {
                    return Err("`{}` names nothing; write `{{` for a literal brace".into());
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Placeholder(resolve(&name)?));
            }
            '}' => return Err("a lone `}`; write `}}` for a literal brace".into()),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// Writes parts back as template text.
fn unparse<P>(
    parts: &[Part<P>],
    f: &mut fmt::Formatter<'_>,
    name: impl Fn(&P) -> String,
) -> fmt::Result {
    for part in parts {
        match part {
            Part::Literal(text) => f.write_str(&text.replace('{', "{{").replace('}', "}}"))?,
            Part::Placeholder(p) => write!(f, "{{{}}}", name(p))?,
        }
    }
    Ok(())
}

/// A placeholder of an index name template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum IndexVar {
    /// `namespace.name`.
    Table,
    Namespace,
    Name,
    /// The commit time in UTC, formatted with a chrono `strftime` format.
    Date(String),
}

/// An index name, fixed or computed per event from the table and the commit time:
/// `{table}` (`namespace.name`), `{namespace}`, `{name}`, `{date}` or `{date:FORMAT}` (a
/// strftime format of the commit time in UTC; `{date}` is `{date:%Y.%m.%d}`).
/// Table names are lowercased: OpenSearch index names are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexTemplate {
    parts: Vec<Part<IndexVar>>,
}

impl IndexTemplate {
    /// Parses and checks a template; the error says what to change.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts = parse(text, |name| match name.split_once(':') {
            None => match name {
                "table" => Ok(IndexVar::Table),
                "namespace" => Ok(IndexVar::Namespace),
                "name" => Ok(IndexVar::Name),
                "date" => Ok(IndexVar::Date(DEFAULT_DATE_FORMAT.into())),
                other => Err(format!(
                    "unknown placeholder {{{other}}}; use {{table}}, {{namespace}}, {{name}} or {{date:%Y.%m.%d}}"
                )),
            },
            Some(("date", format)) => {
                check_date_format(format).map(|()| IndexVar::Date(format.into()))
            }
            Some((other, _)) => Err(format!(
                "placeholder {{{other}:…}} takes no format; only {{date:…}} does"
            )),
        })?;
        if parts.is_empty() {
            return Err("the index name is empty".into());
        }
        // Literal text is checked now, values at render time: a sample rendering catches a
        // bad literal or date format before any event is sent.
        let template = Self { parts };
        let sample = template.render_unchecked(
            "ns",
            "t",
            Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
        );
        check_index_name(&sample)
            .map_err(|reason| format!("names like {sample:?} are invalid: {reason}"))?;
        Ok(template)
    }

    /// Whether every event goes to the same index (the template has no placeholder).
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The index for an event of table `namespace.name` committed at `committed_at`.
    pub fn render(
        &self,
        namespace: &str,
        name: &str,
        committed_at: DateTime<Utc>,
    ) -> Result<String, RenderError> {
        let index = self.render_unchecked(namespace, name, committed_at);
        check_index_name(&index).map_err(|reason| RenderError::IndexName {
            name: index.clone(),
            reason,
        })?;
        Ok(index)
    }

    fn render_unchecked(&self, namespace: &str, name: &str, committed_at: DateTime<Utc>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Placeholder(IndexVar::Table) => {
                    out.push_str(&namespace.to_lowercase());
                    out.push('.');
                    out.push_str(&name.to_lowercase());
                }
                Part::Placeholder(IndexVar::Namespace) => out.push_str(&namespace.to_lowercase()),
                Part::Placeholder(IndexVar::Name) => out.push_str(&name.to_lowercase()),
                Part::Placeholder(IndexVar::Date(format)) => {
                    out.push_str(&committed_at.format(format).to_string())
                }
            }
        }
        out
    }
}

impl fmt::Display for IndexTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        unparse(&self.parts, f, |var| match var {
            IndexVar::Table => "table".into(),
            IndexVar::Namespace => "namespace".into(),
            IndexVar::Name => "name".into(),
            IndexVar::Date(format) => format!("date:{format}"),
        })
    }
}

fn check_date_format(format: &str) -> Result<(), String> {
    if format.is_empty() || StrftimeItems::new(format).any(|item| matches!(item, Item::Error)) {
        return Err(format!(
            "{format:?} is not a valid strftime date format, e.g. %Y.%m.%d"
        ));
    }
    Ok(())
}

/// OpenSearch's rules for index names.
fn check_index_name(name: &str) -> Result<(), String> {
    if let Some(c) = name.chars().find(|c| INDEX_FORBIDDEN.contains(c)) {
        return Err(format!(
            "it contains {c:?}; index names may not contain any of \\ / * ? \" < > | , # : or spaces"
        ));
    }
    if name.chars().any(char::is_uppercase) {
        return Err("it has upper-case letters; index names are lower case".into());
    }
    if name.starts_with(['_', '-', '+']) {
        return Err("it starts with `_`, `-` or `+`".into());
    }
    if name == "." || name == ".." {
        return Err("`.` and `..` are not index names".into());
    }
    if name.len() > MAX_INDEX_BYTES {
        return Err(format!(
            "it is {} bytes long; the limit is {MAX_INDEX_BYTES}",
            name.len()
        ));
    }
    Ok(())
}

/// A value computed from a row's columns, such as `{region}-{order_id}`; a bare column
/// name `region` means `{region}`. Column values are written as text: strings as they
/// are, numbers, booleans, objects and arrays as JSON; a null or missing column is an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTemplate {
    parts: Vec<Part<String>>,
}

impl FieldTemplate {
    /// Parses a template, or a bare column name when `text` has no braces.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("it is empty; name a column, or use a template such as {column}".into());
        }
        if !text.contains(['{', '}']) {
            return Ok(Self {
                parts: vec![Part::Placeholder(text.to_string())],
            });
        }
        let parts = parse(text, |name| Ok(name.to_string()))?;
        if !parts.iter().any(|p| matches!(p, Part::Placeholder(_))) {
            return Err("it names no column; use {column} placeholders".into());
        }
        Ok(Self { parts })
    }

    /// The columns the template reads.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Placeholder(c) => Some(c.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// The value for a row.
    pub fn render(&self, row: &Map<String, Value>) -> Result<String, RenderError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Placeholder(column) => push_column_text(&mut out, row, column)?,
            }
        }
        Ok(out)
    }
}

impl fmt::Display for FieldTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        unparse(&self.parts, f, String::clone)
    }
}

/// Appends a column's value as text (see [`FieldTemplate`]).
fn push_column_text(
    out: &mut String,
    row: &Map<String, Value>,
    column: &str,
) -> Result<(), RenderError> {
    match row.get(column) {
        None => Err(RenderError::MissingColumn(column.into())),
        Some(Value::Null) => Err(RenderError::NullColumn(column.into())),
        Some(Value::String(s)) => {
            out.push_str(s);
            Ok(())
        }
        Some(other) => {
            out.push_str(&other.to_string());
            Ok(())
        }
    }
}

/// How each event's document id is computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DocumentId {
    /// From the table's identifier columns: one column's value as text (see
    /// [`FieldTemplate`]); several columns' texts in identifier order, each with `\`
    /// written `\\` and `|` written `\|`, joined by `|`. So `(1, "a|b")` is `1|a\|b`,
    /// and distinct keys never share an id.
    IdentifierColumns,
    /// From a template over the row's columns.
    Template(FieldTemplate),
}

impl DocumentId {
    /// The document id of a row: the `after` image of an insert or update, the `before`
    /// image (or the key) of a delete.
    pub fn render(
        &self,
        identifier_columns: &[String],
        row: &Map<String, Value>,
    ) -> Result<String, RenderError> {
        let id = match self {
            DocumentId::Template(template) => template.render(row)?,
            DocumentId::IdentifierColumns => key_id(identifier_columns, row)?,
        };
        if id.is_empty() {
            return Err(RenderError::EmptyId);
        }
        if id.len() > MAX_ID_BYTES {
            return Err(RenderError::IdTooLong(id.len()));
        }
        Ok(id)
    }
}

fn key_id(columns: &[String], row: &Map<String, Value>) -> Result<String, RenderError> {
    if let [column] = columns {
        let mut id = String::new();
        push_column_text(&mut id, row, column)?;
        return Ok(id);
    }
    let mut id = String::new();
    let mut text = String::new();
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            id.push('|');
        }
        text.clear();
        push_column_text(&mut text, row, column)?;
        for c in text.chars() {
            if c == '\\' || c == '|' {
                id.push('\\');
            }
            id.push(c);
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn index_templates_render_table_and_commit_date() {
        let at = Utc.with_ymd_and_hms(2026, 7, 13, 8, 0, 0).unwrap();
        let cases = [
            ("orders", "orders"),
            ("{table}", "shop.orders"),
            (
                "cdc-{namespace}-{name}-{date}",
                "cdc-shop-orders-2026.07.13",
            ),
            ("{name}-{date:%Y-%m}", "orders-2026-07"),
        ];
        for (template, want) in cases {
            let t = IndexTemplate::parse(template).unwrap();
            assert_eq!(t.render("Shop", "Orders", at).unwrap(), want, "{template}");
            assert_eq!(
                IndexTemplate::parse(&t.to_string()).unwrap(),
                t,
                "round trip"
            );
        }
        assert!(IndexTemplate::parse("orders").unwrap().is_fixed());
        assert!(!IndexTemplate::parse("{table}").unwrap().is_fixed());
    }

    #[test]
    fn bad_index_templates_say_what_to_fix() {
        let cases = [
            ("", "empty"),
            ("{tabel}", "unknown placeholder {tabel}"),
            ("{table", "not closed"),
            ("a}b", "lone `}`"),
            ("{}", "names nothing"),
            ("{name:x}", "takes no format"),
            ("{date:%Q}", "not a valid strftime"),
            ("Orders", "upper-case"),
            ("_x{name}", "starts with"),
            ("{date:%H:%M}", "contains ':'"),
            ("a b", "contains ' '"),
        ];
        for (template, want) in cases {
            let err = IndexTemplate::parse(template).unwrap_err();
            assert!(err.contains(want), "{template}: {err}");
        }
    }

    #[test]
    fn rendered_index_names_are_checked() {
        let t = IndexTemplate::parse("{name}").unwrap();
        let err = t.render("ns", "a b", Utc::now()).unwrap_err();
        assert!(matches!(err, RenderError::IndexName { .. }), "{err}");
    }

    #[test]
    fn single_column_ids_are_the_value_as_text() {
        let r = row(
            json!({"id": 1042, "s": "a|b\\c", "big": 12345678901234567890u64, "b": true, "n": null}),
        );
        let id = |c: &str| DocumentId::IdentifierColumns.render(&cols(&[c]), &r);
        assert_eq!(id("id").unwrap(), "1042");
        assert_eq!(id("s").unwrap(), "a|b\\c", "no escaping with one column");
        assert_eq!(id("big").unwrap(), "12345678901234567890", "exact");
        assert_eq!(id("b").unwrap(), "true");
        assert_eq!(id("n").unwrap_err(), RenderError::NullColumn("n".into()));
        assert_eq!(
            id("zz").unwrap_err(),
            RenderError::MissingColumn("zz".into())
        );
    }

    #[test]
    fn composite_ids_are_escaped_and_joined_in_key_order() {
        let id = |a: Value, b: Value| {
            DocumentId::IdentifierColumns
                .render(&cols(&["b", "a"]), &row(json!({"a": a, "b": b})))
                .unwrap()
        };
        assert_eq!(
            id(json!(1), json!("x")),
            "x|1",
            "identifier order, not name order"
        );
        assert_eq!(id(json!("c"), json!("a|b")), "a\\|b|c");
        assert_eq!(id(json!("b|c"), json!("a")), "a|b\\|c");
        assert_eq!(id(json!("\\"), json!("a\\")), "a\\\\|\\\\");
        // Keys that a naive join would confuse stay distinct.
        assert_ne!(id(json!("c"), json!("a|b")), id(json!("b|c"), json!("a")));
        assert_ne!(id(json!("x"), json!("a\\")), id(json!("\\x"), json!("a")));
    }

    #[test]
    fn ids_must_be_non_empty_and_short() {
        let r = row(
            json!({"s": "", "long": "x".repeat(MAX_ID_BYTES + 1), "ok": "x".repeat(MAX_ID_BYTES)}),
        );
        let id = |c: &str| DocumentId::IdentifierColumns.render(&cols(&[c]), &r);
        assert_eq!(id("s").unwrap_err(), RenderError::EmptyId);
        assert_eq!(
            id("long").unwrap_err(),
            RenderError::IdTooLong(MAX_ID_BYTES + 1)
        );
        assert_eq!(id("ok").unwrap().len(), MAX_ID_BYTES);
    }

    #[test]
    fn field_templates_render_columns() {
        let r = row(json!({"region": "eu", "id": 7, "tags": ["a", 1]}));
        let render = |t: &str| FieldTemplate::parse(t).unwrap().render(&r).unwrap();
        assert_eq!(render("region"), "eu", "a bare column");
        assert_eq!(render("{region}-{id}"), "eu-7");
        assert_eq!(render("{{{id}}}"), "{7}");
        assert_eq!(render("{tags}"), r#"["a",1]"#);
        let t = FieldTemplate::parse("{region}/{id}").unwrap();
        assert_eq!(t.columns().collect::<Vec<_>>(), ["region", "id"]);
        assert_eq!(t.to_string(), "{region}/{id}");
        let id = DocumentId::Template(FieldTemplate::parse("{region}:{id}").unwrap());
        assert_eq!(id.render(&[], &r).unwrap(), "eu:7");
        for bad in ["", "{{x}}", "{a"] {
            assert!(FieldTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
