//! ember's web UI: a status store of jobs, stages, tasks and executors fed by the
//! scheduler's listener bus ([`feed`]), an event log of the same events, a REST API
//! (`/api/v1/...`), Prometheus metrics (`/metrics`), server-rendered HTML pages with an SVG picture of each job's stages
//! (and the operators in each), a stage's summary quantiles, cached RDDs (Storage) and configuration (Environment),
//! and the HTTP server for them (axum). The driver serves it for a cluster; a history
//! server serves it from event logs of finished applications.
//!
//! Invariants: the store is only written by the feeder thread (or a replay) and read by
//! request handlers, never blocking the scheduler; every page and API answer is built
//! from one consistent read of the store; nothing from a request is trusted beyond
//! parsing a number out of a path segment.

mod access;
mod api;
mod app_pages;
mod decommission;
pub mod event;
pub mod event_log;
mod history;
mod history_routes;
mod html;
mod kill;
mod label;
pub mod log_reader;
mod metrics;
mod nav;
mod pages;
pub mod server;
pub mod store;
mod timeline;

use std::sync::Arc;

use crossbeam_channel::Receiver;
use ember_scheduler::ListenerEvent;
use parking_lot::RwLock;

/// Connection bounds of the UI's port (see `ember_proto::listener`).
pub use ember_proto::listener::ConnectionLimits;
pub use event::{AppEvent, Metrics};
pub use event_log::{EventLogWriter, LogError};
pub use server::{serve, serve_with, Auth, ExtraMetrics, Sessions, Source};
pub use store::AppStatus;

/// One application's status, shared by its feeder and the server.
pub type SharedStatus = Arc<RwLock<AppStatus>>;

/// Applies every event from `events` (the scheduler's bus) and `extra` (what the
/// daemon adds, e.g. executors' memory) to `status`, and appends it to `log`, on a
/// thread of its own, until the scheduler's bus closes.
pub fn feed(
    events: Receiver<ListenerEvent>,
    extra: Receiver<AppEvent>,
    status: SharedStatus,
    mut log: Option<EventLogWriter>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("ember-ui-feed".into())
        .spawn(move || {
            let mut extra_open = true;
            loop {
                let first = if extra_open {
                    crossbeam_channel::select! {
                        recv(events) -> e => match e {
                            Ok(e) => AppEvent::from(&e),
                            Err(_) => break,
                        },
                        recv(extra) -> e => match e {
                            Ok(e) => e,
                            Err(_) => {
                                extra_open = false;
                                continue;
                            }
                        },
                    }
                } else {
                    match events.recv() {
                        Ok(e) => AppEvent::from(&e),
                        Err(_) => break,
                    }
                };
                // A burst is applied under one lock and written with one flush.
                let batch: Vec<AppEvent> = std::iter::once(first)
                    .chain(events.try_iter().map(|e| AppEvent::from(&e)))
                    .chain(extra.try_iter())
                    .collect();
                {
                    let mut s = status.write();
                    for e in &batch {
                        s.apply(e);
                    }
                }
                if let Some(w) = log.as_mut() {
                    let written = batch
                        .iter()
                        .try_for_each(|e| w.write(e))
                        .and_then(|()| w.flush());
                    if let Err(e) = written {
                        tracing::warn!("event log: {e}; not writing it any more");
                        log = None;
                    }
                }
            }
        })
        .expect("spawn the UI feeder")
}
