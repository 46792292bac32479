//! A stage and its lifecycle as one explicit state.
//!
//! ```text
//!            submit_tasks                 last pending partition done
//!  Waiting ───────────────▶ Running ──────────────────────────────────▶ Available
//!     ▲                      │  │                                          │
//!     │  fetch failure,      │  │ attempts used up                         │ outputs lost
//!     │  job ended           │  ▼                                          │ (executor lost,
//!     └──────────────────────┘ Failed ── a later job needs it ──▶ Waiting  │  fetch failure)
//!     ▲                                                                    │
//!     └────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Invariants:
//! - `Running` holds the number of the attempt being run and the partitions of that
//!   attempt not yet finished; no other state has tasks in flight that count. A task
//!   of another attempt may still finish (its output is taken, it decides nothing).
//! - A shuffle-map stage is `Available` exactly when the map-output tracker has an
//!   output for each of its partitions: it becomes `Available` when the last one is
//!   registered and goes back to `Waiting` in the places outputs are removed.
//! - `attempts` only grows: an attempt number is never reused, so a status of an
//!   older attempt is always recognised as such.
//! - `gang` is set only while a barrier stage (`barrier`) is `Running`, and belongs to
//!   that attempt: stopping the attempt drops it (see `barrier.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ember_proto::Plan;

use super::barrier::Gang;
use crate::dag::PlanIndex;
use crate::events::StageShared;

/// A stage's task plan and the shuffles it reads.
fn task_view(
    plan: &Plan,
    index: &PlanIndex,
    kind: StageKind,
    rdd_id: u32,
    broadcasts: &crate::events::Broadcasts,
) -> (StageShared, Vec<u32>) {
    let writes = match kind {
        StageKind::ShuffleMap(sid) => Some(sid),
        StageKind::Result(_) => None,
    };
    (
        StageShared::new(
            Arc::new(index.stage_plan(plan, rdd_id, writes)),
            broadcasts.clone(),
        ),
        index.all_stage_shuffles(rdd_id),
    )
}

/// What a stage produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum StageKind {
    /// The map side of a shuffle (by shuffle id), shared by every job that reads it.
    ShuffleMap(u32),
    /// The results of one job.
    Result(u64),
}

/// Where a stage is in its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StageState {
    /// Not running: new, waiting for its parents' outputs, or stopped (a fetch failure
    /// ended its attempt, or the last job that needed it ended).
    Waiting,
    /// Attempt `attempt` is running; `pending` are its partitions not yet finished.
    Running { attempt: u32, pending: HashSet<u32> },
    /// Every output exists (a shuffle-map stage) or every result was delivered.
    Available,
    /// Gave up: its attempts or a task's attempts ran out and its jobs failed. A later
    /// job that needs it submits it again.
    Failed,
}

pub(super) struct Stage {
    pub id: u32,
    /// Its number within its application (`Plan.application`): the id users see.
    pub number: u32,
    pub kind: StageKind,
    pub rdd_id: u32,
    pub num_partitions: u32,
    pub name: String,
    /// The plan tasks of this stage are built from (latest job that needed it).
    pub plan: Arc<Plan>,
    pub index: Arc<PlanIndex>,
    /// What a task of this stage runs: the part of `plan` the stage needs
    /// ([`PlanIndex::stage_plan`]), so task size stays flat however long the lineage,
    /// under its plan id, with the job's broadcasts.
    pub task_plan: StageShared,
    /// Every shuffle the stage reads (ignoring caches): its parent stages' outputs.
    pub reads: Vec<u32>,
    pub state: StageState,
    /// Attempts started so far (the latest attempt's number).
    pub attempts: u32,
    /// Consecutive attempts that ended in a fetch failure (or, for a barrier stage, in
    /// any failure of one of its tasks).
    pub failed_attempts: u32,
    /// The attempt whose fetch failure was last counted in `failed_attempts`.
    pub last_failed_attempt: Option<u32>,
    /// Failed attempts per partition (task errors).
    pub task_failures: HashMap<u32, u32>,
    /// Executors lost while running each partition, in order.
    pub executor_losses: HashMap<u32, Vec<String>>,
    /// Failed tasks per executor, and the executors that get no more of its tasks.
    pub executor_failures: HashMap<String, u32>,
    pub excluded: HashSet<String>,
    /// Run times of the current attempt's finished tasks (for speculation).
    pub durations: Vec<Duration>,
    /// Partitions of the current attempt that already have a speculative copy.
    pub speculated: HashSet<u32>,
    /// Its tasks that finished in a row, each quicker than `SchedulerConfig::quick_task`:
    /// past `quick_streak`, its tasks are pipelined.
    pub quick_streak: u32,
    /// The longest run time (µs) in the current quick streak: how deep it is pipelined.
    pub quick_max_micros: u64,
    /// A barrier stage (some node of its narrow chain is barrier, Spark's `isBarrier`):
    /// its attempts run every partition at once, one slot each (see `barrier.rs`).
    pub barrier: bool,
    /// The running attempt of a barrier stage: its key, ranks and rendezvous.
    pub gang: Option<Gang>,
    /// The session and pool its tasks queue in, and its place in FIFO order (the
    /// earliest job that needed it when its attempt was submitted): see `fair.rs`.
    pub pool: crate::pools::PoolKey,
    pub priority: u64,
    /// When the stage last launched a task on an executor caching its input (or its
    /// attempt started): its tasks wait for such a slot until
    /// `SchedulerConfig::locality_wait` after this.
    pub locality_since: std::time::Instant,
}

