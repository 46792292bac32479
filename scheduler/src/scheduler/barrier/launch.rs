//! Gang scheduling: a barrier stage attempt's tasks wait (in `Scheduler::gangs`, in
//! the order their attempts started) until one dispatch pass finds `world` free slots,
//! then all launch in that pass, each rank on a slot of its own.
//!
//! Invariants: a free slot is one an executor has while it has fewer tasks in flight
//! than slots (a task sent there runs at once; a pipelined or abandoned task still
//! holds its slot); a gang is launched whole or not at all; while it waits, ordinary
//! tasks (and smaller gangs) may take the free slots it cannot use yet; a stage that
//! needs more slots than every executor together has, or than its session may use
//! (`--max-cores-per-session`), fails at once (checked once per attempt, and not for a
//! rerun; see `mod.rs`); with no executor at all it waits, and so does one whose
//! session's running tasks leave too little of its bound.

use std::collections::VecDeque;

use tracing::info;

use super::super::{Pending, Scheduler, StageState};

impl Scheduler {
    /// Launches every waiting gang that fits in the free slots, oldest first (called at
    /// the start of each dispatch pass, before ordinary tasks take slots).
    pub(in crate::scheduler) fn launch_gangs(&mut self) {
        if self.gangs.is_empty() {
            return;
        }
        let total: u64 = self.executors.values().map(|e| u64::from(e.slots)).sum();
        // With no executor at all there is no cluster yet to judge a gang by or run it.
        let cluster = !self.executors.is_empty();
        let mut waiting = std::mem::take(&mut self.gangs);
        let mut still = VecDeque::new();
        self.held_for_gangs.clear();
        while let Some(stage_id) = waiting.pop_front() {
            let Some((number, world, checked)) = self.waiting_gang(stage_id, cluster) else {
                continue; // its attempt ended or was launched: a stale entry
            };
            if !cluster {
                still.push_back(stage_id);
                continue;
            }
            if !checked && u64::from(world) > total {
                // Spark's check: a gang that can never run together fails at once.
                let message = format!(
                    "barrier stage {number} needs {world} slots but the cluster has {total}"
                );
                self.fail_barrier_stage(stage_id, message);
                continue;
            }
            let bound = self.config.fair.max_cores_per_session;
            if let Some(b) = bound.filter(|b| world > *b) {
                // Nor one wider than its session may ever hold at once (the bound
                // does not change: a rerun fails the same way).
                let message = format!(
                    "barrier stage {number} needs {world} slots but its session may use \
                     at most {b} (--max-cores-per-session)"
                );
                self.fail_barrier_stage(stage_id, message);
                continue;
            }
            if bound.is_some() && !self.gang_within_bound(stage_id, world) {
                // Its session's own tasks must end first; none of its others start.
                if let Some(st) = self.stages.get(&stage_id) {
                    self.held_for_gangs.insert(st.pool.application.clone());
                }
                still.push_back(stage_id);
                continue;
            }
            let free: u64 = self
                .executors
                .values()
                .map(|e| u64::from(e.slots.saturating_sub(e.in_flight)))
                .sum();
            if u64::from(world) > free || !self.launch_gang(stage_id) {
                self.note_waiting(stage_id, free);
                still.push_back(stage_id);
            }
        }
        // Failing a stage above may not add gangs, but keep any that were.
        still.append(&mut self.gangs);
        self.gangs = still;
    }

    /// Whether `world` more running tasks keep stage `stage_id`'s session within
    /// `max_cores_per_session`.
    fn gang_within_bound(&self, stage_id: u32, world: u32) -> bool {
        let (Some(bound), Some(st)) = (
            self.config.fair.max_cores_per_session,
            self.stages.get(&stage_id),
        ) else {
            return true;
        };
        let running = self.shares().session(&st.pool.application);
        running.saturating_add(world) <= bound
    }

    /// A gang still to launch: its stage's number, its world and whether its width was
    /// checked (marking it checked from now on if `checking`).
    fn waiting_gang(&mut self, stage_id: u32, checking: bool) -> Option<(u32, u32, bool)> {
        let st = self.stages.get_mut(&stage_id)?;
        let StageState::Running { attempt, .. } = st.state else {
            return None;
        };
        let gang = st.gang.as_mut().filter(|g| g.attempt == attempt)?;
        if gang.launched() {
            return None;
        }
        let checked = gang.checked;
        gang.checked |= checking;
        Some((st.number, gang.world, checked))
    }

