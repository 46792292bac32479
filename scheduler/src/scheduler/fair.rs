//! Which queued stage the next free slot goes to: one FIFO order of jobs in `fifo`
//! mode, Spark's fair order over sessions, their pools and the pools' stages in
//! `fair` mode (see [`crate::pools`]), and in both the per-session bound on slots
//! (`--max-cores-per-session`).
//!
//! Invariants: the order is taken afresh for every task placed, from running counts
//! that include the tasks placed earlier in the same pass, so a pass that frees many
//! slots at once still splits them by weight; a session never has more tasks in
//! flight than its bound (pipelined ones included: a bounded session's brief tasks
//! pipeline only within it), and one at its bound gets no slot (it waits, it is not
//! refused); while a barrier stage of a session waits for room under the bound, the
//! session's ordinary tasks take none, so the gang is not starved; a stage with
//! nothing placeable on the free executors (its tasks pinned to busy ones, or
//! excluded) is passed over for the level. At a pipelining level above 1, placing
//! stops at the first stage in order not pipelined that deep, whether or not its tasks
//! could be placed (as before pools existed).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Scheduler;
use crate::pools::{FairKey, PoolKey, SchedulingMode};

/// Running (launched, not finished) tasks per stage, pool and session.
#[derive(Default)]
pub(super) struct Shares {
    stage: HashMap<u32, u32>,
    pool: HashMap<PoolKey, u32>,
    session: HashMap<Arc<str>, u32>,
}

impl Shares {
    /// Counts one more running task of stage `stage_id` in `pool`.
    pub(super) fn add(&mut self, stage_id: u32, pool: &PoolKey) {
        *self.stage.entry(stage_id).or_default() += 1;
        *self.pool.entry(pool.clone()).or_default() += 1;
        *self.session.entry(pool.application.clone()).or_default() += 1;
    }

    /// Running tasks of the session of `application`.
    pub(super) fn session(&self, application: &str) -> u32 {
        self.session.get(application).copied().unwrap_or(0)
    }

    fn stage(&self, stage_id: u32) -> u32 {
        self.stage.get(&stage_id).copied().unwrap_or(0)
    }

    fn pool(&self, pool: &PoolKey) -> u32 {
        self.pool.get(pool).copied().unwrap_or(0)
    }
}

/// A queued stage's place in the fair order (compared field by field: its session's
/// key and name, its pool's key and name, then its place within the pool).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct FairOrder<'a> {
    session: FairKey,
    application: &'a str,
    pool: FairKey,
    pool_name: &'a str,
    /// `None` in a `fifo` pool; in a `fair` one, the stage's own key (weight 1).
    within: Option<FairKey>,
    priority: u64,
    stage_id: u32,
}

impl Scheduler {
    /// Whether placing tasks needs running counts: a session bound, or fair mode with
    /// more than one stage queued (with one, every order picks it; no stage is queued
    /// during a dispatch pass, which only launches).
    pub(super) fn needs_shares(&self) -> bool {
        let fair = &self.config.fair;
        fair.max_cores_per_session.is_some()
            || (fair.mode == SchedulingMode::Fair && self.queue.stages().nth(1).is_some())
    }

    /// The running counts of every stage, pool and session.
    pub(super) fn shares(&self) -> Shares {
        let mut shares = Shares::default();
        for run in self.running.values() {
            if let Some(st) = self.stages.get(&run.stage_id) {
                shares.add(run.stage_id, &st.pool);
            }
        }
        shares
    }

    /// The stage whose task the next free slot goes to: the first in the mode's order
    /// among the queued stages not `blocked` whose session is under its bound (`max_cores_per_session` tasks in flight, pipelined ones included, and
    /// none while one of its barrier stages waits for room under the bound). `shares`
    /// is `Some` whenever [`Self::needs_shares`].
    pub(super) fn pick_stage(
        &self,
        shares: Option<&Shares>,
        blocked: &HashSet<u32>,
    ) -> Option<u32> {
        let fair = &self.config.fair;
        let bound = fair.max_cores_per_session;
        let candidates = self.queue.stages().filter(|s| !blocked.contains(s));
        let at_bound = |application: &str| match (bound, shares) {
            (Some(b), Some(sh)) => {
                sh.session(application) >= b || self.held_for_gangs.contains(application)
            }
            _ => false,
        };
        match (fair.mode, shares) {
            (SchedulingMode::Fair, Some(sh)) => candidates
                .filter_map(|stage_id| {
                    let Some(st) = self.stages.get(&stage_id) else {
                        // Stale: picked first, so `dispatch_level` drops its tasks.
                        return Some((None, stage_id));
                    };
                    if at_bound(&st.pool.application) {
                        return None;
                    }
                    let app = fair.application(&st.pool.application);
                    let pool = fair.pool(&st.pool.pool);
                    let order = FairOrder {
                        session: FairKey::new(
                            sh.session(&st.pool.application),
                            app.weight,
                            app.min_share,
                        ),
                        application: &st.pool.application,
                        pool: FairKey::new(sh.pool(&st.pool), pool.weight, pool.min_share),
                        pool_name: &st.pool.pool,
                        within: (pool.mode == SchedulingMode::Fair)
                            .then(|| FairKey::new(sh.stage(stage_id), 1, 0)),
                        priority: st.priority,
                        stage_id,
                    };
                    Some((Some(order), stage_id))
                })
                .min_by(|a, b| a.0.cmp(&b.0))
                .map(|(_, s)| s),
            _ => candidates
                .filter_map(|stage_id| match self.stages.get(&stage_id) {
                    None => Some((0, stage_id)),
                    Some(st) if at_bound(&st.pool.application) => None,
                    Some(st) => Some((st.priority, stage_id)),
                })
                .min()
                .map(|(_, s)| s),
        }
    }

    /// How pool `pool` shares slots, for the web UI (see `ListenerEvent::JobSubmitted`).
    pub(super) fn pool_share(&self, pool: &str) -> String {
        let fair = &self.config.fair;
        if fair.mode == SchedulingMode::Fifo {
            return "fifo".to_string();
        }
        let p = fair.pool(pool);
        format!("weight {}, min share {}, {}", p.weight, p.min_share, p.mode)
    }
}
