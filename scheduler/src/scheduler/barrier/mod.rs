//! Barrier stages (Spark's barrier execution mode): a stage some node of whose narrow
//! chain is barrier (`RddNode.barrier`) runs all its tasks at the same time, one per
//! slot, and they talk to each other directly (MPI-style collectives); the scheduler
//! gang-schedules them, hands out a per-attempt key and the peers' addresses
//! (rendezvous), and reruns the whole stage when any of them fails.
//!
//! How it fits the stage lifecycle (`stage.rs`): a barrier stage goes through the same
//! states as any. An attempt starts in `submit_tasks` over *every* partition (a map
//! stage's surviving outputs are dropped first), with world = the partition count and
//! rank = partition; instead of queueing its tasks, the attempt gets a [`Gang`] (its
//! key, its ranks, its rendezvous) and its stage id waits in `Scheduler::gangs` until a
//! dispatch pass finds `world` free slots (`launch.rs`). Its tasks' outcomes stay in the
//! gang until the attempt's last rank succeeds (`outcome.rs`); a failure of any rank
//! kills the others and ends the attempt, and the stage is submitted again as a new
//! attempt (or fails after `max_stage_attempts` consecutive failed attempts).
//!
//! Invariants:
//! - All or none: a gang's tasks are launched in one dispatch pass, each on a free slot
//!   (an executor with fewer tasks in flight than slots, so it runs at once, never
//!   queued behind another task), or none is. Barrier tasks never enter the ordinary
//!   queue, so they are never pipelined nor speculated.
//! - A stage wider than the cluster's slots fails its jobs at its first dispatch (not on
//!   a rerun after a failure, which waits for executors to come back, as Spark's does).
//! - An attempt runs every partition under a fresh 32-byte key; `Stage::gang` is that
//!   attempt's while it runs and is dropped with it.
//! - Nothing of an attempt reaches a job before every rank succeeded in it: results and
//!   the job's `TaskEnded` events (with their accumulator updates) wait in the gang; a
//!   failed attempt's are dropped (its task ends reported uncounted).
//! - Rendezvous: a rank's first valid address counts; the peers go once per attempt to
//!   each executor hosting a running rank, after every rank has reported. Nothing an
//!   address report says (unknown, finished or superseded task, duplicate, oversized)
//!   makes the loop panic: it is ignored with a log line.

use std::collections::BTreeMap;

use ember_proto::{AccumulatorUpdate, BarrierTask, TaskMetrics};
use tracing::{debug, warn};

use super::{Scheduler, StageKind};
use crate::events::JobFailure;

mod launch; // waiting for free slots and launching a gang at once
mod outcome; // a gang's successes held back, and Spark's failure rule
mod rendezvous; // addresses in, peers out

/// Bytes of the key of a barrier stage attempt.
pub const KEY_BYTES: usize = 32;

/// The running attempt of a barrier stage.
pub(in crate::scheduler) struct Gang {
    /// The stage attempt it belongs to.
    pub attempt: u32,
    /// Random, drawn for this attempt: the ranks' connections authenticate with it.
    key: Vec<u8>,
    /// Its task count: ranks (= partitions) 0 .. world.
    pub world: u32,
    /// Executors caching each rank's input (rank order).
    preferred: Vec<Vec<String>>,
    /// Once launched: each rank's task id and executor (index = rank), else empty.
    ranks: Vec<(u64, String)>,
    /// Whether the stage's width was checked against the cluster's slots (or is not
    /// to be: a rerun waits for slots instead).
    checked: bool,
    /// Whether "waiting for slots" was logged.
    announced: bool,
    /// Each rank's rendezvous address, once reported.
    addresses: Vec<Option<String>>,
    reported: u32,
    peers_sent: bool,
    /// Whether every rank was placed on executors of one host (set at launch).
    one_host: bool,
    /// A result stage's results of the ranks that succeeded: partition -> (executor,
    /// result), and their total bytes.
    results: BTreeMap<u32, (String, Vec<u8>)>,
    result_bytes: u64,
    /// The job-facing ends of the ranks that succeeded, sent once the attempt's outcome
    /// is known.
    deferred: Vec<DeferredEnd>,
}

