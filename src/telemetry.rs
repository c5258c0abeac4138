//! Logs and metrics.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Sets up logging from `RUST_LOG` (default `info`); `json` selects JSON lines. Colours
/// only on a terminal, and never with `NO_COLOR` set, so log files hold plain text.
pub fn init_logging(json: bool) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_target(false);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The process-wide Prometheus recorder (installed on first use).
pub fn metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may exist when icefeed is embedded; then ours stays empty.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "icefeed_scheduler_rows_published_total",
        "Change events published"
    );
    describe_counter!(
        "icefeed_scheduler_change_sets_published_total",
        "Change sets published"
    );
    describe_counter!(
        "icefeed_change_sets_pruned_total",
        "Change sets removed by retention"
    );
    describe_counter!(
        "icefeed_scheduler_poll_errors_total",
        "Failed polls, by table"
    );
    describe_counter!(
        "icefeed_shuffle_spilled_partitions_total",
        "Spill partitions of map tasks whose input exceeded scheduler.map_memory_bytes"
    );
    describe_counter!(
        crate::changes::store::INSERT_BYTES_COPIED,
        metrics::Unit::Bytes,
        "Bytes of data files copied into insert segments, by who moved them: the S3 server \
         (the change store is the table's bucket) or the node"
    );
    use crate::workers::pull_gauges;
    describe_gauge!(
        pull_gauges::LAG_EVENTS,
        "Published events a pull subscription has not acknowledged; set by one node"
    );
    describe_gauge!(
        pull_gauges::LAG_SNAPSHOTS,
        "Snapshots a pull subscription has not acknowledged, published or not"
    );
    describe_gauge!(
        pull_gauges::LAG_SECONDS,
        "Age of the oldest change a pull subscription has not acknowledged"
    );
    describe_counter!(
        crate::workers::supervisor::RESTARTS,
        "Background services (labelled `service`) started again after they panicked or returned"
    );
    describe_counter!(
        crate::api::request_metrics::REQUESTS,
        "HTTP requests answered, by method, route template and status"
    );
    describe_histogram!(
        crate::api::request_metrics::DURATION,
        metrics::Unit::Seconds,
        "Time from a request to the head of its answer, by method, route template and status"
    );
    describe_counter!(
        crate::api::admission::SHED,
        "Requests answered at once because a limits.* limit was reached: `overloaded` (503, \
         the node's) or `client_limit` (429, one client's streams and long polls)"
    );
    describe_gauge!(
        crate::api::admission::WAITING,
        "Event streams and waiting long polls open on this node"
    );
    describe_counter!(
        "icefeed_task_failures_total",
        "Shuffle task attempts that failed, by kind (map, reduce)"
    );
    describe_histogram!(
        "icefeed_task_duration_seconds",
        metrics::Unit::Seconds,
        "Time a shuffle task attempt ran, by kind"
    );
    for (name, what) in [
        ("icefeed_push_documents_indexed_total", "indexed"),
        ("icefeed_push_documents_deleted_total", "deleted"),
        (
            "icefeed_push_documents_skipped_total",
            "skipped as older than the index's",
        ),
        (
            "icefeed_push_documents_rejected_total",
            "refused and kept as dead letters",
        ),
    ] {
        describe_counter!(name, format!("Documents a push subscription {what}"));
    }
    describe_counter!(
        "icefeed_resurrected_rows_total",
        "Rows snapshots brought back by dropping deletes without replacing them (published \
         as inserts; a metadata edit, not an engine's commit)"
    );
    describe_counter!(
        "icefeed_delete_anomalies_total",
        "Positions of position deletes at or past their data file's row count (they delete \
         nothing)"
    );
    describe_gauge!(
        "icefeed_table_snapshots_behind",
        "Snapshots committed but not yet published"
    );
    describe_gauge!(
        "icefeed_table_seconds_behind",
        "Age of the oldest unpublished snapshot"
    );
    describe_gauge!(
        crate::delivery::stream::OPEN_STREAMS,
        "Server-sent event streams open on this node"
    );
    describe_counter!(
        crate::delivery::stream::EVENTS_STREAMED,
        "Change events sent over server-sent event streams"
    );
    use crate::workers::push::gauges;
    describe_gauge!(
        gauges::STATE,
        "1 for a push subscription's state (running, backing_off, paused, failed), 0 for the \
         others; set by the node pushing it"
    );
    describe_gauge!(
        gauges::LAG_EVENTS,
        "Published events a push subscription has not pushed"
    );
    describe_gauge!(
        gauges::LAG_SNAPSHOTS,
        "Snapshots a push subscription has not pushed, published or not"
    );
    describe_gauge!(
        gauges::LAG_SECONDS,
        "Age of the oldest change a push subscription has not pushed"
    );
}
