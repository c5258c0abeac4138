//! Every metric icefeed records, defined once: its name, kind, unit and description.
//! Call sites name a metric by its constant here (`metrics::counter!(ROWS_PUBLISHED.name)`),
//! never by a string of their own, and `/metrics` describes each one.
//! Must not reach: the rest of the crate.
//!
//! Names: `icefeed_<area>_<what>`, then the unit where it is one (`_seconds`, `_bytes`;
//! counts of a kind of thing name it, as in `_lag_snapshots`), counters ending in
//! `_total`. Every metric has a unit ([`metrics::Unit::Count`] for counts), given to
//! the recorder with its description.

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
    /// Its name in `/metrics`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// What one of its values counts or measures.
    pub unit: metrics::Unit,
    /// Its `# HELP` line.
    pub help: &'static str,
}

use metrics::Unit::{Bytes, Count, Seconds};

const fn counter(name: &'static str, unit: metrics::Unit, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        unit,
        help,
    }
}

const fn gauge(name: &'static str, unit: metrics::Unit, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        unit,
        help,
    }
}

const fn histogram(name: &'static str, unit: metrics::Unit, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Histogram,
        unit,
        help,
    }
}

// The scheduler and its tasks.
pub const ROWS_PUBLISHED: Metric = counter(
    "icefeed_scheduler_rows_published_total",
    Count,
    "Change events published",
);
pub const CHANGE_SETS_PUBLISHED: Metric = counter(
    "icefeed_scheduler_change_sets_published_total",
    Count,
    "Change sets published",
);
pub const POLL_ERRORS: Metric = counter(
    "icefeed_scheduler_poll_errors_total",
    Count,
    "Failed polls, by table",
);
pub const TABLE_LAG_SNAPSHOTS: Metric = gauge(
    "icefeed_table_lag_snapshots",
    Count,
    "Snapshots committed but not yet published",
);
pub const TABLE_LAG_SECONDS: Metric = gauge(
    "icefeed_table_lag_seconds",
    Seconds,
    "Age of the oldest unpublished snapshot",
);
pub const CHANGE_SETS_PRUNED: Metric = counter(
    "icefeed_change_sets_pruned_total",
    Count,
    "Change sets removed by retention",
);
pub const TASK_FAILURES: Metric = counter(
    "icefeed_task_failures_total",
    Count,
    "Shuffle task attempts that failed, by kind (map, reduce)",
);
pub const TASK_DURATION: Metric = histogram(
    "icefeed_task_duration_seconds",
    Seconds,
    "Time a shuffle task attempt ran, by kind",
);
pub const SPILLED_PARTITIONS: Metric = counter(
    "icefeed_shuffle_spilled_partitions_total",
    Count,
    "Spill partitions of map tasks whose input exceeded scheduler.map_memory_bytes, by \
     level: 0 for a task's, 1 and deeper for a partition split again because its rows \
     decoded to more than a quarter of the budget",
);
pub const OVER_ESTIMATE: Metric = counter(
    "icefeed_decoded_over_estimate_total",
    Count,
    "Rewrites computed in place (where=in_place) and map tasks (where=map) whose rows \
     decoded to more than their stored sizes promised and than scheduler.map_memory_bytes \
     holds, and were computed through the shuffle or spill partitions instead",
);
pub const REWRITES: Metric = counter(
    "icefeed_rewrites_total",
    Count,
    "Snapshots that removed data files, by how their changes were computed: in_place (in \
     memory where planned, under scheduler.shuffle_from_bytes) or shuffled (map and \
     reduce tasks)",
);
pub const INSERT_BYTES_COPIED: Metric = counter(
    "icefeed_insert_bytes_copied_total",
    Bytes,
    "Bytes of data files copied into insert segments, by who moved them: the S3 server \
     (the change store is the table's bucket) or the node",
);
pub const RESURRECTED_ROWS: Metric = counter(
    "icefeed_resurrected_rows_total",
    Count,
    "Rows snapshots brought back by dropping deletes without replacing them (published as \
     inserts; a metadata edit, not an engine's commit)",
);
pub const DELETE_ANOMALIES: Metric = counter(
    "icefeed_delete_anomalies_total",
    Count,
    "Positions of position deletes at or past their data file's row count (they delete \
     nothing)",
);
pub const EQUALITY_KEY_SPLITS: Metric = counter(
    "icefeed_equality_key_splits_total",
    Count,
    "Times the keys of equality delete files passed the memory budget and were split into \
     one more share, each applied in a pass of its own",
);
pub const SERVICE_RESTARTS: Metric = counter(
    "icefeed_service_restarts_total",
    Count,
    "Background services (labelled `service`) started again after they panicked or returned",
);

