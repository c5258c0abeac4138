//! Extractors whose rejections are problem documents with stable codes, and the checks
//! every request passes before a handler sees it.
//!
//! PostgreSQL refuses NUL in `text` and `\u0000` in `jsonb` (and numbers beyond its
//! `numeric`), so path parameters, query parameters and every string, key and number of
//! a JSON body are checked here, once for every handler: hostile text answers `400
//! invalid_text` naming the field instead of a 500 from the database. A body must be a
//! JSON object (`[true]` is not `{"paused": true}`), at every depth where a struct is
//! read (see [`super::strict`]).
//! Must not reach: `store`, `delivery` (requests are parsed before anything is read).

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, ProblemCode};
use super::strict;

/// Characters of a JSON number literal, at most: enough for any `f64` and any 64-bit
/// integer written out in full, far below what PostgreSQL's `numeric` refuses.
const MAX_NUMBER_LEN: usize = 100;
/// The largest decimal exponent a JSON number may be written with (a double's reach).
const MAX_EXPONENT: i32 = 400;

/// A JSON object body; a wrong media type answers `415 unsupported_media_type`, a body
/// over `api.max_body_bytes` `413 request_body_too_large`, invalid JSON `400` and a body
/// of the wrong shape `422 invalid_request_body`, text PostgreSQL cannot store `400
/// invalid_text` (numbers it cannot store `400 invalid_number`).
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::new(
                ProblemCode::UnsupportedMediaType,
                "the body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                let max = state.settings.api.max_body_bytes;
                ApiError::new(
                    ProblemCode::RequestBodyTooLarge,
                    format!("the body is larger than {max} bytes, the most this node takes"),
                )
                .with("max_bytes", max)
            } else {
                ApiError::new(ProblemCode::MalformedBody, e.body_text())
            }
        })?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::new(
                ProblemCode::MalformedBody,
                format!("the body is not valid JSON: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(ApiError::new(
                ProblemCode::InvalidRequestBody,
                format!(
                    "the body must be a JSON object; got {}",
                    kind_of(&value).unwrap_or("a number")
                ),
            ));
        }
        check_value(&value, &mut String::new())?;
        let parsed = strict::from_value(&value).map_err(|e| {
            let field = e.path();
            let problem = ApiError::new(
                ProblemCode::InvalidRequestBody,
                format!("the body does not have the documented shape: {e}"),
            );
            match field.is_empty() {
                true => problem,
                false => problem.with("field", field),
            }
        })?;
        Ok(Json(parsed))
    }
}

/// Whether the request says its body is JSON: `application/json` or `application/*+json`.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(media) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", subtype)) => subtype == "json" || subtype.ends_with("+json"),
        _ => false,
    }
}

fn kind_of(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => return None,
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    })
}

/// 400 `invalid_text`: `field` holds a NUL character.
fn invalid_text(field: String) -> ApiError {
    ApiError::new(
        ProblemCode::InvalidText,
        format!("{field} contains a NUL character (U+0000), which icefeed cannot store; remove it"),
    )
    .with("field", field)
}

