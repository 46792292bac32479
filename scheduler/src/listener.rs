//! The scheduler's listener bus: what it tells observers (the web UI's status store, the
//! event log, metrics) about every job, stage, task and executor, as Spark's
//! `SparkListener` events.
//!
//! Invariants: events are sent from the scheduler thread in the order things happened,
//! each stamped with the wall-clock time it happened; a listener that stops receiving is
//! dropped, never blocks the scheduler (channels are unbounded) and never changes what
//! the scheduler does. Results of tasks are not included (they can be large).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use ember_proto::TaskMetrics;

/// A stage as a job's DAG lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageDesc {
    pub stage_id: u32,
    /// Its number within its application (what the user sees; `stage_id` is the
    /// scheduler's, unique across applications).
    pub number: u32,
    pub name: String,
    pub num_tasks: u32,
    /// The stages whose shuffle output it reads.
    pub parents: Vec<u32>,
    /// The shuffle it writes; `None` for the job's result stage.
    pub shuffle_id: Option<u32>,
    /// The RDD operators the stage runs, parents first (at most
    /// [`MAX_STAGE_OPERATORS`]: the first ones, `more_operators` counting the rest).
    pub operators: Vec<StageOperator>,
    pub more_operators: u32,
}

/// Operators a [`StageDesc`] lists at most (the UI draws each in the stage's box).
pub const MAX_STAGE_OPERATORS: usize = 32;

/// One RDD of a stage, as the DAG shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageOperator {
    pub rdd_id: u32,
    /// The node's name (its operator and call site), as the plan gives it.
    pub name: String,
    /// Whether it is persisted (its partitions are cached where computed).
    pub cached: bool,
}

