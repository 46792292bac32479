//! The executor registry: one entry per live executor registration, its outbound
//! channel, and the heartbeat monitor that declares silent executors lost.
//!
//! Invariants:
//! - An executor id (`executor-N`, N counting from 1 for the driver's lifetime) names
//!   one registration; an executor that reconnects gets a new id.
//! - An entry is in the registry exactly while the scheduler believes the executor
//!   alive: it is inserted before `ExecutorAdded` is sent, and `ExecutorLost` is sent
//!   while the entry is removed, under the registry lock, so a launch that finds no
//!   entry always comes after the scheduler was told.
//! - Dropping an entry drops the registration's outbound sender (which ends the
//!   executor's response stream, so it re-registers) and stops its inbound reader.
//! - `sent_broadcasts` lists the broadcast ids this registration has been sent; it dies
//!   with the entry, and a session's range is forgotten when the session is cleaned up.
//! - `held_plans` lists the stage plans this registration holds: a task goes with its
//!   stage's plan exactly when the plan is not held, after the forgets that made room
//!   (`ember_proto::held_plans`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ember_proto::held_plans::HeldPlans;
use ember_proto::{
    driver_message, executor_message, limits, BroadcastValue, CleanupSession, DriverMessage,
    ExecutorInfo, ExecutorMessage, Heartbeat, LaunchTask, LaunchTasks, RegisterExecutor,
    Registered, StagePlan, TaskDescription, TaskStatus,
};
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Status, Streaming};
use tracing::{debug, info, warn};

use super::DriverState;
use ember_scheduler::events::{SchedulerEvent, StageShared};

/// How often the driver asks executors to send a heartbeat.
pub const HEARTBEAT_INTERVAL_MS: u32 = 1000;
/// How long a new executor channel may take to send its `register` message.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the monitor looks for silent executors.
const MONITOR_PERIOD: Duration = Duration::from_millis(250);

/// What the driver sends on an executor's channel.
pub(crate) type Outbound = mpsc::UnboundedSender<Result<DriverMessage, Status>>;
/// The response stream of an executor channel.
pub(crate) type OutboundStream = UnboundedReceiverStream<Result<DriverMessage, Status>>;

struct Entry {
    seq: u64,
    info: RegisterExecutor,
    last_seen: Instant,
    running_tasks: u32,
    memory_used_bytes: u64,
    outbound: Outbound,
    sent_broadcasts: HashSet<u64>,
    /// The stage plans this registration holds (it was sent and not told to forget).
    held_plans: HeldPlans,
    /// Dropped with the entry: tells the inbound reader to stop.
    _alive: oneshot::Sender<()>,
}

impl Entry {
    /// The launch of `task`: its stage's broadcasts and plan where this registration
    /// has not been sent them (making room for the plan as `HeldPlans` says).
    fn launch_of(&mut self, task: TaskDescription, stage: &StageShared) -> LaunchTask {
        let mut broadcasts: Vec<BroadcastValue> = stage
            .broadcasts
            .iter()
            .filter(|(bid, _)| self.sent_broadcasts.insert(**bid))
            .map(|(id, value)| BroadcastValue {
                id: *id,
                value: value.clone(),
            })
            .collect();
        broadcasts.sort_by_key(|b| b.id);
        let (forget_plans, plan) = if self.held_plans.contains(stage.plan_id) {
            (Vec::new(), None)
        } else {
            let forget = self
                .held_plans
                .hold(stage.plan_id, stage.plan.encoded_len());
            let plan = StagePlan {
                id: stage.plan_id,
                plan: Some((*stage.plan).clone()),
            };
            (forget, Some(plan))
        };
        LaunchTask {
            task: Some(task),
            broadcasts,
            forget_plans,
            plan,
        }
    }

    /// One message: a lone launch as `Launch`, more as `LaunchBatch`.
    fn send_launches(&self, mut launches: Vec<LaunchTask>) -> Result<(), ()> {
        let msg = match launches.len() {
            0 => return Ok(()),
            1 => driver_message::Msg::Launch(launches.pop().ok_or(())?),
            _ => driver_message::Msg::LaunchBatch(LaunchTasks { launches }),
        };
        self.outbound
            .send(Ok(DriverMessage { msg: Some(msg) }))
            .map_err(|_| ())
    }
}