/// Checks every string, key and number of a body, depth first; `path` is where `value` is.
fn check_value(value: &Value, path: &mut String) -> Result<(), ApiError> {
    let field = |path: &str| match path {
        "" => "the body".to_string(),
        path => path.to_string(),
    };
    match value {
        Value::String(s) if s.contains('\0') => Err(invalid_text(field(path))),
        Value::Number(n) => check_number(n, &field(path)),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_value(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                let plain = !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b));
                match (plain, path.is_empty()) {
                    (true, true) => path.push_str(key),
                    (true, false) => path.push_str(&format!(".{key}")),
                    (false, _) => path.push_str(&format!("[{key:?}]")),
                }
                if key.contains('\0') {
                    return Err(invalid_text(format!("the key {path}")));
                }
                check_value(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A number must fit a double (finite, and not a nonzero value too small for one) in at
/// most [`MAX_NUMBER_LEN`] characters; PostgreSQL's `jsonb` refuses some that do not.
fn check_number(n: &serde_json::Number, field: &str) -> Result<(), ApiError> {
    let literal = n.to_string();
    let mut parts = literal.split(['e', 'E']);
    let mantissa = parts.next().unwrap_or_default();
    // PostgreSQL refuses `0e-999999` too: the exponent itself is bounded.
    let exponent_ok = parts
        .next()
        .is_none_or(|e| e.parse::<i32>().is_ok_and(|e| e.abs() <= MAX_EXPONENT));
    let underflows =
        || n.as_f64() == Some(0.0) && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if literal.len() > MAX_NUMBER_LEN
        || !exponent_ok
        || n.as_f64().is_none_or(|f| !f.is_finite())
        || underflows()
    {
        let shown: String = literal.chars().take(24).collect();
        let ellipsis = if literal.len() > 24 { "…" } else { "" };
        return Err(ApiError::new(
            ProblemCode::InvalidNumber,
            format!(
                "{field} is {shown}{ellipsis}: numbers must be within the range of a double \
                 and at most {MAX_NUMBER_LEN} characters long"
            ),
        )
        .with("field", field));
    }
    Ok(())
}

/// Query parameters; bad ones answer `invalid_query`, NUL in any `invalid_text`.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if let Some(query) = parts.uri.query() {
            for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
                if name.contains('\0') || value.contains('\0') {
                    return Err(invalid_text(format!("query parameter {name:?}")));
                }
            }
        }
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Query(value))
    }
}

/// Path parameters; bad ones answer `invalid_path`, NUL in any `invalid_text`.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::new(ProblemCode::InvalidPath, e.body_text()))?;
        if let Some((name, _)) = raw.iter().find(|(_, value)| value.contains('\0')) {
            return Err(invalid_text(format!("path parameter {name:?}")));
        }
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Path(value))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError::new(ProblemCode::InvalidQuery, e.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        ApiError::new(ProblemCode::InvalidPath, e.body_text())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problem(value: Value) -> Option<(String, Value)> {
        check_value(&value, &mut String::new()).err().map(|e| {
            let code = e.code().to_string();
            (code, e.into_problem().extensions["field"].clone())
        })
    }

    #[test]
    fn nul_anywhere_is_named() {
        assert_eq!(problem(json!({"name": "ok", "n": [1, "two"]})), None);
        assert_eq!(
            problem(json!({"name": "a\u{0}b"})),
            Some(("invalid_text".into(), json!("name")))
        );
        assert_eq!(
            problem(json!({"catalog": {"properties": {"s3.endpoint": "x\u{0}"}}})),
            Some((
                "invalid_text".into(),
                json!("catalog.properties[\"s3.endpoint\"]")
            ))
        );
        assert_eq!(
            problem(json!({"catalog": {"properties": {"k\u{0}": "v"}}})),
            Some((
                "invalid_text".into(),
                json!("the key catalog.properties[\"k\\0\"]")
            ))
        );
        assert_eq!(
            problem(json!({"tables": ["a", ["b", "\u{0}"]]})),
            Some(("invalid_text".into(), json!("tables[1][1]")))
        );
    }

    #[test]
    fn numbers_postgresql_refuses_are_named() {
        let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        for fine in [
            "{\"n\": 1}",
            "{\"n\": -9223372036854775808}",
            "{\"n\": 18446744073709551615}",
            "{\"n\": 1.5e300}",
            "{\"n\": 0.0}",
            "{\"n\": 5e-324}",
        ] {
            assert_eq!(problem(parse(fine)), None, "{fine}");
        }
        for bad in [
            "{\"m\": {\"n\": 1e999999}}",
            "{\"m\": {\"n\": -1e400}}",
            "{\"m\": {\"n\": 1e-999999}}",
            "{\"m\": {\"n\": 0e-999999}}",
            "{\"m\": {\"n\": 0e999999}}",
        ] {
            assert_eq!(
                problem(parse(bad)),
                Some(("invalid_number".into(), json!("m.n"))),
                "{bad}"
            );
        }
        let long = format!("{{\"m\": {{\"n\": 1.{}}}}}", "0".repeat(200));
        assert_eq!(
            problem(parse(&long)),
            Some(("invalid_number".into(), json!("m.n")))
        );
    }

    #[test]
    fn json_media_types() {
        let with = |media: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, media.parse().unwrap());
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!with("application/jsonx"));
        assert!(!with("text/json"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
