//! The messages into and out of the scheduler's event loop.
//!
//! Into the loop: [`SchedulerEvent`]s (jobs submitted, task statuses, executors coming
//! and going). Out of the loop: [`JobEvent`]s streamed to the job's client, and task
//! launches through the [`TaskLauncher`] of the deployment (local threads or remote
//! executors).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ember_proto::{
    AccumulatorUpdate, BarrierPeers, MapHost, MigratedBlock, MigratedOutput, Plan, TaskDescription,
    TaskMetrics, TaskStatus,
};

/// What every task of a stage shares, handed to the launcher beside each task's own
/// description (which carries `plan_id` and neither the plan nor the broadcasts), so
/// a launcher can send them to an executor once rather than with every task, as
/// Spark broadcasts a stage's task binary.
///
/// Invariant: one `plan_id` always names the same plan: a stage whose task plan is
/// rebuilt gets a new id ([`StageShared::new`] draws ids from a process-wide counter).
#[derive(Debug, Clone)]
pub struct StageShared {
    pub plan_id: u64,
    pub plan: Arc<Plan>,
    /// Broadcast values the stage's job uses: id -> serialised value.
    pub broadcasts: Broadcasts,
}

/// A job's broadcast values, id -> serialised value: shared, never copied, by every
/// job of a client session and every stage of those jobs (the driver holds a session's
/// values once, however many jobs use them).
pub type Broadcasts = Arc<HashMap<u64, bytes::Bytes>>;

/// Runs its function when dropped (after the sender beside it has disconnected).
struct Wake(Box<dyn Fn() + Send + Sync>);

impl Drop for Wake {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Where the scheduler sends one job's [`JobEvent`]s: a channel, and optionally a
/// function called after every event and once when the scheduler lets go of the job
/// (the channel then disconnected), so an async reader can wait without a thread of
/// its own (the driver daemon follows hundreds of jobs on its async runtime).
#[derive(Clone)]
pub struct JobEventSender {
    // Declared before `wake`: dropped (disconnecting the channel) before it runs.
    tx: crossbeam_channel::Sender<JobEvent>,
    wake: Option<Arc<Wake>>,
}

impl JobEventSender {
    /// A sender that calls `wake` after every event and when the job is let go.
    pub fn with_wake(
        tx: crossbeam_channel::Sender<JobEvent>,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        JobEventSender {
            tx,
            wake: Some(Arc::new(Wake(Box::new(wake)))),
        }
    }

    /// Sends `event`; false if the reader has gone.
    pub fn send(&self, event: JobEvent) -> bool {
        let sent = self.tx.send(event).is_ok();
        if let Some(w) = &self.wake {
            (w.0)();
        }
        sent
    }
}

impl From<crossbeam_channel::Sender<JobEvent>> for JobEventSender {
    fn from(tx: crossbeam_channel::Sender<JobEvent>) -> Self {
        JobEventSender { tx, wake: None }
    }
}

static NEXT_PLAN_ID: AtomicU64 = AtomicU64::new(1);

impl StageShared {
    /// A stage plan under a fresh id.
    pub fn new(plan: Arc<Plan>, broadcasts: Broadcasts) -> Self {
        StageShared {
            plan_id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
            plan,
            broadcasts,
        }
    }

