//! Every metric icefeed records, defined once: its name, kind, unit and description.
//! Call sites name a metric by its constant here (`metrics::counter!(ROWS_PUBLISHED.name)`),
//! never by a string of their own, and `/metrics` describes each one. Depends on nothing
//! in the crate.
//!
//! Names: `icefeed_<area>_<what>`, counters ending in `_total`, times in `_seconds`.

/// What a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<metrics::Unit>,
    pub help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        unit: None,
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        unit: None,
        help,
    }
}

const fn seconds(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Histogram,
        unit: Some(metrics::Unit::Seconds),
        help,
    }
}

// The scheduler and its tasks.
pub const ROWS_PUBLISHED: Metric = counter(
    "icefeed_scheduler_rows_published_total",
    "Change events published",
);
pub const CHANGE_SETS_PUBLISHED: Metric = counter(
    "icefeed_scheduler_change_sets_published_total",
    "Change sets published",
);
pub const POLL_ERRORS: Metric = counter(
    "icefeed_scheduler_poll_errors_total",
    "Failed polls, by table",
);
pub const TABLE_SNAPSHOTS_BEHIND: Metric = gauge(
    "icefeed_table_snapshots_behind",
    "Snapshots committed but not yet published",
);
pub const TABLE_SECONDS_BEHIND: Metric = gauge(
    "icefeed_table_seconds_behind",
    "Age of the oldest unpublished snapshot",
);
pub const CHANGE_SETS_PRUNED: Metric = counter(
    "icefeed_change_sets_pruned_total",
    "Change sets removed by retention",
);
pub const TASK_FAILURES: Metric = counter(
    "icefeed_task_failures_total",
    "Shuffle task attempts that failed, by kind (map, reduce)",
);
pub const TASK_DURATION: Metric = seconds(
    "icefeed_task_duration_seconds",
    "Time a shuffle task attempt ran, by kind",
);
pub const SPILLED_PARTITIONS: Metric = counter(
    "icefeed_shuffle_spilled_partitions_total",
    "Spill partitions of map tasks whose input exceeded scheduler.map_memory_bytes",
);
pub const INSERT_BYTES_COPIED: Metric = Metric {
    unit: Some(metrics::Unit::Bytes),
    ..counter(
        "icefeed_insert_bytes_copied_total",
        "Bytes of data files copied into insert segments, by who moved them: the S3 server \
         (the change store is the table's bucket) or the node",
    )
};
pub const RESURRECTED_ROWS: Metric = counter(
    "icefeed_resurrected_rows_total",
    "Rows snapshots brought back by dropping deletes without replacing them (published as \
     inserts; a metadata edit, not an engine's commit)",
);
pub const DELETE_ANOMALIES: Metric = counter(
    "icefeed_delete_anomalies_total",
    "Positions of position deletes at or past their data file's row count (they delete \
     nothing)",
);
pub const EQUALITY_KEY_SPLITS: Metric = counter(
    "icefeed_equality_key_splits_total",
    "Times the keys of equality delete files passed the memory budget and were split into \
     one more share, each applied in a pass of its own",
);
pub const SERVICE_RESTARTS: Metric = counter(
    "icefeed_service_restarts_total",
    "Background services (labelled `service`) started again after they panicked or returned",
);

// The API and delivery.
pub const HTTP_REQUESTS: Metric = counter(
    "icefeed_http_requests_total",
    "HTTP requests answered, by method, route template and status",
);
pub const HTTP_REQUEST_DURATION: Metric = seconds(
    "icefeed_http_request_duration_seconds",
    "Time from a request to the head of its answer, by method, route template and status",
);
pub const HTTP_REQUESTS_SHED: Metric = counter(
    "icefeed_http_requests_shed_total",
    "Requests answered at once because a limits.* limit was reached: `overloaded` (503, the \
     node's) or `client_limit` (429, one client's streams and long polls)",
);
pub const HTTP_WAITING_REQUESTS: Metric = gauge(
    "icefeed_http_waiting_requests",
    "Event streams and waiting long polls open on this node",
);
pub const OPEN_STREAMS: Metric = gauge(
    "icefeed_delivery_open_streams",
    "Server-sent event streams open on this node",
);
pub const EVENTS_STREAMED: Metric = counter(
    "icefeed_delivery_events_streamed_total",
    "Change events sent over server-sent event streams",
);
pub const EVENTS_RENDERED: Metric = counter(
    "icefeed_delivery_events_rendered_total",
    "Change events rendered as JSON for pages and streams; consumers reading the same \
     events share one rendering, so this grows slower than the events they are sent",
);

