//! The cluster's [`TaskLauncher`]: hands tasks and kill requests to executors over
//! their gRPC channels. It runs on the scheduler thread and never blocks: every send
//! goes to an unbounded channel.
//!
//! Invariants:
//! - Every launched task gets a status: if its executor is unknown or its channel is
//!   gone, the launcher reports the task failed with `ExecutorLost` itself.
//! - Launches of one scheduler pass go out together at `flush`, per executor in the
//!   order they were made; a kill or a shuffle removal flushes first, so it never
//!   reaches an executor before a launch decided earlier.
//! - A task's stage plan travels to an executor once while it holds it
//!   (`ExecutorRegistry::launch`); descriptions carry only the plan id.
//! - `RemoveShuffles` goes to every executor only when the scheduler has forgotten
//!   those shuffles (it calls [`TaskLauncher::remove_shuffles`] once no job reads
//!   them), so no task is ever sent map locations whose files were deleted.
//! - A broadcast value travels to an executor once per registration (see
//!   [`ExecutorRegistry::launch`]); a task's own `broadcasts` map is always sent empty.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;
use ember_proto::{
    driver_message, task_failure, task_status, BarrierPeers, KillTask, TaskDescription,
    TaskFailure, TaskStatus,
};
use tracing::{debug, error};

use super::executors::{ExecutorRegistry, Launch};
use ember_scheduler::events::{SchedulerEvent, StageShared, TaskLauncher};

/// Launches tasks on registered executors.
pub struct GrpcLauncher {
    executors: Arc<ExecutorRegistry>,
    /// The scheduler's own input, set once the scheduler has started.
    scheduler: Arc<OnceLock<Sender<SchedulerEvent>>>,
    /// Launches of the scheduler's current pass, per executor, in order (sent on
    /// `flush`, and before any kill or removal so those never overtake them).
    pending: Vec<(String, Vec<(TaskDescription, StageShared)>)>,
    /// Where each executor's launches are in `pending`.
    pending_at: HashMap<String, usize>,
}

impl GrpcLauncher {
    /// A launcher over `executors`; `scheduler` must be set before the first launch.
    pub fn new(
        executors: Arc<ExecutorRegistry>,
        scheduler: Arc<OnceLock<Sender<SchedulerEvent>>>,
    ) -> Self {
        GrpcLauncher {
            executors,
            scheduler,
            pending: Vec::new(),
            pending_at: HashMap::new(),
        }
    }

    fn report(&self, event: SchedulerEvent) {
        match self.scheduler.get() {
            Some(tx) => {
                let _ = tx.send(event);
            }
            None => error!("task launcher used before the scheduler sender was set"),
        }
    }
}

impl GrpcLauncher {
    /// Sends one executor's launches; if it is gone, each task fails `ExecutorLost`.
    fn send(&mut self, executor_id: &str, tasks: Vec<(TaskDescription, StageShared)>) {
        let ids: Vec<u64> = tasks.iter().map(|(t, _)| t.task_id).collect();
        let gone = match self.executors.launch(executor_id, tasks) {
            Launch::Sent => return,
            Launch::Unknown => format!("{executor_id} is gone"),
            Launch::Closed => {
                let reason = format!("connection to {executor_id} closed: its stream is gone");
                if let Some(tx) = self.scheduler.get() {
                    // Remove it first, so the scheduler stops placing tasks there.
                    let _ = self.executors.lose(tx, executor_id, reason);
                }
                format!("{executor_id} is gone")
            }
        };
        debug!(tasks = ids.len(), executor = %executor_id, "cannot launch: {gone}");
        for task_id in ids {
            self.report(SchedulerEvent::TaskFinished(Box::new(TaskStatus {
                barrier: None,
                task_id,
                executor_id: executor_id.to_string(),
                metrics: None,
                outcome: Some(task_status::Outcome::Failure(TaskFailure {
                    reason: Some(task_failure::Reason::ExecutorLost(gone.clone())),
                })),
            })));
        }
    }
}

impl TaskLauncher for GrpcLauncher {
    fn launch(&mut self, executor_id: &str, task: TaskDescription, stage: &StageShared) {
        let entry = (task, stage.clone());
        match self.pending_at.get(executor_id) {
            Some(&i) => self.pending[i].1.push(entry),
            None => {
                self.pending_at
                    .insert(executor_id.to_string(), self.pending.len());
                self.pending.push((executor_id.to_string(), vec![entry]));
            }
        }
    }

    fn flush(&mut self) {
        self.pending_at.clear();
        for (executor_id, tasks) in std::mem::take(&mut self.pending) {
            self.send(&executor_id, tasks);
        }
    }

    fn remove_shuffles(&mut self, shuffle_ids: &[u32]) {
        self.flush();
        debug!(shuffles = ?shuffle_ids, "telling every executor to delete released shuffles");
        self.executors.remove_shuffles(shuffle_ids);
    }

    fn barrier_peers(&mut self, executor_id: &str, task_ids: &[u64], peers: &BarrierPeers) {
        // The ranks were launched in an earlier pass; flush anyway, so nothing decided
        // before reaches the executor after the peers.
        self.flush();
        let mut peers = peers.clone();
        peers.task_ids = task_ids.to_vec();
        self.executors
            .send(executor_id, driver_message::Msg::BarrierPeers(peers));
    }

    fn migrate_outputs(
        &mut self,
        executor_id: &str,
        outputs: Vec<ember_proto::MigratedOutput>,
        blocks: Vec<ember_proto::MigratedBlock>,
    ) {
        self.flush();
        // `last` on the final message (an empty plan is one empty message).
        let mut msgs = ember_proto::limits::migration_messages(outputs, blocks);
        if msgs.is_empty() {
            msgs.push(Default::default());
        }
        if let Some(m) = msgs.last_mut() {
            m.last = true;
        }
        for msg in msgs {
            self.executors
                .send(executor_id, driver_message::Msg::MigrateOutputs(msg));
        }
    }

    fn kill(&mut self, executor_id: &str, task_id: u64) {
        self.send_kill(executor_id, task_id, false);
    }

    fn interrupt(&mut self, executor_id: &str, task_id: u64) {
        self.send_kill(executor_id, task_id, true);
    }
}

impl GrpcLauncher {
    /// Tells `executor_id` to stop `task_id` (ending its worker if it does not stop,
    /// with `interrupt`), after the launches before it.
    fn send_kill(&mut self, executor_id: &str, task_id: u64, interrupt: bool) {
        self.flush();
        debug!(task = task_id, executor = %executor_id, interrupt, "killing task");
        self.executors.send(
            executor_id,
            driver_message::Msg::Kill(KillTask {
                task_id,
                reason: "its job ended".into(),
                interrupt,
            }),
        );
    }
}