#[derive(Default)]
struct Inner {
    next_seq: u64,
    executors: HashMap<String, Entry>,
}

/// The live executors.
#[derive(Default)]
pub struct ExecutorRegistry {
    inner: Mutex<Inner>,
    /// Where executors' hosts and memory go for the web UI.
    ui: std::sync::OnceLock<crossbeam_channel::Sender<ember_ui::AppEvent>>,
}

/// Result of trying to hand a task to an executor.
pub(crate) enum Launch {
    Sent,
    /// No such executor (already lost).
    Unknown,
    /// The executor's response stream is gone: it has just been removed.
    Closed,
}

impl ExecutorRegistry {
    /// Total cores and number of live executors.
    pub fn totals(&self) -> (u32, u32) {
        let inner = self.inner.lock();
        let cores = inner
            .executors
            .values()
            .fold(0u32, |a, e| a.saturating_add(e.info.cores));
        (cores, inner.executors.len() as u32)
    }

    /// The live executors, in registration order.
    pub fn snapshot(&self) -> Vec<ExecutorInfo> {
        let inner = self.inner.lock();
        let mut v: Vec<(u64, ExecutorInfo)> = inner
            .executors
            .iter()
            .map(|(id, e)| {
                let info = ExecutorInfo {
                    executor_id: id.clone(),
                    cores: e.info.cores,
                    memory_bytes: e.info.memory_bytes,
                    shuffle_address: e.info.shuffle_address.clone(),
                    running_tasks: e.running_tasks,
                };
                (e.seq, info)
            })
            .collect();
        v.sort_by_key(|(seq, _)| *seq);
        v.into_iter().map(|(_, i)| i).collect()
    }

    fn next_id(&self) -> (u64, String) {
        let mut inner = self.inner.lock();
        inner.next_seq += 1;
        (inner.next_seq, format!("executor-{}", inner.next_seq))
    }

    /// Sends executors' hosts and memory to the web UI's store from now on.
    pub(crate) fn report_to_ui(&self, tx: crossbeam_channel::Sender<ember_ui::AppEvent>) {
        let _ = self.ui.set(tx);
    }

    /// Sends `event` to the web UI's store (once [`report_to_ui`](Self::report_to_ui)
    /// gave it a channel).
    pub(crate) fn send_to_ui(&self, event: ember_ui::AppEvent) {
        if let Some(ui) = self.ui.get() {
            let _ = ui.send(event);
        }
    }

    /// Tells the UI what `id` offers and uses.
    fn resources_to_ui(&self, id: &str, e: &Entry) {
        if let Some(ui) = self.ui.get() {
            let _ = ui.send(ember_ui::AppEvent::ExecutorResources {
                executor_id: id.to_string(),
                host: e.info.host.clone(),
                memory_limit_bytes: e.info.memory_bytes,
                memory_used_bytes: e.memory_used_bytes,
                time_ms: ember_scheduler::listener::now_ms(),
            });
        }
    }

    /// Whether `id` is registered now.
    pub(crate) fn is_registered(&self, id: &str) -> bool {
        self.inner.lock().executors.contains_key(id)
    }

    /// Marks `id` as heard from; false if it is no longer registered.
    fn touch(&self, id: &str, heartbeat: Option<Heartbeat>) -> bool {
        let mut inner = self.inner.lock();
        let Some(e) = inner.executors.get_mut(id) else {
            return false;
        };
        e.last_seen = Instant::now();
        if let Some(hb) = heartbeat {
            e.running_tasks = u32::try_from(hb.running_tasks.len()).unwrap_or(u32::MAX);
            if e.memory_used_bytes != hb.memory_used_bytes {
                e.memory_used_bytes = hb.memory_used_bytes;
                let e = &*e;
                self.resources_to_ui(id, e);
            }
        }
        true
    }

