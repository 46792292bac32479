//! The scheduler's settings: retries, exclusion, speculation, plan limits, pipelining,
//! how an idle scheduler gives memory back, and how slots are shared (pools).

use std::time::Duration;

use crate::limits::PlanLimits;

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Attempts per task before its job fails (Spark's `spark.task.maxFailures`).
    pub max_task_attempts: u32,
    /// Times one task may be lost with its executor (its executor died or its channel
    /// broke while it ran) before its job fails; Spark counts these toward
    /// `spark.task.maxFailures`, here they have their own cap so that a healthy task
    /// on a dying executor does not use up its attempts.
    pub max_executor_losses_per_task: u32,
    /// Consecutive failed attempts of a stage (fetch failures; for a barrier stage, any
    /// failure of one of its tasks) before its job fails.
    pub max_stage_attempts: u32,
    /// Failed tasks of one stage on one executor after which that executor gets no
    /// more tasks of the stage (Spark's `excludeOnFailure.stage.maxFailedTasksPerExecutor`).
    pub max_failures_per_executor_per_stage: u32,
    /// Launch a second copy of a task far slower than its stage's median
    /// (Spark's `spark.speculation`); off by default.
    pub speculation: bool,
    /// A task is "far slower" when it has run this many times the median duration of
    /// the stage's finished tasks...
    pub speculation_multiplier: f64,
    /// ...once this fraction of the stage's tasks has finished...
    pub speculation_quantile: f64,
    /// ...and for at least this long.
    pub speculation_min: Duration,
    /// Bounds on what one plan may ask for (checked before anything is allocated).
    pub limits: PlanLimits,
    /// Most tasks one slot may have in flight (launched, not finished) for a stage whose
    /// tasks run briefly: the next ones wait on the executor instead of a round trip to
    /// the driver per task, as Drizzle's group scheduling hides it. 1 turns it off, and
    /// so does speculation (a task waiting its turn would look slow).
    pub pipeline_depth: u32,
    /// How much run time may wait behind a slot's running task: a pipelined stage gets
    /// `pipeline_budget / (its slowest task of the quick streak)` tasks per slot, at
    /// least 2 and at most `pipeline_depth`. So 2 ms tasks get 16 per slot, 100 µs
    /// tasks the whole depth, and the tail a slow executor can hold stays this short.
    pub pipeline_budget: Duration,
    /// A stage's tasks "run briefly" once this many in a row took less than
    /// `quick_task` to run (the executor's own run time, without the wait).
    pub quick_streak: u32,
    pub quick_task: Duration,
    /// Called on the scheduler thread when its last job has ended, if its jobs had
    /// grown its maps past a few thousand entries, after it has shrunk its job and task
    /// state: a deployment returns the freed pages to the OS here (the driver daemon:
    /// mimalloc's `mi_collect`), since an idle thread's allocator otherwise keeps them.
    pub release_memory: Option<fn()>,
    /// How slots are shared between sessions, pools and jobs (`--scheduling-mode`,
    /// `--pool-file`, `--max-cores-per-session`): see [`crate::pools`].
    pub fair: crate::pools::FairConfig,
    /// How long a stage's tasks wait for a slot on an executor caching their input
    /// before they take any free slot (Spark's `spark.locality.wait`, 3 s): the clock
    /// restarts whenever the stage launches a task where its input is cached. Zero:
    /// a task takes any free slot at once.
    pub locality_wait: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_task_attempts: 4,
            max_executor_losses_per_task: 4,
            max_stage_attempts: 4,
            max_failures_per_executor_per_stage: 2,
            speculation: false,
            speculation_multiplier: 1.5,
            speculation_quantile: 0.75,
            speculation_min: Duration::from_millis(100),
            limits: PlanLimits::default(),
            pipeline_depth: 256,
            pipeline_budget: Duration::from_millis(32),
            quick_streak: 8,
            quick_task: Duration::from_millis(2),
            release_memory: None,
            fair: Default::default(),
            locality_wait: Duration::from_secs(3),
        }
    }
}
