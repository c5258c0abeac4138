//! The node's long-running services (scheduler, task workers, pusher, janitor, change
//! notifier), supervised: one that panics or returns before the node stops is logged,
//! counted (`icefeed_service_restarts_total`) and started again after a backoff, and
//! `/readyz` fails while it is down. Without this a dead scheduler would leave a node
//! that answers every health check and publishes nothing.
//! Must not reach: `store`, `api` (it restarts services, whatever they do).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::telemetry::metric::SERVICE_RESTARTS;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The first wait before a restart; it doubles while the service keeps dying.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A service that ran this long before dying starts again with the first backoff.
const STEADY: Duration = Duration::from_secs(60);

/// What is known of a service.
#[derive(Clone, Debug, Default)]
struct Health {
    /// Why it is down, while it waits to be started again.
    down: Option<String>,
    restarts: u64,
}

/// The services of a node and their health, shared with `/readyz`.
#[derive(Clone, Debug)]
pub struct Services {
    health: Arc<Mutex<BTreeMap<String, Health>>>,
    first_backoff: Duration,
}

impl Default for Services {
    fn default() -> Self {
        Self::with_backoff(FIRST_BACKOFF)
    }
}

impl Services {
    /// Services restarted first after `first_backoff` (tests use short ones).
    pub fn with_backoff(first_backoff: Duration) -> Self {
        Self {
            health: Default::default(),
            first_backoff,
        }
    }

    /// Runs the service `make` builds in `set` until `stop`, starting a new one whenever
    /// it panics or returns earlier.
    pub fn spawn<F, Fut>(&self, set: &mut JoinSet<()>, name: &str, stop: CancellationToken, make: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (services, name) = (self.clone(), name.to_string());
        services.set(&name, |h| h.down = None);
        set.spawn(async move {
            let mut backoff = services.first_backoff;
            loop {
                let started = Instant::now();
                let ended = tokio::spawn(make()).await;
                if stop.is_cancelled() {
                    return;
                }
                let why = match ended {
                    Ok(()) => "it returned".to_string(),
                    Err(e) if e.is_panic() => format!("it panicked: {}", panic_text(e.into_panic())),
                    Err(e) => e.to_string(),
                };
                if started.elapsed() >= STEADY {
                    backoff = services.first_backoff;
                }
                tracing::error!(service = %name, reason = %why, ?backoff, "service stopped; starting it again");
                metrics::counter!(SERVICE_RESTARTS.name, "service" => name.clone()).increment(1);
                services.set(&name, |h| {
                    h.down = Some(why.clone());
                    h.restarts += 1;
                });
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                services.set(&name, |h| h.down = None);
            }
        });
    }

    fn set(&self, name: &str, change: impl FnOnce(&mut Health)) {
        let mut health = self.health.lock().expect("service health");
        change(health.entry(name.to_string()).or_default());
    }

    /// Services that are down, with why: `/readyz` fails while there is one.
    pub fn down(&self) -> Vec<(String, String)> {
        let health = self.health.lock().expect("service health");
        health
            .iter()
            .filter_map(|(name, h)| h.down.clone().map(|why| (name.clone(), why)))
            .collect()
    }

    /// How often `name` was started again.
    pub fn restarts(&self, name: &str) -> u64 {
        let health = self.health.lock().expect("service health");
        health.get(name).map_or(0, |h| h.restarts)
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_service_that_panics_is_reported_down_and_started_again() {
        let services = Services::with_backoff(Duration::from_millis(200));
        let (stop, mut set) = (CancellationToken::new(), JoinSet::new());
        let starts = Arc::new(AtomicU32::new(0));
        let (counted, until) = (starts.clone(), stop.clone());
        services.spawn(&mut set, "scheduler", stop.clone(), move || {
            let (counted, until) = (counted.clone(), until.clone());
            async move {
                // Fault injection: the first run dies, the second runs until stopped,
                // as the node's services do.
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("injected failure");
                }
                until.cancelled().await;
            }
        });

        tokio::time::sleep(Duration::from_millis(50)).await;
        let down = services.down();
        assert_eq!(down.len(), 1, "{down:?}");
        assert_eq!(down[0].0, "scheduler");
        assert!(down[0].1.contains("injected failure"), "{down:?}");

        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(services.down().is_empty(), "running again");
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        assert_eq!(services.restarts("scheduler"), 1);

        // Stopping is no failure: nothing is restarted or reported.
        stop.cancel();
        while set.join_next().await.is_some() {}
        assert!(services.down().is_empty());
        assert_eq!(services.restarts("scheduler"), 1);
    }

    #[tokio::test]
    async fn a_service_that_returns_early_is_started_again_with_a_growing_backoff() {
        let services = Services::with_backoff(Duration::from_millis(20));
        let (stop, mut set) = (CancellationToken::new(), JoinSet::new());
        services.spawn(&mut set, "janitor", stop.clone(), || async {});
        tokio::time::sleep(Duration::from_millis(250)).await;
        // 20 + 40 + 80 ms of backoff fit in 250 ms, 20 + 40 + 80 + 160 do not.
        let restarts = services.restarts("janitor");
        assert!((3..=4).contains(&restarts), "{restarts}");
        stop.cancel();
        while set.join_next().await.is_some() {}
    }
}