/// A successful rank's task end, held back from the jobs until its attempt succeeds.
pub(in crate::scheduler) struct DeferredEnd {
    pub partition: u32,
    pub executor_id: String,
    pub metrics: TaskMetrics,
    pub accumulators: Vec<AccumulatorUpdate>,
}

impl Gang {
    /// What rank `rank`'s task description carries.
    pub fn task(&self, rank: u32) -> BarrierTask {
        BarrierTask {
            world: self.world,
            rank,
            key: self.key.clone(),
            stage_attempt: self.attempt,
            one_host: self.one_host,
        }
    }

    /// Whether its tasks were launched.
    pub fn launched(&self) -> bool {
        !self.ranks.is_empty()
    }
}

impl Scheduler {
    /// Before a barrier map stage's attempt: drops its surviving outputs, so the
    /// attempt runs every partition (its ranks only make sense together).
    pub(in crate::scheduler) fn reset_barrier_outputs(&mut self, stage_id: u32) {
        let Some(st) = self.stages.get(&stage_id).filter(|s| s.barrier) else {
            return;
        };
        if let StageKind::ShuffleMap(sid) = st.kind {
            let maps = st.num_partitions;
            self.tracker.remove_shuffle(sid);
            self.tracker.register_shuffle(sid, maps);
            self.refresh_map_stage(sid);
        }
    }

    /// Gives barrier stage `stage_id`'s new attempt `attempt` (every partition, with
    /// the executors caching each partition's input) its gang, to launch once `world`
    /// slots are free. Fails the stage's jobs if no key can be drawn.
    pub(in crate::scheduler) fn start_gang(
        &mut self,
        stage_id: u32,
        attempt: u32,
        preferred: Vec<Vec<String>>,
    ) {
        let mut key = vec![0u8; KEY_BYTES];
        if let Err(e) = getrandom::fill(&mut key) {
            let message = format!("no key for the barrier stage's attempt: the operating system's random source failed: {e}");
            return self.fail_barrier_stage(stage_id, message);
        }
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        let world = preferred.len() as u32;
        // A rerun after a failed attempt waits for slots rather than failing because
        // an executor it lost has not come back yet.
        let rerun = attempt > 1 && st.last_failed_attempt == Some(attempt - 1);
        debug!(
            stage = st.number,
            stage_id, attempt, world, "barrier stage attempt waits for its slots"
        );
        st.gang = Some(Gang {
            attempt,
            key,
            world,
            preferred,
            ranks: Vec::new(),
            checked: rerun,
            announced: false,
            addresses: vec![None; world as usize],
            reported: 0,
            peers_sent: false,
            one_host: false,
            results: BTreeMap::new(),
            result_bytes: 0,
            deferred: Vec::new(),
        });
        if !self.gangs.contains(&stage_id) {
            self.gangs.push_back(stage_id);
        }
    }

    /// Fails barrier stage `stage_id` and every job using it with `message`.
    pub(in crate::scheduler) fn fail_barrier_stage(&mut self, stage_id: u32, message: String) {
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        warn!(stage = st.number, stage_id, "{message}");
        st.stop();
        st.state = super::StageState::Failed;
        let failure = JobFailure::StageFailed {
            stage_id,
            stage_name: st.name.clone(),
            message,
        };
        for jid in self.jobs_using(stage_id) {
            self.fail_job(jid, failure.clone());
        }
    }

    /// Tasks of gangs waiting for their slots (for `SchedulerHandle::queued_tasks`).
    pub(in crate::scheduler) fn waiting_gang_tasks(&self) -> usize {
        self.gangs
            .iter()
            .filter_map(|s| self.stages.get(s)?.gang.as_ref())
            .filter(|g| !g.launched())
            .map(|g| g.world as usize)
            .sum()
    }
}

/// Why a job over some of a barrier stage's partitions cannot run (every rank runs at
/// once: `take`, `first` and the like are refused on a barrier RDD, as Spark does).
pub(in crate::scheduler) fn partial_barrier_job(
    index: &crate::dag::PlanIndex,
    rdd_id: u32,
    requested: usize,
    partitions: u32,
) -> Option<String> {
    (requested != partitions as usize && index.stage_is_barrier(rdd_id)).then(|| {
        format!(
            "the job asks for {requested} of the {partitions} partitions of node {rdd_id}, \
             whose stage is a barrier stage: its tasks run all at once, so a job must \
             ask for every partition"
        )
    })
}
