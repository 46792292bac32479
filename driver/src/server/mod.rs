//! The driver daemon: the gRPC `Driver` service that executors register with and job
//! clients submit plans to, around one [`SchedulerHandle`].
//!
//! Rooms: [`executors`] (registry, executor channels, heartbeat monitor), [`launcher`]
//! (the scheduler's [`TaskLauncher`](ember_scheduler::TaskLauncher) over executor channels),
//! `sessions` and `jobs` (client sessions, job submission and event streaming),
//! `job_queue` (a session's jobs waiting for its running-jobs bound), `names` (what
//! clients name, escaped and bounded),
//! `release` (checking the client cleaner's `ReleaseShuffles` calls),
//! [`binaries`] (the content-addressed binary store, whose unused binaries a periodic
//! task deletes), `service` (the tonic service
//! that delegates to those); the web UI, REST API and event log are `ember-ui`'s, fed
//! by the scheduler's listener bus from the daemon's start.
//!
//! Invariants:
//! - One scheduler per daemon; everything that changes scheduling goes through its
//!   event channel, in the order the daemon observed it.
//! - Nothing received from the network is trusted: malformed or oversized messages
//!   become a tonic `Status`, never a panic.
//! - Locks are taken in the order sessions → job tracker → executors, never held
//!   across an `.await`, and nothing under them blocks (all sends are unbounded).

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::Sender;
use ember_proto::auth::{self, RequireSecrets};
use ember_proto::driver_server::DriverServer;
use ember_proto::listener::{BoundedListener, ConnectionLimits, FirstRequest};
use ember_proto::ClusterStatus;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

use ember_scheduler::events::SchedulerEvent;
use ember_scheduler::scheduler::{SchedulerConfig, SchedulerHandle};

pub mod binaries;
mod binary_file;
mod decommission;
pub mod executors;
mod held_outputs;
mod job_queue;
mod jobs;
pub mod launcher;
pub mod names;
mod release;
mod service;
mod sessions;
mod ui_sessions;

pub use binaries::BinaryStore;
pub use executors::ExecutorRegistry;
pub use jobs::check_plan_ids;
pub use launcher::GrpcLauncher;
pub use service::DriverService;

/// HTTP/2 keepalive ping interval: a dead peer is noticed within interval + timeout.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a keepalive ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of a driver daemon.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// An executor silent for longer than this is lost.
    pub heartbeat_timeout: Duration,
    /// Retries, exclusion and speculation.
    pub scheduler: SchedulerConfig,
    /// Where uploaded binaries are kept.
    pub binary_dir: PathBuf,
    /// The cluster secret clients' calls must carry (none: open, loopback only).
    pub secret: Option<String>,
    /// The operator secret (`--operator-secret-file`): the web UI, REST API and
    /// `/metrics` across all applications. Without it but with a cluster secret, the
    /// UI serves session tokens only; with neither, it is open (loopback only).
    pub operator_secret: Option<String>,
    /// The executor secret `ExecutorChannel` and `FetchBinary` must carry; required
    /// with a cluster secret, and different from it.
    pub executor_secret: Option<String>,
    /// Bounds on what clients may store in the driver (plan bounds are in
    /// `scheduler.limits`).
    pub limits: ServerLimits,
    /// Where to write the event log (one JSON line per scheduler event), if anywhere.
    pub event_log_dir: Option<PathBuf>,
    /// Where each open session's state file is kept so that its client can reopen it
    /// after a driver restart (`<--binary-dir>/sessions`); none: sessions end with the
    /// driver.
    pub session_state_dir: Option<PathBuf>,
    /// How long a session recovered from the state directory waits for its client
    /// before it is finalized (its executors' files deleted).
    pub session_reconnect: Duration,
    /// The daemon's flags and their values, for the web UI's Environment page
    /// (credentials redacted: the UI redacts by name again).
    pub flags: Vec<(String, String)>,
}

