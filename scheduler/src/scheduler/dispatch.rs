//! Placing queued tasks on free executor slots and building their descriptions.
//!
//! Invariants: a task is launched only for the current attempt of its stage (a barrier
//! stage's tasks only all at once, each on a free slot: `barrier/launch.rs`); a queued
//! task of a superseded attempt is dropped here and its slot given back. An executor
//! has at most `slots` tasks in flight, or `slots x depth` when they belong to a stage
//! whose tasks run briefly (`Scheduler::stage_depth`: a run-time budget over its tasks'
//! run time, at most `pipeline_depth`), filled level by level so the load stays even.

use std::collections::{HashMap, HashSet};

use ember_proto::{MapHost, TaskDescription};

use super::{fair, Executor, Pending, Scheduler, StageKind, TaskRun};
use crate::events::JobEvent;
use crate::listener::{now_ms, ListenerEvent};

impl Scheduler {
    /// Launches queued tasks on free slots: first one task per slot, then, for stages
    /// whose tasks run briefly, up to `pipeline_depth` per slot, a level at a time so
    /// every executor gets its second task before any gets a third. Which stage each
    /// slot goes to is `fair.rs`'s order.
    pub(super) fn dispatch(&mut self) {
        // Gangs first: a barrier stage attempt launches whole when its slots are free
        // (`barrier/launch.rs`); ordinary tasks take what is left.
        self.launch_gangs();
        self.locality_waiting = false;
        if self.queue.is_empty() {
            return;
        }
        let depth = if self.config.speculation {
            1
        } else {
            self.config.pipeline_depth.max(1)
        };
        let Some((first, _)) = self.room.first() else {
            return;
        };
        let first = *first;
        let mut shares = self.needs_shares().then(|| self.shares());
        for level in first..=depth {
            if self.queue.is_empty() {
                return;
            }
            // The executors with room at this level (`room` is keyed by the lowest).
            let free: Vec<String> = self
                .room
                .range(..(level + 1, String::new()))
                .map(|(_, id)| id.clone())
                .collect();
            if free.is_empty() {
                continue;
            }
            if !self.dispatch_level(level, free, &mut shares) {
                return;
            }
        }
    }

    /// How many tasks of `stage_id` one slot may have in flight: 1 unless its tasks run
    /// briefly, then the run-time budget over its slowest quick task, within 2 and
    /// `pipeline_depth`.
    fn stage_depth(&self, stage_id: u32) -> u32 {
        let max = self.config.pipeline_depth.max(1);
        match self.stages.get(&stage_id) {
            // `max > 1` also keeps the clamp below sound: `clamp(2, 1)` panics.
            Some(st) if st.quick_streak >= self.config.quick_streak && max > 1 => {
                let budget = self.config.pipeline_budget.as_micros() as u64;
                let fits = budget / st.quick_max_micros.max(1);
                fits.clamp(2, u64::from(max)) as u32
            }
            _ => 1,
        }
    }

    /// Launches queued tasks on executors with fewer than `level` tasks in flight per
    /// slot, each time of the stage first in the fair order (beyond level 1, only while
    /// that stage is pipelined that deep: false then, and deeper levels wait too).
    /// `free`: the executors that may have room at this level, lowest level first.
    fn dispatch_level(
        &mut self,
        level: u32,
        mut free: Vec<String>,
        shares: &mut Option<fair::Shares>,
    ) -> bool {
        // Stages with nothing placeable on `free` (it only shrinks during the level).
        let mut blocked: HashSet<u32> = HashSet::new();
        // Per stage, the queued tasks from its front already found unplaceable (few
        // stages: a list beats a map).
        let mut skip: Vec<(u32, usize)> = Vec::new();
        while !free.is_empty() {
            let Some(stage_id) = self.pick_stage(shares.as_ref(), &blocked) else {
                return true;
            };
            if !self.stages.contains_key(&stage_id) {
                // Stale (its stage is gone): its tasks are dropped, nothing waits on it.
                self.queue.remove_stage(stage_id);
                continue;
            }
            if level > self.stage_depth(stage_id) {
                return false;
            }
            let slot = match skip.iter().position(|(s, _)| *s == stage_id) {
                Some(i) => i,
                None => {
                    skip.push((stage_id, 0));
                    skip.len() - 1
                }
            };
            match self.place_next(stage_id, skip[slot].1, level, &mut free) {
                Placed::Launched(at) => {
                    skip[slot].1 = at;
                    if let (Some(sh), Some(st)) = (shares.as_mut(), self.stages.get(&stage_id)) {
                        sh.add(stage_id, &st.pool);
                    }
                }
                Placed::Dropped(at) => skip[slot].1 = at,
                Placed::Retry => {}
                Placed::Nothing => {
                    blocked.insert(stage_id);
                }
            }
        }
        true
    }

