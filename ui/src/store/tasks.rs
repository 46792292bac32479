//! The task entries of the status store: what each task attempt did (its metrics, its
//! error, a barrier task's collectives), updated as its events arrive, and the bound on
//! how many are kept.
//!
//! Invariants: a task's entry is the last one with its id in its stage's list; at most
//! [`MAX_TASKS`] entries over all stages, the oldest stage's oldest going first (its
//! counts stay on the stage).

use serde::Serialize;

use super::{AppStatus, Status, MAX_TASKS};
use crate::event::{Metrics, SuperstepInfo};

#[derive(Debug, Clone, Serialize)]
pub struct TaskInfo {
    pub task_id: u64,
    pub stage_id: u32,
    pub stage_attempt: u32,
    pub partition: u32,
    pub attempt: u32,
    pub executor_id: String,
    pub speculative: bool,
    pub status: Status,
    pub launched_ms: u64,
    pub finished_ms: Option<u64>,
    pub metrics: Metrics,
    pub error: Option<String>,
    /// A barrier task's collectives (absent for other tasks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier: Option<BarrierInfo>,
}

/// What a barrier task's collectives did: one entry per call, in order.
#[derive(Debug, Clone, Serialize)]
pub struct BarrierInfo {
    pub supersteps: Vec<SuperstepInfo>,
    /// Calls beyond those listed.
    pub dropped: u64,
    /// The superstep checkpoint the task resumed from, if any.
    pub resumed_after: Option<u64>,
}

impl AppStatus {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn task_ended(
        &mut self,
        task_id: u64,
        stage_id: u32,
        executor_id: &str,
        metrics: &Metrics,
        succeeded: bool,
        failure: &Option<String>,
        at: u64,
    ) {
        if succeeded {
            self.tasks_succeeded_total += 1;
        } else {
            self.tasks_failed_total += 1;
        }
        self.task_seconds
            .0
            .observe(metrics.run_time_micros as f64 / 1_000_000.0);
        if let Some(s) = self.stages.get_mut(&stage_id) {
            s.tasks_running = s.tasks_running.saturating_sub(1);
            if succeeded {
                s.tasks_succeeded += 1;
                s.metrics.add(metrics);
            } else {
                s.tasks_failed += 1;
            }
        }
        if let Some(x) = self.executors.get_mut(executor_id) {
            x.tasks_running = x.tasks_running.saturating_sub(1);
            if succeeded {
                x.tasks_succeeded += 1;
                x.shuffle_bytes_written += metrics.shuffle_bytes_written;
                x.shuffle_bytes_read += metrics.shuffle_bytes_read;
            } else {
                x.tasks_failed += 1;
            }
        }
        if let Some(t) = self.task_entry(stage_id, task_id) {
            t.status = if succeeded {
                Status::Succeeded
            } else {
                Status::Failed
            };
            t.finished_ms = Some(at);
            t.metrics = *metrics;
            t.error = failure.clone();
        }
    }

    /// Task `task_id`'s entry: the last with its id in its stage's list.
    fn task_entry(&mut self, stage_id: u32, task_id: u64) -> Option<&mut TaskInfo> {
        self.tasks
            .get_mut(&stage_id)?
            .iter_mut()
            .rev()
            .find(|t| t.task_id == task_id)
    }

    /// A barrier task's collectives: kept on its entry.
    pub(super) fn task_supersteps(
        &mut self,
        task_id: u64,
        stage_id: u32,
        supersteps: &[SuperstepInfo],
        dropped: u64,
        resumed_after: Option<u64>,
    ) {
        if let Some(t) = self.task_entry(stage_id, task_id) {
            t.barrier = Some(BarrierInfo {
                supersteps: supersteps.to_vec(),
                dropped,
                resumed_after,
            });
        }
    }

    /// Keeps at most [`MAX_TASKS`] task entries: the oldest stage's oldest go first (a
    /// stage whose entries have all gone keeps its counts).
    pub(super) fn let_old_tasks_go(&mut self) {
        while self.task_entries > MAX_TASKS {
            let Some(mut oldest) = self.tasks.first_entry() else {
                return;
            };
            oldest.get_mut().pop_front();
            self.task_entries -= 1;
            if oldest.get().is_empty() {
                oldest.remove();
            }
        }
    }
}
