//! The web UI and event log of a local-mode context (the `ui` feature, on by default):
//! opt-in with `EMBER_UI_PORT` (serves `ember-ui`'s pages and REST API on
//! `127.0.0.1:PORT`; 0 picks a free port, logged) and `EMBER_EVENT_LOG_DIR` (writes the
//! event log for `ember-driver history`).
//!
//! Invariants: it only ever listens on loopback; with `EMBER_SECRET` set every request
//! needs it; it stops (and the feeder ends) when the context ends; neither can fail the
//! context: a bad setting is an error at context creation, a runtime failure a warning.

use std::sync::Arc;

use ember_scheduler::SchedulerHandle;

use crate::error::{EmberError, Result};

/// A running local UI; stops its server when dropped.
pub(crate) struct LocalUi {
    /// Where it listens (none: event log only).
    pub addr: Option<std::net::SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LocalUi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// Starts what the environment asks for (nothing if neither variable is set).
pub(crate) fn start(
    scheduler: &SchedulerHandle,
    app: &str,
    conf: &crate::conf::Conf,
) -> Result<Option<LocalUi>> {
    let port = match std::env::var("EMBER_UI_PORT") {
        Ok(p) if !p.is_empty() => Some(p.trim().parse::<u16>().map_err(|_| {
            EmberError::Config(format!(
                "EMBER_UI_PORT: expected a port number, got {:?}",
                crate::io::excerpt(&p)
            ))
        })?),
        _ => None,
    };
    let log_dir = std::env::var_os("EMBER_EVENT_LOG_DIR").filter(|d| !d.is_empty());
    if port.is_none() && log_dir.is_none() {
        return Ok(None);
    }
    let started = ember_scheduler::listener::now_ms();
    let status = Arc::new(parking_lot::RwLock::new(ember_ui::AppStatus::new(
        app, started,
    )));
    let log = match &log_dir {
        Some(dir) => Some(
            ember_ui::EventLogWriter::create(std::path::Path::new(dir), app, started)
                .map_err(|e| EmberError::Config(format!("EMBER_EVENT_LOG_DIR: {e}")))?,
        ),
        None => None,
    };
    // Local mode adds its configuration (the Environment page) to the scheduler's events.
    let (configuration, extra) = crossbeam_channel::unbounded();
    let _ = configuration.send(ember_ui::AppEvent::Environment {
        application: String::new(),
        section: "Configuration".into(),
        entries: conf.entries(),
        time_ms: started,
    });
    drop(configuration);
    ember_ui::feed(scheduler.listen(), extra, status.clone(), log);
    let Some(port) = port else {
        return Ok(Some(LocalUi {
            addr: None,
            stop: None,
            server: None,
        }));
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            EmberError::Config(format!(
                "EMBER_UI_PORT: cannot listen on 127.0.0.1:{port}: {e}"
            ))
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| EmberError::Config(e.to_string()))?;
    let auth = match ember_proto::auth::load_secret(None) {
        Ok(Some(s)) => ember_ui::Auth::Secret(s.into()),
        _ => ember_ui::Auth::Open,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::Builder::new()
        .name("ember-ui".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::warn!("web UI: no runtime: {e}"),
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return tracing::warn!("web UI: {e}"),
                };
                let shutdown = async {
                    let _ = stopped.await;
                };
                if let Err(e) =
                    ember_ui::serve(listener, ember_ui::Source::Live(status), auth, shutdown).await
                {
                    tracing::warn!("web UI stopped: {e}");
                }
            });
        })
        .map_err(|e| EmberError::Config(format!("cannot start the web UI: {e}")))?;
    tracing::info!("ember ui on http://{addr}");
    Ok(Some(LocalUi {
        addr: Some(addr),
        stop: Some(stop),
        server: Some(server),
    }))
}
