//! Routing the driver's task commands to worker slots, one slot per job binary, for one
//! registration with the driver; and the set of tasks this executor is running.
//!
//! Invariants:
//! * Every task accepted from the driver is in the running set until exactly one
//!   `TaskStatus` for it went to the driver ([`WorkerEnv::report`] drops any second
//!   status, and statuses for tasks that are not running).
//! * One slot (see [`crate::slot`]) per binary hash; a slot lives as long as this
//!   registration, its worker process only as long as it works.
//! * Every status sent to the driver is bounded (`ember_proto::limits::fit_status`):
//!   failure messages cut to 4 KiB, a status too large for one message replaced by a
//!   failure of that task naming the sizes.
//! * [`Workers::shutdown`] kills every worker: the driver has lost this executor, so
//!   their tasks are void and no status is sent for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ember_proto::limits;
use ember_proto::{
    executor_message, task_failure, task_status, CleanupSession, ExecutorMessage, KillTask,
    LaunchTask, TaskFailure, TaskStatus,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::binaries::{is_valid_sha, BinaryStore};
use crate::config::Config;
use crate::registration::DriverConn;
use crate::slot::{self, SlotCmd};

/// Task id -> binary hash of every task accepted and not yet reported.
pub type RunningTasks = Arc<Mutex<HashMap<u64, String>>>;

/// What the slots of one registration share.
pub struct WorkerEnv {
    pub config: Arc<Config>,
    /// This registration's executor id.
    pub executor_id: String,
    pub binaries: Arc<BinaryStore>,
    /// For fetching binaries.
    pub driver: DriverConn,
    to_driver: mpsc::Sender<ExecutorMessage>,
    running: RunningTasks,
}

impl WorkerEnv {
    /// Sends a task's final status to the driver, once: `false` (and nothing sent) if
    /// the task is not running here.
    pub async fn report(&self, mut status: TaskStatus) -> bool {
        status.executor_id = self.executor_id.clone();
        // Whatever the worker sent: one task's huge error or result must not break the
        // channel (and so lose this executor), only fail that task.
        let status = limits::fit_status(status, limits::max_message_bytes());
        let known = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&status.task_id)
            .is_some();
        if !known {
            tracing::warn!(
                task_id = status.task_id,
                "dropping a status for a task that is not running here"
            );
            return false;
        }
        let msg = ExecutorMessage {
            msg: Some(executor_message::Msg::Status(status)),
        };
        // A closed channel means the registration is over: the driver forgot the task.
        let _ = self.to_driver.send(msg).await;
        true
    }

    /// Reports task `task_id` failed with a user-visible `message`.
    pub async fn fail(&self, task_id: u64, mut message: String) {
        limits::bound_message(&mut message);
        tracing::warn!(task_id, "task failed: {message}");
        self.report(failed_status(task_id, &self.executor_id, message))
            .await;
    }
}

/// A `TaskStatus` failing `task_id` with `UserError(message)`.
pub fn failed_status(task_id: u64, executor_id: &str, message: String) -> TaskStatus {
    TaskStatus {
        task_id,
        executor_id: executor_id.to_string(),
        metrics: None,
        outcome: Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::UserError(message)),
        })),
    }
}

struct SlotHandle {
    tx: mpsc::UnboundedSender<SlotCmd>,
    task: JoinHandle<()>,
}

/// The worker slots of one registration.
pub struct Workers {
    env: Arc<WorkerEnv>,
    slots: HashMap<String, SlotHandle>,
}

impl Workers {
    /// Slots for registration `executor_id`; statuses go to `to_driver`.
    pub fn new(
        config: Arc<Config>,
        executor_id: String,
        binaries: Arc<BinaryStore>,
        driver: DriverConn,
        to_driver: mpsc::Sender<ExecutorMessage>,
    ) -> Self {
        let env = WorkerEnv {
            config,
            executor_id,
            binaries,
            driver,
            to_driver,
            running: Arc::default(),
        };
        Workers {
            env: Arc::new(env),
            slots: HashMap::new(),
        }
    }

