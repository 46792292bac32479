//! How the scheduler reacts to task outcomes and lost executors: registering map
//! outputs, delivering results, retrying failed tasks, rerunning lost map outputs after
//! fetch failures, and failing jobs when attempts run out.

use std::collections::HashSet;

use ember_proto::{
    task_failure, task_status, task_success, MapLocation, TaskFailure, TaskMetrics, TaskStatus,
    TaskSuccess,
};
use tracing::{debug, info, warn};

use super::{Pending, Scheduler, StageKind, StageState, TaskRun};
use crate::events::{JobEvent, JobFailure};
use crate::limits::for_log;
use crate::listener::{now_ms, ListenerEvent};
use ember_proto::FetchFailure;

impl Scheduler {
    pub(super) fn task_finished(&mut self, status: TaskStatus) {
        if let Some(executor_id) = self.abandoned.remove(&status.task_id) {
            self.free_slot(&executor_id);
            self.drop_stale_output(&status);
            debug!(
                task = status.task_id,
                "ignoring status of an abandoned attempt"
            );
            return;
        }
        let Some(run) = self.take_running(status.task_id) else {
            self.drop_stale_output(&status);
            debug!(
                task = status.task_id,
                "ignoring status of an unknown attempt"
            );
            return;
        };
        self.free_slot(&run.executor_id);
        let metrics = status.metrics.unwrap_or_default();
        let succeeded = matches!(status.outcome, Some(task_status::Outcome::Success(_)));
        self.note_run_time(&run, succeeded, &metrics);
        match status.outcome {
            Some(task_status::Outcome::Success(s)) => self.task_succeeded(run, s, metrics),
            Some(task_status::Outcome::Failure(f)) => self.task_failed(run, f, metrics),
            None => self.task_failed(
                run,
                TaskFailure {
                    reason: Some(task_failure::Reason::UserError(
                        "task reported no outcome".into(),
                    )),
                },
                metrics,
            ),
        }
    }

    /// Gives back the slot a task of `executor_id` held.
    pub(super) fn free_slot(&mut self, executor_id: &str) {
        if let Some(ex) = self.executors.get_mut(executor_id) {
            ex.in_flight = ex.in_flight.saturating_sub(1);
            self.refile(executor_id);
        }
    }

    /// Counts a finished task of `run`'s stage toward (or against) pipelining it.
    fn note_run_time(&mut self, run: &TaskRun, succeeded: bool, metrics: &TaskMetrics) {
        let quick = self.config.quick_task.as_micros() as u64;
        if let Some(st) = self.stages.get_mut(&run.stage_id) {
            if succeeded && metrics.run_time_micros < quick {
                st.quick_streak = st.quick_streak.saturating_add(1);
                st.quick_max_micros = st.quick_max_micros.max(metrics.run_time_micros);
            } else {
                st.quick_streak = 0;
                st.quick_max_micros = 0;
            }
        }
    }

