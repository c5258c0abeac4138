//! Secret strings (passwords, tokens): kept out of `Debug` output and so out of logs.
//! Must not reach: `config`, `store`.

use serde::{Deserialize, Serialize};

use crate::catalog::REDACTED;

/// A secret string: serialized as it is (to be stored), never printed by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}
