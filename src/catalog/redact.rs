//! Keeping catalog secrets out of API answers and logs.
//! Must not reach: the rest of the crate (settings in, settings out).

use serde_json::Value;

/// What secret values are replaced with.
pub const REDACTED: &str = "********";

/// Property names whose values are secrets.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "secret",
        "password",
        "token",
        "credential",
        "access-key",
        "session-key",
        "sas",
        "account-key",
        "private-key",
        "authorization",
    ]
    .iter()
    .any(|w| key.contains(w))
}

/// A copy of catalog settings with secret property values and URL passwords masked.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(_) if is_secret_key(k) => Value::String(REDACTED.into()),
                        Value::String(s) => Value::String(redact_url(s)),
                        other => redact(other),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// Masks the password of a URL such as `postgres://user:pw@host/db`; other text is kept.
pub fn redact_url(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return text.to_string();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return text.to_string();
    };
    format!(
        "{}{}:{REDACTED}{}",
        &text[..scheme_end + 3],
        &userinfo[..colon],
        &text[scheme_end + 3 + at..]
    )
}

/// Masks URL passwords inside free text such as an error message.
pub fn redact_text(text: &str) -> String {
    text.split(' ')
        .map(redact_url)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_and_the_rest_kept() {
        let settings = json!({
            "type": "rest",
            "uri": "https://user:hunter2@catalog.example/api",
            "properties": {"credential": "id:secret", "token": "t", "s3.secret-access-key": "k",
                           "s3.access-key-id": "AKIA", "scope": "catalog",
                           "header.Authorization": "Bearer abc", "adls.account-key": "acct"}
        });
        let shown = redact(&settings).to_string();
        for secret in [
            "hunter2",
            "id:secret",
            "\"t\"",
            "\"k\"",
            "AKIA",
            "Bearer",
            "acct",
        ] {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
        assert!(shown.contains("https://user:********@catalog.example/api"));
        assert!(shown.contains("\"scope\":\"catalog\""));
    }

    #[test]
    fn urls_without_passwords_are_unchanged() {
        for url in [
            "sqlite:/tmp/c.db",
            "postgres://host/db",
            "http://u@h/x",
            "not a url",
        ] {
            assert_eq!(redact_url(url), url);
        }
        assert_eq!(
            redact_url("postgres://a:b@h:5432/db?x=@"),
            "postgres://a:********@h:5432/db?x=@"
        );
    }
}