/// Bounds on what clients may store in the driver: running and waiting jobs, queued
/// tasks, broadcasts and binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// Jobs of one session running at once (`--max-running-jobs-per-session`); more
    /// wait in the session's queue.
    pub max_running_jobs_per_session: u32,
    /// Jobs running at once over all sessions (`--max-running-jobs`); more wait in
    /// their session's queue.
    pub max_running_jobs: u32,
    /// Jobs one session may have waiting to start (`--max-queued-jobs-per-session`);
    /// a job past it is refused.
    pub max_queued_jobs_per_session: u32,
    /// Tasks waiting for a slot over all jobs (`--max-queued-tasks`): a job whose tasks
    /// would take the count past it is refused.
    pub max_queued_tasks: u64,
    /// Broadcast values one session may hold (`--max-broadcasts-per-session`).
    pub max_broadcasts_per_session: u32,
    /// Total bytes of one session's broadcast values (`--max-broadcast-bytes-per-session`).
    pub max_broadcast_bytes_per_session: u64,
    /// Largest binary an upload may declare (`--max-binary-bytes`).
    pub max_binary_bytes: u64,
    /// Most bytes the binary store holds, uploads in progress included
    /// (`--max-binary-store-bytes`).
    pub max_binary_store_bytes: u64,
    /// A binary no session uses is deleted once unused this long
    /// (`--binary-max-age-secs`).
    pub binary_max_age: Duration,
    /// Sessions one client connection may hold (`--max-sessions-per-connection`).
    pub max_sessions_per_connection: u32,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_running_jobs_per_session: 16,
            max_running_jobs: 256,
            max_queued_jobs_per_session: 64,
            max_queued_tasks: 4_000_000,
            max_broadcasts_per_session: 10_000,
            max_broadcast_bytes_per_session: 1 << 30,
            max_binary_bytes: 2 << 30,
            max_binary_store_bytes: 8 << 30,
            binary_max_age: Duration::from_secs(3600),
            max_sessions_per_connection: 8,
        }
    }
}

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot use binary directory {dir}: {source}")]
    BinaryDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("web UI failed: {0}")]
    Ui(std::io::Error),
    #[error("event log: {0}")]
    EventLog(#[from] ember_ui::LogError),
    #[error("{0}")]
    Secrets(&'static str),
}

/// The credential model's start-up rules: a cluster secret needs an executor secret
/// (else every client could pose as an executor), and the two differ.
fn check_secrets(config: &DriverConfig) -> Result<(), ServerError> {
    match (&config.secret, &config.executor_secret) {
        (Some(_), None) => Err(ServerError::Secrets(
            "a driver with a cluster secret needs an executor secret too \
             (--executor-secret-file or EMBER_EXECUTOR_SECRET_FILE): clients hold the \
             cluster secret and must not be able to act as executors",
        )),
        (Some(c), Some(e)) if c == e => Err(ServerError::Secrets(
            "the executor secret must differ from the cluster secret \
             (--executor-secret-file and --secret-file hold the same secret)",
        )),
        _ => Ok(()),
    }
}

/// State shared by every call.
pub(crate) struct DriverState {
    pub scheduler: SchedulerHandle,
    pub to_scheduler: Sender<SchedulerEvent>,
    pub executors: Arc<ExecutorRegistry>,
    pub sessions: sessions::SessionRegistry,
    pub binaries: BinaryStore,
    pub limits: ServerLimits,
    pub plan_limits: ember_scheduler::limits::PlanLimits,
    /// Set when the driver recovered sessions at start: jobs wait until then before
    /// the scheduler plans them, so the executors (retrying every half second while
    /// they hold outputs) have registered and reported what they kept.
    pub recovery_until: Option<tokio::time::Instant>,
}

impl DriverState {
    fn status(&self) -> ClusterStatus {
        let summaries = self.sessions.summaries();
        ClusterStatus {
            executors: self.executors.snapshot(),
            sessions: summaries.len() as u32,
            running_jobs: summaries.iter().map(|s| s.running_jobs.len() as u32).sum(),
        }
    }

    fn collect_binaries(&self) -> Vec<String> {
        let in_use = self.sessions.binaries_in_use();
        self.binaries
            .collect_garbage(&in_use, std::time::SystemTime::now())
    }

    fn shutdown(&self) {
        self.scheduler.send(SchedulerEvent::Shutdown);
        self.sessions.shutdown();
        self.executors.clear();
    }
}

/// How long a driver that recovered sessions holds their resubmitted jobs back from
/// the scheduler after it starts (see `DriverState::recovery_until`).
pub const RECOVERY_WAIT: Duration = Duration::from_secs(3);

/// Every second, finalizes the recovered sessions no client reopened in time. Ends when
/// the driver state is dropped.
async fn expire_detached_every(state: std::sync::Weak<DriverState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else {
            return;
        };
        sessions::expire_detached(&state);
    }
}

/// Every `period`, deletes the binaries no session has used for the maximum age.
/// Ends when the driver state is dropped.
async fn collect_binaries_every(state: std::sync::Weak<DriverState>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else {
            return;
        };
        // Directory listing and unlinks: off the async workers.
        let _ = tokio::task::spawn_blocking(move || state.collect_binaries()).await;
    }
}

