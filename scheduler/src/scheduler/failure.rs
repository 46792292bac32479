//! How the scheduler handles a failed task attempt and a lost executor: fetch
//! failures (the map outputs of the executor read from are forgotten and the stage's
//! attempt ends), tasks lost with their executor, errors of the task's own code, and
//! requeueing another attempt of a task.
//!
//! A task of a barrier stage is the exception: any failure ends its whole attempt
//! (`barrier/outcome.rs`, which hands fetch failures back to `fetch_failed`).
//!
//! Invariants: only failures of the current stage attempt (or of a still-pending
//! partition) count toward the limits (`max_stage_attempts`, `max_task_attempts`,
//! `max_executor_losses_per_task`, `max_failures_per_executor_per_stage`); once a limit
//! is reached the stage fails and so does every job using it.

use std::collections::HashSet;

use ember_proto::{task_failure, FetchFailure, TaskFailure, TaskMetrics};
use tracing::{debug, info, warn};

use super::{Pending, Scheduler, StageState, TaskRun};
use crate::events::{JobEvent, JobFailure};
use crate::limits::for_log;
use crate::listener::{now_ms, ListenerEvent};

impl Scheduler {
    /// A task attempt failed: counted against what failed (the shuffle data it read,
    /// its executor, or its own code), retried or its jobs failed.
    pub(super) fn task_failed(&mut self, run: TaskRun, failure: TaskFailure, metrics: TaskMetrics) {
        if !self.stages.contains_key(&run.stage_id) {
            return;
        }
        self.report_task_end(&run, metrics, None, Some(&failure));
        if self.stages.get(&run.stage_id).is_some_and(|s| s.barrier) {
            // Spark's rule: the whole attempt ends and reruns (`barrier/outcome.rs`).
            return self.barrier_task_failed(run, failure);
        }
        match failure.reason {
            Some(task_failure::Reason::FetchFailed(ff)) => self.fetch_failed(run, ff),
            Some(task_failure::Reason::Killed(_)) => {}
            Some(task_failure::Reason::ExecutorLost(msg)) => self.task_lost(run, &msg),
            // Its worker was ended to stop another task: no fault of its own.
            Some(task_failure::Reason::WorkerEnded(_)) => self.requeue(run, false),
            Some(task_failure::Reason::UserError(message)) => self.task_error(run, message),
            None => self.requeue(run, true),
        }
    }

    /// A reducer could not read a map output: every output of the executor it lives on
    /// is forgotten, and the stage's attempt ends (to run again once the lost outputs
    /// are rerun), or the stage fails after `max_stage_attempts` consecutive failed
    /// attempts.
    pub(super) fn fetch_failed(&mut self, run: TaskRun, ff: FetchFailure) {
        warn!(
            stage = self.stage_number(run.stage_id),
            stage_id = run.stage_id,
            partition = run.partition,
            shuffle = ff.shuffle_id,
            map = ff.map_partition,
            executor = %ff.executor_id,
            "fetch failure: {}", for_log(&ff.message)
        );
        // As Spark does (without an external shuffle service): the executor a block
        // could not be fetched from is presumed to have lost every map output it holds,
        // so they all rerun at once instead of one lost output per stage attempt; those
        // that were stored are read from storage instead (a bad stored copy drops that
        // executor's stored copies of the shuffle).
        let lost = self
            .tracker
            .fetch_failed(&ff.executor_id, ff.shuffle_id, ff.from_storage);
        for sid in lost {
            self.refresh_map_stage(sid);
        }
        let max = self.config.max_stage_attempts;
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        let current =
            matches!(st.state, StageState::Running { attempt, .. } if attempt == run.stage_attempt);
        if !current {
            // An older attempt: the current one re-reads its inputs and reports its own
            // fetch failures; the output dropped above is rerun when a stage next needs it.
            return;
        }
        // Every reducer of an attempt may report the same loss: count the attempt once.
        if st.last_failed_attempt != Some(run.stage_attempt) {
            st.last_failed_attempt = Some(run.stage_attempt);
            st.failed_attempts += 1;
        }
        st.stop();
        if st.failed_attempts >= max {
            st.state = StageState::Failed;
            let failure = JobFailure::StageFailed {
                stage_id: st.id,
                stage_name: st.name.clone(),
                message: format!(
                    "stage failed {} consecutive attempts; last fetch failure: shuffle {} map {} on executor {}: {}",
                    st.failed_attempts, ff.shuffle_id, ff.map_partition, ff.executor_id, ff.message
                ),
            };
            for jid in self.jobs_using(run.stage_id) {
                self.fail_job(jid, failure.clone());
            }
            return;
        }
        // Queued tasks of the failed attempt would only fail the same way.
        self.queue.remove_stage(run.stage_id);
        for jid in self.jobs_using(run.stage_id) {
            self.submit_stage(jid, run.stage_id);
        }
    }

