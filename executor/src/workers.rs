//! Routing the driver's task commands to the workers of job binaries, one per (binary,
//! client session), for one registration with the driver; and the set of tasks this
//! executor is running.
//!
//! Invariants:
//! * Every task accepted is in the running set of the [`WorkerEnv`] until its one
//!   status went to the driver (see [`crate::worker_env`]).
//! * One [`crate::binary_worker`] per binary hash and session (the [`IdRange`] owning
//!   the task's plan): a worker process runs job code, so it holds only its own
//!   session's tasks, plans, broadcasts and shuffle key, never another session's. It
//!   lives until its session is cleaned up or this registration ends, its worker
//!   process only as long as it works. On cleanup the session's workers leave the map
//!   at once (whatever else runs), so a task of the next session given the same id
//!   range starts a fresh worker process; the old actor ends after its queued commands
//!   (its process killed) and any task of it still unreported is failed.
//! * The stage plans held here are the ones the driver sent and did not say to forget
//!   (bounded by `ember_proto::held_plans`, enforced here too); each binary's worker
//!   holds a subset of them, and a plan dropped here is dropped there.
//! * With worker uids, a session's workers run as one uid leased for the session
//!   ([`crate::worker_users`]); the lease leaves the map at the session's cleanup and
//!   goes back to the pool once its last actor ended, so a new session given the same
//!   id range gets another uid's (or a freshly cleaned) lease, never a live one.
//! * [`Workers::shutdown`] kills every worker: the driver has lost this executor, so
//!   their tasks are void and no status is sent for them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ember_proto::held_plans::HeldPlans;
use ember_proto::IdRange;
use ember_proto::{CleanupSession, ExecutorMessage, KillTask, LaunchTask, Plan, StagePlan};
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::binaries::{is_valid_sha, BinaryStore};
use crate::binary_worker::{self, WorkerCmd};
use crate::config::Config;
use crate::driver_conn::DriverConn;
pub use crate::worker_env::{failed_status, RunningTasks, WorkerEnv};
use crate::worker_users::UidLease;

struct WorkerHandle {
    tx: mpsc::UnboundedSender<WorkerCmd>,
    task: JoinHandle<()>,
}

/// Which worker runs a task: its binary's hash and its session's id range.
type WorkerKey = (String, IdRange);

/// The worker of `plan`'s binary and session.
fn key_of(plan: &Plan) -> WorkerKey {
    (plan.binary_hash.clone(), IdRange::of_id(plan.final_rdd))
}

