//! How a barrier stage attempt ends. Success: the attempt's last rank succeeded, and
//! only then do its jobs hear the ranks' task ends (with their accumulator updates) and
//! a result stage's results, in partition order. Failure (Spark's rule): any rank of the
//! running attempt failing (its own error, its executor lost, a fetch failure, killed
//! by anyone but the scheduler) kills every other running rank, drops everything the
//! attempt produced (results, map outputs, held-back task ends: reported uncounted) and
//! submits the stage again as a new attempt over every partition with a new key, which
//! counts toward `max_stage_attempts`; past it the stage's jobs fail naming the stage
//! and the last error.
//!
//! Invariants: an attempt's outcome is decided once (the first failure of the running
//! attempt, or its last success); a failure of a task of an attempt already ended
//! decides nothing (a fetch failure still has the executor's map outputs forgotten).

use ember_proto::{task_failure, TaskFailure, TaskSuccess};
use tracing::{debug, info, warn};

use super::super::{Scheduler, StageKind, TaskRun};
use super::DeferredEnd;
use crate::events::JobFailure;
use crate::limits::for_log;

impl Scheduler {
    /// Holds back the job-facing end of a successful rank of a running barrier attempt
    /// until the attempt's outcome is known; false (report it now) for any other task.
    pub(in crate::scheduler) fn defer_barrier_end(
        &mut self,
        run: &TaskRun,
        metrics: ember_proto::TaskMetrics,
        success: &TaskSuccess,
    ) -> bool {
        let Some(gang) = self
            .stages
            .get_mut(&run.stage_id)
            .and_then(|s| s.gang.as_mut())
            .filter(|g| g.attempt == run.stage_attempt)
        else {
            return false;
        };
        gang.deferred.push(DeferredEnd {
            partition: run.partition,
            executor_id: run.executor_id.clone(),
            metrics,
            accumulators: success.accumulators.clone(),
        });
        true
    }

    /// The attempt's ranks' held-back task ends go to the jobs: counted (their
    /// accumulator updates taken) if the attempt succeeded, else uncounted.
    fn send_deferred(&mut self, deferred: Vec<DeferredEnd>, stage_id: u32, counted: bool) {
        for d in deferred {
            let accumulators = counted.then_some(&d.accumulators[..]);
            let (partition, metrics) = (d.partition, d.metrics);
            self.job_task_ended(
                stage_id,
                partition,
                &d.executor_id,
                metrics,
                true,
                accumulators,
            );
        }
    }

    /// The running attempt of barrier map stage `stage_id` finished its last rank: its
    /// jobs hear every rank's end (a no-op for any other stage).
    pub(in crate::scheduler) fn barrier_attempt_succeeded(&mut self, stage_id: u32) {
        let Some(gang) = self.stages.get_mut(&stage_id).and_then(|s| s.gang.take()) else {
            return;
        };
        self.send_deferred(gang.deferred, stage_id, true);
    }

    /// A rank of a barrier result stage succeeded with `result`: held until every rank
    /// has, then every result goes to the job in partition order and the job ends.
    pub(in crate::scheduler) fn barrier_result(
        &mut self,
        job_id: u64,
        run: &TaskRun,
        result: Vec<u8>,
    ) {
        let max_bytes = self.config.limits.max_result_bytes;
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        if !st.is_pending(run.stage_attempt, run.partition) {
            return;
        }
        let Some(gang) = st.gang.as_mut() else {
            return;
        };
        gang.result_bytes = gang.result_bytes.saturating_add(result.len() as u64);
        if gang.result_bytes > max_bytes {
            let total = gang.result_bytes;
            let failure =
                self.result_limit_failure(run.stage_id, run.partition, &run.executor_id, total);
            return self.fail_job(job_id, failure);
        }
        gang.results
            .insert(run.partition, (run.executor_id.clone(), result));
        if !st.finish_partition(run.partition) {
            return;
        }
        let Some(gang) = st.gang.take() else {
            return;
        };
        self.send_deferred(gang.deferred, run.stage_id, true);
        for (partition, (executor_id, result)) in gang.results {
            if self.deliver_result(job_id, run.stage_id, partition, &executor_id, result) {
                self.result_stage_finished(job_id, run.stage_id);
                return;
            }
        }
    }

