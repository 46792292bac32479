//! The executor's channel to the driver: connect, register, heartbeat, dispatch the
//! driver's messages; and, when the channel is lost, clean up and register again.
//!
//! Invariants:
//! * One registration at a time. Its workers, broadcasts and running tasks belong to it
//!   alone: when its channel ends or errors (driver gone or restarted), every worker is
//!   killed before the executor registers again (as a new executor: the driver gives
//!   a new id). A worker's plans, broadcasts and task ids are numbered by the driver
//!   that sent them, so no worker outlives its registration.
//! * The shuffle files (and the session keys that guard them) outlive a lost
//!   registration for `--driver-reconnect-secs`: the next registration within that
//!   time reports every committed map output it finds (`crate::held_outputs`, in
//!   `HeldOutputs` messages right after `Registered`, before any driver message is
//!   handled), and from then on they are its own (a session the driver does not know
//!   is cleaned up by the driver's `CleanupSession`). When no registration succeeds in
//!   that time, every shuffle file is deleted and every session key forgotten.
//! * A decommissioning registration (`crate::decommission`) ends once its outputs moved,
//!   and the loop returns instead of registering again.
//! * Reconnection never stops, with backoff from [`INITIAL_BACKOFF`] doubling to
//!   [`MAX_BACKOFF`] ([`HELD_BACKOFF`] while shuffle files wait for a driver that comes
//!   back; reset after each successful registration), except when the driver
//!   refuses the secret: retrying cannot fix that, so [`run`] returns
//!   [`RegistrationError::Unauthenticated`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use ember_proto::{
    driver_message, executor_message, limits, DriverMessage, ExecutorMessage, Heartbeat,
    HeldSession, IdRange, LaunchTask, RegisterExecutor, Registered,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status, Streaming};

use crate::binaries::BinaryStore;
use crate::blocks::{SessionKeys, SharedExecutorId};
use crate::cleanup;
use crate::config::Config;
use crate::decommission::Decommission;
use crate::driver_conn::{driver_client, driver_endpoint, DriverConn};
use crate::workers::Workers;

/// First wait before reconnecting.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait between reconnection attempts while the shuffle files of a lost
/// registration wait for a driver that comes back: a restarted driver holds its
/// recovered sessions' jobs back a few seconds for the executors to report in.
pub const HELD_BACKOFF: Duration = Duration::from_millis(500);
/// How long the driver has to answer `Register` with `Registered`.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a decommissioned executor waits for the driver to end its channel.
const DONE_WAIT: Duration = Duration::from_secs(5);
/// Outbound messages (heartbeats, statuses) waiting for the channel.
const OUTBOUND_QUEUE: usize = 1024;

/// Why [`run`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("driver refused registration: wrong or missing executor secret ({0})")]
    Unauthenticated(String),
}

/// What the registration loop needs.
pub struct Registration {
    pub config: Arc<Config>,
    pub binaries: Arc<BinaryStore>,
    /// Advertised address of this executor's shuffle service.
    pub shuffle_address: String,
    /// Updated on every registration, for the shuffle service's messages.
    pub executor_id: SharedExecutorId,
    /// The shuffle service's session keys: learned from launched tasks, forgotten on
    /// session cleanup and when the registration ends.
    pub session_keys: SessionKeys,
    /// Cancelled on SIGINT/SIGTERM: kill the workers and return.
    pub shutdown: CancellationToken,
    /// Cancelled on SIGTERM (with a decommission timeout) or the driver's
    /// `Decommission`: leave gracefully (`crate::decommission`), then return.
    pub decommission: CancellationToken,
    /// Whether a registration is live (the health check reports it).
    pub registered: RegisteredFlag,
}