    /// A task was lost with its executor: run it again elsewhere, unless it has lost
    /// `max_executor_losses_per_task` executors already (then its jobs fail).
    fn task_lost(&mut self, run: TaskRun, msg: &str) {
        debug!(
            stage = self.stage_number(run.stage_id),
            stage_id = run.stage_id,
            "task lost with its executor: {msg}"
        );
        let max = self.config.max_executor_losses_per_task;
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        if !st.is_pending(run.stage_attempt, run.partition) {
            return; // superseded or finished: nothing to retry, nothing to count
        }
        let lost = st.executor_losses.entry(run.partition).or_default();
        lost.push(run.executor_id.clone());
        if lost.len() as u32 >= max {
            let failure = JobFailure::TaskFailed {
                stage_id: st.id,
                stage_name: st.name.clone(),
                partition: run.partition,
                executor_id: run.executor_id.clone(),
                message: format!(
                    "the task was lost with its executor {} times (executors {}), the limit of --max-executor-losses-per-task; last: {msg}",
                    lost.len(),
                    lost.join(", ")
                ),
            };
            st.stop();
            st.state = StageState::Failed;
            warn!(
                stage = st.number,
                stage_id = run.stage_id,
                partition = run.partition,
                "giving up on a task that keeps losing its executor"
            );
            for jid in self.jobs_using(run.stage_id) {
                self.fail_job(jid, failure.clone());
            }
            return;
        }
        self.requeue(run, false);
    }

    /// The task's own code failed: retry it (not on the same executor) until it has
    /// failed `max_task_attempts` times, then fail its jobs; an executor that fails
    /// `max_failures_per_executor_per_stage` tasks of the stage gets no more of them.
    fn task_error(&mut self, run: TaskRun, message: String) {
        let max = self.config.max_task_attempts;
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        let current =
            matches!(st.state, StageState::Running { attempt, .. } if attempt == run.stage_attempt);
        if !current {
            debug!(
                stage = st.number,
                stage_id = run.stage_id,
                partition = run.partition,
                "ignoring a failure of an older stage attempt: {}",
                for_log(&message)
            );
            return;
        }
        let on_executor = st
            .executor_failures
            .entry(run.executor_id.clone())
            .or_insert(0);
        *on_executor += 1;
        if *on_executor >= self.config.max_failures_per_executor_per_stage
            && st.excluded.insert(run.executor_id.clone())
        {
            warn!(
                stage = st.number,
                stage_id = run.stage_id,
                executor = %run.executor_id,
                "executor excluded from the rest of the stage after {} failed tasks",
                on_executor
            );
        }
        let n = st.task_failures.entry(run.partition).or_insert(0);
        *n += 1;
        if *n < max {
            warn!(
                stage = st.number,
                stage_id = run.stage_id,
                partition = run.partition,
                attempt = run.attempt,
                executor = %run.executor_id,
                "task failed, retrying: {}", for_log(&message)
            );
            self.requeue(run, true);
            return;
        }
        // The job's error carries this message; logging it too would print it twice.
        debug!(
            stage = st.number,
            stage_id = run.stage_id,
            partition = run.partition,
            "task failed its last attempt: {}",
            for_log(&message)
        );
        let failure = JobFailure::TaskFailed {
            stage_id: st.id,
            stage_name: st.name.clone(),
            partition: run.partition,
            executor_id: run.executor_id.clone(),
            message,
        };
        st.stop();
        st.state = StageState::Failed;
        for jid in self.jobs_using(run.stage_id) {
            self.fail_job(jid, failure.clone());
        }
    }