impl Stage {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u32,
        kind: StageKind,
        rdd_id: u32,
        num_partitions: u32,
        name: String,
        plan: Arc<Plan>,
        index: Arc<PlanIndex>,
        broadcasts: crate::events::Broadcasts,
    ) -> Self {
        let (task_plan, reads) = task_view(&plan, &index, kind, rdd_id, &broadcasts);
        let barrier = index.stage_is_barrier(rdd_id);
        let pool = crate::pools::PoolKey::new(&plan.application, "");
        Stage {
            id,
            number: id,
            kind,
            rdd_id,
            num_partitions,
            name,
            plan,
            index,
            task_plan,
            reads,
            state: StageState::Waiting,
            attempts: 0,
            failed_attempts: 0,
            last_failed_attempt: None,
            task_failures: HashMap::new(),
            executor_losses: HashMap::new(),
            executor_failures: HashMap::new(),
            excluded: HashSet::new(),
            durations: Vec::new(),
            speculated: HashSet::new(),
            quick_streak: 0,
            quick_max_micros: 0,
            locality_since: std::time::Instant::now(),
            barrier,
            gang: None,
            pool,
            priority: 0,
        }
    }

    /// Takes the plan of a later job that needs this stage (ids are stable within a
    /// context, so the stage's part of it is the same lineage).
    pub fn replan(
        &mut self,
        plan: Arc<Plan>,
        index: Arc<PlanIndex>,
        broadcasts: crate::events::Broadcasts,
    ) {
        (self.task_plan, self.reads) =
            task_view(&plan, &index, self.kind, self.rdd_id, &broadcasts);
        self.barrier = index.stage_is_barrier(self.rdd_id);
        self.plan = plan;
        self.index = index;
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, StageState::Running { .. })
    }

    pub fn is_available(&self) -> bool {
        self.state == StageState::Available
    }

    /// Whether `partition` is still to finish in the running attempt `attempt`: only
    /// then does a task of that attempt decide anything.
    pub fn is_pending(&self, attempt: u32, partition: u32) -> bool {
        match &self.state {
            StageState::Running {
                attempt: a,
                pending,
            } => *a == attempt && pending.contains(&partition),
            _ => false,
        }
    }

    /// Starts the next attempt over `partitions`; returns its number.
    pub fn start_attempt(&mut self, partitions: impl IntoIterator<Item = u32>) -> u32 {
        self.attempts += 1;
        self.state = StageState::Running {
            attempt: self.attempts,
            pending: partitions.into_iter().collect(),
        };
        self.durations.clear();
        self.speculated.clear();
        self.locality_since = std::time::Instant::now();
        self.attempts
    }

    /// Marks `partition` finished (by any attempt); true if that was the running
    /// attempt's last pending partition.
    pub fn finish_partition(&mut self, partition: u32) -> bool {
        match &mut self.state {
            StageState::Running { pending, .. } => pending.remove(&partition) && pending.is_empty(),
            _ => false,
        }
    }

    /// Stops a running attempt (its tasks no longer count, a barrier attempt's gang
    /// is dropped); other states are kept.
    pub fn stop(&mut self) {
        if self.is_running() {
            self.state = StageState::Waiting;
        }
        self.gang = None;
    }
}