// The API and delivery.
pub const HTTP_REQUESTS: Metric = counter(
    "icefeed_http_requests_total",
    Count,
    "HTTP requests answered, by method, route template and status",
);
pub const HTTP_REQUEST_DURATION: Metric = histogram(
    "icefeed_http_request_duration_seconds",
    Seconds,
    "Time from a request to the head of its answer, by method, route template and status",
);
pub const HTTP_REQUESTS_SHED: Metric = counter(
    "icefeed_http_requests_shed_total",
    Count,
    "Requests answered at once because a limits.* limit was reached: `overloaded` (503, the \
     node's) or `client_limit` (429, one client's streams and long polls)",
);
pub const HTTP_WAITING_REQUESTS: Metric = gauge(
    "icefeed_http_waiting_requests",
    Count,
    "Event streams and waiting long polls open on this node",
);
pub const OPEN_STREAMS: Metric = gauge(
    "icefeed_delivery_open_streams",
    Count,
    "Server-sent event streams open on this node",
);
pub const EVENTS_STREAMED: Metric = counter(
    "icefeed_delivery_events_streamed_total",
    Count,
    "Change events sent over server-sent event streams",
);
pub const PAGES_AHEAD: Metric = counter(
    "icefeed_delivery_pages_ahead_total",
    Count,
    "Table pages prepared while their consumer took the page before (outcome=prepared), \
     and requests answered with one (outcome=answered)",
);
pub const EVENTS_RENDERED: Metric = counter(
    "icefeed_delivery_events_rendered_total",
    Count,
    "Change events rendered as JSON for pages and streams; consumers reading the same \
     events share one rendering, so this grows slower than the events they are sent",
);

// Subscriptions.
pub const PULL_LAG_EVENTS: Metric = gauge(
    "icefeed_subscription_lag_events",
    Count,
    "Published events a pull subscription has not acknowledged; set by one node",
);
pub const PULL_LAG_SNAPSHOTS: Metric = gauge(
    "icefeed_subscription_lag_snapshots",
    Count,
    "Snapshots a pull subscription has not acknowledged, published or not",
);
pub const PULL_LAG_SECONDS: Metric = gauge(
    "icefeed_subscription_lag_seconds",
    Seconds,
    "Age of the oldest change a pull subscription has not acknowledged",
);
pub const PUSH_STATE: Metric = gauge(
    "icefeed_push_state",
    Count,
    "1 for a push subscription's state (running, backing_off, paused, failed), 0 for the \
     others; set by the node pushing it",
);
pub const PUSH_LAG_EVENTS: Metric = gauge(
    "icefeed_push_lag_events",
    Count,
    "Published events a push subscription has not pushed",
);
pub const PUSH_LAG_SNAPSHOTS: Metric = gauge(
    "icefeed_push_lag_snapshots",
    Count,
    "Snapshots a push subscription has not pushed, published or not",
);
pub const PUSH_LAG_SECONDS: Metric = gauge(
    "icefeed_push_lag_seconds",
    Seconds,
    "Age of the oldest change a push subscription has not pushed",
);
pub const PUSH_DOCUMENTS_INDEXED: Metric = counter(
    "icefeed_push_documents_indexed_total",
    Count,
    "Documents a push subscription indexed",
);
pub const PUSH_DOCUMENTS_DELETED: Metric = counter(
    "icefeed_push_documents_deleted_total",
    Count,
    "Documents a push subscription deleted",
);
pub const PUSH_DOCUMENTS_SKIPPED: Metric = counter(
    "icefeed_push_documents_skipped_total",
    Count,
    "Documents a push subscription skipped as older than the index's",
);
pub const PUSH_DOCUMENTS_REJECTED: Metric = counter(
    "icefeed_push_documents_rejected_total",
    Count,
    "Documents a push subscription refused and kept as dead letters",
);

/// Every metric, described to the recorder at start.
pub const ALL: &[Metric] = &[
    ROWS_PUBLISHED,
    CHANGE_SETS_PUBLISHED,
    POLL_ERRORS,
    TABLE_LAG_SNAPSHOTS,
    TABLE_LAG_SECONDS,
    CHANGE_SETS_PRUNED,
    TASK_FAILURES,
    TASK_DURATION,
    SPILLED_PARTITIONS,
    OVER_ESTIMATE,
    REWRITES,
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
    PAGES_AHEAD,
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
        let unit = m.unit;
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, unit, help),
            Kind::Gauge => metrics::describe_gauge!(m.name, unit, help),
            Kind::Histogram => metrics::describe_histogram!(m.name, unit, help),
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
            let bare = rest.strip_suffix("_total").unwrap_or(rest);
            match m.unit {
                Seconds => assert!(bare.ends_with("_seconds"), "{}: in seconds", m.name),
                Bytes => assert!(bare.contains("_bytes"), "{}: in bytes", m.name),
                Count => assert!(
                    !bare.ends_with("_seconds") && !bare.contains("_bytes"),
                    "{}: a count",
                    m.name
                ),
                other => panic!("{}: unit {other:?} has no naming rule", m.name),
            }
            assert!(!m.help.is_empty(), "{}", m.name);
        }
    }

    /// `/metrics` describes every metric (`# HELP`) once it has a value.
    #[test]
    fn every_metric_is_described_in_the_exposition() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe_all();
            for m in ALL {
                match m.kind {
                    Kind::Counter => metrics::counter!(m.name).increment(1),
                    Kind::Gauge => metrics::gauge!(m.name).set(1.0),
                    Kind::Histogram => metrics::histogram!(m.name).record(1.0),
                }
            }
        });
        let text = handle.render();
        for m in ALL {
            assert!(
                text.contains(&format!("# HELP {} {}\n", m.name, m.help)),
                "{}",
                m.name
            );
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
