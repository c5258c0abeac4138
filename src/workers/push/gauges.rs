//! The push worker's gauges, per subscription it pushes: its state and its lag, set
//! where the worker learns them (after a batch, when idle, on a failure, when stopping),
//! so that a scrape costs no database query. A node reports only the subscriptions it
//! pushes, or that it saw paused or failed until they are resumed or deleted: when it
//! gives one up, it clears them, so that another node's figures are the only ones.
//! Must not reach: `delivery`, `api` (gauges only).

use uuid::Uuid;

use crate::store::{Lag, SubscriptionState};
use crate::telemetry::metric::{
    Metric, PUSH_LAG_EVENTS, PUSH_LAG_SECONDS, PUSH_LAG_SNAPSHOTS, PUSH_STATE,
};

const ALL_STATES: [SubscriptionState; 4] = [
    SubscriptionState::Active,
    SubscriptionState::BackingOff,
    SubscriptionState::Paused,
    SubscriptionState::Failed,
];

/// A subscription's state as the API and the `state` label name it.
pub fn state_name(state: SubscriptionState) -> &'static str {
    match state {
        SubscriptionState::Active => "running",
        SubscriptionState::BackingOff => "backing_off",
        SubscriptionState::Paused => "paused",
        SubscriptionState::Failed => "failed",
    }
}

/// The labels of a subscription's metrics: its id, which never changes, and its name.
pub fn labels(id: Uuid, name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("subscription_id", id.to_string()),
        ("subscription", name.to_string()),
    ]
}

/// Sets the state gauges of a subscription.
pub fn set_state(id: Uuid, subscription: &str, state: SubscriptionState) {
    let current = state_name(state);
    for state in ALL_STATES {
        let name = state_name(state);
        let mut labels = labels(id, subscription);
        labels.push(("state", name.to_string()));
        metrics::gauge!(PUSH_STATE.name, &labels).set(if name == current { 1.0 } else { 0.0 });
    }
}

/// Sets the lag gauges of a push subscription.
pub fn set_lag(id: Uuid, subscription: &str, lag: &Lag) {
    set_lag_gauges(
        [PUSH_LAG_EVENTS, PUSH_LAG_SNAPSHOTS, PUSH_LAG_SECONDS],
        id,
        subscription,
        lag,
    );
}

/// Sets the three lag gauges `names` (events, snapshots, seconds) of a subscription.
pub fn set_lag_gauges(metrics: [Metric; 3], id: Uuid, subscription: &str, lag: &Lag) {
    let labels = labels(id, subscription);
    let [events, snapshots, seconds] = metrics;
    metrics::gauge!(events.name, &labels).set(lag.events as f64);
    metrics::gauge!(snapshots.name, &labels).set(lag.snapshots as f64);
    metrics::gauge!(seconds.name, &labels).set(lag.seconds());
}

/// Clears the gauges of a subscription this node no longer reports: no state, no lag.
pub fn clear(id: Uuid, subscription: &str) {
    for state in ALL_STATES {
        let mut labels = labels(id, subscription);
        labels.push(("state", state_name(state).to_string()));
        metrics::gauge!(PUSH_STATE.name, &labels).set(0.0);
    }
    set_lag(id, subscription, &Lag::default());
}