/// A running driver: its scheduler, registries and heartbeat monitor. Serve it with
/// [`DriverDaemon::serve`]; dropping it stops the scheduler.
pub struct DriverDaemon {
    state: Arc<DriverState>,
    /// Jobs, stages, tasks and executors as the UI shows them.
    status: ember_ui::SharedStatus,
    secret: Option<String>,
    operator_secret: Option<String>,
    executor_secret: Option<String>,
    monitor: tokio::task::JoinHandle<()>,
    binary_gc: tokio::task::JoinHandle<()>,
    /// Finalizes recovered sessions no client reopened in time.
    expiry: tokio::task::JoinHandle<()>,
    /// Set to the reason if the scheduler thread panics.
    failed: tokio::sync::watch::Receiver<Option<String>>,
}

impl DriverDaemon {
    /// Starts the scheduler and the heartbeat monitor; must run inside a tokio runtime.
    pub fn start(config: DriverConfig) -> Result<Self, ServerError> {
        check_secrets(&config)?;
        let binaries = BinaryStore::new(
            &config.binary_dir,
            config.limits.max_binary_bytes,
            config.limits.max_binary_store_bytes,
            config.limits.binary_max_age,
        )
        .map_err(|source| ServerError::BinaryDir {
            dir: config.binary_dir.clone(),
            source,
        })?;
        let executors = Arc::new(ExecutorRegistry::default());
        let scheduler_sender = Arc::new(OnceLock::new());
        let launcher = GrpcLauncher::new(executors.clone(), scheduler_sender.clone());
        let (failed_tx, failed) = tokio::sync::watch::channel(None);
        let on_panic = Box::new(move |reason: String| {
            let _ = failed_tx.send(Some(reason));
        });
        let scheduler = SchedulerHandle::start_with_panic_handler(
            SchedulerConfig {
                max_task_attempts: config.scheduler.max_task_attempts.max(1),
                max_executor_losses_per_task: config.scheduler.max_executor_losses_per_task.max(1),
                ..config.scheduler.clone()
            },
            Box::new(launcher),
            on_panic,
        );
        let to_scheduler = scheduler.sender();
        let _ = scheduler_sender.set(to_scheduler.clone());
        let started = ember_scheduler::listener::now_ms();
        let status = Arc::new(parking_lot::RwLock::new(ember_ui::AppStatus::new(
            "ember-driver",
            started,
        )));
        let log = match &config.event_log_dir {
            Some(dir) => Some(ember_ui::EventLogWriter::create(
                dir,
                "ember-driver",
                started,
            )?),
            None => None,
        };
        let (sessions, recovered) = sessions::SessionRegistry::with_state_dir(
            config.session_state_dir.clone(),
            config.session_reconnect,
            config.limits.max_queued_jobs_per_session,
        );
        match &config.session_state_dir {
            Some(dir) if recovered > 0 => tracing::info!(
                sessions = recovered,
                dir = %dir.display(),
                "recovered client sessions from the state directory; each waits {} s for its client",
                config.session_reconnect.as_secs()
            ),
            Some(_) => {}
            None => tracing::info!(
                "no --binary-dir: client sessions do not survive a driver restart \
                 (the binaries and session state live in a temporary directory)"
            ),
        }
        let (ui_tx, ui_rx) = crossbeam_channel::unbounded();
        let _ = ui_tx.send(ember_ui::AppEvent::Environment {
            application: String::new(),
            section: "Driver flags".into(),
            entries: config.flags.clone(),
            time_ms: started,
        });
        executors.report_to_ui(ui_tx);
        ember_ui::feed(scheduler.listen(), ui_rx, status.clone(), log);
        let state = Arc::new(DriverState {
            scheduler,
            to_scheduler,
            executors,
            sessions,
            binaries,
            limits: config.limits.clone(),
            plan_limits: config.scheduler.limits.clone(),
            recovery_until: (recovered > 0).then(|| tokio::time::Instant::now() + RECOVERY_WAIT),
        });
        let monitor = tokio::spawn(executors::monitor(
            Arc::downgrade(&state),
            config.heartbeat_timeout,
        ));
        let expiry = tokio::spawn(expire_detached_every(Arc::downgrade(&state)));
        let binary_gc = tokio::spawn(collect_binaries_every(
            Arc::downgrade(&state),
            (config.limits.binary_max_age / 4)
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
        ));
        Ok(DriverDaemon {
            state,
            status,
            secret: config.secret,
            operator_secret: config.operator_secret,
            executor_secret: config.executor_secret,
            monitor,
            binary_gc,
            expiry,
            failed,
        })
    }

    /// Deletes the binaries no session uses that have been unused for the maximum
    /// age (the daemon also does so periodically); returns their digests.
    pub fn collect_binaries(&self) -> Vec<String> {
        self.state.collect_binaries()
    }

