//! Builds a node: database, change store, API and scheduler; runs until told to stop.
//! Must not reach: `cli` (the command line talks to nodes over HTTP only).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::catalog::CatalogCache;
use crate::changes::{ChangeStore, SegmentReader};
use crate::config::Settings;
use crate::delivery::{ChangeNotifier, Feed};
use crate::store::Store;
use crate::workers::task_context::TaskContext;
use crate::workers::tasks::TaskRunner;
use crate::workers::{Janitor, PushWorker, Scheduler};

/// A node that is running.
pub struct RunningNode {
    /// The address the API listens on.
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningNode {
    /// Stops polling, lets in-flight requests finish, and waits for the node to exit.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task.await.context("node task")?
    }

    /// Waits until the node exits by itself or `stop` (given to [`start`]) is cancelled.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("node task")?
    }
}

/// Connects, migrates and starts the API and the scheduler; returns once listening.
pub async fn start(settings: Settings, stop: CancellationToken) -> anyhow::Result<RunningNode> {
    settings.check_exposure()?;
    let settings = Arc::new(settings);
    let store = Store::connect_with(&settings.database_url, &settings.database)
        .await
        .context("connecting to PostgreSQL (set ICEFEED_DATABASE_URL)")?;
    store.migrate().await.context("applying migrations")?;
    let changes = ChangeStore::open(&settings.change_store, &settings.change_store_options)?;
    let node = settings.node_name();
    let reach = crate::catalog::Reach {
        types: settings.catalog.allowed_types.clone(),
        local: crate::catalog::LocalPaths::only(&settings.catalog.local_paths),
        hosts: settings.network.host_policy()?,
    };
    let wake = Arc::new(Notify::new());
    let notifier = ChangeNotifier::new(stop.clone());
    let state = AppState {
        store: store.clone(),
        changes: changes.clone(),
        feed: Feed::new(store.clone(), SegmentReader::new(changes.clone())),
        notifier: notifier.clone(),
        settings: settings.clone(),
        metrics: crate::telemetry::metrics(),
        scheduler_wake: wake.clone(),
        auth: crate::api::auth::Authenticator::new(store.clone(), &settings.auth),
        reach: reach.clone(),
        services: crate::workers::supervisor::Services::default(),
        admission: Arc::new(crate::api::admission::Admission::new(
            settings.limits.clone(),
        )),
        pages_ahead: Default::default(),
    };
    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    // Responses are written as they are produced (a page in parts, events of a stream as
    // they come): without this, each write after the first waits for the client's
    // acknowledgement of the one before (Nagle's algorithm against delayed ACKs).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on a connection");
        }
    });
    tracing::info!(%addr, node = %node, change_store = %changes.location(), "icefeed listening");

    let catalogs = CatalogCache::new(settings.catalog.timeout, reach.clone());
    let runner = TaskRunner {
        context: TaskContext {
            store: store.clone(),
            changes: changes.clone(),
            feed: state.feed.clone(),
            catalogs: catalogs.clone(),
            file_concurrency: settings.scheduler.file_concurrency,
            map_memory_bytes: settings.scheduler.map_memory_bytes,
        },
        settings: settings.scheduler.clone(),
        node: node.clone(),
    };
    let mut background = tokio::task::JoinSet::new();
    let services = &state.services;
    let listening = store.clone();
    services.spawn(&mut background, "notifier", stop.clone(), move || {
        notifier.clone().run(listening.clone())
    });
    for n in 0..settings.scheduler.task_workers {
        let (runner, stop) = (runner.clone(), stop.clone());
        services.spawn(
            &mut background,
            &format!("task-worker-{n}"),
            stop.clone(),
            move || runner.clone().run(stop.clone()),
        );
    }
    let janitor = Janitor {
        store: store.clone(),
        changes: changes.clone(),
        settings: settings.retention.clone(),
        scheduler: settings.scheduler.clone(),
    };
    let janitor_stop = stop.clone();
    services.spawn(&mut background, "janitor", stop.clone(), move || {
        janitor.clone().run(janitor_stop.clone())
    });
    let pusher = PushWorker {
        feed: state.feed.clone(),
        notifier: state.notifier.clone(),
        settings: settings.push.clone(),
        lease_ttl: settings.scheduler.lease_ttl,
        node: node.clone(),
        hosts: state.reach.hosts.clone(),
    };
    let pull_gauges = crate::workers::pull_gauges::PullGauges {
        store: store.clone(),
        node: node.clone(),
        interval: settings.api.lag_report_interval,
    };
    let gauges_stop = stop.clone();
    services.spawn(&mut background, "pull-gauges", stop.clone(), move || {
        pull_gauges.clone().run(gauges_stop.clone())
    });
    let pusher_stop = stop.clone();
    services.spawn(&mut background, "pusher", stop.clone(), move || {
        pusher.clone().run(pusher_stop.clone())
    });
    let scheduler = Scheduler::new(store, changes, settings.scheduler.clone(), node, catalogs);
    let scheduler_stop = stop.clone();
    services.spawn(&mut background, "scheduler", stop.clone(), move || {
        scheduler.clone().run(scheduler_stop.clone(), wake.clone())
    });
    let app = api::router(state);
    let grace = settings.api.shutdown_grace;
    let task_stop = stop.clone();
    let task = tokio::spawn(async move {
        let server = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(task_stop.clone().cancelled_owned());
        // Streams end when `stop` is cancelled, but one whose client stopped reading is
        // never polled again to notice: shutdown stops waiting for it after the grace.
        let served = tokio::select! {
            served = server.into_future() => served.context("HTTP server"),
            _ = async {
                task_stop.cancelled().await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!("connections still open after the grace period; no longer waiting for them");
                Ok(())
            }
        };
        // Stop polling; in-flight syncs abandon between files and release their leases.
        task_stop.cancel();
        if tokio::time::timeout(grace, background.join_all())
            .await
            .is_err()
        {
            tracing::warn!("background work did not stop within the grace period");
        }
        tracing::info!("icefeed stopped");
        served
    });
    Ok(RunningNode { addr, stop, task })
}

/// Cancels `stop` on SIGTERM or Ctrl-C.
pub fn stop_on_signals(stop: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        #[cfg(unix)]
        let terminate = term.recv();
        #[cfg(not(unix))]
        let terminate = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = ctrl_c => tracing::info!("interrupted; shutting down"),
            _ = terminate => tracing::info!("SIGTERM; shutting down"),
        }
        stop.cancel();
    });
}