    /// Removes `id` and tells the scheduler it is lost; false if it was already gone.
    pub(crate) fn lose(
        &self,
        scheduler: &Sender<SchedulerEvent>,
        id: &str,
        reason: String,
    ) -> bool {
        let mut inner = self.inner.lock();
        if inner.executors.remove(id).is_none() {
            return false;
        }
        warn!(executor = %id, "executor lost: {reason}");
        let _ = scheduler.send(SchedulerEvent::ExecutorLost {
            executor_id: id.to_string(),
            reason,
        });
        true
    }

    /// Removes every executor silent for longer than `timeout` and tells the scheduler.
    fn expire(&self, scheduler: &Sender<SchedulerEvent>, timeout: Duration) {
        let mut inner = self.inner.lock();
        let silent: Vec<(String, Duration)> = inner
            .executors
            .iter()
            .map(|(id, e)| (id.clone(), e.last_seen.elapsed()))
            .filter(|(_, d)| *d > timeout)
            .collect();
        for (id, silence) in silent {
            inner.executors.remove(&id);
            let reason = format!("{id} sent no heartbeat for {} ms", silence.as_millis());
            warn!(executor = %id, "executor lost: {reason}");
            let _ = scheduler.send(SchedulerEvent::ExecutorLost {
                executor_id: id,
                reason,
            });
        }
    }

    /// Sends `tasks` to `id` in order, each with the broadcasts and the stage plan it
    /// has not been sent before, as few messages as the batch bounds allow.
    pub(crate) fn launch(&self, id: &str, tasks: Vec<(TaskDescription, StageShared)>) -> Launch {
        let mut inner = self.inner.lock();
        let Some(e) = inner.executors.get_mut(id) else {
            return Launch::Unknown;
        };
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        for (task, stage) in tasks {
            let launch = e.launch_of(task, &stage);
            let size = launch.encoded_len();
            if !batch.is_empty()
                && (batch.len() >= limits::MAX_LAUNCH_BATCH
                    || batch_bytes + size > limits::BATCH_BYTES)
            {
                if e.send_launches(std::mem::take(&mut batch)).is_err() {
                    return Launch::Closed;
                }
                batch_bytes = 0;
            }
            batch_bytes += size;
            batch.push(launch);
        }
        match e.send_launches(batch) {
            Ok(()) => Launch::Sent,
            Err(()) => Launch::Closed,
        }
    }

    /// Sends `msg` to `id` if it is registered (best effort).
    pub(crate) fn send(&self, id: &str, msg: driver_message::Msg) {
        let inner = self.inner.lock();
        if let Some(e) = inner.executors.get(id) {
            let _ = e.outbound.send(Ok(DriverMessage { msg: Some(msg) }));
        }
    }

    /// Tells every executor that a session ended and forgets which of its broadcasts
    /// they were sent (the ids may be reused by a later session with the same id range).
    pub(crate) fn cleanup_session(&self, cleanup: CleanupSession) {
        let mut inner = self.inner.lock();
        let range = cleanup.broadcast_lo..cleanup.broadcast_hi;
        for e in inner.executors.values_mut() {
            e.sent_broadcasts.retain(|b| !range.contains(b));
            let msg = driver_message::Msg::Cleanup(cleanup);
            let _ = e.outbound.send(Ok(DriverMessage { msg: Some(msg) }));
        }
    }

    /// Tells every executor to drop the cached partitions of an RDD.
    pub(crate) fn unpersist(&self, rdd_id: u32) {
        let inner = self.inner.lock();
        for e in inner.executors.values() {
            let msg = driver_message::Msg::Unpersist(ember_proto::UnpersistRdd { rdd_id });
            let _ = e.outbound.send(Ok(DriverMessage { msg: Some(msg) }));
        }
    }

    /// Tells every executor to delete the files of shuffles the scheduler forgot (at
    /// most `MAX_RELEASED_SHUFFLES` ids per message).
    pub(crate) fn remove_shuffles(&self, shuffle_ids: &[u32]) {
        let inner = self.inner.lock();
        for chunk in shuffle_ids.chunks(ember_proto::limits::MAX_RELEASED_SHUFFLES) {
            for e in inner.executors.values() {
                let msg = driver_message::Msg::RemoveShuffles(ember_proto::RemoveShuffles {
                    shuffle_ids: chunk.to_vec(),
                });
                let _ = e.outbound.send(Ok(DriverMessage { msg: Some(msg) }));
            }
        }
    }