    /// Sends a task-ended event to every job that uses the stage; only the first job
    /// (and only the first successful attempt per partition) gets `counted`.
    fn report_task_end(
        &mut self,
        run: &TaskRun,
        metrics: TaskMetrics,
        success: Option<&TaskSuccess>,
        failure: Option<&TaskFailure>,
    ) {
        self.listeners.emit(|| ListenerEvent::TaskEnded {
            task_id: run.task_id,
            stage_id: run.stage_id,
            partition: run.partition,
            attempt: run.attempt,
            executor_id: run.executor_id.clone(),
            metrics,
            succeeded: success.is_some(),
            failure: failure.map(failure_text),
            time_ms: now_ms(),
        });
        let mut job_ids: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| j.stages.contains(&run.stage_id))
            .map(|j| j.id)
            .collect();
        job_ids.sort_unstable();
        let number = self.stage_number(run.stage_id);
        for (i, jid) in job_ids.into_iter().enumerate() {
            let Some(job) = self.jobs.get_mut(&jid) else {
                continue;
            };
            let counted =
                success.is_some() && i == 0 && job.counted.insert((run.stage_id, run.partition));
            let _ = job.events.send(JobEvent::TaskEnded {
                stage_id: number,
                partition: run.partition,
                executor_id: run.executor_id.clone(),
                metrics,
                succeeded: success.is_some(),
                counted,
                accumulators: if counted {
                    success.map(|s| s.accumulators.clone()).unwrap_or_default()
                } else {
                    Vec::new()
                },
            });
        }
    }

    /// Why a successful status cannot be taken as it is (the executor is trusted with
    /// the secret, but a bug there must not corrupt the driver's state).
    fn check_success(&self, run: &TaskRun, success: &TaskSuccess) -> Result<(), String> {
        let Some(st) = self.stages.get(&run.stage_id) else {
            return Ok(());
        };
        match (st.kind, &success.output) {
            (StageKind::ShuffleMap(sid), Some(task_success::Output::MapStatus(ms))) => {
                let reducers = st.index.shuffle(sid).map_or(0, |d| d.num_reduce_partitions);
                if ms.block_sizes.len() as u64 != u64::from(reducers) {
                    return Err(format!(
                        "the task's map output has {} block sizes, but shuffle {sid} has {reducers} reduce partitions",
                        ms.block_sizes.len()
                    ));
                }
                Ok(())
            }
            (StageKind::Result(_), Some(task_success::Output::Result(_))) => Ok(()),
            _ => Err("task returned an output of the wrong kind for its stage".into()),
        }
    }

    fn task_succeeded(&mut self, run: TaskRun, success: TaskSuccess, metrics: TaskMetrics) {
        if let Err(message) = self.check_success(&run, &success) {
            warn!(stage_id = run.stage_id, partition = run.partition, executor = %run.executor_id, "malformed task status: {}", for_log(&message));
            let failure = TaskFailure {
                reason: Some(task_failure::Reason::UserError(message)),
            };
            return self.task_failed(run, failure, metrics);
        }
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        let kind = st.kind;
        if st.is_pending(run.stage_attempt, run.partition) {
            st.durations.push(run.started.elapsed());
        }
        // Only blocks of persisted nodes of the stage's plan, within their partitions.
        for b in &success.cached {
            let known = st
                .index
                .node(b.rdd_id)
                .is_some_and(|n| n.storage != 0 && b.partition < n.num_partitions);
            if !known {
                warn!(executor = %run.executor_id, rdd = b.rdd_id, partition = b.partition, "ignoring a cached block the plan does not persist");
                continue;
            }
            let holders = self.cache.entry((b.rdd_id, b.partition)).or_default();
            if !holders.contains(&run.executor_id) {
                holders.push(run.executor_id.clone());
            }
        }
        self.report_task_end(&run, metrics, Some(&success), None);
        self.kill_other_copies(&run);
        match (kind, success.output) {
            (StageKind::ShuffleMap(sid), Some(task_success::Output::MapStatus(ms))) => {
                let shuffle_address = self
                    .executors
                    .get(&run.executor_id)
                    .map(|e| e.shuffle_address.clone())
                    .unwrap_or_default();
                self.tracker.register_output(
                    sid,
                    MapLocation {
                        map_partition: run.partition,
                        executor_id: run.executor_id.clone(),
                        shuffle_address,
                        block_sizes: ms.block_sizes,
                        first_reduce: 0,
                    },
                );
                let Some(st) = self.stages.get_mut(&run.stage_id) else {
                    return;
                };
                if st.finish_partition(run.partition) {
                    self.map_stage_finished(run.stage_id, sid);
                } else {
                    // A straggler of an earlier attempt may complete a stopped stage.
                    self.refresh_map_stage(sid);
                }
            }
            (StageKind::Result(job_id), Some(task_success::Output::Result(bytes))) => {
                if let Some(st) = self.stages.get_mut(&run.stage_id) {
                    st.finish_partition(run.partition);
                }
                let max_bytes = self.config.limits.max_result_bytes;
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                if !job.done.insert(run.partition) {
                    return;
                }
                job.result_bytes = job.result_bytes.saturating_add(bytes.len() as u64);
                if job.result_bytes > max_bytes {
                    let failure = JobFailure::TaskFailed {
                        stage_id: run.stage_id,
                        stage_name: self.stages.get(&run.stage_id).map(|s| s.name.clone()).unwrap_or_default(),
                        partition: run.partition,
                        executor_id: run.executor_id.clone(),
                        message: format!(
                            "the job's results total {} bytes with this partition's, over the limit of {max_bytes} (--max-result-bytes)",
                            job.result_bytes
                        ),
                    };
                    self.fail_job(job_id, failure);
                    return;
                }
                let _ = job.events.send(JobEvent::TaskResult {
                    partition: run.partition,
                    result: bytes,
                });
                if job.done.len() == job.partitions.len() {
                    self.result_stage_finished(job_id, run.stage_id);
                }
            }
            (_, _) => {} // refused by `check_success`
        }
    }

    /// Kills the other running attempts of a partition that just finished (the loser
    /// of a speculative race); their slots come back when their statuses arrive.
    fn kill_other_copies(&mut self, winner: &TaskRun) {
        if !self
            .copies
            .contains_key(&(winner.stage_id, winner.partition))
        {
            return; // the winner was the only attempt running
        }
        let abandoned = self
            .abandon_running(|r| r.stage_id == winner.stage_id && r.partition == winner.partition);
        for run in abandoned {
            info!(
                stage_id = run.stage_id,
                partition = run.partition,
                executor = %run.executor_id,
                "killed a redundant attempt: another one finished first"
            );
        }
    }

    /// Gives up on the running attempts `which` selects: asks their executors to kill
    /// them and keeps their slots taken (in `abandoned`) until their statuses arrive.
    fn abandon_running(&mut self, which: impl Fn(&TaskRun) -> bool) -> Vec<TaskRun> {
        let ids: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| which(r))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let run = self.take_running(id)?;
                self.launcher.kill(&run.executor_id, id);
                self.abandoned.insert(id, run.executor_id.clone());
                Some(run)
            })
            .collect()
    }

    /// Every partition of a job's result stage is delivered: the job succeeded.
    pub(super) fn result_stage_finished(&mut self, job_id: u64, stage_id: u32) {
        if let Some(st) = self.stages.get_mut(&stage_id) {
            st.state = StageState::Available;
        }
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let _ = job.events.send(JobEvent::StageCompleted {
            stage_id: self.stage_number(stage_id),
        });
        let _ = job.events.send(JobEvent::JobSucceeded { job_id });
        self.listeners.emit(|| ListenerEvent::StageCompleted {
            stage_id,
            time_ms: now_ms(),
        });
        self.listeners.emit(|| ListenerEvent::JobEnded {
            job_id,
            succeeded: true,
            failure: None,
            time_ms: now_ms(),
        });
        debug!(job = job_id, "job succeeded");
        self.finish_job(job_id);
    }

    /// The running attempt of a shuffle-map stage has no partition left: the stage is
    /// available, or runs again for outputs lost meanwhile.
    pub(super) fn map_stage_finished(&mut self, stage_id: u32, shuffle_id: u32) {
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        if !self.tracker.is_available(shuffle_id) {
            // Some outputs were lost while the stage ran: run the missing ones again.
            st.stop();
            let jobs: Vec<u64> = self.jobs_using(stage_id);
            if let Some(&job) = jobs.first() {
                self.submit_tasks(job, stage_id);
            }
            return;
        }
        st.state = StageState::Available;
        st.failed_attempts = 0;
        debug!(stage_id, shuffle = shuffle_id, "shuffle-map stage finished");
        self.listeners.emit(|| ListenerEvent::StageCompleted {
            stage_id,
            time_ms: now_ms(),
        });
        let number = self.stage_number(stage_id);
        for jid in self.jobs_using(stage_id) {
            // A job may end while an earlier one's waiting stages are submitted.
            let Some(job) = self.jobs.get_mut(&jid) else {
                continue;
            };
            let _ = job
                .events
                .send(JobEvent::StageCompleted { stage_id: number });
            job.waiting.remove(&stage_id);
            // The waiting stages that read this one's output (Spark's
            // `submitWaitingChildStages`): `submit_stage` runs one whose inputs are now
            // complete and reruns any parent that lost outputs meanwhile (say, with a
            // lost executor). Every other waiting stage waits on a stage still to finish,
            // which wakes it in turn; looking only at the children keeps a job of S
            // stages at O(S) wake-ups per finished stage, not a walk of every chain.
            let mut waiting: Vec<u32> = job
                .waiting
                .iter()
                .copied()
                .filter(|w| {
                    self.stages
                        .get(w)
                        .is_some_and(|s| s.reads.contains(&shuffle_id))
                })
                .collect();
            waiting.sort_unstable();
            for w in waiting {
                if w != stage_id && !self.stages.get(&w).is_some_and(|s| s.is_running()) {
                    self.submit_stage(jid, w);
                }
            }
        }
    }

    fn jobs_using(&self, stage_id: u32) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| j.stages.contains(&stage_id))
            .map(|j| j.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// A task attempt failed: counted against what failed (the shuffle data it read,
    /// its executor, or its own code), retried or its jobs failed.
    fn task_failed(&mut self, run: TaskRun, failure: TaskFailure, metrics: TaskMetrics) {
        if !self.stages.contains_key(&run.stage_id) {
            return;
        }
        self.report_task_end(&run, metrics, None, Some(&failure));
        match failure.reason {
            Some(task_failure::Reason::FetchFailed(ff)) => self.fetch_failed(run, ff),
            Some(task_failure::Reason::Killed(_)) => {}
            Some(task_failure::Reason::ExecutorLost(msg)) => self.task_lost(run, &msg),
            Some(task_failure::Reason::UserError(message)) => self.task_error(run, message),
            None => self.requeue(run, true),
        }
    }

    /// A reducer could not read a map output: every output of the executor it lives on
    /// is forgotten, and the stage's attempt ends (to run again once the lost outputs
    /// are rerun), or the stage fails after `max_stage_attempts` consecutive failed
    /// attempts.
    fn fetch_failed(&mut self, run: TaskRun, ff: FetchFailure) {
        warn!(
            stage_id = run.stage_id,
            partition = run.partition,
            shuffle = ff.shuffle_id,
            map = ff.map_partition,
            executor = %ff.executor_id,
            "fetch failure: {}", for_log(&ff.message)
        );
        // As Spark does (without an external shuffle service): the executor a block
        // could not be fetched from is presumed to have lost every map output it holds,
        // so they all rerun at once instead of one lost output per stage attempt.
        for sid in self.tracker.remove_executor(&ff.executor_id) {
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
        self.queue.retain(|p| p.stage_id != run.stage_id);
        for jid in self.jobs_using(run.stage_id) {
            self.submit_stage(jid, run.stage_id);
        }
    }

    /// A task was lost with its executor: run it again elsewhere, unless it has lost
    /// `max_executor_losses_per_task` executors already (then its jobs fail).
    fn task_lost(&mut self, run: TaskRun, msg: &str) {
        debug!(
            task_stage = run.stage_id,
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
        warn!(executor = %executor_id, "executor lost: {reason}");
        self.listeners.emit(|| ListenerEvent::ExecutorLost {
            executor_id: executor_id.to_string(),
            reason: reason.to_string(),
            time_ms: now_ms(),
        });
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
        for job in self.jobs.values() {
            if job.stages.iter().any(|s| hit.contains(s)) {
                let _ = job.events.send(JobEvent::ExecutorLost {
                    executor_id: executor_id.to_string(),
                    reason: reason.to_string(),
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
        let shuffles = self.tracker.remove_executor(executor_id);
        if !shuffles.is_empty() {
            info!(executor = %executor_id, ?shuffles, "map outputs lost with executor");
        }
        for sid in shuffles {
            self.refresh_map_stage(sid);
        }
        for holders in self.cache.values_mut() {
            holders.retain(|e| e != executor_id);
        }
        self.cache.retain(|_, h| !h.is_empty());
    }

    /// Fails a job: tells its client, stops its tasks, forgets its state.
    pub(super) fn fail_job(&mut self, job_id: u64, mut failure: JobFailure) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        // The failure names the stage by the scheduler's id; its client and the text
        // name it by its number within the application.
        let stage = match &mut failure {
            JobFailure::TaskFailed { stage_id, .. } | JobFailure::StageFailed { stage_id, .. } => {
                let id = *stage_id;
                *stage_id = self.stage_number(id);
                Some(id)
            }
            JobFailure::Cancelled(_) | JobFailure::InvalidPlan(_) => None,
        };
        let reason = crate::listener::describe_failure(&failure);
        if let Some(stage_id) = stage {
            // A stage (or a task of it) gave up: its stage failed with the job.
            self.listeners.emit(|| ListenerEvent::StageFailed {
                stage_id,
                reason: reason.clone(),
                time_ms: now_ms(),
            });
        }
        self.listeners.emit(|| ListenerEvent::JobEnded {
            job_id,
            succeeded: false,
            failure: Some(reason),
            time_ms: now_ms(),
        });
        let _ = job.events.send(JobEvent::JobFailed { job_id, failure });
        self.finish_job(job_id);
    }

    /// The number within its application of stage `stage_id` (the id itself for a
    /// stage already forgotten).
    pub(super) fn stage_number(&self, stage_id: u32) -> u32 {
        self.stages.get(&stage_id).map_or(stage_id, |s| s.number)
    }

    fn finish_job(&mut self, job_id: u64) {
        let Some(job) = self.jobs.remove(&job_id) else {
            return;
        };
        let still_used: HashSet<u32> = self
            .jobs
            .values()
            .flat_map(|j| j.stages.iter().copied())
            .collect();
        let orphaned: HashSet<u32> = job
            .stages
            .iter()
            .copied()
            .filter(|s| !still_used.contains(s))
            .collect();
        self.queue.retain(|p| !orphaned.contains(&p.stage_id));
        self.abandon_running(|r| orphaned.contains(&r.stage_id));
        for s in &orphaned {
            if let Some(st) = self.stages.get_mut(s) {
                st.stop();
                st.task_failures.clear();
                st.executor_losses.clear();
            }
        }
        self.stages.remove(&job.result_stage);
    }
}

/// A failed attempt's reason as the listeners show it (bounded: the executor already cut
/// long messages).
fn failure_text(f: &TaskFailure) -> String {
    match &f.reason {
        Some(task_failure::Reason::FetchFailed(ff)) => format!(
            "fetch failed: shuffle {} map {} on executor {}: {}",
            ff.shuffle_id, ff.map_partition, ff.executor_id, ff.message
        ),
        Some(task_failure::Reason::Killed(m)) => format!("killed: {m}"),
        Some(task_failure::Reason::ExecutorLost(m)) => format!("executor lost: {m}"),
        Some(task_failure::Reason::UserError(m)) => m.clone(),
        None => "no reason given".to_string(),
    }
}