    /// Queues another attempt of a task whose partition is still pending.
    fn requeue(&mut self, run: TaskRun, exclude_executor: bool) {
        let Some(st) = self.stages.get(&run.stage_id) else {
            return;
        };
        let StageState::Running { attempt, pending } = &st.state else {
            return;
        };
        if !pending.contains(&run.partition) {
            return;
        }
        let mut excluded = run.excluded;
        if exclude_executor && !excluded.contains(&run.executor_id) {
            excluded.push(run.executor_id.clone());
        }
        self.queue.push_back(Pending {
            stage_id: run.stage_id,
            stage_attempt: *attempt,
            partition: run.partition,
            attempt: run.attempt + 1,
            preferred: Vec::new(),
            pinned: false,
            excluded,
            speculative: false,
        });
    }

    pub(super) fn executor_lost(&mut self, executor_id: &str, reason: &str) {
        let Some(gone) = self.executors.remove(executor_id) else {
            return;
        };
        self.room.remove(&(gone.level, executor_id.to_string()));
        self.held.executor_lost(executor_id);
        warn!(executor = %executor_id, "executor lost: {reason}");
        // The jobs it ran tasks for or held shuffle output of hear it first.
        let mut hit: HashSet<u32> = self
            .running
            .values()
            .filter(|r| r.executor_id == executor_id)
            .map(|r| r.stage_id)
            .collect();
        for sid in self.tracker.shuffles_on(executor_id) {
            if let Some(&stage) = self.shuffle_stage.get(&sid) {
                hit.insert(stage);
            }
        }
        // Its replicated outputs will be served by replicas, its stored ones read from
        // storage (the tracker moves them below, after its tasks fail, as the barrier
        // path expects).
        let kept = self.tracker.kept_if_lost(executor_id);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let (from_replicas, from_storage) = (count(kept.from_replicas), count(kept.from_storage));
        self.listeners.emit(|| ListenerEvent::ExecutorLost {
            executor_id: executor_id.to_string(),
            reason: reason.to_string(),
            outputs_from_storage: from_storage,
            outputs_from_replicas: from_replicas,
            time_ms: now_ms(),
        });
        for job in self.jobs.values() {
            if job.stages.iter().any(|s| hit.contains(s)) {
                let _ = job.events.send(JobEvent::ExecutorLost {
                    executor_id: executor_id.to_string(),
                    reason: reason.to_string(),
                    outputs_from_storage: from_storage,
                    outputs_from_replicas: from_replicas,
                });
            }
        }
        let lost: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.executor_id == executor_id)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            // A job failed by an earlier loss in this loop has abandoned its tasks.
            let Some(run) = self.take_running(id) else {
                continue;
            };
            let failure = TaskFailure {
                reason: Some(task_failure::Reason::ExecutorLost(format!(
                    "executor {executor_id} lost: {reason}"
                ))),
            };
            self.task_failed(run, failure, TaskMetrics::default());
        }
        self.abandoned.retain(|_, e| e != executor_id);
        self.slots_given_back.retain(|_, e| e != executor_id);
        // Its replicated outputs move to a replica, its stored ones to storage, the
        // rest are forgotten.
        let (shuffles, _) = self.tracker.executor_lost(executor_id);
        if !shuffles.is_empty() {
            info!(executor = %executor_id, ?shuffles, "map outputs lost with executor");
        }
        if from_replicas > 0 {
            info!(
                executor = %executor_id,
                outputs = from_replicas,
                "map outputs of the lost executor are served by their replicas"
            );
        }
        if from_storage > 0 {
            info!(
                executor = %executor_id,
                outputs = from_storage,
                "map outputs of the lost executor are read from storage"
            );
        }
        for sid in shuffles {
            self.refresh_map_stage(sid);
        }
        for holders in self.cache.values_mut() {
            holders.retain(|e| e != executor_id);
        }
        self.cache.retain(|_, h| !h.is_empty());
        let still: std::collections::HashSet<u32> = self.cache.keys().map(|(r, _)| *r).collect();
        self.cached_rdds.retain(|r, _| still.contains(r));
    }
}
