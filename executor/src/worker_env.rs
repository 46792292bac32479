//! What the per-binary workers of one registration share ([`WorkerEnv`]): the
//! executor's settings, its binaries, its driver connection, and the set of running
//! tasks through which every status reaches the driver exactly once.
//!
//! Invariants:
//! * Every task accepted from the driver is in the running set until exactly one
//!   `TaskStatus` for it went to the driver ([`WorkerEnv::report`] drops any second
//!   status, and statuses for tasks that are not running).
//! * Every status sent to the driver is bounded (`ember_proto::limits::fit_status`):
//!   failure messages cut to 4 KiB, a status too large for one message replaced by a
//!   failure of that task naming the sizes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ember_proto::limits;
use ember_proto::{
    executor_message, task_failure, task_status, ExecutorMessage, TaskFailure, TaskStatus,
};
use tokio::sync::mpsc;

use crate::binaries::BinaryStore;
use crate::config::Config;
use crate::driver_conn::DriverConn;

/// Task id -> binary hash of every task accepted and not yet reported.
pub type RunningTasks = Arc<Mutex<HashMap<u64, String>>>;

/// Worker name -> memory its running tasks reserve (its last `WorkerMemory` report).
pub type WorkerMemory = Arc<Mutex<HashMap<String, u64>>>;

/// A live worker's entry in [`WorkerMemory`], removed when the worker goes.
pub(crate) struct MemorySlot {
    pub map: WorkerMemory,
    pub name: String,
}

impl MemorySlot {
    pub(crate) fn set(&self, bytes: u64) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.name.clone(), bytes);
    }
}

impl Drop for MemorySlot {
    fn drop(&mut self) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.name);
    }
}

/// Sends a task's final status to the driver, once: `false` (and nothing sent) if the
/// task is not in `running`.
async fn deliver(
    running: &RunningTasks,
    to_driver: &mpsc::Sender<ExecutorMessage>,
    status: TaskStatus,
) -> bool {
    // Whatever the worker sent: one task's huge error or result must not break the
    // channel (and so lose this executor), only fail that task.
    let status = limits::fit_status(status, limits::max_message_bytes());
    let known = running
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
    let succeeded = matches!(status.outcome, Some(task_status::Outcome::Success(_)));
    crate::metrics::metrics().task_ended(succeeded, status.metrics.as_ref());
    let msg = ExecutorMessage {
        msg: Some(executor_message::Msg::Status(status)),
    };
    // A closed channel means the registration is over: the driver forgot the task.
    let _ = to_driver.send(msg).await;
    true
}

/// What the binary workers of one registration share.
pub struct WorkerEnv {
    pub config: Arc<Config>,
    /// This registration's executor id.
    pub executor_id: String,
    pub binaries: Arc<BinaryStore>,
    /// For fetching binaries.
    pub driver: DriverConn,
    pub(crate) to_driver: mpsc::Sender<ExecutorMessage>,
    pub(crate) running: RunningTasks,
    /// What each live worker's tasks reserve.
    pub(crate) memory: WorkerMemory,
    /// Where running map tasks' outputs are pushed before they are reported.
    pub(crate) replication: Arc<crate::replicate::Replication>,
}

impl WorkerEnv {
    /// Sends a task's final status to the driver, once: `false` (and nothing sent) if
    /// the task is not running here.
    pub async fn report(&self, mut status: TaskStatus) -> bool {
        status.executor_id = self.executor_id.clone();
        let task_id = status.task_id;
        match self.replication.pushing(status) {
            Err(status) => deliver(&self.running, &self.to_driver, *status).await,
            Ok(push) => {
                // The output goes to its replicas first (`replicated:N`); the task stays
                // running until then, and this worker's other statuses do not wait. Its
                // slot is free meanwhile: the driver may run another task in it.
                let pushing = ExecutorMessage {
                    msg: Some(executor_message::Msg::Pushing(task_id)),
                };
                let _ = self.to_driver.send(pushing).await;
                let (running, to_driver) = (self.running.clone(), self.to_driver.clone());
                tokio::spawn(async move {
                    let status = push.await;
                    deliver(&running, &to_driver, status).await;
                });
                true
            }
        }
    }

    /// Passes a barrier task's rendezvous address on to the driver.
    pub async fn relay_barrier_address(&self, address: ember_proto::BarrierAddress) {
        let msg = ExecutorMessage {
            msg: Some(executor_message::Msg::BarrierAddress(address)),
        };
        let _ = self.to_driver.send(msg).await;
    }

    /// Reports task `task_id` failed with a user-visible `message`.
    pub async fn fail(&self, task_id: u64, mut message: String) {
        limits::bound_message(&mut message);
        tracing::warn!(task_id, "task failed: {message}");
        self.report(failed_status(task_id, &self.executor_id, message))
            .await;
    }

    /// Reports `task_id` ended through no fault of its own (its worker was ended to stop
    /// another task): the scheduler runs it again without counting an attempt or an
    /// executor loss.
    pub async fn lose(&self, task_id: u64, mut message: String) {
        limits::bound_message(&mut message);
        tracing::warn!(task_id, "task ended with its worker: {message}");
        let mut status = failed_status(task_id, &self.executor_id, String::new());
        status.outcome = Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::WorkerEnded(message)),
        }));
        self.report(status).await;
    }
}

impl Drop for WorkerEnv {
    /// The registration ended: tasks never reported are no longer running here.
    fn drop(&mut self) {
        let left = self.running.lock().unwrap_or_else(|p| p.into_inner()).len();
        for _ in 0..left {
            crate::metrics::metrics().task_abandoned();
        }
    }
}

/// A `TaskStatus` failing `task_id` with `UserError(message)`.
pub fn failed_status(task_id: u64, executor_id: &str, message: String) -> TaskStatus {
    TaskStatus {
        barrier: None,
        task_id,
        executor_id: executor_id.to_string(),
        metrics: None,
        outcome: Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::UserError(message)),
        })),
    }
}
