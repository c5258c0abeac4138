//! OpenAPI responses built from the catalogue: an operation's problem codes grouped by
//! status, each response describing its codes as "Phrase (`code`); phrase (`code`)".
//! Must not reach: `changelog`, `workers` (handlers read what workers published).

use std::collections::BTreeMap;

use utoipa::openapi::response::Response;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

use super::ProblemCode;

/// The responses of an operation answering `groups` (each a list of codes): one per
/// status, keyed by the status as OpenAPI writes it.
pub fn responses(groups: &[&[ProblemCode]]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<ProblemCode>> = BTreeMap::new();
    for &code in groups.iter().copied().flatten() {
        let codes = by_status.entry(code.status().as_u16()).or_default();
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    by_status
        .into_iter()
        .map(|(status, codes)| {
            (
                status.to_string(),
                problem_response(&describe(&codes)).into(),
            )
        })
        .collect()
}

/// "Phrase (`code`); phrase (`code`)" for `codes`, starting in upper case.
pub fn describe(codes: &[ProblemCode]) -> String {
    let text = codes
        .iter()
        .map(|c| format!("{} (`{}`)", c.summary(), c.as_str()))
        .collect::<Vec<_>>()
        .join("; ");
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

/// A problem+json response with `description`.
pub fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/problem+json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// Whether a response's description, written by [`describe`], names `code`.
pub fn names(description: &str, code: ProblemCode) -> bool {
    description.contains(&format!("(`{}`)", code.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProblemCode::*;

    #[test]
    fn codes_are_grouped_by_status_once_each() {
        let answers = responses(&[super::super::TABLE, &[TableNotFound, TableInUse]]);
        assert_eq!(answers.keys().collect::<Vec<_>>(), ["400", "404", "409"]);
        let RefOr::T(bad) = &answers["400"] else {
            panic!("inline")
        };
        for code in [InvalidTableId, InvalidPath, InvalidText] {
            assert!(names(&bad.description, code), "{code}");
        }
        assert!(!names(&bad.description, MalformedCursor));
        assert!(
            bad.description
                .starts_with("Not a table id (`invalid_table_id`); a path")
        );
        let RefOr::T(gone) = &answers["404"] else {
            panic!("inline")
        };
        assert_eq!(gone.description, "No such table (`table_not_found`)");
    }
}
