//! Giving memory back once no job is left: a job of 200,000 tasks grows the per-task
//! and per-job maps to that many entries, which an idle scheduler would otherwise keep
//! (and its thread's allocator the freed pages).
//!
//! Invariant: at most once per idle spell (no job, no abandoned attempt holding a
//! slot), and only after work that grew the maps past [`RELEASE_ABOVE_CAPACITY`]
//! entries, the maps are shrunk and `SchedulerConfig::release_memory` is called; a
//! stream of small jobs pays nothing.

use super::Scheduler;

/// Map entries (see [`super::SchedulerHandle::task_capacity`]) above which an idle
/// scheduler shrinks its maps and calls `release_memory`.
const RELEASE_ABOVE_CAPACITY: usize = 4096;

impl Scheduler {
    /// Shrinks the maps and releases memory if the scheduler has just become idle
    /// after large work (called after every step of the loop).
    pub(super) fn release_if_idle(&mut self) {
        if self.idle_released || !self.jobs.is_empty() || !self.abandoned.is_empty() {
            return;
        }
        if self.held_task_capacity() > RELEASE_ABOVE_CAPACITY {
            self.release_when_idle();
        }
        self.idle_released = true;
    }

    /// No job is left: shrinks the per-task and per-job maps (a job of 200,000 tasks
    /// grew them to that many entries) and lets the deployment return freed pages.
    fn release_when_idle(&mut self) {
        self.jobs.shrink_to_fit();
        self.running.shrink_to_fit();
        self.copies.shrink_to_fit();
        self.abandoned.shrink_to_fit();
        self.queue.shrink_to_fit();
        self.stages.shrink_to_fit();
        if let Some(release) = self.config.release_memory {
            release();
        }
    }

    /// Entries the per-task and per-job maps have room for.
    pub(super) fn held_task_capacity(&self) -> usize {
        self.jobs.capacity()
            + self.running.capacity()
            + self.copies.capacity()
            + self.abandoned.capacity()
            + self.queue.capacity()
    }
}