    /// A task of barrier stage `run.stage_id` failed: if of the running attempt, the
    /// attempt ends (its other ranks killed, its outputs dropped) and the stage runs
    /// again, or fails past `max_stage_attempts`.
    pub(in crate::scheduler) fn barrier_task_failed(&mut self, run: TaskRun, failure: TaskFailure) {
        let Some(st) = self.stages.get(&run.stage_id) else {
            return;
        };
        let current = st
            .gang
            .as_ref()
            .is_some_and(|g| g.attempt == run.stage_attempt);
        let why = super::super::completion::failure_text(&failure);
        if let Some(task_failure::Reason::FetchFailed(ff)) = failure.reason {
            if current {
                self.end_barrier_attempt(&run, &why);
            }
            // Counts the attempt, forgets the lost outputs, reruns their stages first.
            return self.fetch_failed(run, ff);
        }
        if !current {
            debug!(
                stage = st.number,
                stage_id = run.stage_id,
                partition = run.partition,
                "ignoring a failure of a barrier stage attempt already ended: {}",
                for_log(&why)
            );
            return;
        }
        self.end_barrier_attempt(&run, &why);
        if !self.executors.contains_key(&run.executor_id) {
            // The executor is gone (`executor_lost` fails its tasks first): its map
            // outputs too (those stored are read from storage), forgotten now so that
            // parents that lost some rerun first.
            for sid in self.tracker.executor_lost(&run.executor_id).0 {
                self.refresh_map_stage(sid);
            }
        }
        let max = self.config.max_stage_attempts;
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        if st.last_failed_attempt != Some(run.stage_attempt) {
            st.last_failed_attempt = Some(run.stage_attempt);
            st.failed_attempts += 1;
        }
        st.stop();
        if st.failed_attempts >= max {
            let message = format!(
                "barrier stage failed {} consecutive attempts (the limit of --max-stage-attempts); last: task {} on executor {}: {why}",
                st.failed_attempts, run.partition, run.executor_id
            );
            return self.fail_barrier_stage(run.stage_id, message);
        }
        warn!(
            stage = st.number,
            stage_id = run.stage_id,
            attempt = run.stage_attempt,
            partition = run.partition,
            executor = %run.executor_id,
            "a task of a barrier stage failed; rerunning all {} of its tasks: {}",
            st.num_partitions,
            for_log(&why)
        );
        for jid in self.jobs_using(run.stage_id) {
            self.submit_stage(jid, run.stage_id);
        }
    }

    /// Ends the running attempt of `run`'s barrier stage after `run` failed: kills its
    /// other running ranks (their slots come back with their statuses), reports its
    /// held-back task ends uncounted and drops its results and map outputs. The stage's
    /// state is left to the caller.
    fn end_barrier_attempt(&mut self, run: &TaskRun, why: &str) {
        let (stage_id, attempt) = (run.stage_id, run.stage_attempt);
        let killed = self.abandon_running(|r| r.stage_id == stage_id && r.stage_attempt == attempt);
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        info!(
            stage = st.number,
            stage_id,
            attempt,
            killed = killed.len(),
            "barrier stage attempt failed (task {}: {}); its other tasks are killed",
            run.partition,
            for_log(why)
        );
        let kind = st.kind;
        if let Some(gang) = st.gang.take() {
            self.send_deferred(gang.deferred, stage_id, false);
        }
        if let StageKind::ShuffleMap(sid) = kind {
            self.reset_barrier_outputs(stage_id);
            debug!(
                stage_id,
                shuffle = sid,
                "the failed barrier attempt's map outputs are dropped"
            );
        }
    }

    /// The failure of a job whose results passed `max_result_bytes` with this one.
    pub(in crate::scheduler) fn result_limit_failure(
        &self,
        stage_id: u32,
        partition: u32,
        executor_id: &str,
        total: u64,
    ) -> JobFailure {
        let max_bytes = self.config.limits.max_result_bytes;
        JobFailure::TaskFailed {
            stage_id,
            stage_name: self
                .stages
                .get(&stage_id)
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            partition,
            executor_id: executor_id.to_string(),
            message: format!(
                "the job's results total {total} bytes with this partition's, over the limit of {max_bytes} (--max-result-bytes)"
            ),
        }
    }
}
