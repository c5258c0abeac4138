//! Wakes the node's task runners when tasks are created, and coordinators when tasks
//! settle, on any node: the store announces both on [`TASKS_CHANNEL`] (and signals its
//! own node at once), and the node's one `LISTEN` connection (`delivery::notify`) passes
//! other nodes' announcements on. Without them an idle runner would see new tasks only on
//! its next tick, and a rewrite would wait up to two ticks (map, then reduce) to publish.
//!
//! Receivers are `watch` counters: one that marks what it has seen before looking for
//! work cannot miss a signal sent after it looked.
//! Must not reach: `changelog`, `workers` (PostgreSQL only).

use std::time::Duration;

use tokio::sync::watch;

use super::StoreError;

/// The PostgreSQL channel tasks are announced on; the payload is a [`TaskEvent`].
pub const TASKS_CHANNEL: &str = "icefeed_tasks";

/// What happened to some tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// Tasks were created: a runner may claim them.
    Created,
    /// A task finished or failed: its coordinator may go on.
    Settled,
}

impl TaskEvent {
    /// The payload of its notification.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskEvent::Created => "created",
            TaskEvent::Settled => "settled",
        }
    }

    /// The event a notification's payload names.
    pub fn parse(payload: &str) -> Option<Self> {
        [TaskEvent::Created, TaskEvent::Settled]
            .into_iter()
            .find(|e| e.as_str() == payload)
    }
}

/// The node's task signals; cheap to clone (clones share the counters).
#[derive(Clone, Debug)]
pub struct TaskSignals {
    created: watch::Sender<u64>,
    settled: watch::Sender<u64>,
}

impl Default for TaskSignals {
    fn default() -> Self {
        Self {
            created: watch::channel(0).0,
            settled: watch::channel(0).0,
        }
    }
}

impl TaskSignals {
    /// Wakes the receivers of `event`.
    pub fn signal(&self, event: TaskEvent) {
        let sender = match event {
            TaskEvent::Created => &self.created,
            TaskEvent::Settled => &self.settled,
        };
        sender.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes every receiver (after the listener reconnected: announcements may be lost).
    pub fn signal_all(&self) {
        self.signal(TaskEvent::Created);
        self.signal(TaskEvent::Settled);
    }

    /// A receiver of creations; what it has seen starts at now.
    pub fn created(&self) -> watch::Receiver<u64> {
        self.created.subscribe()
    }

    /// A receiver of tasks settling; what it has seen starts at now.
    pub fn settled(&self) -> watch::Receiver<u64> {
        self.settled.subscribe()
    }
}

/// Waits until `receiver` is signalled after what it last saw, or `at_most` has passed
/// (the backstop for an announcement lost with the listener's connection).
pub async fn signalled_within(receiver: &mut watch::Receiver<u64>, at_most: Duration) {
    match tokio::time::timeout(at_most, receiver.changed()).await {
        Ok(Ok(())) | Err(_) => {}
        // The signals are gone (the node is stopping): wait out the backstop instead.
        Ok(Err(_)) => tokio::time::sleep(at_most).await,
    }
}

/// Announces `event` to every node when the statement (or its transaction) commits.
pub(super) async fn announce(
    executor: impl sqlx::PgExecutor<'_>,
    event: TaskEvent,
) -> Result<(), StoreError> {
    super::notify(executor, TASKS_CHANNEL, event.as_str()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_from_their_payloads() {
        for event in [TaskEvent::Created, TaskEvent::Settled] {
            assert_eq!(TaskEvent::parse(event.as_str()), Some(event));
        }
        assert_eq!(TaskEvent::parse("finished"), None);
    }

    #[tokio::test]
    async fn a_signal_after_looking_is_never_missed_and_wakes_only_its_kind() {
        let signals = TaskSignals::default();
        let (mut created, settled) = (signals.created(), signals.settled());
        created.borrow_and_update();
        // Sent between a runner's look for work and its wait: still seen.
        signals.signal(TaskEvent::Created);
        let started = tokio::time::Instant::now();
        signalled_within(&mut created, Duration::from_secs(10)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!settled.has_changed().unwrap());
        signals.signal_all();
        assert!(created.has_changed().unwrap() && settled.has_changed().unwrap());
    }

    #[tokio::test]
    async fn without_a_signal_the_wait_ends_at_its_backstop() {
        let signals = TaskSignals::default();
        let mut created = signals.created();
        let started = tokio::time::Instant::now();
        signalled_within(&mut created, Duration::from_millis(100)).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
