//! Forgetting what clients released: shuffles no live RDD reaches any more
//! ([`SchedulerEvent::RemoveShuffles`](crate::events::SchedulerEvent::RemoveShuffles)),
//! the ids of a session that ended, and map output a late attempt wrote for a shuffle
//! already forgotten.
//!
//! Invariant: a stage a live job uses is never forgotten here; a released shuffle whose
//! stage is busy waits in `released` until its last job ends.

use std::collections::HashSet;

use tracing::debug;

use super::Scheduler;
use crate::listener::{now_ms, ListenerEvent};

impl Scheduler {
    /// The stages of every live job.
    fn busy_stages(&self) -> HashSet<u32> {
        self.jobs
            .values()
            .flat_map(|j| j.stages.iter().copied())
            .collect()
    }

    /// Drops shuffle stages (and their map outputs) and cached blocks whose ids fall in
    /// `[lo, hi)`, keeping any stage a live job still uses.
    pub(super) fn forget_ids(&mut self, lo: u32, hi: u32) {
        let in_range = |id: u32| id >= lo && id < hi;
        let busy = self.busy_stages();
        let doomed: Vec<(u32, u32)> = self
            .shuffle_stage
            .iter()
            .filter(|(sid, stage)| in_range(**sid) && !busy.contains(stage))
            .map(|(s, st)| (*s, *st))
            .collect();
        for (shuffle_id, stage_id) in doomed {
            self.shuffle_stage.remove(&shuffle_id);
            self.stages.remove(&stage_id);
            self.tracker.remove_shuffle(shuffle_id);
        }
        self.cache.retain(|(rdd, _), _| !in_range(*rdd));
        self.cached_rdds.retain(|rdd, _| !in_range(*rdd));
        self.listeners.emit(|| ListenerEvent::BlocksRemoved {
            rdd_lo: lo,
            rdd_hi: hi,
            time_ms: now_ms(),
        });
        self.released.retain(|id| !in_range(*id));
        self.held.forget(in_range);
        debug!(lo, hi, "forgot ids of an ended session");
    }

    /// Forgets the released shuffles no live job uses (stage, map outputs) and has
    /// the launcher delete the files of those the scheduler knew; the others stay in
    /// `released` until their last job ends.
    pub(super) fn remove_released(&mut self) {
        let busy = self.busy_stages();
        let mut known = Vec::new();
        let shuffle_stage = &self.shuffle_stage;
        self.released.retain(|sid| match shuffle_stage.get(sid) {
            Some(stage) if busy.contains(stage) => true,
            Some(_) => {
                known.push(*sid);
                false
            }
            None => false,
        });
        for sid in &known {
            if let Some(stage) = self.shuffle_stage.remove(sid) {
                self.stages.remove(&stage);
            }
            self.tracker.remove_shuffle(*sid);
        }
        if !known.is_empty() {
            known.sort_unstable();
            debug!(shuffles = ?known, "released shuffles forgotten");
            self.launcher.remove_shuffles(&known);
        }
    }

    /// A late status (of an attempt given up on) that wrote map output for a shuffle
    /// the scheduler no longer knows: its files are deleted too.
    pub(super) fn drop_stale_output(&mut self, status: &ember_proto::TaskStatus) {
        use ember_proto::{task_status, task_success};
        let Some(task_status::Outcome::Success(s)) = &status.outcome else {
            return;
        };
        if let Some(task_success::Output::MapStatus(m)) = &s.output {
            if !self.shuffle_stage.contains_key(&m.shuffle_id) {
                self.launcher.remove_shuffles(&[m.shuffle_id]);
            }
        }
    }
}
