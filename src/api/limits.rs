//! Ranges of the numeric (and time) fields of requests: what PostgreSQL intervals and
//! timestamps, chrono and JSON clients can all hold. A value out of range answers its
//! field's stable code with `field`, `minimum` and `maximum` members.
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use chrono::{DateTime, Datelike, Utc};
use serde_json::Value;

use super::error::{ApiError, ProblemCode};

/// The longest duration a request may give, in milliseconds: 100 years (of 365.25 days).
pub const MAX_DURATION_MS: i64 = crate::store::Retention::MAX_AGE_MS;

/// The largest count a request may give: the largest integer every JSON client reads
/// exactly (2^53 − 1).
pub const MAX_COUNT: i64 = (1 << 53) - 1;

/// The earliest and latest timestamps a request may give: RFC 3339's four-digit years
/// (PostgreSQL refuses years before 4713 BC, which chrono parses).
pub const TIMESTAMPS: (&str, &str) = ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z");

/// `code` (a 400): `field` is `got`, outside `minimum..=maximum`; `unit` follows the bounds
/// in the message (e.g. ` seconds`).
pub fn out_of_range(
    code: ProblemCode,
    field: &str,
    minimum: impl Into<Value> + std::fmt::Display,
    maximum: impl Into<Value> + std::fmt::Display,
    unit: &str,
    got: impl std::fmt::Display,
) -> ApiError {
    ApiError::new(
        code,
        format!("{field} must be between {minimum} and {maximum}{unit}; got {got}"),
    )
    .with("field", field)
    .with("minimum", minimum)
    .with("maximum", maximum)
}

/// Checks that `value` of `field` is within `minimum..=maximum`.
pub fn check<T>(
    code: ProblemCode,
    field: &str,
    value: T,
    minimum: T,
    maximum: T,
) -> Result<T, ApiError>
where
    T: PartialOrd + Copy + Into<Value> + std::fmt::Display,
{
    if minimum <= value && value <= maximum {
        Ok(value)
    } else {
        Err(out_of_range(code, field, minimum, maximum, "", value))
    }
}

/// Checks a timestamp of `field`: `400 timestamp_out_of_range` outside [`TIMESTAMPS`].
pub fn check_timestamp(field: &str, timestamp: &DateTime<Utc>) -> Result<(), ApiError> {
    if (1..=9999).contains(&timestamp.year()) {
        return Ok(());
    }
    let (minimum, maximum) = TIMESTAMPS;
    Err(out_of_range(
        ProblemCode::TimestampOutOfRange,
        field,
        minimum,
        maximum,
        "",
        timestamp.to_rfc3339(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_hold_in_postgresql_and_chrono() {
        // 100 years of milliseconds as a chrono duration and back.
        let d = chrono::TimeDelta::try_milliseconds(MAX_DURATION_MS).unwrap();
        assert_eq!(d.num_days(), 36_525);
        assert!(Utc::now().checked_sub_signed(d).is_some());
        assert_eq!(MAX_COUNT as f64 as i64, MAX_COUNT);
        let p = check(ProblemCode::LimitOutOfRange, "f", 0i64, 1, 5)
            .unwrap_err()
            .into_problem();
        assert_eq!(p.code, "limit_out_of_range");
        assert_eq!(p.extensions["field"], "f");
        assert_eq!(p.extensions["maximum"], 5);
        let early: DateTime<Utc> = "-5000-01-01T00:00:00Z".parse().unwrap();
        assert!(check_timestamp("t", &early).is_err());
        let late: DateTime<Utc> = TIMESTAMPS.1.parse().unwrap();
        assert!(check_timestamp("t", &late).is_ok());
    }
}