    /// Launches the first of stage `stage_id`'s queued tasks from `start` on that can
    /// go to an executor of `free` with room at `level` (a preferred one first; a
    /// pinned task only where its block is; while its stage's locality wait runs, a task
    /// whose input is cached on a live executor only there; never an excluded one unless
    /// no executor at all could take it).
    fn place_next(
        &mut self,
        stage_id: u32,
        start: usize,
        level: u32,
        free: &mut Vec<String>,
    ) -> Placed {
        let room = |e: &super::Executor| e.in_flight < e.slots.saturating_mul(level);
        let Some(queue) = self.queue.of_stage(stage_id) else {
            return Placed::Nothing;
        };
        let stage_excluded = self.stages.get(&stage_id).map(|s| &s.excluded);
        // Delay scheduling: while the stage's locality wait runs, a task whose input is
        // cached on a live executor still taking tasks waits for a slot there.
        let now = std::time::Instant::now();
        let patient = self.stages.get(&stage_id).is_some_and(|s| {
            now.saturating_duration_since(s.locality_since) < self.config.locality_wait
        });
        let mut waited = false;
        let mut found = None;
        for (i, p) in queue.iter().enumerate().skip(start) {
            let excluded = |e: &String| {
                p.excluded.contains(e) || stage_excluded.is_some_and(|x| x.contains(e))
            };
            let preferred_free = if p.preferred.is_empty() {
                None
            } else {
                free.iter()
                    .position(|e| p.preferred.contains(e) && !excluded(e))
            };
            if preferred_free.is_none()
                && p.pinned
                && p.preferred.iter().any(|e| self.executors.contains_key(e))
            {
                // Its block lives only there: wait for that executor's slot.
                continue;
            }
            if preferred_free.is_none()
                && patient
                && p.preferred
                    .iter()
                    .any(|e| !excluded(e) && self.executors.get(e).is_some_and(|x| x.slots > 0))
            {
                waited = true;
                continue;
            }
            let choice = preferred_free
                .or_else(|| free.iter().position(|e| !excluded(e)))
                .or_else(|| {
                    // Every free executor is excluded: only wait if some other executor could take it.
                    let others = self.executors.keys().any(|e| !excluded(e));
                    if others || p.speculative {
                        None
                    } else {
                        Some(0)
                    }
                });
            if let Some(pos) = choice {
                found = Some((i, pos, preferred_free.is_some()));
                break;
            }
        }
        if waited {
            self.locality_waiting = true;
        }
        let Some((i, pos, local)) = found else {
            return Placed::Nothing;
        };
        if local {
            if let Some(st) = self.stages.get_mut(&stage_id) {
                st.locality_since = now;
            }
        }
        let exec_id = free[pos].clone();
        let Some(ex) = self.executors.get_mut(&exec_id).filter(|e| room(e)) else {
            free.remove(pos); // `free` lists only live executors with room
            return Placed::Retry;
        };
        let Some(task) = self.queue.take(stage_id, i) else {
            return Placed::Nothing; // `i` is an index of the queue above
        };
        ex.in_flight += 1;
        if !room(ex) {
            free.remove(pos);
        }
        self.refile(&exec_id);
        match self.launch(task, &exec_id) {
            Some(_) => Placed::Launched(i),
            None => Placed::Dropped(i),
        }
    }

