//! How much work one node takes on before it answers "later" instead of slowing down.
//! Must not reach: the rest of the crate.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Admission limits of the HTTP API.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Ordinary requests (everything but streams and long polls) a node works on at once;
    /// more answer `503 overloaded` at once.
    pub max_concurrent_requests: usize,
    /// Open event streams and waiting long polls on a node; more answer `503 overloaded`.
    pub max_waiting_requests: usize,
    /// Open event streams and waiting long polls of one client (its API token, or its
    /// address without one) on a node; more answer `429 too_many_waiting_requests`.
    pub max_waiting_per_client: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            max_concurrent_requests: 256,
            max_waiting_requests: 2048,
            max_waiting_per_client: 100,
        }
    }
}

impl LimitSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let Self {
            max_concurrent_requests,
            max_waiting_requests,
            max_waiting_per_client,
        } = *self;
        if max_concurrent_requests == 0 || max_waiting_requests == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_concurrent_requests and limits.max_waiting_requests must be \
                 positive"
                    .into(),
            ));
        }
        if !(1..=max_waiting_requests).contains(&max_waiting_per_client) {
            return Err(ConfigError::Invalid(format!(
                "limits.max_waiting_per_client must be between 1 and \
                 limits.max_waiting_requests ({max_waiting_requests})"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_must_leave_room() {
        assert!(LimitSettings::default().validate().is_ok());
        let with = |requests, waiting, per_client| LimitSettings {
            max_concurrent_requests: requests,
            max_waiting_requests: waiting,
            max_waiting_per_client: per_client,
        };
        for bad in [
            with(0, 10, 1),
            with(1, 0, 1),
            with(1, 10, 0),
            with(1, 10, 11),
        ] {
            let refused = bad.validate().unwrap_err().to_string();
            assert!(refused.contains("limits."), "{bad:?}: {refused}");
        }
        assert!(with(1, 10, 10).validate().is_ok());
    }
}
