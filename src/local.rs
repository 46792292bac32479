//! Local mode: one in-process executor with N task slots on N threads, fed by the same
//! scheduler and the same serialised task descriptions as a cluster.
//!
//! Invariants: the work directory (shuffle files, spills, disk-cached blocks) is a
//! temporary directory owned by the cluster and removed when the context drops, or when
//! the process is interrupted (SIGINT, SIGTERM: see [`crate::interrupt`]); the
//! files of a shuffle the scheduler has forgotten (released by the context's cleaner)
//! are deleted sooner, by the launcher;
//! every launched task produces exactly one status back to the scheduler.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use ember_proto::{Plan, TaskDescription};
use ember_scheduler::{JobEvent, SchedulerEvent, SchedulerHandle, StageShared, TaskLauncher};
use parking_lot::Mutex;
use prost::Message;

use crate::backend::Backend;
use crate::cleaner::ReleaseTarget;
use crate::conf::Conf;
use crate::env::ExecutorEnv;
use crate::error::{EmberError, Result};
use crate::task::{run_encoded_task, StagePlan};

/// Id of the in-process executor.
pub(crate) const LOCAL_EXECUTOR: &str = "local";

/// The in-process executor of local mode.
pub(crate) struct LocalCluster {
    pub env: Arc<ExecutorEnv>,
    tasks: Receiver<LocalTask>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    work_dir: Option<tempfile::TempDir>,
    /// Removes the work directory if the process is interrupted (see `interrupt`).
    _remove_work_dir: crate::interrupt::RemoveOnInterrupt,
    /// SIGINT and SIGTERM handled while the cluster lives (see `interrupt`).
    _handlers: crate::interrupt::LocalHandlers,
}

/// A task as the task threads take it: its serialised description and its stage's plan.
type LocalTask = (Vec<u8>, Arc<StagePlan>);

/// Stage plans kept for later tasks of their stages; past this many, the launcher
/// starts over (tasks already queued hold their plan themselves).
const HELD_PLANS: usize = 64;

/// Hands tasks to the worker threads.
struct LocalLauncher {
    tasks: Sender<LocalTask>,
    env: Arc<ExecutorEnv>,
    /// Stage plans by plan id, each decoded once from its serialised form.
    plans: HashMap<u64, Arc<StagePlan>>,
}

impl TaskLauncher for LocalLauncher {
    fn launch(&mut self, _executor_id: &str, task: TaskDescription, stage: &StageShared) {
        // Tasks run from their serialised form, exactly as on a remote worker, and so
        // does each stage plan (once per stage, as a worker is sent it).
        if !self.plans.contains_key(&stage.plan_id) {
            if self.plans.len() >= HELD_PLANS {
                self.plans.clear();
            }
            let plan = Plan::decode(stage.plan.encode_to_vec().as_slice())
                .unwrap_or_else(|_| (*stage.plan).clone());
            let shared = Arc::new(StagePlan::new(plan, stage.broadcasts.clone()));
            self.plans.insert(stage.plan_id, shared);
        }
        let plan = self.plans[&stage.plan_id].clone();
        let _ = self.tasks.send((task.encode_to_vec(), plan));
    }

    fn kill(&mut self, _executor_id: &str, task_id: u64) {
        // A running task stops at its next batch; its late status is ignored.
        self.env.kill_task(task_id);
    }

    fn barrier_peers(
        &mut self,
        _executor_id: &str,
        task_ids: &[u64],
        peers: &ember_proto::BarrierPeers,
    ) {
        self.env
            .rendezvous
            .deliver(peers.stage_attempt, task_ids, &peers.addresses);
    }

    fn remove_shuffles(&mut self, shuffle_ids: &[u32]) {
        // A directory listing and a few unlinks, on the scheduler thread: the
        // scheduler has forgotten these shuffles and no live job reads them.
        let n = ember_shuffle::remove_shuffle_files(&self.env.shuffle_dir(), shuffle_ids);
        tracing::debug!(shuffles = ?shuffle_ids, files = n, "deleted released shuffles");
    }
}

impl LocalCluster {
    pub(crate) fn create(
        conf: &Conf,
        binary_id: &str,
        _threads: usize,
    ) -> Result<(LocalCluster, Box<dyn TaskLauncher>)> {
        let handlers = crate::interrupt::local_context();
        let mut builder = tempfile::Builder::new();
        builder.prefix("ember-local-");
        let dir = match &conf.local_dir {
            Some(parent) => {
                std::fs::create_dir_all(parent).map_err(|e| EmberError::io(parent, e))?;
                builder.tempdir_in(parent)
            }
            None => builder.tempdir(),
        }
        .map_err(|e| EmberError::io(std::env::temp_dir(), e))?;
        let remove_work_dir = crate::interrupt::remove_on_interrupt(dir.path());
        let env = ExecutorEnv::new(
            LOCAL_EXECUTOR.to_string(),
            binary_id.to_string(),
            dir.path().to_path_buf(),
            conf.executor_memory,
        )
        .map_err(|e| EmberError::io(dir.path(), e))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let env = Arc::new(env);
        Ok((
            LocalCluster {
                env: env.clone(),
                tasks: rx,
                workers: Mutex::new(Vec::new()),
                work_dir: Some(dir),
                _remove_work_dir: remove_work_dir,
                _handlers: handlers,
            },
            Box::new(LocalLauncher {
                tasks: tx,
                env,
                plans: HashMap::new(),
            }),
        ))
    }

