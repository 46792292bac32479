//! One job binary's worker: an actor that owns the binary's broadcasts, its worker
//! process (started on demand) and the tasks that worker runs.
//!
//! Invariants:
//! * Commands are handled in the order the driver sent them. While the binary is being
//!   fetched or its worker started, later commands wait; if that fails, the first task
//!   and every task waiting behind it fail with the same message, and the next task
//!   tries again.
//! * Before a task goes to a worker, every stored broadcast of this binary that worker
//!   has not been sent goes first, on the same socket, and so does the task's stage
//!   plan if that worker does not hold it; a plan the executor forgets, the worker is
//!   told to forget. A new worker starts with an empty
//!   sent-set; broadcasts of an ended session are dropped on cleanup.
//! * A worker that exits, closes its socket or sends garbage is killed (if needed) and
//!   each task it was running fails with a message saying how the worker ended; its
//!   statuses already on the socket are still read and forwarded first.
//! * When the command channel closes (the registration is over) the worker is killed.
//! * The binary is leased (not collectable) from before it is fetched until the worker
//!   is gone.
//! * A worker with no task for `Config::worker_idle` is stopped, unless one of its tasks
//!   stored a cached block (the driver counts on it being here); the next task for its
//!   binary starts a new one (with every stored broadcast sent again).
//! * An export of cached blocks (a decommission's) is answered once: with what the
//!   worker wrote of the blocks asked (nothing else, each once), or with nothing when
//!   no worker runs or it is lost first (its waiter's sender drops).
//! * An interrupting kill (`KillTask.interrupt`, a cancelled job's
//!   `interrupt_on_cancel`) of a task still running [`INTERRUPT_GRACE`] later ends
//!   the worker process: the task fails, the worker's other tasks are reported
//!   `WorkerEnded` (they run again, counting no attempt and no executor loss), and the
//!   next task starts a new worker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ember_proto::{
    from_worker, to_worker, BroadcastValue, CleanupSession, ForgetPlans, KillTask, Plan, StagePlan,
    TaskDescription, ToWorker,
};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::binaries::BinaryLease;
use crate::process::{self, describe_exit, WorkerProcess, WorkerSpec};
use crate::protocol::{decode_from_worker, encode_to_worker, WorkerFramed};
use crate::worker_env::WorkerEnv;
use crate::worker_users::UidLease;
use ember_proto::IdRange;

/// How long a task told to stop with an interrupting kill has before its worker
/// process is ended: a task between batches stops well within it, one stuck in user
/// code (a sleep, a blocking call) does not.
pub const INTERRUPT_GRACE: Duration = Duration::from_millis(250);

/// What a binary's worker is asked to do.
#[derive(Debug)]
pub enum WorkerCmd {
    Launch {
        task: Box<TaskDescription>,
        /// The stage plan the task names by id (and that id), unless the task carries
        /// its plan itself.
        plan: Option<(u64, Arc<Plan>)>,
        /// Broadcasts this executor had not received before.
        broadcasts: Vec<BroadcastValue>,
    },
    /// The executor dropped these stage plans: the worker drops them too.
    ForgetPlans(Vec<u64>),
    Kill(KillTask),
    Cleanup(CleanupSession),
    Unpersist(ember_proto::UnpersistRdd),
    /// A barrier stage's peers, for this worker's ranks (`task_ids`).
    BarrierPeers(ember_proto::BarrierPeers),
    /// Write these cached blocks (those the worker holds) to the session's shuffle
    /// directory; `reply` gets the ones written (none when no worker runs).
    ExportBlocks {
        blocks: Vec<ember_proto::BlockRef>,
        reply: oneshot::Sender<Vec<ember_proto::ExportedBlock>>,
    },
}

/// Starts the worker actor for binary `sha` and session `session`, its processes
/// running as `user` if given (the lease is held until the actor ends).
pub fn spawn(
    sha: String,
    session: IdRange,
    user: Option<Arc<UidLease>>,
    env: Arc<WorkerEnv>,
) -> (mpsc::UnboundedSender<WorkerCmd>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let worker = BinaryWorker {
        sha16: sha[..16.min(sha.len())].to_string(),
        sha,
        session,
        user,
        env,
        broadcasts: BTreeMap::new(),
        worker: None,
        interrupts: Vec::new(),
    };
    (tx, tokio::spawn(worker.run(rx)))
}

