//! Speculative execution (Spark's `spark.speculation`): a second copy of a task that
//! runs far longer than its stage's finished tasks, on another executor; whichever
//! copy finishes first wins and the other is killed.
//!
//! Invariants: a barrier stage's tasks get no copies (as in Spark); a partition gets
//! at most one speculative copy per stage attempt; a
//! copy is queued only when some executor other than the ones running the partition
//! exists; results stay exact because a partition's output is taken from its first
//! successful attempt only (see `completion.rs`).

use std::time::Duration;

use tracing::info;

use super::{Pending, Scheduler, StageState};

impl Scheduler {
    /// Queues a speculative copy of every task that qualifies (called on each loop turn
    /// when speculation is on).
    pub(super) fn speculate(&mut self) {
        let mut copies = Vec::new();
        for (stage_id, st) in &self.stages {
            let StageState::Running { attempt, pending } = &st.state else {
                continue;
            };
            if st.barrier {
                continue; // its ranks run together: a copy of one would have no peers
            }
            if st.durations.is_empty() {
                continue;
            }
            let total = st.durations.len() + pending.len();
            if (st.durations.len() as f64) < self.config.speculation_quantile * total as f64 {
                continue;
            }
            let mut sorted = st.durations.clone();
            sorted.sort_unstable();
            let median = sorted[sorted.len() / 2];
            let threshold = median
                .mul_f64(self.config.speculation_multiplier)
                .max(self.config.speculation_min);
            for run in self.running.values() {
                if run.stage_id != *stage_id
                    || run.stage_attempt != *attempt
                    || !pending.contains(&run.partition)
                    || st.speculated.contains(&run.partition)
                {
                    continue;
                }
                let elapsed = run.started.elapsed();
                if elapsed > threshold {
                    copies.push((
                        *stage_id,
                        *attempt,
                        run.partition,
                        run.attempt,
                        elapsed,
                        median,
                    ));
                }
            }
        }
        for (stage_id, stage_attempt, partition, attempt, elapsed, median) in copies {
            let running_on: Vec<String> = self
                .running
                .values()
                .filter(|r| r.stage_id == stage_id && r.partition == partition)
                .map(|r| r.executor_id.clone())
                .collect();
            if !self.executors.keys().any(|e| !running_on.contains(e)) {
                continue; // nowhere else to run it
            }
            let Some(st) = self.stages.get_mut(&stage_id) else {
                continue;
            };
            st.speculated.insert(partition);
            info!(
                stage_id,
                partition,
                "speculating: task has run {} ms, the stage's median is {} ms",
                ms(elapsed),
                ms(median)
            );
            self.queue.push_front(Pending {
                stage_id,
                stage_attempt,
                partition,
                attempt: attempt + 1,
                preferred: Vec::new(),
                pinned: false,
                excluded: running_on,
                speculative: true,
            });
        }
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}
