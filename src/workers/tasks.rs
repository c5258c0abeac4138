//! The task runner: every node claims shuffle tasks of any table from PostgreSQL and runs
//! them under a heartbeat; results are recorded only while the claim is still held.
//! Must not reach: `api`, `catalog`.

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::heartbeat::Heartbeat;
use super::net::{self, NetMapTask, NetReduceTask, run_net_map, run_net_reduce};
use super::shuffle::{MapTask, ReduceTask, run_map, run_reduce};
use super::task_context::{TaskContext, TaskError};
use crate::config::SchedulerSettings;
use crate::failure::{Failure, FailureCode};
use crate::store::{ClaimedTask, StoreError, TaskKind, signalled_within};
use crate::telemetry::metric;

/// Claims and runs tasks until stopped.
#[derive(Clone)]
pub struct TaskRunner {
    pub context: TaskContext,
    pub settings: SchedulerSettings,
    pub node: String,
}

impl TaskRunner {
    /// Runs until `stop` is cancelled; a task in flight is abandoned (its claim expires).
    /// An idle runner wakes when tasks are created on any node, or after a tick.
    pub async fn run(self, stop: CancellationToken) {
        let mut created = self.context.store.task_signals().created();
        loop {
            // Seen before looking: tasks created from now on wake the wait below.
            created.borrow_and_update();
            let worked = match self.run_once(&stop).await {
                Ok(worked) => worked,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming a task failed");
                    false
                }
            };
            if stop.is_cancelled() {
                return;
            }
            if !worked {
                let jitter = rand::rng().random_range(0.8..1.2);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = signalled_within(&mut created, self.settings.tick.mul_f64(jitter)) => {}
                }
            }
        }
    }

    /// Claims one task and runs it; false when there was none.
    pub async fn run_once(&self, stop: &CancellationToken) -> Result<bool, StoreError> {
        let (ttl, max) = (self.settings.lease_ttl, self.settings.max_task_attempts);
        let store = &self.context.store;
        let Some(task) = store.claim_task(&self.node, ttl, max).await? else {
            return Ok(false);
        };
        let lost = stop.child_token();
        let _heartbeat = {
            let (store, held) = (store.clone(), task.clone());
            Heartbeat::start(task.id.clone(), ttl / 3, lost.clone(), move || {
                let (store, held) = (store.clone(), held.clone());
                async move { store.renew_task(&held, ttl).await }
            })
        };
        let started = std::time::Instant::now();
        let outcome = tokio::select! {
            outcome = self.execute(&task) => outcome,
            _ = lost.cancelled() => return Ok(true),
        };
        let took = started.elapsed();
        metrics::histogram!(metric::TASK_DURATION.name, "kind" => task.kind.clone())
            .record(took.as_secs_f64());
        tracing::debug!(task = %task.id, ms = took.as_millis() as u64, "task ran");
        match outcome {
            Ok(result) => match store.complete_task(&task, &result).await {
                Err(StoreError::LeaseLost(_)) => tracing::info!(task = %task.id, "task taken over"),
                other => other?,
            },
            Err(e) => {
                metrics::counter!(metric::TASK_FAILURES.name, "kind" => task.kind.clone())
                    .increment(1);
                let permanent = matches!(e, TaskError::Permanent(_));
                tracing::warn!(task = %task.id, attempt = task.attempts, error = %e, "task failed");
                store.fail_task(&task, e.failure(), permanent, max).await?;
            }
        }
        // The step after a net range's task is planned by whoever sees it due: first of
        // all the node that just finished one.
        if let Some(key) = task.net_key()
            && let Some(range) = store.net_range(key.table, key.range).await?
        {
            net::advance(store, &self.settings, &range).await?;
        }
        Ok(true)
    }

    async fn execute(&self, task: &ClaimedTask) -> Result<serde_json::Value, TaskError> {
        let payload = task.payload.clone();
        let bad = |e: serde_json::Error| {
            TaskError::Permanent(Failure::new(
                FailureCode::Internal,
                format!("malformed task: {e}"),
            ))
        };
        let result = match TaskKind::parse(&task.kind) {
            Some(TaskKind::Map) => {
                let map: MapTask = serde_json::from_value(payload).map_err(bad)?;
                serde_json::to_value(run_map(&self.context, task, map).await?)
            }
            Some(TaskKind::Reduce) => {
                let reduce: ReduceTask = serde_json::from_value(payload).map_err(bad)?;
                serde_json::to_value(run_reduce(&self.context, task, reduce).await?)
            }
            Some(TaskKind::NetMap) => {
                let map: NetMapTask = serde_json::from_value(payload).map_err(bad)?;
                serde_json::to_value(run_net_map(&self.context, task, map).await?)
            }
            Some(TaskKind::NetReduce) => {
                let reduce: NetReduceTask = serde_json::from_value(payload).map_err(bad)?;
                serde_json::to_value(run_net_reduce(&self.context, task, reduce).await?)
            }
            None => {
                return Err(TaskError::Permanent(Failure::new(
                    FailureCode::Internal,
                    format!("unknown task kind {}", task.kind),
                )));
            }
        };
        Ok(result.expect("task results serialize"))
    }
}