// Subscriptions.
pub const PULL_LAG_EVENTS: Metric = gauge(
    "icefeed_subscription_lag_events",
    "Published events a pull subscription has not acknowledged; set by one node",
);
pub const PULL_LAG_SNAPSHOTS: Metric = gauge(
    "icefeed_subscription_lag_snapshots",
    "Snapshots a pull subscription has not acknowledged, published or not",
);
pub const PULL_LAG_SECONDS: Metric = gauge(
    "icefeed_subscription_lag_seconds",
    "Age of the oldest change a pull subscription has not acknowledged",
);
pub const PUSH_STATE: Metric = gauge(
    "icefeed_push_state",
    "1 for a push subscription's state (running, backing_off, paused, failed), 0 for the \
     others; set by the node pushing it",
);
pub const PUSH_LAG_EVENTS: Metric = gauge(
    "icefeed_push_lag_events",
    "Published events a push subscription has not pushed",
);
pub const PUSH_LAG_SNAPSHOTS: Metric = gauge(
    "icefeed_push_lag_snapshots",
    "Snapshots a push subscription has not pushed, published or not",
);
pub const PUSH_LAG_SECONDS: Metric = gauge(
    "icefeed_push_lag_seconds",
    "Age of the oldest change a push subscription has not pushed",
);
pub const PUSH_DOCUMENTS_INDEXED: Metric = counter(
    "icefeed_push_documents_indexed_total",
    "Documents a push subscription indexed",
);
pub const PUSH_DOCUMENTS_DELETED: Metric = counter(
    "icefeed_push_documents_deleted_total",
    "Documents a push subscription deleted",
);
pub const PUSH_DOCUMENTS_SKIPPED: Metric = counter(
    "icefeed_push_documents_skipped_total",
    "Documents a push subscription skipped as older than the index's",
);
pub const PUSH_DOCUMENTS_REJECTED: Metric = counter(
    "icefeed_push_documents_rejected_total",
    "Documents a push subscription refused and kept as dead letters",
);

/// Every metric, described to the recorder at start.
pub const ALL: &[Metric] = &[
    ROWS_PUBLISHED,
    CHANGE_SETS_PUBLISHED,
    POLL_ERRORS,
    TABLE_SNAPSHOTS_BEHIND,
    TABLE_SECONDS_BEHIND,
    CHANGE_SETS_PRUNED,
    TASK_FAILURES,
    TASK_DURATION,
    SPILLED_PARTITIONS,
    INSERT_BYTES_COPIED,
    RESURRECTED_ROWS,
    DELETE_ANOMALIES,
    EQUALITY_KEY_SPLITS,
    SERVICE_RESTARTS,
    HTTP_REQUESTS,
    HTTP_REQUEST_DURATION,
    HTTP_REQUESTS_SHED,
    HTTP_WAITING_REQUESTS,
    OPEN_STREAMS,
    EVENTS_STREAMED,
    EVENTS_RENDERED,
    PULL_LAG_EVENTS,
    PULL_LAG_SNAPSHOTS,
    PULL_LAG_SECONDS,
    PUSH_STATE,
    PUSH_LAG_EVENTS,
    PUSH_LAG_SNAPSHOTS,
    PUSH_LAG_SECONDS,
    PUSH_DOCUMENTS_INDEXED,
    PUSH_DOCUMENTS_DELETED,
    PUSH_DOCUMENTS_SKIPPED,
    PUSH_DOCUMENTS_REJECTED,
];

/// Describes every metric to the installed recorder.
pub fn describe_all() {
    for m in ALL {
        let help = m.help;
        match (m.kind, m.unit) {
            (Kind::Counter, Some(unit)) => metrics::describe_counter!(m.name, unit, help),
            (Kind::Counter, None) => metrics::describe_counter!(m.name, help),
            (Kind::Gauge, Some(unit)) => metrics::describe_gauge!(m.name, unit, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(m.name, help),
            (Kind::Histogram, Some(unit)) => metrics::describe_histogram!(m.name, unit, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(m.name, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;

    use super::*;

    #[test]
    fn names_follow_one_scheme_and_are_unique() {
        let mut seen = HashSet::new();
        for m in ALL {
            assert!(seen.insert(m.name), "{} twice", m.name);
            let rest = m.name.strip_prefix("icefeed_").expect(m.name);
            assert!(
                rest.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                m.name
            );
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                m.name
            );
            if m.unit == Some(metrics::Unit::Seconds) {
                assert!(m.name.ends_with("_seconds"), "{}", m.name);
            }
            assert!(!m.help.is_empty(), "{}", m.name);
        }
    }

    /// A metric recorded under a name of its own would not be described: every call site
    /// names one of the catalogue's.
    #[test]
    fn every_call_site_names_a_metric_of_the_catalogue() {
        fn visit(dir: &Path, offenders: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    visit(&path, offenders);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("telemetry/metric.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for call in ["counter!(", "gauge!(", "histogram!("] {
                        for (at, _) in text.match_indices(call) {
                            let rest = &text[at + call.len()..];
                            let end = rest.find([',', ')']).unwrap_or(rest.len());
                            let name = rest[..end].trim();
                            if !name.ends_with(".name") {
                                offenders.push(format!("{}: {call}{name}", path.display()));
                            }
                        }
                    }
                }
            }
        }
        let mut offenders = Vec::new();
        visit(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut offenders,
        );
        assert!(offenders.is_empty(), "{}", offenders.join("\n"));
    }
}