    /// Logs, once per attempt, that a gang waits for slots.
    fn note_waiting(&mut self, stage_id: u32, free: u64) {
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        let number = st.number;
        if let Some(g) = st.gang.as_mut().filter(|g| !g.announced) {
            g.announced = true;
            info!(
                stage = number,
                stage_id,
                attempt = g.attempt,
                "barrier stage waits for {} free slots ({free} free now)",
                g.world
            );
        }
    }

    /// Places every rank of the gang on a free slot (a rank whose input is cached on an
    /// executor with room goes there; the others fill the executors with the most room
    /// first, consecutive ranks together) and launches them all; false (nothing
    /// launched) if they do not fit.
    fn launch_gang(&mut self, stage_id: u32) -> bool {
        let Some(gang) = self.stages.get(&stage_id).and_then(|s| s.gang.as_ref()) else {
            return false;
        };
        let mut free: Vec<(String, u32)> = self
            .executors
            .iter()
            .filter(|(_, e)| e.in_flight < e.slots)
            .map(|(id, e)| (id.clone(), e.slots - e.in_flight))
            .collect();
        free.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut place: Vec<Option<usize>> = vec![None; gang.world as usize];
        for (rank, preferred) in gang.preferred.iter().enumerate() {
            let room = free
                .iter()
                .position(|(id, n)| *n > 0 && preferred.contains(id));
            if let (Some(i), Some(p)) = (room, place.get_mut(rank)) {
                *p = Some(i);
                free[i].1 -= 1;
            }
        }
        let mut next = 0;
        for p in place.iter_mut().filter(|p| p.is_none()) {
            while free.get(next).is_some_and(|(_, n)| *n == 0) {
                next += 1;
            }
            let Some(slot) = free.get_mut(next) else {
                return false; // fewer free slots than ranks: launch none
            };
            slot.1 -= 1;
            *p = Some(next);
        }
        let attempt = gang.attempt;
        // One host when every chosen executor's shuffle address names the same host.
        let hosts: std::collections::BTreeSet<&str> = place
            .iter()
            .filter_map(|i| free.get(i.unwrap_or_default()))
            .filter_map(|(id, _)| self.executors.get(id))
            .map(|e| host_of(&e.shuffle_address))
            .collect();
        let one_host = hosts.len() <= 1;
        if let Some(g) = self.stages.get_mut(&stage_id).and_then(|s| s.gang.as_mut()) {
            g.one_host = one_host;
        }
        let mut ranks = Vec::with_capacity(place.len());
        for (rank, i) in place.into_iter().enumerate() {
            let exec_id = free[i.unwrap_or_default()].0.clone();
            if let Some(ex) = self.executors.get_mut(&exec_id) {
                ex.in_flight += 1;
            }
            self.refile(&exec_id);
            let task = Pending {
                stage_id,
                stage_attempt: attempt,
                partition: rank as u32,
                attempt: 0,
                preferred: Vec::new(),
                pinned: false,
                excluded: Vec::new(),
                speculative: false,
            };
            // (`launch` gives every rank a task: the attempt runs and all are pending.)
            let task_id = self.launch(task, &exec_id).unwrap_or(u64::MAX);
            ranks.push((task_id, exec_id));
        }
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return true;
        };
        info!(
            stage = st.number,
            stage_id,
            attempt,
            "barrier stage launched: all {} tasks at once",
            ranks.len()
        );
        if let Some(g) = st.gang.as_mut() {
            g.ranks = ranks;
        }
        true
    }
}

/// The host part of a shuffle address (`http://host:port`, `host:port`, `[v6]:port`;
/// empty in local mode).
fn host_of(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_of_a_shuffle_address() {
        assert_eq!(super::host_of("http://10.0.0.5:7078"), "10.0.0.5");
        assert_eq!(super::host_of("executor-1:7078"), "executor-1");
        assert_eq!(super::host_of("http://[::1]:7078/"), "[::1]");
        assert_eq!(super::host_of(""), "");
    }
}