/// The per-(binary, session) workers of one registration.
pub struct Workers {
    env: Arc<WorkerEnv>,
    by_binary: HashMap<WorkerKey, WorkerHandle>,
    /// The worker each task went to, while the task may still be running (pruned to
    /// the running set as it grows).
    task_workers: HashMap<u64, WorkerKey>,
    /// Stage plans the driver sent, by plan id, until it says to forget them.
    plans: HashMap<u64, Arc<Plan>>,
    held: HeldPlans,
    /// With worker uids: the uid of each session that has workers here, held until
    /// the session is cleaned up (its actors hold it too, until they end).
    session_users: HashMap<IdRange, Arc<UidLease>>,
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
        let config_for_push = config.clone();
        let env = WorkerEnv {
            config,
            executor_id,
            binaries,
            driver,
            to_driver,
            running: Arc::default(),
            memory: Arc::default(),
            replication: Arc::new(crate::replicate::Replication::new(config_for_push)),
        };
        Workers {
            env: Arc::new(env),
            by_binary: HashMap::new(),
            task_workers: HashMap::new(),
            plans: HashMap::new(),
            held: HeldPlans::receiver(),
            session_users: HashMap::new(),
        }
    }

    /// Where map outputs are pushed from (replicas, and a decommissioning executor's
    /// moves).
    pub fn replication(&self) -> Arc<crate::replicate::Replication> {
        self.env.replication.clone()
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

    /// Hands a task to the worker of its binary (starting one if needed), after
    /// dropping the stage plans the driver said to forget and keeping the one it sent.
    pub async fn launch(&mut self, launch: LaunchTask) {
        for id in launch.forget_plans {
            self.forget_plan(id);
        }
        if let Some(StagePlan {
            id,
            plan: Some(plan),
        }) = launch.plan
        {
            self.hold_plan(id, plan);
        }
        let Some(mut task) = launch.task else {
            tracing::warn!("driver sent a LaunchTask without a task; ignored");
            return;
        };
        let task_id = task.task_id;
        // The task's stage plan: inline (it travels on inline), else the one held
        // under its id.
        let held = match &task.plan {
            Some(_) => None,
            None => self.plans.get(&task.plan_id).cloned(),
        };
        let key = task
            .plan
            .as_ref()
            .or(held.as_deref())
            .map(key_of)
            .unwrap_or_else(|| (String::new(), IdRange::of_id(0)));
        let sha = key.0.clone();
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
        if task.plan.is_none() && held.is_none() {
            let msg = format!(
                "task {task_id} names stage plan {}, which this executor does not hold \
                 (never sent, or forgotten); refusing to run it",
                task.plan_id
            );
            self.env.fail(task_id, msg).await;
            return;
        }
        if !is_valid_sha(&sha) {
            let msg = format!(
                "task {task_id} names binary {sha:?}, which is not a SHA-256 (64 lower-case \
                 hex digits); refusing to run it"
            );
            self.env.fail(task_id, msg).await;
            return;
        }
        if let Err(msg) = self.session_user(key.1) {
            let msg = format!("task {task_id} cannot start: {msg}");
            self.env.fail(task_id, msg).await;
            return;
        }
        tracing::debug!(task_id, binary = &sha[..16], "launching task");
        if task.shuffle_id.is_some() && !task.replica_targets.is_empty() {
            let plan = task.plan.as_ref().or(held.as_deref());
            let key = plan.map_or("", |p| p.shuffle_key.as_str());
            let targets = std::mem::take(&mut task.replica_targets);
            let shuffle_id = task.shuffle_id.unwrap_or_default();
            self.env
                .replication
                .plan(task_id, shuffle_id, task.partition, targets, key);
        }
        let plan = held.map(|p| (task.plan_id, p));
        self.remember_worker(task_id, key.clone());
        self.send(
            &key,
            WorkerCmd::Launch {
                task: Box::new(task),
                plan,
                broadcasts: launch.broadcasts,
            },
        );
    }

    /// Refuses task `task_id` with `msg` (it is reported failed, once).
    pub async fn refuse(&mut self, task_id: u64, msg: String) {
        if self.take_refused(task_id) {
            self.env.fail(task_id, msg).await;
        }
    }

    /// Refuses task `task_id` because this executor is decommissioning: reported lost
    /// with its executor, so the scheduler runs it elsewhere without counting a failure
    /// of the task (a launch the driver sent before it knew).
    pub async fn refuse_leaving(&mut self, task_id: u64) {
        if self.take_refused(task_id) {
            let why = format!(
                "executor {} is decommissioning and takes no more tasks",
                self.env.executor_id
            );
            let status = ember_proto::TaskStatus {
                task_id,
                executor_id: self.env.executor_id.clone(),
                outcome: Some(ember_proto::task_status::Outcome::Failure(
                    ember_proto::TaskFailure {
                        reason: Some(ember_proto::task_failure::Reason::ExecutorLost(why)),
                    },
                )),
                ..Default::default()
            };
            self.env.report(status).await;
        }
    }

    /// Enters a refused task in the running set (so its one status goes out); false if
    /// it is there already (its status will come from where it runs).
    fn take_refused(&mut self, task_id: u64) -> bool {
        let fresh = {
            let mut running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
            running.insert(task_id, String::new()).is_none()
        };
        if fresh {
            crate::metrics::metrics().task_started();
        }
        fresh
    }

    /// Keeps stage plan `id` for the tasks that name it, within `HeldPlans`' bounds
    /// (a driver that never says "forget" cannot make this executor hold more).
    fn hold_plan(&mut self, id: u64, plan: Plan) {
        for old in self.held.hold(id, plan.encoded_len()) {
            tracing::debug!(plan_id = old, "stage plan over the bound; forgotten");
            self.drop_plan(old);
        }
        self.plans.insert(id, Arc::new(plan));
    }

    /// Drops stage plan `id` here and in its binary's and session's worker.
    fn forget_plan(&mut self, id: u64) {
        if self.held.forget(id) {
            self.drop_plan(id);
        }
    }

    fn drop_plan(&mut self, id: u64) {
        if let Some(plan) = self.plans.remove(&id) {
            let key = key_of(&plan);
            if self.by_binary.contains_key(&key) {
                self.send(&key, WorkerCmd::ForgetPlans(vec![id]));
            }
        }
    }

    /// Forwards a kill to the workers of the task's binary (the one running it acts).
    pub fn kill(&mut self, kill: KillTask) {
        let sha = {
            let running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
            running.get(&kill.task_id).cloned()
        };
        let keys: Vec<WorkerKey> = match sha {
            Some(sha) => self
                .by_binary
                .keys()
                .filter(|(s, _)| *s == sha)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if keys.is_empty() {
            tracing::debug!(task_id = kill.task_id, "kill for a task not running here");
        }
        for key in keys {
            self.send(&key, WorkerCmd::Kill(kill.clone()));
        }
    }

    /// Hands a barrier stage's peers to the workers running its ranks named in
    /// `peers.task_ids` (each worker gets the ranks it runs); ranks not running here
    /// are skipped (they ended, and the scheduler reruns the stage).
    pub fn barrier_peers(&mut self, peers: ember_proto::BarrierPeers) {
        let mut by_worker: HashMap<WorkerKey, Vec<u64>> = HashMap::new();
        for id in &peers.task_ids {
            match self.task_workers.get(id) {
                Some(key) => by_worker.entry(key.clone()).or_default().push(*id),
                None => tracing::debug!(task_id = id, "barrier peers for a task not running here"),
            }
        }
        for (key, task_ids) in by_worker {
            let mut p = peers.clone();
            p.task_ids = task_ids;
            self.send(&key, WorkerCmd::BarrierPeers(p));
        }
    }

    /// Records that task `task_id` went to `key`'s worker; forgets the tasks no longer
    /// running once the record has grown past twice the running set.
    fn remember_worker(&mut self, task_id: u64, key: WorkerKey) {
        self.task_workers.insert(task_id, key);
        let running = self.env.running.lock().unwrap_or_else(|p| p.into_inner());
        if self.task_workers.len() > 2 * running.len() + 64 {
            self.task_workers.retain(|id, _| running.contains_key(id));
        }
    }

    /// A session ended: each of its workers is sent the cleanup and removed from the
    /// map, so the next session given the same id range gets fresh worker processes
    /// (never this session's, even while other tasks of the binary run). The old actor
    /// ends once its queued commands are done and kills its process; then any task it
    /// was still running is failed (each task reports once, so a finished one is not).
    pub fn cleanup(&mut self, cleanup: CleanupSession) {
        let session = IdRange::of_id(cleanup.id_lo);
        // Its uid goes back to the pool once the actors below have ended.
        self.session_users.remove(&session);
        let keys = self.session_workers(session);
        for key in keys {
            self.send(&key, WorkerCmd::Cleanup(cleanup));
            let Some(h) = self.by_binary.remove(&key) else {
                continue;
            };
            let tasks: Vec<u64> = self
                .task_workers
                .iter()
                .filter(|(_, k)| **k == key)
                .map(|(id, _)| *id)
                .collect();
            self.task_workers.retain(|_, k| *k != key);
            // Closing its channel ends the actor after the cleanup.
            drop(h.tx);
            let env = self.env.clone();
            tokio::spawn(async move {
                let _ = h.task.await;
                for task_id in tasks {
                    let known = env
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains_key(&task_id);
                    if known {
                        let msg = format!(
                            "task {task_id}'s session ended; its worker process was stopped"
                        );
                        env.fail(task_id, msg).await;
                    }
                }
            });
        }
    }

    /// Forwards an unpersist to the workers of the session owning the RDD.
    pub fn unpersist(&mut self, unpersist: ember_proto::UnpersistRdd) {
        let session = IdRange::of_id(unpersist.rdd_id);
        let keys = self.session_workers(session);
        for key in keys {
            self.send(&key, WorkerCmd::Unpersist(unpersist));
        }
    }

    /// Asks the workers of the blocks' sessions to write the cached blocks they hold of
    /// `blocks` to their session's shuffle directory (a decommission moves them); the
    /// returned future resolves to the blocks written (a worker lost meanwhile, or not
    /// answering within `timeout`, counts none; the others' count).
    pub fn export_blocks(
        &mut self,
        blocks: &[(u32, u32)],
        timeout: std::time::Duration,
    ) -> impl std::future::Future<Output = Vec<ember_proto::ExportedBlock>> + Send + 'static {
        let mut by_session: HashMap<IdRange, Vec<ember_proto::BlockRef>> = HashMap::new();
        for &(rdd_id, partition) in blocks {
            by_session
                .entry(IdRange::of_id(rdd_id))
                .or_default()
                .push(ember_proto::BlockRef { rdd_id, partition });
        }
        let mut waits = Vec::new();
        for (session, refs) in by_session {
            for key in self.session_workers(session) {
                let (reply, wait) = tokio::sync::oneshot::channel();
                let blocks = refs.clone();
                self.send(&key, WorkerCmd::ExportBlocks { blocks, reply });
                waits.push(async move {
                    match tokio::time::timeout(timeout, wait).await {
                        Ok(Ok(written)) => written,
                        Ok(Err(_)) => Vec::new(), // its worker was lost
                        Err(_) => {
                            tracing::warn!(
                                "decommissioning: a worker did not write out its cached blocks in time; not moving them"
                            );
                            Vec::new()
                        }
                    }
                });
            }
        }
        async move {
            futures_util::future::join_all(waits)
                .await
                .into_iter()
                .flatten()
                .collect()
        }
    }

    /// The workers (one per binary) of `session`.
    fn session_workers(&self, session: IdRange) -> Vec<WorkerKey> {
        self.by_binary
            .keys()
            .filter(|(_, range)| *range == session)
            .cloned()
            .collect()
    }

    /// Sends `cmd` to `key`'s worker actor, creating it (again, if it ended) as needed.
    fn send(&mut self, key: &WorkerKey, cmd: WorkerCmd) {
        let cmd = match self.by_binary.get(key) {
            Some(h) => match h.tx.send(cmd) {
                Ok(()) => return,
                Err(mpsc::error::SendError(cmd)) => {
                    tracing::error!(
                        binary = key.0,
                        session_range = key.1.index(),
                        "binary worker ended unexpectedly; restarting it"
                    );
                    cmd
                }
            },
            None => cmd,
        };
        let user = match self.session_user(key.1) {
            Ok(user) => user,
            Err(msg) => {
                tracing::warn!(session_range = key.1.index(), "{msg}; command dropped");
                return;
            }
        };
        let (tx, task) = binary_worker::spawn(key.0.clone(), key.1, user, self.env.clone());
        // A new worker actor's receiver is alive, so this send cannot fail.
        let _ = tx.send(cmd);
        self.by_binary
            .insert(key.clone(), WorkerHandle { tx, task });
    }

    /// The uid `session`'s workers run as: none without worker uids; else the
    /// session's lease, taken from the pool the first time. `Err` when every uid
    /// serves another session.
    fn session_user(&mut self, session: IdRange) -> Result<Option<Arc<UidLease>>, String> {
        let Some(users) = &self.env.config.worker_users else {
            return Ok(None);
        };
        if let Some(lease) = self.session_users.get(&session) {
            return Ok(Some(lease.clone()));
        }
        let lease = users.lease().ok_or_else(|| {
            format!(
                "every worker uid of --worker-uids {} serves another session on this \
                 executor",
                users.describe()
            )
        })?;
        self.session_users.insert(session, lease.clone());
        Ok(Some(lease))
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
