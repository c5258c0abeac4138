//! Retrying requests that failed for now: exponential backoff with full jitter, bounded,
//! and cut short by cancellation.
//! Must not reach: `api`, `store`
//! (the cluster's protocol only; what to push is `delivery::push`'s).

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::client::{RequestError, SendError};
use super::response::is_retryable_status;

/// How failed requests are retried; its values come from the `push.*` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Longest wait before the first retry.
    pub initial_delay: Duration,
    /// Longest wait before any retry.
    pub max_delay: Duration,
    /// Retries after the first attempt before giving up.
    pub max_retries: u32,
}

impl RetryPolicy {
    /// The longest wait before retry `retry` (0 is the first): the initial delay doubled
    /// per retry, capped at the maximum.
    pub fn ceiling(&self, retry: u32) -> Duration {
        self.initial_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay)
    }

    /// The wait before retry `retry`: uniform between zero and the ceiling ("full
    /// jitter"), so that many clients throttled together do not come back together.
    pub fn delay(&self, retry: u32) -> Duration {
        let ceiling = self.ceiling(retry);
        ceiling.mul_f64(rand::rng().random_range(0.0..=1.0))
    }
}

/// Waits `delay`, or less if `cancel` fires first.
pub async fn sleep_or_cancel(delay: Duration, cancel: &CancellationToken) -> Result<(), SendError> {
    tokio::select! {
        _ = tokio::time::sleep(delay) => Ok(()),
        _ = cancel.cancelled() => Err(SendError::Cancelled),
    }
}

/// Runs `op` until it succeeds, fails for good (a 4xx answer other than 429), or has
/// been retried `policy.max_retries` times; cancelling stops an attempt or a wait.
pub async fn retry<T, F, Fut>(
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    mut op: F,
) -> Result<T, SendError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let mut retries = 0;
    loop {
        let result = tokio::select! {
            result = op() => result,
            _ = cancel.cancelled() => return Err(SendError::Cancelled),
        };
        match result {
            Ok(value) => return Ok(value),
            Err(RequestError::Status(e)) if !is_retryable_status(e.status) => {
                return Err(SendError::Refused(e));
            }
            Err(e) if retries >= policy.max_retries => {
                return Err(SendError::GaveUp {
                    attempts: retries + 1,
                    last: Box::new(e),
                });
            }
            Err(e) => {
                let delay = policy.delay(retries);
                tracing::warn!(error = %e, retry = retries + 1, delay_ms = delay.as_millis() as u64, "OpenSearch request failed; retrying");
                sleep_or_cancel(delay, cancel).await?;
                retries += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::opensearch::response::OpenSearchError;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn fast() -> RetryPolicy {
        RetryPolicy {
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
            max_retries: 3,
        }
    }

    fn status(status: u16) -> RequestError {
        RequestError::Status(OpenSearchError {
            status,
            error_type: "t".into(),
            reason: "r".into(),
        })
    }

    #[test]
    fn delays_double_up_to_the_cap_with_full_jitter() {
        let p = RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_retries: 5,
        };
        let ceilings: Vec<u128> = (0..6).map(|r| p.ceiling(r).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.ceiling(u32::MAX), p.max_delay, "no overflow");
        let delays: Vec<Duration> = (0..200).map(|_| p.delay(3)).collect();
        assert!(delays.iter().all(|d| *d <= p.ceiling(3)));
        assert!(
            delays.iter().any(|d| *d < p.ceiling(3) / 2),
            "spread below half the ceiling"
        );
        assert!(delays.iter().any(|d| *d > p.ceiling(3) / 2), "and above");
    }

    #[tokio::test]
    async fn retryable_failures_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let result = retry(&fast(), &CancellationToken::new(), || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(status(429)),
                1 => Err(RequestError::Connection("refused".into())),
                2 => Err(status(503)),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);
    }

    #[tokio::test]
    async fn permanent_failures_are_not_retried() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = retry(&fast(), &CancellationToken::new(), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(status(403))
        })
        .await;
        assert!(matches!(result, Err(SendError::Refused(e)) if e.status == 403));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn retries_are_bounded() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = retry(&fast(), &CancellationToken::new(), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(status(503))
        })
        .await;
        assert!(
            matches!(result, Err(SendError::GaveUp { attempts: 4, .. })),
            "{result:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn cancellation_stops_a_long_backoff() {
        let policy = RetryPolicy {
            initial_delay: Duration::from_secs(3600),
            max_delay: Duration::from_secs(3600),
            max_retries: 3,
        };
        let cancel = CancellationToken::new();
        let cancelling = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cancelling.cancel();
        });
        let started = std::time::Instant::now();
        let result: Result<(), _> = retry(&policy, &cancel, || async { Err(status(429)) }).await;
        assert!(matches!(result, Err(SendError::Cancelled)), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
