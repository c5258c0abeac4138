//! The committed OpenAPI document matches the code, and every operation is documented.

use crate::support::Node;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/icefeed.json");

#[test]
fn committed_document_matches_the_code() {
    let generated = icefeed::api::openapi_json();
    if std::env::var_os("ICEFEED_UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/icefeed.json is stale: run `cargo run -- openapi > openapi/icefeed.json` \
         (or the tests with ICEFEED_UPDATE_OPENAPI=1) and commit it"
    );
}

#[test]
fn every_operation_has_summary_tag_id_and_errors() {
    let doc: serde_json::Value = serde_json::from_str(&icefeed::api::openapi_json()).unwrap();
    let operational = ["/healthz", "/metrics"];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{method} {path}");
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{what}: summary"
            );
            assert!(op["operationId"].as_str().is_some(), "{what}: operationId");
            assert!(!op["tags"].as_array().unwrap().is_empty(), "{what}: tag");
            let responses = op["responses"].as_object().unwrap();
            if !operational.contains(&path.as_str()) {
                assert!(
                    responses
                        .keys()
                        .any(|code| code.starts_with('4') || code.starts_with('5')),
                    "{what}: error responses"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_service_serves_the_document() {
    let (node, _store) = Node::start_fresh().await;
    let served = node.get_text("/openapi.json").await;
    assert_eq!(served, icefeed::api::openapi_json());
    node.shutdown().await;
}

/// Every `$ref` in `value`, with where it was found.
fn refs<'a>(value: &'a serde_json::Value, at: &str, out: &mut Vec<(String, &'a str)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(target)) => out.push((at.to_string(), target)),
                    _ => refs(v, &format!("{at}/{k}"), out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_reference_resolves() {
    let doc: serde_json::Value = serde_json::from_str(&icefeed::api::openapi_json()).unwrap();
    let mut found = Vec::new();
    refs(&doc, "", &mut found);
    assert!(!found.is_empty());
    for (at, target) in found {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: external reference {target}"));
        assert!(
            doc.pointer(pointer).is_some(),
            "{at}: {target} is not in the document (SDK generators drop the operation)"
        );
    }
}

#[test]
fn errors_are_problem_documents_and_bodies_document_422() {
    let doc: serde_json::Value = serde_json::from_str(&icefeed::api::openapi_json()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{method} {path}");
            let responses = op["responses"].as_object().unwrap();
            for (code, response) in responses {
                if code.starts_with('4') || code.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/problem+json"]["schema"]["$ref"],
                        "#/components/schemas/Problem",
                        "{what} {code}: not a problem document"
                    );
                }
            }
            // A JSON body of the wrong shape answers 422 invalid_request_body.
            if op.get("requestBody").is_some() {
                assert!(responses.contains_key("422"), "{what}: 422 for bad bodies");
            }
        }
    }
}