    /// `task` with the plan and broadcasts filled in: the self-contained description
    /// of before plans were shared (what tests and simple launchers want).
    pub fn describe(&self, mut task: TaskDescription) -> TaskDescription {
        task.plan = Some((*self.plan).clone());
        task.broadcasts = self
            .broadcasts
            .iter()
            .map(|(id, v)| (*id, v.to_vec()))
            .collect();
        task
    }
}

/// What a deployment provides to run tasks.
pub trait TaskLauncher: Send + 'static {
    /// Starts `task` on `executor_id`; its status must come back as
    /// [`SchedulerEvent::TaskFinished`]. `task.plan` is `None` and `task.broadcasts`
    /// empty: they are `stage`'s, under `task.plan_id`.
    fn launch(&mut self, executor_id: &str, task: TaskDescription, stage: &StageShared);
    /// Sends what `launch` calls since the last flush left buffered. The scheduler
    /// calls it after each pass over its queue, so a launcher may batch the launches
    /// of one pass into one message per executor.
    fn flush(&mut self) {}
    /// Asks `executor_id` to stop running `task_id` (best effort): it stops at its next
    /// batch.
    fn kill(&mut self, executor_id: &str, task_id: u64);
    /// [`Self::kill`], and if `task_id` does not stop at once (stuck in user code),
    /// ends it the hard way: the executor ends the worker process running it (a
    /// cancelled job's `interrupt_on_cancel`). Local mode cannot end a thread: there
    /// it is [`Self::kill`].
    fn interrupt(&mut self, executor_id: &str, task_id: u64) {
        self.kill(executor_id, task_id);
    }
    /// Deletes the map output files of `shuffle_ids` on every executor (best effort,
    /// must not block the loop). Called only for shuffles the scheduler has forgotten
    /// and no live job reads (see [`SchedulerEvent::RemoveShuffles`]).
    fn remove_shuffles(&mut self, shuffle_ids: &[u32]) {
        let _ = shuffle_ids;
    }
    /// Hands the rendezvous of a barrier stage attempt to `executor_id`: every rank's
    /// address (`peers.addresses`, index = rank) for its ranks `task_ids` (in rank
    /// order; `peers.task_ids` is empty, a launcher sets it per executor). Called once
    /// per attempt and executor hosting a running rank, after every rank reported its
    /// address ([`SchedulerEvent::BarrierAddress`]); must not block the loop.
    fn barrier_peers(&mut self, executor_id: &str, task_ids: &[u64], peers: &BarrierPeers) {
        let _ = (executor_id, task_ids, peers);
    }
    /// Tells decommissioning `executor_id` where to push each of its map outputs and
    /// the cached blocks it holds alone (all of its plan in one call, possibly empty:
    /// the executor waits for the whole plan); must not block the loop.
    fn migrate_outputs(
        &mut self,
        executor_id: &str,
        outputs: Vec<MigratedOutput>,
        blocks: Vec<MigratedBlock>,
    ) {
        let _ = (executor_id, outputs, blocks);
    }
}

/// Input to the scheduler event loop.
pub enum SchedulerEvent {
    /// A client submits a job; its events go to `events`.
    SubmitJob {
        plan: Box<Plan>,
        broadcasts: Broadcasts,
        events: JobEventSender,
    },
    /// The client gave up on a job (dropped it or disconnected), or the UI killed it:
    /// its tasks are killed (interrupted, with the job's `interrupt_on_cancel`).
    CancelJob { job_id: u64, reason: String },
    /// Cancel the running jobs of `application` in job group `group`, or all of them
    /// (`None`): Spark's `cancelJobGroup` / `cancelAllJobs`. With the job's
    /// `interrupt_on_cancel` their tasks are interrupted; without, they run out.
    CancelJobGroup {
        application: String,
        group: Option<String>,
    },
    /// The UI's kill of a stage: every job that needs stage `stage_id` (of
    /// `application` only, unless `None`) fails with `reason`, as Spark's
    /// `cancelStage` does.
    CancelStage {
        stage_id: u32,
        application: Option<String>,
        reason: String,
    },
    /// A task attempt ended.
    TaskFinished(Box<TaskStatus>),
    /// A running task of a barrier stage reports where it listens for its peers (at
    /// most `ember_proto::limits::MAX_BARRIER_ADDRESS_BYTES`, once per task); once
    /// every rank of the attempt has, [`TaskLauncher::barrier_peers`] gets them all.
    /// `executor_id` is who relayed it: an address counts only from the executor the
    /// task runs on.
    BarrierAddress {
        task_id: u64,
        executor_id: String,
        address: String,
    },
    /// An executor offers `slots` task slots.
    ExecutorAdded {
        executor_id: String,
        slots: u32,
        shuffle_address: String,
        /// The machine it runs on (replicas of a map output go to other hosts first).
        host: String,
    },
    /// An executor registered holding map outputs from before (its driver restarted, or
    /// its channel broke): added as [`SchedulerEvent::ExecutorAdded`], then each output
    /// of `held` that fits its shuffle is recorded (now, or when a job's plan creates
    /// the shuffle's stage), in the one event so no task is placed on it before.
    ExecutorRejoined {
        executor_id: String,
        slots: u32,
        shuffle_address: String,
        host: String,
        held: Vec<ember_proto::HeldOutput>,
    },
    /// An executor is decommissioning: it takes no more tasks from now on; once
    /// `drained` (its running tasks ended) the scheduler plans where its map outputs go
    /// ([`TaskLauncher::migrate_outputs`]).
    ExecutorDecommissioning { executor_id: String, drained: bool },
    /// A decommissioning executor pushed these map outputs (shuffle, map) to the peers
    /// named: replicas there from now on; and these cached blocks (rdd, partition, the
    /// peer, the bytes it stored): cached there from now on.
    OutputsMigrated {
        executor_id: String,
        outputs: Vec<(u32, u32, MapHost)>,
        blocks: Vec<(u32, u32, MapHost, u64)>,
    },
    /// Map task `task_id` on `executor_id` ended well and its executor pushes its output
    /// to replicas: its slot is free now; its status follows.
    SlotReleased { task_id: u64, executor_id: String },
    /// An executor is gone: its running tasks, map outputs and cached blocks are lost.
    ExecutorLost { executor_id: String, reason: String },
    /// Forget cached blocks of an RDD (unpersist).
    Unpersist { rdd_id: u32 },
    /// No live RDD of the client reaches these shuffles any more: forget their stages
    /// and map outputs and have the launcher delete their files. A shuffle that a live
    /// job still uses stays until the last such job has ended.
    RemoveShuffles { shuffle_ids: Vec<u32> },
    /// A client session ended: forget the shuffle stages, map outputs and cached blocks
    /// of its shuffle and RDD ids in `[id_lo, id_hi)`, except stages a running job uses.
    ForgetIds { id_lo: u32, id_hi: u32 },
    /// An application (client session) ended: a later one of the same name numbers its
    /// jobs and stages from 0 again.
    ApplicationEnded { application: String },
    /// Stop the event loop.
    Shutdown,
}

