//! The tasks waiting for a slot, one queue per stage (a task set, in Spark's words), so
//! the fair order can pick a stage and then its next task.
//!
//! Invariants: `len` is the number of queued tasks over all stages; a stage with no
//! queued task has no entry (so iterating the stages visits only ones with work);
//! inside a stage, tasks keep the order they were queued in (a speculative copy goes
//! first).

use std::collections::{BTreeMap, VecDeque};

use super::Pending;

#[derive(Default)]
pub(super) struct TaskQueues {
    by_stage: BTreeMap<u32, VecDeque<Pending>>,
    len: usize,
    /// The most tasks queued at once since the last [`Self::shrink_to_fit`]: memory
    /// the queues took and gave back to the allocator, which an idle scheduler
    /// returns to the OS (`idle.rs`).
    peak: usize,
}

impl TaskQueues {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push_back(&mut self, p: Pending) {
        self.by_stage.entry(p.stage_id).or_default().push_back(p);
        self.grew();
    }

    pub(super) fn push_front(&mut self, p: Pending) {
        self.by_stage.entry(p.stage_id).or_default().push_front(p);
        self.grew();
    }

    fn grew(&mut self) {
        self.len += 1;
        self.peak = self.peak.max(self.len);
    }

    /// The stages with queued tasks, in id order.
    pub(super) fn stages(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_stage.keys().copied()
    }

    /// Stage `stage_id`'s queued tasks, in order.
    pub(super) fn of_stage(&self, stage_id: u32) -> Option<&VecDeque<Pending>> {
        self.by_stage.get(&stage_id)
    }

    /// Takes task `i` of stage `stage_id`'s queue.
    pub(super) fn take(&mut self, stage_id: u32, i: usize) -> Option<Pending> {
        let q = self.by_stage.get_mut(&stage_id)?;
        let p = q.remove(i)?;
        if q.is_empty() {
            self.by_stage.remove(&stage_id);
        }
        self.len -= 1;
        Some(p)
    }

    /// Drops every queued task of `stage_id`.
    pub(super) fn remove_stage(&mut self, stage_id: u32) {
        if let Some(q) = self.by_stage.remove(&stage_id) {
            self.len -= q.len();
        }
    }

    /// Keeps only the queued tasks of the stages `keep` selects.
    pub(super) fn retain_stages(&mut self, keep: impl Fn(u32) -> bool) {
        let gone: Vec<u32> = self.stages().filter(|s| !keep(*s)).collect();
        for s in gone {
            self.remove_stage(s);
        }
    }

    /// Entries the queues hold room for, or held since the last shrink (for the idle
    /// scheduler's accounting).
    pub(super) fn capacity(&self) -> usize {
        let held: usize = self.by_stage.values().map(VecDeque::capacity).sum();
        held.max(self.peak)
    }

    /// Forgets the high-water mark (the queues of emptied stages are already freed).
    pub(super) fn shrink_to_fit(&mut self) {
        for q in self.by_stage.values_mut() {
            q.shrink_to_fit();
        }
        self.peak = self.len;
    }
}
