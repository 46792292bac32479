//! The driver's shutdown signals: SIGINT and SIGTERM, watched from start-up so a signal
//! that arrives early is not lost; the daemon and the history server stop on the first.

use tracing::{info, warn};

/// SIGINT and SIGTERM handlers, registered when installed.
pub struct ShutdownSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let watch = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    warn!("cannot watch {name}: {e}");
                    None
                }
            };
            ShutdownSignals {
                term: watch(SignalKind::terminate(), "SIGTERM"),
                int: watch(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignals {}
    }

    /// Resolves on the first SIGINT or SIGTERM.
    pub async fn wait(mut self) {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.term) => {}
                _ = recv(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        info!("shutdown signal received");
    }
}
