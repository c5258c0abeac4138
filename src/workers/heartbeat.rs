//! Keeping a lease alive while work runs under it.
//! Must not reach: `changes`, `catalog` (the lease only).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::StoreError;

/// Calls `renew` every `period` until dropped. When a renewal fails (the lease expired
/// or moved to another node) it cancels `lost`, so the work under it stops.
pub struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// Starts renewing; `what` names the lease in logs.
    pub fn start<F, Fut>(what: String, period: Duration, lost: CancellationToken, renew: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), StoreError>> + Send,
    {
        let task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.tick().await;
            loop {
                tokio::select! {
                    _ = lost.cancelled() => return,
                    _ = interval.tick() => {}
                }
                if let Err(e) = renew().await {
                    tracing::warn!(lease = %what, error = %e, "lease lost; stopping its work");
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