struct BinaryWorker {
    sha: String,
    sha16: String,
    session: IdRange,
    env: Arc<WorkerEnv>,
    broadcasts: BTreeMap<u64, Bytes>,
    worker: Option<Live>,
    /// Tasks told to stop with an interrupting kill, and when their worker is ended
    /// if they have not stopped by then (oldest first).
    interrupts: Vec<(tokio::time::Instant, u64)>,
    /// Declared last, so dropped after the worker process (killed on drop).
    user: Option<Arc<UidLease>>,
}

/// A worker that said Ready.
struct Live {
    proc: WorkerProcess,
    /// Keeps the binary from being deleted while this worker lives.
    _binary: BinaryLease,
    input: SplitStream<WorkerFramed>,
    out: mpsc::UnboundedSender<Bytes>,
    writer: JoinHandle<()>,
    sent: HashSet<u64>,
    /// Stage plans this worker was sent and not told to forget.
    plans: HashSet<u64>,
    tasks: HashSet<u64>,
    /// Its tasks' reserved memory, as it last reported (gone with the worker).
    memory: crate::worker_env::MemorySlot,
    /// A task of it stored a cached block: it is not stopped for idleness (its blocks
    /// would go with it while the driver counts on them).
    holds_blocks: bool,
    /// Exports asked for and not answered: the blocks asked for, and who waits.
    exports: HashMap<u64, Export>,
    next_export: u64,
}

/// An export the worker has not answered yet.
struct Export {
    asked: HashSet<(u32, u32)>,
    reply: oneshot::Sender<Vec<ember_proto::ExportedBlock>>,
}

impl Live {
    fn send(&self, msg: to_worker::Msg) {
        // If the writer is gone the socket is broken: the reader sees that next.
        let _ = self
            .out
            .send(encode_to_worker(&ToWorker { msg: Some(msg) }));
    }
}

enum Event {
    Cmd(WorkerCmd),
    Frame(Option<std::io::Result<BytesMut>>),
    Exited(String),
    Idle,
    /// An interrupting kill's grace ran out.
    InterruptDue,
}

/// How a worker was lost.
enum Loss {
    Exited(String),
    Closed,
    Broken(String),
    /// Ended because this task did not stop within [`INTERRUPT_GRACE`] of an
    /// interrupting kill.
    Interrupted(u64),
}