    /// Drops every registration (driver shutdown): their response streams end.
    pub(crate) fn clear(&self) {
        self.inner.lock().executors.clear();
    }
}

fn invalid(msg: &str) -> Status {
    Status::invalid_argument(msg.to_string())
}

/// Accepts a new executor channel: waits for `register`, answers `Registered`, tells
/// the scheduler, and spawns the reader of the executor's further messages.
pub(crate) async fn open_channel(
    state: Arc<DriverState>,
    mut inbound: Streaming<ExecutorMessage>,
) -> Result<OutboundStream, Status> {
    let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
        .await
        .map_err(|_| {
            Status::deadline_exceeded(format!(
                "executor did not register within {} s",
                REGISTER_TIMEOUT.as_secs()
            ))
        })??;
    let reg = match first.and_then(|m| m.msg) {
        Some(executor_message::Msg::Register(r)) => r,
        Some(_) => {
            return Err(invalid(
                "the first message on an executor channel must be `register`",
            ))
        }
        None => return Err(invalid("executor channel ended before `register`")),
    };
    if reg.cores == 0 {
        return Err(invalid("an executor must offer at least one core"));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let (seq, id) = state.executors.next_id();
    let registered = driver_message::Msg::Registered(Registered {
        executor_id: id.clone(),
        heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
    });
    // Queued before the entry exists, so nothing can overtake it.
    let _ = tx.send(Ok(DriverMessage {
        msg: Some(registered),
    }));
    info!(
        executor = %id,
        cores = reg.cores,
        memory_bytes = reg.memory_bytes,
        shuffle_address = %reg.shuffle_address,
        host = %reg.host,
        pid = reg.pid,
        "executor registered"
    );
    // It answers `Registered` with the map outputs it holds from before: taken in
    // before the scheduler hears of it, so no task reaches it first.
    tokio::spawn(async move {
        let held = match super::held_outputs::read(&state, &id, &tx, &mut inbound).await {
            Ok(held) => held,
            Err(why) => {
                warn!(executor = %id, "registration dropped: {why}");
                return;
            }
        };
        add(state, (seq, id), reg, tx, held, inbound);
    });
    Ok(UnboundedReceiverStream::new(rx))
}

/// Puts registration `id` into the registry, tells the scheduler (with the outputs it
/// holds), and reads its further messages.
fn add(
    state: Arc<DriverState>,
    (seq, id): (u64, String),
    reg: RegisterExecutor,
    tx: Outbound,
    held: Vec<ember_proto::HeldOutput>,
    inbound: Streaming<ExecutorMessage>,
) {
    let (alive_tx, alive_rx) = oneshot::channel();
    let added = if held.is_empty() {
        SchedulerEvent::ExecutorAdded {
            executor_id: id.clone(),
            slots: reg.cores,
            shuffle_address: reg.shuffle_address.clone(),
            host: reg.host.clone(),
        }
    } else {
        info!(executor = %id, outputs = held.len(), "executor holds map outputs from before");
        SchedulerEvent::ExecutorRejoined {
            executor_id: id.clone(),
            slots: reg.cores,
            shuffle_address: reg.shuffle_address.clone(),
            host: reg.host.clone(),
            held,
        }
    };
    {
        let mut inner = state.executors.inner.lock();
        inner.executors.insert(
            id.clone(),
            Entry {
                seq,
                info: reg,
                last_seen: Instant::now(),
                running_tasks: 0,
                memory_used_bytes: 0,
                outbound: tx,
                sent_broadcasts: HashSet::new(),
                held_plans: HeldPlans::default(),
                _alive: alive_tx,
            },
        );
        if let Some(e) = inner.executors.get(&id) {
            state.executors.resources_to_ui(&id, e);
        }
    }
    state.scheduler.send(added);
    tokio::spawn(read_channel(state, id, inbound, alive_rx));
}

/// Reads an executor's heartbeats and task statuses until its stream ends (the
/// executor is then lost) or its entry is dropped.
async fn read_channel(
    state: Arc<DriverState>,
    id: String,
    mut inbound: Streaming<ExecutorMessage>,
    mut alive: oneshot::Receiver<()>,
) {
    loop {
        let next = tokio::select! {
            m = inbound.message() => m,
            _ = &mut alive => {
                debug!(executor = %id, "registration dropped; no longer reading its channel");
                return;
            }
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => {
                let reason = format!("connection to {id} closed: the executor ended its stream");
                state.executors.lose(&state.to_scheduler, &id, reason);
                return;
            }
            Err(e) => {
                let reason = format!("connection to {id} closed: {}", e.message());
                state.executors.lose(&state.to_scheduler, &id, reason);
                return;
            }
        };
        let alive_still = match msg.msg {
            Some(executor_message::Msg::Heartbeat(hb)) => state.executors.touch(&id, Some(hb)),
            Some(executor_message::Msg::Status(status)) => forward(&state, &id, vec![status]),
            Some(executor_message::Msg::Statuses(batch)) => {
                let n = batch.statuses.len();
                if n > limits::MAX_STATUS_BATCH {
                    let reason = format!(
                        "{id} sent {n} task statuses in one message, more than the {} allowed",
                        limits::MAX_STATUS_BATCH
                    );
                    state.executors.lose(&state.to_scheduler, &id, reason);
                    return;
                }
                forward(&state, &id, batch.statuses)
            }
            Some(executor_message::Msg::HeldOutputs(_)) => {
                warn!(executor = %id, "executor reported held outputs again; ignoring them");
                state.executors.touch(&id, None)
            }
            Some(executor_message::Msg::Register(_)) => {
                warn!(executor = %id, "executor sent `register` twice; ignoring it");
                state.executors.touch(&id, None)
            }
            Some(executor_message::Msg::BarrierAddress(a)) => {
                // The scheduler bounds the address and checks that the task is a rank
                // running on this executor.
                let known = state.executors.touch(&id, None);
                if known {
                    state.scheduler.send(SchedulerEvent::BarrierAddress {
                        task_id: a.task_id,
                        executor_id: id.clone(),
                        address: a.address,
                    });
                }
                known
            }
            Some(executor_message::Msg::Decommissioning(d)) => {
                if !state.executors.touch(&id, None) {
                    return;
                }
                if let super::decommission::Next::Done = super::decommission::phase(&state, &id, d)
                {
                    // Its outputs moved: it is lost now, which ends its channel (the
                    // executor waits for that before it exits).
                    let reason = super::decommission::DECOMMISSIONED.to_string();
                    state.executors.lose(&state.to_scheduler, &id, reason);
                    return;
                }
                true
            }
            Some(executor_message::Msg::Pushing(task_id)) => {
                let known = state.executors.touch(&id, None);
                if known {
                    state.scheduler.send(SchedulerEvent::SlotReleased {
                        task_id,
                        executor_id: id.clone(),
                    });
                }
                known
            }
            Some(executor_message::Msg::OutputsMigrated(m)) => {
                if !state.executors.touch(&id, None) {
                    return;
                }
                if let super::decommission::Next::Lose(reason) =
                    super::decommission::migrated(&state, &id, m)
                {
                    state.executors.lose(&state.to_scheduler, &id, reason);
                    return;
                }
                true
            }
            None => {
                warn!(executor = %id, "executor sent an empty message; ignoring it");
                state.executors.touch(&id, None)
            }
        };
        if !alive_still {
            return;
        }
    }
}

/// Hands an executor's task statuses to the scheduler under its id; false if it is no
/// longer registered (then nothing is forwarded).
fn forward(state: &DriverState, id: &str, statuses: Vec<TaskStatus>) -> bool {
    let known = state.executors.touch(id, None);
    if known {
        for mut status in statuses {
            status.executor_id = id.to_string();
            state
                .scheduler
                .send(SchedulerEvent::TaskFinished(Box::new(status)));
        }
    }
    known
}

/// Every [`MONITOR_PERIOD`], declares executors silent for longer than `timeout` lost.
/// Ends when the driver state is dropped.
pub(crate) async fn monitor(state: std::sync::Weak<DriverState>, timeout: Duration) {
    let mut tick = tokio::time::interval(MONITOR_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else {
            return;
        };
        state.executors.expire(&state.to_scheduler, timeout);
    }
}