    /// Launches `p` on `executor_id` (whose slot it already counts); its task id, or
    /// `None` (the slot given back) if its stage attempt no longer needs it.
    pub(super) fn launch(&mut self, p: Pending, executor_id: &str) -> Option<u64> {
        let Some(st) = self.stages.get(&p.stage_id) else {
            self.free_slot(executor_id);
            return None;
        };
        if !st.is_pending(p.stage_attempt, p.partition) {
            // A newer attempt of the stage superseded this task, or another attempt
            // (a speculative copy) already finished the partition.
            self.free_slot(executor_id);
            return None;
        }
        let job_id = match st.kind {
            StageKind::Result(j) => j,
            StageKind::ShuffleMap(_) => self
                .jobs
                .values()
                .filter(|j| j.stages.contains(&p.stage_id))
                .map(|j| j.id)
                .min()
                .unwrap_or(u64::MAX),
        };
        let task_id = self.next_task;
        self.next_task += 1;
        // Each input with only the block sizes this partition reads where that is one
        // reduce partition (every narrow step one-to-one), else with all of them.
        let shuffle_inputs = st
            .index
            .stage_shuffle_reads(st.rdd_id, p.partition)
            .into_iter()
            .map(|(sid, reduce)| self.tracker.input_for(sid, reduce))
            .collect();
        let replica_targets = match st.kind {
            StageKind::ShuffleMap(sid) => {
                let max = ember_proto::limits::MAX_SHUFFLE_REPLICAS as u32;
                let n = st.index.shuffle(sid).map_or(0, |d| d.replicas.min(max));
                replica_targets(&self.executors, executor_id, n, p.partition)
            }
            StageKind::Result(_) => Vec::new(),
        };
        let desc = TaskDescription {
            job_id,
            stage_id: st.id,
            stage_attempt: p.stage_attempt,
            partition: p.partition,
            attempt: p.attempt,
            task_id,
            shuffle_id: match st.kind {
                StageKind::ShuffleMap(s) => Some(s),
                StageKind::Result(_) => None,
            },
            plan: None,
            shuffle_inputs,
            broadcasts: Default::default(),
            plan_id: st.task_plan.plan_id,
            // A barrier stage's rank: its gang's world, key and attempt.
            barrier: st.gang.as_ref().map(|g| g.task(p.partition)),
            replica_targets,
        };
        *self.copies.entry((st.id, p.partition)).or_insert(0) += 1;
        self.running.insert(
            task_id,
            TaskRun {
                task_id,
                stage_id: st.id,
                stage_attempt: p.stage_attempt,
                partition: p.partition,
                attempt: p.attempt,
                executor_id: executor_id.to_string(),
                excluded: p.excluded,
                started: std::time::Instant::now(),
            },
        );
        self.listeners.emit(|| ListenerEvent::TaskStarted {
            task_id,
            stage_id: st.id,
            stage_attempt: p.stage_attempt,
            partition: p.partition,
            attempt: p.attempt,
            executor_id: executor_id.to_string(),
            speculative: p.speculative,
            time_ms: now_ms(),
        });
        for job in self.jobs.values() {
            if job.stages.contains(&st.id) {
                let _ = job.events.send(JobEvent::TaskStarted {
                    stage_id: st.number,
                    partition: p.partition,
                });
            }
        }
        self.launcher.launch(executor_id, desc, &st.task_plan);
        Some(task_id)
    }
}

/// What placing one task of a stage came to.
enum Placed {
    /// Its task at this index of the stage's queue was launched...
    Launched(usize),
    /// ...or was stale (its attempt superseded) and dropped, its slot given back.
    Dropped(usize),
    /// The executor chosen had no room after all: choose again.
    Retry,
    /// None of its queued tasks can go to a free executor now.
    Nothing,
}

/// The executors that can take copies of `on`'s map outputs: every other executor that
/// serves shuffle blocks and offers slots (not decommissioning), in id order, each with
/// whether it is on `on`'s host.
pub(super) fn peers<'a>(
    executors: &'a HashMap<String, Executor>,
    on: &str,
) -> Vec<(&'a String, &'a Executor, bool)> {
    let host = executors.get(on).map_or("", |e| e.host.as_str());
    let mut peers: Vec<(&String, &Executor, bool)> = executors
        .iter()
        .filter(|(id, e)| id.as_str() != on && e.slots > 0 && !e.shuffle_address.is_empty())
        .map(|(id, e)| (id, e, !host.is_empty() && e.host == host))
        .collect();
    peers.sort_unstable_by(|a, b| a.0.cmp(b.0));
    peers
}

/// Executor `id` as the host of a copy.
pub(super) fn copy_host(id: &str, e: &Executor) -> MapHost {
    MapHost {
        executor_id: id.to_string().into(),
        shuffle_address: e.shuffle_address.clone().into(),
        from_storage: false,
    }
}

/// Where map task `partition` running on `on` pushes its output under `replicated:N`:
/// `n` of its [`peers`], those on other hosts first, taken in id order from a place
/// rotated by the partition so the copies spread over them. Fewer when fewer exist (the
/// output then has fewer copies; lineage stays the fallback).
fn replica_targets(
    executors: &HashMap<String, Executor>,
    on: &str,
    n: u32,
    partition: u32,
) -> Vec<MapHost> {
    if n == 0 {
        return Vec::new();
    }
    let mut others = peers(executors, on);
    if others.is_empty() {
        return Vec::new();
    }
    let turn = partition as usize % others.len();
    others.rotate_left(turn);
    // Stable: the rotation's order stays within each group.
    others.sort_by_key(|(_, _, same_host)| *same_host);
    others
        .into_iter()
        .take(n as usize)
        .map(|(id, e, _)| copy_host(id, e))
        .collect()
}
