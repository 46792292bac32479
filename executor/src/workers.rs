//! Routing the driver's task commands to the workers of job binaries, one per binary, for one
//! registration with the driver; and the set of tasks this executor is running.
//!
//! Invariants:
//! * Every task accepted is in the running set of the [`WorkerEnv`] until its one
//!   status went to the driver (see [`crate::worker_env`]).
//! * One [`crate::binary_worker`] per binary hash; it lives as long as this
//!   registration, its worker process only as long as it works.
//! * [`Workers::shutdown`] kills every worker: the driver has lost this executor, so
//!   their tasks are void and no status is sent for them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ember_proto::{CleanupSession, ExecutorMessage, KillTask, LaunchTask};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::binaries::{is_valid_sha, BinaryStore};
use crate::binary_worker::{self, WorkerCmd};
use crate::config::Config;
use crate::driver_conn::DriverConn;
pub use crate::worker_env::{failed_status, RunningTasks, WorkerEnv};

struct WorkerHandle {
    tx: mpsc::UnboundedSender<WorkerCmd>,
    task: JoinHandle<()>,
}

/// The per-binary workers of one registration.
pub struct Workers {
    env: Arc<WorkerEnv>,
    by_binary: HashMap<String, WorkerHandle>,
}

impl Workers {
    /// Workers for registration `executor_id`; statuses go to `to_driver`.
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
            memory: Arc::default(),
        };
        Workers {
            env: Arc::new(env),
            by_binary: HashMap::new(),
        }
    }

    /// Memory the workers' running tasks reserve, summed (for heartbeats).
    pub fn memory_used(&self) -> u64 {
        let used: u64 = self
            .env
            .memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum();
        crate::metrics::metrics().set_memory_reserved(used);
        used
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
            crate::metrics::metrics().task_started();
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
            WorkerCmd::Launch {
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
            Some(sha) if self.by_binary.contains_key(&sha) => {
                self.send(&sha, WorkerCmd::Kill(kill))
            }
            _ => tracing::debug!(task_id = kill.task_id, "kill for a task not running here"),
        }
    }

    /// Forwards a session cleanup to every binary's worker.
    pub fn cleanup(&mut self, cleanup: CleanupSession) {
        let shas: Vec<String> = self.by_binary.keys().cloned().collect();
        for sha in shas {
            self.send(&sha, WorkerCmd::Cleanup(cleanup));
        }
    }

    /// Forwards an unpersist to every binary's worker.
    pub fn unpersist(&mut self, unpersist: ember_proto::UnpersistRdd) {
        let shas: Vec<String> = self.by_binary.keys().cloned().collect();
        for sha in shas {
            self.send(&sha, WorkerCmd::Unpersist(unpersist));
        }
    }

    /// Sends `cmd` to `sha`'s worker actor, creating it (again, if it ended) as needed.
    fn send(&mut self, sha: &str, cmd: WorkerCmd) {
        let cmd = match self.by_binary.get(sha) {
            Some(h) => match h.tx.send(cmd) {
                Ok(()) => return,
                Err(mpsc::error::SendError(cmd)) => {
                    tracing::error!(
                        binary = sha,
                        "binary worker ended unexpectedly; restarting it"
                    );
                    cmd
                }
            },
            None => cmd,
        };
        let (tx, task) = binary_worker::spawn(sha.to_string(), self.env.clone());
        // A new worker actor's receiver is alive, so this send cannot fail.
        let _ = tx.send(cmd);
        self.by_binary
            .insert(sha.to_string(), WorkerHandle { tx, task });
    }

    /// Kills every worker process and waits (briefly) for them to be gone.
    pub async fn shutdown(self) {
        let mut tasks = Vec::new();
        for (_, h) in self.by_binary {
            drop(h.tx);
            tasks.push(h.task);
        }
        let n = tasks.len();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        for mut t in tasks {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                // Dropping the actor kills its process (kill_on_drop) and removes its files.
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
            tracing::info!(binaries = n, "stopped every worker process");
        }
    }
}