/// Whether the executor is registered with the driver now, observable by the health
/// service (`true` from `Registered` until the channel ends).
#[derive(Clone)]
pub struct RegisteredFlag(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for RegisteredFlag {
    fn default() -> Self {
        RegisteredFlag(Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl RegisteredFlag {
    fn set(&self, registered: bool) {
        self.0.send_replace(registered);
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// Clears the flag when a registration ends, however it ends.
struct Live<'a>(&'a RegisteredFlag);

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

enum End {
    Shutdown,
    /// Decommissioned: its outputs moved, the executor leaves.
    Decommissioned,
    /// A registration the driver accepted ended.
    Lost(String),
    /// No registration: the driver could not be reached or did not accept one.
    Unreachable(String),
}

/// Registers with the driver and serves it until shutdown, re-registering after every
/// loss of the channel. Returns `Ok` on shutdown.
pub async fn run(reg: &Registration) -> Result<(), RegistrationError> {
    let mut backoff = INITIAL_BACKOFF;
    // Since when the shuffle files of a lost registration wait for the next one.
    let mut held_since: Option<Instant> = None;
    let grace = reg.config.driver_reconnect;
    loop {
        let reason = match session(reg, &mut backoff, &mut held_since).await? {
            End::Shutdown | End::Decommissioned => return Ok(()),
            // A decommissioning executor that lost its driver leaves rather than join
            // again.
            End::Lost(reason) if reg.decommission.is_cancelled() => {
                tracing::warn!("{reason}; decommissioning, so not registering again");
                return Ok(());
            }
            End::Lost(reason) => {
                reg.executor_id
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
                held_since = Some(Instant::now());
                reason
            }
            End::Unreachable(reason) => reason,
        };
        let wait = match held_since {
            Some(since) if since.elapsed() < grace => {
                let left = grace - since.elapsed();
                let wait = backoff.min(HELD_BACKOFF).min(left);
                tracing::warn!(
                    "{reason}; keeping the shuffle files for a driver that comes back \
                     (for {} s more); reconnecting in {} ms",
                    left.as_secs(),
                    wait.as_millis()
                );
                wait
            }
            Some(_) | None => {
                let deleted = if held_since.take().is_some() || grace.is_zero() {
                    forget_outputs(reg).await
                } else {
                    0
                };
                tracing::warn!(
                    deleted_shuffle_files = deleted,
                    "{reason}; reconnecting in {} ms",
                    backoff.as_millis()
                );
                backoff
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = reg.shutdown.cancelled() => return Ok(()),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Deletes every shuffle file and forgets every session key (a lost registration's
/// outputs no driver took over); how many entries were deleted.
async fn forget_outputs(reg: &Registration) -> usize {
    reg.session_keys.clear();
    let dir = reg.config.shuffle_dir();
    tokio::task::spawn_blocking(move || cleanup::delete_all(&dir))
        .await
        .unwrap_or(0)
}

/// Tells the driver every map output this executor holds from before, with the digest
/// of the session key it holds each session's under (one empty message marked last
/// when none). A session directory whose key is not known here cannot be claimed and
/// is deleted.
async fn report_held_outputs(
    reg: &Registration,
    tx: &mpsc::Sender<ExecutorMessage>,
    kept_from_a_lost_registration: bool,
) {
    let dir = reg.config.shuffle_dir();
    let keys = reg.session_keys.digests();
    let known: Vec<IdRange> = keys.iter().map(|(r, _)| *r).collect();
    let held = match kept_from_a_lost_registration {
        true => tokio::task::spawn_blocking(move || crate::held_outputs::scan(&dir, &known))
            .await
            .unwrap_or_default(),
        false => Vec::new(),
    };
    let sessions: Vec<HeldSession> = (keys.into_iter())
        .filter(|(r, _)| held.iter().any(|o| IdRange::of_id(o.shuffle_id) == *r))
        .map(|(r, shuffle_key_sha256)| HeldSession {
            range: r.index(),
            shuffle_key_sha256,
        })
        .collect();
    if !held.is_empty() {
        tracing::info!(
            outputs = held.len(),
            "telling the driver the map outputs held from before this registration"
        );
    }
    for msg in limits::held_output_messages(held, sessions) {
        let msg = ExecutorMessage {
            msg: Some(executor_message::Msg::HeldOutputs(msg)),
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

/// A registration the driver accepted.
struct Connected {
    client: DriverConn,
    tx: mpsc::Sender<ExecutorMessage>,
    inbound: Streaming<DriverMessage>,
    registered: Registered,
}

/// Why a registration attempt failed.
enum Failed {
    Fatal(RegistrationError),
    Retry(String),
}

impl From<String> for Failed {
    fn from(reason: String) -> Self {
        Failed::Retry(reason)
    }
}

/// `Fatal` for a refused secret, else `Retry` with `what` and the status.
fn failed(what: String, status: Status) -> Failed {
    if matches!(
        status.code(),
        Code::Unauthenticated | Code::PermissionDenied
    ) {
        Failed::Fatal(RegistrationError::Unauthenticated(
            status.message().to_string(),
        ))
    } else {
        Failed::Retry(format!("{what}: {status}"))
    }
}

/// Connects and registers.
async fn register(reg: &Registration) -> Result<Connected, Failed> {
    let url = &reg.config.driver;
    let channel = driver_endpoint(url)?
        .connect()
        .await
        .map_err(|e| format!("cannot connect to the driver at {url}: {e}"))?;
    let mut client = driver_client(channel, reg.config.executor_secret.as_deref())?;
    let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
    let register = RegisterExecutor {
        cores: reg.config.cores,
        memory_bytes: reg.config.memory_bytes,
        shuffle_address: reg.shuffle_address.clone(),
        host: reg.config.advertise_host.clone(),
        pid: std::process::id(),
    };
    let _ = tx
        .send(ExecutorMessage {
            msg: Some(executor_message::Msg::Register(register)),
        })
        .await;
    let mut inbound = client
        .executor_channel(crate::outbound::Batched::new(rx))
        .await
        .map_err(|s| failed(format!("driver at {url} refused the executor channel"), s))?
        .into_inner();
    let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
        .await
        .map_err(|_| format!("driver at {url} did not answer Register"))?
        .map_err(|s| failed(format!("driver at {url} failed registration"), s))?;
    match first.and_then(|m| m.msg) {
        Some(driver_message::Msg::Registered(registered)) => Ok(Connected {
            client,
            tx,
            inbound,
            registered,
        }),
        Some(other) => Err(Failed::Retry(format!(
            "driver at {url} answered Register with {} instead of Registered",
            kind(&other)
        ))),
        None => Err(Failed::Retry(format!(
            "driver at {url} closed the channel during registration"
        ))),
    }
}

/// One registration: from connecting to losing the channel (or shutdown).
async fn session(
    reg: &Registration,
    backoff: &mut Duration,
    held_since: &mut Option<Instant>,
) -> Result<End, RegistrationError> {
    let attempt = tokio::select! {
        r = register(reg) => r,
        _ = reg.shutdown.cancelled() => return Ok(End::Shutdown),
    };
    let Connected {
        client,
        tx,
        mut inbound,
        registered,
    } = match attempt {
        Ok(c) => c,
        Err(Failed::Fatal(e)) => return Err(e),
        Err(Failed::Retry(reason)) => return Ok(End::Unreachable(reason)),
    };
    *backoff = INITIAL_BACKOFF;
    reg.registered.set(true);
    let _live = Live(&reg.registered);
    let executor_id = registered.executor_id;
    let interval_ms = match registered.heartbeat_interval_ms {
        0 => 1000,
        ms => ms,
    };
    tracing::info!(
        executor_id = %executor_id,
        heartbeat_interval_ms = interval_ms,
        driver = %reg.config.driver,
        "registered with the driver"
    );
    *reg.executor_id.lock().unwrap_or_else(|p| p.into_inner()) = executor_id.clone();
    // Before any driver message is handled: the files found are all from before (only
    // a lost registration leaves any; the first one finds the directory emptied).
    report_held_outputs(reg, &tx, held_since.take().is_some()).await;
    let mut workers = Workers::new(
        reg.config.clone(),
        executor_id.clone(),
        reg.binaries.clone(),
        client,
        tx.clone(),
    );
    let mut heartbeat = tokio::time::interval(Duration::from_millis(interval_ms.into()));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leaving = Decommission::default();
    let mut drain_poll = tokio::time::interval(crate::decommission::DRAIN_POLL);
    let timeout = reg.config.decommission_timeout;
    let end = loop {
        tokio::select! {
            _ = reg.shutdown.cancelled() => break End::Shutdown,
            _ = reg.decommission.cancelled(), if leaving.is_serving() => {
                leaving.start(&tx, timeout).await;
            }
            _ = drain_poll.tick(), if !leaving.is_serving() => {
                if leaving.poll(&mut workers, &tx, timeout).await {
                    break End::Decommissioned;
                }
            }
            _ = leaving.moved() => {
                // `DONE` is queued: the driver answers it by ending the channel. Wait for
                // that (bounded), so the message is not cut off by this side closing.
                let drained = async { while let Ok(Some(_)) = inbound.message().await {} };
                let _ = tokio::time::timeout(DONE_WAIT, drained).await;
                break End::Decommissioned;
            }
            _ = heartbeat.tick() => {
                let hb = Heartbeat { running_tasks: workers.running_tasks(), memory_used_bytes: workers.memory_used() };
                let msg = ExecutorMessage { msg: Some(executor_message::Msg::Heartbeat(hb)) };
                match tx.try_send(msg) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        tracing::debug!("outbound queue full; skipped a heartbeat");
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        break End::Lost("the channel to the driver closed".into());
                    }
                }
            }
            msg = inbound.message() => match msg {
                Ok(Some(DriverMessage { msg: Some(driver_message::Msg::MigrateOutputs(plan)) })) => {
                    leaving.plan(plan, &mut workers, reg.session_keys.clone(), tx.clone(), timeout);
                }
                Ok(Some(m)) if !leaving.is_serving() => refuse_launches(reg, &mut workers, m).await,
                Ok(Some(m)) => dispatch(reg, &mut workers, m).await,
                Ok(None) => break End::Lost(format!("driver closed the channel of executor {executor_id}")),
                Err(s) => break End::Lost(format!("channel of executor {executor_id} to the driver failed: {s}")),
            },
        }
    };
    workers.shutdown().await;
    Ok(end)
}

fn kind(msg: &driver_message::Msg) -> &'static str {
    match msg {
        driver_message::Msg::Registered(_) => "Registered",
        driver_message::Msg::Launch(_) => "LaunchTask",
        driver_message::Msg::LaunchBatch(_) => "LaunchTasks",
        driver_message::Msg::Kill(_) => "KillTask",
        driver_message::Msg::Cleanup(_) => "CleanupSession",
        driver_message::Msg::Unpersist(_) => "UnpersistRdd",
        driver_message::Msg::RemoveShuffles(_) => "RemoveShuffles",
        driver_message::Msg::BarrierPeers(_) => "BarrierPeers",
        driver_message::Msg::MigrateOutputs(_) => "MigrateOutputs",
        driver_message::Msg::Decommission(_) => "Decommission",
    }
}

/// One launch: learns the session key of its plan (the shuffle blocks its session may
/// read), then hands it to the workers.
async fn launch_one(reg: &Registration, workers: &mut Workers, launch: LaunchTask) {
    let sent = launch.plan.as_ref().and_then(|p| p.plan.as_ref());
    let inline = launch.task.as_ref().and_then(|t| t.plan.as_ref());
    if let Some(plan) = sent.or(inline) {
        if let Some(range) = reg.session_keys.learn(plan.final_rdd, &plan.shuffle_key) {
            // An earlier session of this id range left files here (its cleanup was
            // sent while the channel was down): they go before this session writes.
            let dir = reg.config.shuffle_dir();
            let ids = range.ids();
            let deleted = tokio::task::spawn_blocking(move || {
                cleanup::delete_shuffle_range(&dir, ids.start, ids.end)
            })
            .await
            .unwrap_or(0);
            tracing::info!(
                id_range = range.index(),
                deleted,
                "a new session took an id range: deleted an earlier session's files"
            );
        }
    }
    workers.launch(launch).await
}

/// While decommissioning: launches are refused (run elsewhere), the rest dispatched.
async fn refuse_launches(reg: &Registration, workers: &mut Workers, msg: DriverMessage) {
    let tasks: Vec<u64> = match &msg.msg {
        Some(driver_message::Msg::Launch(l)) => l.task.iter().map(|t| t.task_id).collect(),
        Some(driver_message::Msg::LaunchBatch(b)) => (b.launches.iter())
            .take(limits::MAX_LAUNCH_BATCH)
            .filter_map(|l| l.task.as_ref().map(|t| t.task_id))
            .collect(),
        _ => return dispatch(reg, workers, msg).await,
    };
    for task_id in tasks {
        workers.refuse_leaving(task_id).await;
    }
}

async fn dispatch(reg: &Registration, workers: &mut Workers, msg: DriverMessage) {
    match msg.msg {
        Some(driver_message::Msg::Launch(launch)) => launch_one(reg, workers, launch).await,
        Some(driver_message::Msg::LaunchBatch(batch)) => {
            let n = batch.launches.len();
            for (i, launch) in batch.launches.into_iter().enumerate() {
                if i < limits::MAX_LAUNCH_BATCH {
                    launch_one(reg, workers, launch).await;
                } else if let Some(task) = launch.task {
                    let msg = format!(
                        "the driver sent {n} launches in one message, more than the {} \
                         allowed; this one is refused",
                        limits::MAX_LAUNCH_BATCH
                    );
                    workers.refuse(task.task_id, msg).await;
                }
            }
        }
        Some(driver_message::Msg::Kill(kill)) => workers.kill(kill),
        Some(driver_message::Msg::Cleanup(c)) => {
            reg.session_keys.forget_range(c.id_lo, c.id_hi);
            let dir = reg.config.shuffle_dir();
            tokio::task::spawn_blocking(move || {
                let n = cleanup::delete_shuffle_range(&dir, c.id_lo, c.id_hi);
                tracing::info!(
                    id_lo = c.id_lo,
                    id_hi = c.id_hi,
                    deleted = n,
                    "session cleanup"
                );
            });
            workers.cleanup(c);
        }
        Some(driver_message::Msg::Unpersist(u)) => {
            let dir = reg.config.shuffle_dir();
            let rdd_id = u.rdd_id;
            tokio::task::spawn_blocking(move || {
                let n = cleanup::delete_cached_blocks(&dir, rdd_id);
                if n > 0 {
                    tracing::debug!(rdd_id, deleted = n, "removed moved cached blocks");
                }
            });
            workers.unpersist(u);
        }
        Some(driver_message::Msg::RemoveShuffles(r)) => {
            let dir = reg.config.shuffle_dir();
            tokio::task::spawn_blocking(move || {
                let n = cleanup::delete_shuffles(&dir, &r.shuffle_ids);
                tracing::debug!(
                    shuffles = r.shuffle_ids.len(),
                    deleted = n,
                    "removed released shuffles"
                );
            });
        }
        Some(driver_message::Msg::Registered(_)) => {
            tracing::warn!("driver sent Registered again; ignored");
        }
        Some(driver_message::Msg::BarrierPeers(p)) => workers.barrier_peers(p),
        Some(driver_message::Msg::Decommission(_)) => {
            if reg.config.decommission_timeout.is_zero() {
                tracing::warn!(
                    "the driver asked to decommission, but --decommission-timeout is 0; ignored"
                );
            } else {
                reg.decommission.cancel();
            }
        }
        Some(driver_message::Msg::MigrateOutputs(_)) => {
            tracing::warn!("the driver sent a migration plan out of turn; ignored");
        }
        None => tracing::warn!("driver sent an empty or unknown message; ignored"),
    }
}