    /// Ids of the tasks accepted and not yet reported (for heartbeats).
    pub fn running_tasks(&self) -> Vec<u64> {
        let running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<u64> = running.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Hands a task to the worker of its binary (starting one if needed).
    pub async fn launch(&mut self, launch: LaunchTask) {
        let Some(task) = launch.task else {
            tracing::warn!("driver sent a LaunchTask without a task; ignored");
            return;
        };
        let task_id = task.task_id;
        let sha = task
            .plan
            .as_ref()
            .map(|p| p.binary_hash.clone())
            .unwrap_or_default();
        {
            let mut running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
            if running.contains_key(&task_id) {
                tracing::warn!(
                    task_id,
                    "driver launched a task already running here; ignored"
                );
                return;
            }
            running.insert(task_id, sha.clone());
        }
        if !is_valid_sha(&sha) {
            let msg = format!(
                "task {task_id} names binary {sha:?}, which is not a SHA-256 (64 lower-case \
                 hex digits); refusing to run it"
            );
            self.env.fail(task_id, msg).await;
            return;
        }
        tracing::debug!(task_id, binary = &sha[..16], "launching task");
        self.send(
            &sha,
            SlotCmd::Launch {
                task: Box::new(task),
                broadcasts: launch.broadcasts,
            },
        );
    }

    /// Forwards a kill to the worker running the task (if any).
    pub fn kill(&mut self, kill: KillTask) {
        let sha = {
            let running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
            running.get(&kill.task_id).cloned()
        };
        match sha {
            Some(sha) if self.slots.contains_key(&sha) => self.send(&sha, SlotCmd::Kill(kill)),
            _ => tracing::debug!(task_id = kill.task_id, "kill for a task not running here"),
        }
    }

    /// Forwards a session cleanup to every slot (and so every live worker).
    pub fn cleanup(&mut self, cleanup: CleanupSession) {
        let shas: Vec<String> = self.slots.keys().cloned().collect();
        for sha in shas {
            self.send(&sha, SlotCmd::Cleanup(cleanup));
        }
    }

    /// Forwards an unpersist to every slot (and so every live worker).
    pub fn unpersist(&mut self, unpersist: ember_proto::UnpersistRdd) {
        let shas: Vec<String> = self.slots.keys().cloned().collect();
        for sha in shas {
            self.send(&sha, SlotCmd::Unpersist(unpersist));
        }
    }

    /// Sends `cmd` to `sha`'s slot, creating it (again, if its actor ended) as needed.
    fn send(&mut self, sha: &str, cmd: SlotCmd) {
        let cmd = match self.slots.get(sha) {
            Some(h) => match h.tx.send(cmd) {
                Ok(()) => return,
                Err(mpsc::error::SendError(cmd)) => {
                    tracing::error!(
                        binary = sha,
                        "worker slot ended unexpectedly; restarting it"
                    );
                    cmd
                }
            },
            None => cmd,
        };
        let (tx, task) = slot::spawn(sha.to_string(), self.env.clone());
        // A new slot's receiver is alive, so this send cannot fail.
        let _ = tx.send(cmd);
        self.slots.insert(sha.to_string(), SlotHandle { tx, task });
    }

    /// Kills every worker process and waits (briefly) for them to be gone.
    pub async fn shutdown(self) {
        let mut tasks = Vec::new();
        for (_, h) in self.slots {
            drop(h.tx);
            tasks.push(h.task);
        }
        let n = tasks.len();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        for mut t in tasks {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                // Dropping the slot kills its process (kill_on_drop) and removes its files.
                t.abort();
                let _ = t.await;
            }
        }
        self.env
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        if n > 0 {
            tracing::info!(slots = n, "stopped every worker process");
        }
    }
}