/// One thing that happened in the scheduler.
#[derive(Debug, Clone)]
pub enum ListenerEvent {
    /// A job was accepted: its action and call site, and its stages (result stage last).
    JobSubmitted {
        job_id: u64,
        /// The application (client session) it belongs to; empty in local mode.
        application: String,
        /// Its number within the application (what the user sees).
        number: u64,
        description: String,
        stages: Vec<StageDesc>,
        /// The pool it was scheduled in (`Context::set_pool`; `default` if none) and
        /// its job group (empty if none).
        pool: String,
        job_group: String,
        /// How the pool shares slots: `"weight 3, min share 1, fair"` under the fair
        /// mode (the pool file's settings, or the defaults), `"fifo"` under the fifo
        /// mode (where pools do not count).
        pool_share: String,
        time_ms: u64,
    },
    /// A stage of this job already had its output (an earlier job wrote it).
    StageSkipped { job_id: u64, stage_id: u32 },
    /// An attempt of a stage started with `tasks` tasks (its missing partitions).
    StageSubmitted {
        stage_id: u32,
        attempt: u32,
        tasks: u32,
        time_ms: u64,
    },
    /// Every partition of the stage is done.
    StageCompleted { stage_id: u32, time_ms: u64 },
    /// A stage gave up (its attempts ran out).
    StageFailed {
        stage_id: u32,
        reason: String,
        time_ms: u64,
    },
    TaskStarted {
        task_id: u64,
        stage_id: u32,
        stage_attempt: u32,
        partition: u32,
        attempt: u32,
        executor_id: String,
        speculative: bool,
        time_ms: u64,
    },
    TaskEnded {
        task_id: u64,
        stage_id: u32,
        partition: u32,
        attempt: u32,
        executor_id: String,
        metrics: TaskMetrics,
        succeeded: bool,
        /// Why the attempt failed (bounded text).
        failure: Option<String>,
        time_ms: u64,
    },
    /// A task of a barrier stage ended: its collective calls in order (each one
    /// superstep's compute, then its communication), at most
    /// `ember_proto::limits::MAX_SUPERSTEPS` listed and the rest counted in `dropped`;
    /// `resumed_after`: the superstep checkpoint it resumed from, if any. Sent before the
    /// task's `TaskEnded`.
    TaskSupersteps {
        task_id: u64,
        stage_id: u32,
        stage_attempt: u32,
        partition: u32,
        executor_id: String,
        supersteps: Vec<ember_proto::Superstep>,
        dropped: u64,
        resumed_after: Option<u64>,
        time_ms: u64,
    },
    JobEnded {
        job_id: u64,
        succeeded: bool,
        failure: Option<String>,
        time_ms: u64,
    },
    ExecutorAdded {
        executor_id: String,
        slots: u32,
        time_ms: u64,
    },
    ExecutorLost {
        executor_id: String,
        reason: String,
        /// Its map outputs read from their stored copies from now on (`storage:`
        /// shuffle durability) instead of being recomputed.
        outputs_from_storage: u32,
        /// Its map outputs served by replicas on other executors from now on
        /// (`replicated:N` shuffle durability) instead of being recomputed.
        outputs_from_replicas: u32,
        time_ms: u64,
    },
    /// A task stored a partition of a persisted RDD on its executor (reported once
    /// per block and executor; only blocks of nodes the stage's plan persists, within
    /// their partitions). Sizes are the task's own estimate (memory) and file size.
    BlockCached {
        /// The application (client session) whose plan persists it; empty in local mode.
        application: String,
        rdd_id: u32,
        /// The RDD's name (operator and call site) and partition count, from the plan.
        rdd_name: String,
        num_partitions: u32,
        /// `ember_proto::StorageLevel` as its number.
        storage: i32,
        partition: u32,
        executor_id: String,
        memory_bytes: u64,
        disk_bytes: u64,
        /// The decommissioned executor the block was moved from to `executor_id`;
        /// empty when a task there computed it.
        moved_from: String,
        time_ms: u64,
    },
    /// Map outputs of a shuffle-map stage were recovered from what executors reported
    /// holding when they registered (after a driver restart): `outputs` of its map
    /// partitions need not run again.
    OutputsRecovered {
        stage_id: u32,
        shuffle_id: u32,
        outputs: u32,
        /// The executors holding them.
        executors: Vec<String>,
        time_ms: u64,
    },
    /// Every cached block of RDDs `rdd_lo..rdd_hi` is gone (an unpersist: one id; an
    /// ended session: its id range).
    BlocksRemoved {
        rdd_lo: u32,
        rdd_hi: u32,
        time_ms: u64,
    },
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The senders of every listener; shared by the scheduler and its handle.
#[derive(Clone, Default)]
pub(crate) struct Listeners(Arc<Mutex<Vec<Sender<ListenerEvent>>>>);

impl Listeners {
    /// A new listener, receiving every event from now on.
    pub(crate) fn subscribe(&self) -> Receiver<ListenerEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.lock().push(tx);
        rx
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Sender<ListenerEvent>>> {
        // A panic while holding it cannot leave the list half-changed.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `event` to every listener, dropping those that went away.
    pub(crate) fn emit(&self, event: impl FnOnce() -> ListenerEvent) {
        let mut listeners = self.lock();
        if listeners.is_empty() {
            return;
        }
        let event = event();
        listeners.retain(|l| l.send(event.clone()).is_ok());
    }
}

/// A job failure as text (stages by their number within the application).
pub(crate) fn describe_failure(f: &crate::events::JobFailure) -> String {
    use crate::events::JobFailure as F;
    match f {
        F::TaskFailed {
            stage_id,
            stage_name,
            partition,
            executor_id,
            message,
        } => format!(
            "task {partition} of stage {stage_id} ({stage_name}) failed on executor \
             {executor_id}: {message}"
        ),
        F::StageFailed {
            stage_id,
            stage_name,
            message,
        } => format!("stage {stage_id} ({stage_name}) failed: {message}"),
        F::Cancelled(why) => format!("cancelled: {why}"),
        F::InvalidPlan(why) => format!("invalid plan: {why}"),
    }
}