    /// Starts the task threads and offers their slots to the scheduler.
    pub(crate) fn start_workers(&self, scheduler: &SchedulerHandle, threads: usize) {
        self.env
            .rendezvous
            .set_reporter(Box::new(ToScheduler(scheduler.sender())));
        let mut workers = self.workers.lock();
        for i in 0..threads {
            let rx = self.tasks.clone();
            let env = self.env.clone();
            let status_tx = scheduler.sender();
            let handle = std::thread::Builder::new()
                .name(format!("ember-task-{i}"))
                .spawn(move || {
                    while let Ok((bytes, stage)) = rx.recv() {
                        let finished = run_encoded_task(&env, &bytes, Some(&stage));
                        let sent =
                            status_tx.send(SchedulerEvent::TaskFinished(Box::new(finished.status)));
                        // A barrier task's peers see it gone only now.
                        drop(finished.linger);
                        if sent.is_err() {
                            break;
                        }
                    }
                })
                .expect("spawn task thread");
            workers.push(handle);
        }
        scheduler.send(SchedulerEvent::ExecutorAdded {
            executor_id: LOCAL_EXECUTOR.to_string(),
            slots: threads as u32,
            shuffle_address: String::new(),
            host: String::new(),
        });
    }

    /// Waits for the task threads (the scheduler has dropped the launcher) and removes
    /// the work directory.
    pub(crate) fn shutdown(mut self) {
        let workers = std::mem::take(&mut *self.workers.lock());
        drop(self.tasks);
        for w in workers {
            let _ = w.join();
        }
        if let Some(dir) = self.work_dir.take() {
            let _ = dir.close();
        }
    }
}

/// Barrier tasks' addresses, straight to the in-process scheduler.
struct ToScheduler(Sender<SchedulerEvent>);

impl crate::env::AddressReporter for ToScheduler {
    fn report(&self, task_id: u64, address: String) {
        let _ = self.0.send(SchedulerEvent::BarrierAddress {
            task_id,
            executor_id: LOCAL_EXECUTOR.to_string(),
            address,
        });
    }
}

/// Local mode as a context's [`Backend`]: the in-process scheduler, the executor whose
/// task threads it feeds, and local mode's web UI if one was asked for.
pub(crate) struct LocalBackend {
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) cluster: Option<LocalCluster>,
    #[cfg(feature = "ui")]
    pub(crate) ui: Option<crate::local_ui::LocalUi>,
}

impl Backend for LocalBackend {
    fn submit(&self, plan: Plan, broadcasts: &HashMap<u64, Vec<u8>>) -> Receiver<JobEvent> {
        self.scheduler.submit(plan, broadcasts.clone())
    }

    fn cancel(&self, job_id: u64, reason: &str) {
        self.scheduler.send(SchedulerEvent::CancelJob {
            job_id,
            reason: reason.to_string(),
        })
    }

    fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()> {
        self.scheduler.send(SchedulerEvent::CancelJobGroup {
            application: String::new(),
            group: group.map(str::to_string),
        });
        Ok(())
    }

    fn unpersist(&self, rdd_id: u32) {
        self.release_target().unpersist(rdd_id);
    }

    fn release_target(&self) -> Box<dyn ReleaseTarget> {
        Box::new(LocalRelease {
            scheduler: self.scheduler.clone(),
            env: self.cluster.as_ref().map(|c| c.env.clone()),
        })
    }

    fn local_work_dir(&self) -> Option<PathBuf> {
        self.cluster.as_ref().map(|c| c.env.work_dir.clone())
    }

    fn ui_url(&self) -> Option<String> {
        #[cfg(feature = "ui")]
        if let Some(addr) = self.ui.as_ref().and_then(|u| u.addr) {
            return Some(format!("http://{addr}"));
        }
        None
    }

    fn shutdown(&mut self) {
        self.scheduler.send(SchedulerEvent::Shutdown);
        if let Some(local) = self.cluster.take() {
            local.shutdown();
        }
    }
}

/// What the cleaner releases through in local mode: the scheduler forgets the shuffle
/// (then has its launcher delete the files), the block store drops cached blocks.
struct LocalRelease {
    scheduler: SchedulerHandle,
    env: Option<Arc<ExecutorEnv>>,
}

impl ReleaseTarget for LocalRelease {
    fn release_shuffles(&self, ids: &[u32]) {
        self.scheduler.send(SchedulerEvent::RemoveShuffles {
            shuffle_ids: ids.to_vec(),
        })
    }

    fn unpersist(&self, rdd_id: u32) {
        self.scheduler.send(SchedulerEvent::Unpersist { rdd_id });
        if let Some(env) = &self.env {
            env.blocks.remove_rdd(rdd_id);
        }
    }
}