/// Why a job failed, typed so that callers can tell user errors from cancellations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// A task failed its last allowed attempt.
    TaskFailed {
        stage_id: u32,
        stage_name: String,
        partition: u32,
        executor_id: String,
        message: String,
    },
    /// A stage kept losing its inputs.
    StageFailed {
        stage_id: u32,
        stage_name: String,
        message: String,
    },
    /// The job was cancelled.
    Cancelled(String),
    /// The plan could not be scheduled.
    InvalidPlan(String),
}

/// Description of a stage for progress reporting and summaries.
#[derive(Debug, Clone)]
pub struct StageInfo {
    pub stage_id: u32,
    pub name: String,
    pub num_tasks: u32,
    /// Tasks launched in this attempt (missing partitions only).
    pub tasks_to_run: u32,
    pub attempt: u32,
}

/// Output of the scheduler to a job's client, in order.
///
/// Every `stage_id` in them (and in their [`JobFailure`]) is the stage's number within
/// the job's application, as Spark numbers stages per `SparkContext`: what the user
/// sees on the console and in errors. A driver serving many applications keeps its own
/// ids for its bookkeeping and its web UI's addresses.
#[derive(Debug, Clone)]
pub enum JobEvent {
    /// The job got an id (`job_id`, what [`SchedulerEvent::CancelJob`] names) and its
    /// number within its application (`number`, what the user sees).
    Started {
        job_id: u64,
        number: u64,
        num_stages: u32,
    },
    /// A stage's result was already available (shuffle output of an earlier job).
    StageSkipped(StageInfo),
    /// A stage (attempt) started.
    StageSubmitted(StageInfo),
    /// A task started.
    TaskStarted { stage_id: u32, partition: u32 },
    /// A task attempt ended; `counted` is false for stale or failed attempts.
    TaskEnded {
        stage_id: u32,
        partition: u32,
        executor_id: String,
        metrics: TaskMetrics,
        succeeded: bool,
        /// The first successful attempt of this partition in this stage for this job:
        /// its accumulator updates are the ones that count.
        counted: bool,
        accumulators: Vec<AccumulatorUpdate>,
    },
    /// A stage finished all its partitions.
    StageCompleted { stage_id: u32 },
    /// An executor this job had tasks or shuffle output on was lost; what it ran or
    /// held is recomputed (sent before the retries it causes), but for its
    /// `outputs_from_storage` map outputs, read from their stored copies instead, and
    /// its `outputs_from_replicas`, served by replicas on other executors.
    ExecutorLost {
        executor_id: String,
        reason: String,
        outputs_from_storage: u32,
        outputs_from_replicas: u32,
    },
    /// The result of one partition of the final RDD (first successful attempt only).
    TaskResult { partition: u32, result: Vec<u8> },
    /// All partitions delivered.
    JobSucceeded { job_id: u64 },
    /// The job failed.
    JobFailed { job_id: u64, failure: JobFailure },
}

impl JobEvent {
    /// True for the job's last event: it succeeded or failed.
    pub fn ends_job(&self) -> bool {
        matches!(
            self,
            JobEvent::JobSucceeded { .. } | JobEvent::JobFailed { .. }
        )
    }
}