impl BinaryWorker {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<WorkerCmd>) {
        loop {
            let event = match self.worker.as_mut() {
                None => match rx.recv().await {
                    Some(cmd) => Event::Cmd(cmd),
                    None => break,
                },
                Some(live) => {
                    let idle = live.tasks.is_empty() && !live.holds_blocks;
                    let due = self.interrupts.first().map(|(at, _)| *at);
                    tokio::select! {
                        biased;
                        frame = live.input.next() => Event::Frame(frame),
                        cmd = rx.recv() => match cmd {
                            Some(cmd) => Event::Cmd(cmd),
                            None => break,
                        },
                        status = live.proc.child.wait() => Event::Exited(describe_exit(&status)),
                        _ = tokio::time::sleep(self.env.config.worker_idle), if idle => Event::Idle,
                        _ = sleep_until(due), if due.is_some() => Event::InterruptDue,
                    }
                }
            };
            match event {
                Event::Cmd(cmd) => self.command(cmd, &mut rx).await,
                Event::Frame(Some(Ok(frame))) => {
                    if let Some(live) = self.worker.as_mut() {
                        if let Err(e) = handle_frame(&self.env, live, &frame).await {
                            self.lost(Loss::Broken(e)).await;
                        }
                    }
                }
                Event::Frame(Some(Err(e))) => {
                    self.lost(Loss::Broken(format!("a bad frame ({e})"))).await
                }
                Event::Frame(None) => self.lost(Loss::Closed).await,
                Event::Exited(status) => self.lost(Loss::Exited(status)).await,
                Event::InterruptDue => self.interrupt_due().await,
                Event::Idle => {
                    if let Some(mut live) = self.worker.take() {
                        let how = live.proc.kill().await;
                        live.writer.abort();
                        tracing::info!(worker = %live.proc.name, "stopped idle worker process ({how})");
                    }
                }
            }
        }
        if let Some(mut live) = self.worker.take() {
            let how = live.proc.kill().await;
            live.writer.abort();
            tracing::info!(worker = %live.proc.name, "stopped worker process ({how})");
        }
    }

    async fn command(&mut self, cmd: WorkerCmd, rx: &mut mpsc::UnboundedReceiver<WorkerCmd>) {
        match cmd {
            WorkerCmd::Launch {
                task,
                plan,
                broadcasts,
            } => {
                self.store_broadcasts(&task, broadcasts);
                if self.worker.is_none() {
                    if let Err(msg) = self.start().await {
                        self.env.fail(task.task_id, msg.clone()).await;
                        self.fail_waiting(rx, &msg).await;
                        return;
                    }
                }
                let Some(live) = self.worker.as_mut() else {
                    return;
                };
                for (&id, value) in &self.broadcasts {
                    if live.sent.insert(id) {
                        live.send(to_worker::Msg::Broadcast(BroadcastValue {
                            id,
                            value: value.clone(),
                        }));
                    }
                }
                if let Some((plan_id, plan)) = plan {
                    if live.plans.insert(plan_id) {
                        live.send(to_worker::Msg::Plan(StagePlan {
                            id: plan_id,
                            plan: Some((*plan).clone()),
                        }));
                    }
                }
                live.tasks.insert(task.task_id);
                live.send(to_worker::Msg::Run(*task));
            }
            WorkerCmd::ForgetPlans(ids) => {
                if let Some(live) = self.worker.as_mut() {
                    let ids: Vec<u64> =
                        ids.into_iter().filter(|id| live.plans.remove(id)).collect();
                    if !ids.is_empty() {
                        live.send(to_worker::Msg::ForgetPlans(ForgetPlans { ids }));
                    }
                }
            }
            WorkerCmd::Kill(kill) => match self.worker.as_mut() {
                Some(live) if live.tasks.contains(&kill.task_id) => {
                    if kill.interrupt {
                        let at = tokio::time::Instant::now() + INTERRUPT_GRACE;
                        self.interrupts.push((at, kill.task_id));
                    }
                    live.send(to_worker::Msg::Kill(kill));
                }
                _ => tracing::debug!(task_id = kill.task_id, "kill for a task with no worker"),
            },
            WorkerCmd::Cleanup(c) => self.cleanup(c),
            WorkerCmd::BarrierPeers(p) => match self.worker.as_mut() {
                Some(live) if p.task_ids.iter().any(|id| live.tasks.contains(id)) => {
                    live.send(to_worker::Msg::BarrierPeers(p));
                }
                _ => tracing::debug!("barrier peers for ranks with no worker"),
            },
            WorkerCmd::ExportBlocks { blocks, reply } => match self.worker.as_mut() {
                Some(live) => {
                    live.next_export += 1;
                    let request_id = live.next_export;
                    let asked = blocks.iter().map(|b| (b.rdd_id, b.partition)).collect();
                    live.exports.insert(request_id, Export { asked, reply });
                    live.send(to_worker::Msg::ExportBlocks(ember_proto::ExportBlocks {
                        request_id,
                        blocks,
                    }));
                }
                // A worker that is not running holds no cached blocks.
                None => {
                    let _ = reply.send(Vec::new());
                }
            },
            WorkerCmd::Unpersist(u) => {
                // A worker that is not running holds no cached blocks.
                if let Some(live) = self.worker.as_mut() {
                    live.send(to_worker::Msg::Unpersist(u));
                }
            }
        }
    }

    fn store_broadcasts(&mut self, task: &TaskDescription, new: Vec<BroadcastValue>) {
        for b in new {
            self.broadcasts.insert(b.id, b.value);
        }
        for (id, value) in &task.broadcasts {
            self.broadcasts
                .entry(*id)
                .or_insert_with(|| Bytes::from(value.clone()));
        }
    }

    fn cleanup(&mut self, c: CleanupSession) {
        let range = c.broadcast_lo..c.broadcast_hi;
        self.broadcasts.retain(|id, _| !range.contains(id));
        if let Some(live) = self.worker.as_mut() {
            live.sent.retain(|id| !range.contains(id));
            live.send(to_worker::Msg::Cleanup(c));
        }
    }

    /// Fetches the binary if needed and starts its worker.
    async fn start(&mut self) -> Result<(), String> {
        let env = &self.env;
        // Held from before the fetch, so the binary cannot be collected meanwhile.
        let lease = env.binaries.acquire(&self.sha);
        let binary = env
            .binaries
            .ensure_verified(&self.sha, &env.driver)
            .await
            .map_err(|e| e.to_string())?;
        let spec = WorkerSpec {
            config: &env.config,
            binary: &binary,
            sha: &self.sha,
            executor_id: &env.executor_id,
            session: self.session,
            user: self.user.as_deref(),
        };
        let (proc, framed) = process::start(&spec).await?;
        let (mut sink, input) = framed.split();
        let (out, mut queue) = mpsc::unbounded_channel::<Bytes>();
        let name = proc.name.clone();
        let writer = tokio::spawn(async move {
            // Every frame queued by now goes out in one flush (one write for a burst of
            // launches, not one per task).
            while let Some(frame) = queue.recv().await {
                let mut sent = sink.feed(frame).await;
                while sent.is_ok() {
                    match queue.try_recv() {
                        Ok(frame) => sent = sink.feed(frame).await,
                        Err(_) => break,
                    }
                }
                if let Err(e) = sent.and(sink.flush().await) {
                    tracing::debug!(worker = %name, "cannot write to worker: {e}");
                    break;
                }
            }
        });
        let memory = crate::worker_env::MemorySlot {
            map: self.env.memory.clone(),
            name: proc.name.clone(),
        };
        self.worker = Some(Live {
            proc,
            _binary: lease,
            input,
            out,
            writer,
            sent: HashSet::new(),
            plans: HashSet::new(),
            tasks: HashSet::new(),
            memory,
            holds_blocks: false,
            exports: HashMap::new(),
            next_export: 0,
        });
        Ok(())
    }

    /// Fails every task queued behind a start that failed with `msg`.
    async fn fail_waiting(&mut self, rx: &mut mpsc::UnboundedReceiver<WorkerCmd>, msg: &str) {
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                WorkerCmd::Launch {
                    task, broadcasts, ..
                } => {
                    self.store_broadcasts(&task, broadcasts);
                    self.env.fail(task.task_id, msg.to_string()).await;
                }
                WorkerCmd::ExportBlocks { reply, .. } => {
                    let _ = reply.send(Vec::new());
                }
                WorkerCmd::Kill(_)
                | WorkerCmd::Unpersist(_)
                | WorkerCmd::ForgetPlans(_)
                | WorkerCmd::BarrierPeers(_) => {}
                WorkerCmd::Cleanup(c) => self.cleanup(c),
            }
        }
    }

    /// The worker is gone or unusable: forward what it still said, make sure it is
    /// dead, and fail the tasks it was running.
    async fn lost(&mut self, loss: Loss) {
        let Some(mut live) = self.worker.take() else {
            return;
        };
        let loss_task = match loss {
            Loss::Interrupted(id) => Some(id),
            _ => None,
        };
        live.writer.abort();
        let how = match loss {
            Loss::Exited(status) => {
                // Read statuses it sent before exiting (the socket ends right away).
                let drain = async {
                    while let Some(Ok(frame)) = live.input.next().await {
                        if handle_frame(&self.env, &mut live, &frame).await.is_err() {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
                format!("exited ({status})")
            }
            Loss::Closed => match live.proc.wait_for_exit(Duration::from_secs(2)).await {
                Some(status) => format!("exited ({status})"),
                None => {
                    let status = live.proc.kill().await;
                    format!("closed its connection to the executor and was killed ({status})")
                }
            },
            Loss::Broken(what) => {
                let status = live.proc.kill().await;
                format!("sent {what} and was killed ({status})")
            }
            Loss::Interrupted(task_id) => {
                let status = live.proc.kill().await;
                format!(
                    "was ended ({status}) because task {task_id}, cancelled with \
                     interrupt_on_cancel, did not stop within {} ms",
                    INTERRUPT_GRACE.as_millis()
                )
            }
        };
        self.interrupts.clear();
        tracing::warn!(
            worker = %live.proc.name,
            pid = live.proc.pid,
            tasks = live.tasks.len(),
            "worker process {how}"
        );
        let mut tasks: Vec<u64> = live.tasks.drain().collect();
        tasks.sort_unstable();
        for task_id in tasks {
            let msg = format!(
                "worker process for binary {} {how} while running this task",
                self.sha16
            );
            match loss_task {
                // Not its fault: it runs again, counting no attempt and no loss.
                Some(stuck) if stuck != task_id => self.env.lose(task_id, msg).await,
                _ => self.env.fail(task_id, msg).await,
            }
        }
    }

    /// Ends the worker if a task told to stop with an interrupting kill is still
    /// running past its grace.
    async fn interrupt_due(&mut self) {
        let now = tokio::time::Instant::now();
        let due: Vec<u64> = self
            .interrupts
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect();
        self.interrupts.retain(|(at, _)| *at > now);
        let stuck = due.into_iter().find(|id| {
            self.worker
                .as_ref()
                .is_some_and(|live| live.tasks.contains(id))
        });
        if let Some(task_id) = stuck {
            self.lost(Loss::Interrupted(task_id)).await;
        }
    }
}

/// Handles one frame from a live worker; `Err` if the worker broke the protocol.
async fn handle_frame(env: &WorkerEnv, live: &mut Live, frame: &BytesMut) -> Result<(), String> {
    match decode_from_worker(frame)? {
        from_worker::Msg::Status(status) => {
            if stored_blocks(&status) {
                live.holds_blocks = true;
            }
            if live.tasks.remove(&status.task_id) {
                env.report(status).await;
            } else {
                tracing::warn!(
                    worker = %live.proc.name,
                    task_id = status.task_id,
                    "worker sent a status for a task it was not running; dropped"
                );
            }
        }
        from_worker::Msg::Ready(_) => {
            tracing::warn!(worker = %live.proc.name, "worker said Ready twice; ignored");
        }
        from_worker::Msg::Memory(m) => live.memory.set(m.reserved_bytes),
        from_worker::Msg::BlocksExported(x) => match live.exports.remove(&x.request_id) {
            Some(Export { asked, reply }) => {
                // Only blocks it was asked for, each once.
                let mut seen = HashSet::new();
                let blocks = x
                    .blocks
                    .into_iter()
                    .filter(|b| {
                        let id = (b.rdd_id, b.partition);
                        asked.contains(&id) && seen.insert(id)
                    })
                    .collect();
                let _ = reply.send(blocks);
            }
            None => tracing::warn!(
                worker = %live.proc.name,
                request_id = x.request_id,
                "worker answered an export it was not asked for; dropped"
            ),
        },
        from_worker::Msg::BarrierAddress(a) => {
            // Relayed only for a task this worker runs; the driver checks the rest
            // (that the task is a running rank here, the address's size).
            if live.tasks.contains(&a.task_id) {
                env.relay_barrier_address(a).await;
            } else {
                tracing::warn!(
                    worker = %live.proc.name,
                    task_id = a.task_id,
                    "worker sent a barrier address for a task it is not running; dropped"
                );
            }
        }
    }
    Ok(())
}

/// Whether a task's status says it stored a cached block.
fn stored_blocks(status: &ember_proto::TaskStatus) -> bool {
    matches!(
        &status.outcome,
        Some(ember_proto::task_status::Outcome::Success(s)) if !s.cached.is_empty()
    )
}

/// Waits until `at` (forever if `None`: the select guards that branch).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
