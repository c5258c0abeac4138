//! Keeping a lease alive while work runs under it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{Lease, Store};

/// Renews `lease` every third of `ttl` until dropped. When a renewal fails (the lease
/// expired or moved to another node) it cancels `lost`, so the work under it stops.
pub struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// Starts renewing.
    pub fn start(store: Store, lease: Lease, ttl: Duration, lost: CancellationToken) -> Self {
        let task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(ttl / 3);
            interval.tick().await;
            loop {
                tokio::select! {
                    _ = lost.cancelled() => return,
                    _ = interval.tick() => {}
                }
                if let Err(e) = store.renew_lease(&lease, ttl).await {
                    tracing::warn!(lease = %lease.name, error = %e, "lease lost; stopping its work");
                    lost.cancel();
                    return;
                }
            }
        });
        Self { task }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