    /// Resolves, with the reason, if the scheduler thread panics; the daemon must then
    /// exit (every later job would fail), so that a supervisor restarts it.
    pub async fn scheduler_failed(&self) -> String {
        let mut failed = self.failed.clone();
        let reason = match failed.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            Err(_) => None,
        };
        match reason {
            Some(r) => r,
            // The scheduler ended without panicking.
            None => std::future::pending().await,
        }
    }

    /// The `Driver` gRPC service, with message size limits and the secret checks (each
    /// method asks for its role's secret, see [`auth::require`]).
    pub fn service(&self) -> InterceptedService<DriverServer<DriverService>, RequireSecrets> {
        let svc = DriverServer::new(DriverService::new(self.state.clone()))
            .max_decoding_message_size(auth::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(auth::MAX_MESSAGE_BYTES);
        InterceptedService::new(
            svc,
            RequireSecrets::new(
                self.secret.as_deref(),
                self.executor_secret.as_deref(),
                "driver",
            ),
        )
    }

    /// Serves the `Driver` service on `listener` until `shutdown` resolves; then ends
    /// every session and executor stream and stops the scheduler, so that in-flight
    /// calls finish.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        self.serve_bounded(
            grpc_listener(listener, ConnectionLimits::default()),
            shutdown,
        )
        .await
    }

    /// [`serve`](Self::serve) on a listener bounded by [`grpc_listener`].
    pub async fn serve_bounded(
        &self,
        incoming: BoundedListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        let state = self.state.clone();
        // The standard gRPC health service (no secret needed): SERVING while this runs.
        let (_reporter, health) = ember_proto::health::health_reporter();
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(health)
            .add_service(self.service())
            .serve_with_incoming_shutdown(incoming, async move {
                shutdown.await;
                state.shutdown();
            })
            .await?;
        Ok(())
    }

    /// Serves the web UI and REST API on `listener` until `shutdown` resolves: to the
    /// operator secret everything, to a session's token its own application (bearer
    /// token or basic-auth password); open only when the driver has no secret at all.
    pub async fn serve_ui(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let listener = ember_ui::server::bounded(listener, ConnectionLimits::default());
        self.serve_ui_bounded(listener, shutdown).await
    }

    /// [`serve_ui`](Self::serve_ui) on a listener bounded by `ember_ui::server::bounded`.
    pub async fn serve_ui_bounded(
        &self,
        listener: BoundedListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let auth = match (&self.operator_secret, &self.secret) {
            (Some(op), _) => ember_ui::Auth::Secret(Arc::from(op.as_str())),
            (None, Some(_)) => ember_ui::Auth::SessionsOnly,
            (None, None) => ember_ui::Auth::Open,
        };
        let state = Arc::downgrade(&self.state);
        let extra: ember_ui::ExtraMetrics = Arc::new(move || match state.upgrade() {
            Some(state) => driver_metrics(&state),
            None => String::new(),
        });
        ember_ui::serve_with(
            listener,
            ember_ui::Source::Driver {
                status: self.status.clone(),
                sessions: Arc::new(ui_sessions::UiSessions(Arc::downgrade(&self.state))),
            },
            auth,
            Some(extra),
            shutdown,
        )
        .await
        .map_err(ServerError::Ui)
    }

    /// The cluster as `Status` reports it.
    pub fn status(&self) -> ClusterStatus {
        self.state.status()
    }

    /// Ends every session and executor stream and stops the scheduler.
    pub fn shutdown(&self) {
        self.state.shutdown();
    }
}

impl Drop for DriverDaemon {
    fn drop(&mut self) {
        self.monitor.abort();
        self.binary_gc.abort();
        self.expiry.abort();
        self.state.shutdown();
    }
}

/// The driver's own metrics, appended to the UI's `/metrics`: client sessions, tasks
/// waiting for a slot, bytes of job binaries uploaded.
fn driver_metrics(state: &DriverState) -> String {
    use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
    let mut r = prometheus_client::registry::Registry::with_prefix("ember_driver");
    let sessions = Gauge::<i64>::default();
    sessions.set(state.sessions.summaries().len() as i64);
    r.register("sessions", "Client sessions open", sessions);
    let queued = Gauge::<i64>::default();
    queued.set(state.scheduler.queued_tasks() as i64);
    r.register("queued_tasks", "Tasks waiting for a free slot", queued);
    let uploaded = Counter::<u64>::default();
    uploaded.inc_by(state.binaries.uploaded_bytes());
    r.register("uploaded_bytes", "Bytes of job binaries uploaded", uploaded);
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

/// `listener` as the driver's gRPC port: at most `limits.max_connections` open, each
/// with `limits.first_request_timeout` to send the HTTP/2 preface.
pub fn grpc_listener(listener: TcpListener, limits: ConnectionLimits) -> BoundedListener {
    BoundedListener::new(listener, limits, FirstRequest::Http2, "grpc")
}
