//! Lag gauges of pull subscriptions (`icefeed_subscription_lag_*`), set every
//! `interval` by one node at a time: the holder of the `subscription-gauges` lease, so
//! that each series has one source, as push gauges have their pushing node. A node that
//! loses the lease, or stops, clears what it reported.
//! Must not reach: `api`, `delivery`.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store::{Lag, Lease, Store};
use crate::telemetry::metric::{PULL_LAG_EVENTS, PULL_LAG_SECONDS, PULL_LAG_SNAPSHOTS};
use crate::workers::push::gauges::set_lag_gauges;

const LEASE: &str = "subscription-gauges";

/// Reports the lag of every pull subscription while it holds the lease.
#[derive(Clone)]
pub struct PullGauges {
    pub store: Store,
    pub node: String,
    pub interval: Duration,
}

impl PullGauges {
    pub async fn run(self, stop: CancellationToken) {
        let ttl = self.interval * 3;
        let mut held: Option<Lease> = None;
        let mut reported = BTreeMap::new();
        loop {
            held = match held {
                Some(lease) => match self.store.renew_lease(&lease, ttl).await {
                    Ok(()) => Some(lease),
                    Err(_) => None,
                },
                None => self
                    .store
                    .try_acquire_lease(LEASE, &self.node, ttl)
                    .await
                    .ok()
                    .flatten(),
            };
            if held.is_some() {
                if let Err(e) = self.report(&mut reported).await {
                    tracing::debug!(error = %e, "subscription lag not reported");
                }
            } else {
                clear_all(&mut reported);
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
        clear_all(&mut reported);
        if let Some(lease) = held {
            let _ = self.store.release_lease(&lease).await;
        }
    }

    /// Sets the gauges of every pull subscription; clears those of deleted ones.
    async fn report(
        &self,
        reported: &mut BTreeMap<Uuid, String>,
    ) -> Result<(), crate::store::StoreError> {
        let mut now = BTreeMap::new();
        for subscription in self.store.list_subscriptions().await? {
            if subscription.kind != "pull" {
                continue;
            }
            let lag = self.store.subscription_total_lag(subscription.id).await?;
            set(subscription.id, &subscription.name, &lag);
            now.insert(subscription.id, subscription.name);
        }
        for (id, name) in reported.iter() {
            if now.get(id) != Some(name) {
                set(*id, name, &Lag::default());
            }
        }
        *reported = now;
        Ok(())
    }
}

fn set(id: Uuid, name: &str, lag: &Lag) {
    set_lag_gauges(
        [PULL_LAG_EVENTS, PULL_LAG_SNAPSHOTS, PULL_LAG_SECONDS],
        id,
        name,
        lag,
    );
}

fn clear_all(reported: &mut BTreeMap<Uuid, String>) {
    for (id, name) in std::mem::take(reported) {
        set(id, &name, &Lag::default());
    }
}
