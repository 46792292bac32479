//! Summary quantiles of a stage's task metrics (Spark's "Summary Metrics for N
//! Completed Tasks"): min, 25th percentile, median, 75th percentile and max of each
//! metric over the stage's successful task attempts.
//!
//! Invariants: a quantile is a value one of the tasks had (nearest rank, as Spark's
//! `AppStatusStore.taskSummary` picks it: the value at index `min(⌊q·n⌋, n − 1)` of the
//! sorted values); the summary covers the task entries the store keeps (at most
//! `MAX_TASKS_PER_STAGE` per stage: the newest), and `tasks` says how many that is;
//! nothing here changes the store.

use serde::Serialize;

use super::{AppStatus, Status, TaskInfo};

/// The quantiles every summary gives: min, 25th percentile, median, 75th, max.
pub const QUANTILES: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// One metric's five quantiles, in the order of [`QUANTILES`].
pub type Five = [u64; 5];

/// The summary of a stage's successful tasks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSummary {
    pub stage_id: u32,
    /// Successful task attempts summarised (0: every quantile is 0).
    pub tasks: usize,
    pub quantiles: [f64; 5],
    /// Launch to end, in milliseconds.
    pub duration_ms: Five,
    /// Time spent running the task's code, in microseconds.
    pub run_time_micros: Five,
    pub records_in: Five,
    pub records_out: Five,
    pub shuffle_read_bytes: Five,
    pub shuffle_read_records: Five,
    pub shuffle_write_bytes: Five,
    pub shuffle_write_records: Five,
    pub spilled_bytes: Five,
}

/// The quantiles of `values` (sorted here); all 0 when there are none.
pub fn five(mut values: Vec<u64>) -> Five {
    values.sort_unstable();
    let n = values.len();
    if n == 0 {
        return [0; 5];
    }
    QUANTILES.map(|q| values[((q * n as f64) as usize).min(n - 1)])
}

impl AppStatus {
    /// The summary quantiles of stage `stage_id`'s successful task attempts kept, or
    /// `None` for an unknown stage.
    pub fn task_summary(&self, stage_id: u32) -> Option<TaskSummary> {
        self.stages.get(&stage_id)?;
        let done: Vec<&TaskInfo> = self
            .tasks
            .get(&stage_id)
            .map(|l| l.iter().filter(|t| t.status == Status::Succeeded).collect())
            .unwrap_or_default();
        let of = |f: fn(&TaskInfo) -> u64| five(done.iter().map(|t| f(t)).collect());
        Some(TaskSummary {
            stage_id,
            tasks: done.len(),
            quantiles: QUANTILES,
            duration_ms: of(|t| {
                t.finished_ms
                    .unwrap_or(t.launched_ms)
                    .saturating_sub(t.launched_ms)
            }),
            run_time_micros: of(|t| t.metrics.run_time_micros),
            records_in: of(|t| t.metrics.records_in),
            records_out: of(|t| t.metrics.records_out),
            shuffle_read_bytes: of(|t| t.metrics.shuffle_bytes_read),
            shuffle_read_records: of(|t| t.metrics.shuffle_records_read),
            shuffle_write_bytes: of(|t| t.metrics.shuffle_bytes_written),
            shuffle_write_records: of(|t| t.metrics.shuffle_records_written),
            spilled_bytes: of(|t| t.metrics.bytes_spilled),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::five;

    #[test]
    fn nearest_rank_quantiles() {
        assert_eq!(five(vec![]), [0; 5]);
        assert_eq!(five(vec![7]), [7; 5]);
        // n = 4: indices 0, 1, 2, 3, 3.
        assert_eq!(five(vec![40, 10, 30, 20]), [10, 20, 30, 40, 40]);
        // n = 5: indices 0, 1, 2, 3, 4.
        assert_eq!(five(vec![5, 1, 4, 2, 3]), [1, 2, 3, 4, 5]);
    }
}
