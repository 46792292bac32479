//! How the scheduler takes in a task's status and handles a successful attempt:
//! freeing its slot, reporting the task's end to listeners and jobs, checking and
//! registering its output (map output in the tracker, results to their job, cached
//! blocks), and killing the other copies of a partition that just finished.
//!
//! Invariants: a status counts only for an attempt in `running` (an abandoned or
//! unknown attempt's status just frees its slot and deletes stale output), and a
//! malformed success is handled as a failure of the task (see `failure.rs`).

use ember_proto::{
    task_failure, task_status, task_success, AccumulatorUpdate, MapLocation, TaskFailure,
    TaskMetrics, TaskStatus, TaskSuccess,
};
use tracing::{debug, info, warn};

use super::cancel::TaskStop;
use super::{Scheduler, StageKind, TaskRun};
use crate::events::JobEvent;
use crate::limits::for_log;
use crate::listener::{now_ms, ListenerEvent};

impl Scheduler {
    pub(super) fn task_finished(&mut self, mut status: TaskStatus) {
        if let Some(executor_id) = self.abandoned.remove(&status.task_id) {
            self.free_task_slot(status.task_id, &executor_id);
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
        self.free_task_slot(run.task_id, &run.executor_id);
        if let Some(b) = status.barrier.take() {
            self.report_supersteps(&run, b);
        }
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

    /// Gives back the slot task `task_id` of `executor_id` held, unless its executor
    /// gave it back early ([`Self::slot_released`]).
    fn free_task_slot(&mut self, task_id: u64, executor_id: &str) {
        if self.slots_given_back.remove(&task_id).is_none() {
            self.free_slot(executor_id);
        }
    }

    /// Running task `task_id` of `executor_id` no longer needs its slot (its output is
    /// being pushed to replicas; its status follows): the slot is free for another task.
    /// Once per attempt, and only for an attempt that runs there.
    pub(super) fn slot_released(&mut self, task_id: u64, executor_id: String) {
        let runs_there = self
            .running
            .get(&task_id)
            .is_some_and(|r| r.executor_id == executor_id)
            || self.abandoned.get(&task_id) == Some(&executor_id);
        if !runs_there || self.slots_given_back.contains_key(&task_id) {
            return;
        }
        self.free_slot(&executor_id);
        self.slots_given_back.insert(task_id, executor_id);
    }

    /// Gives back the slot a task of `executor_id` held.
    pub(super) fn free_slot(&mut self, executor_id: &str) {
        if let Some(ex) = self.executors.get_mut(executor_id) {
            ex.in_flight = ex.in_flight.saturating_sub(1);
            self.refile(executor_id);
        }
    }

    /// Passes a barrier task's collectives on to the listeners (the web UI), bounded
    /// whatever the status says.
    fn report_supersteps(&mut self, run: &TaskRun, mut b: ember_proto::BarrierMetrics) {
        use ember_proto::limits::{MAX_SUPERSTEPS, MAX_SUPERSTEP_OP_BYTES};
        if !self.stages.get(&run.stage_id).is_some_and(|s| s.barrier) {
            return;
        }
        if b.supersteps.len() > MAX_SUPERSTEPS {
            let extra = (b.supersteps.len() - MAX_SUPERSTEPS) as u64;
            b.supersteps.truncate(MAX_SUPERSTEPS);
            b.dropped = b.dropped.saturating_add(extra);
        }
        for s in &mut b.supersteps {
            let cut = s.op.floor_char_boundary(MAX_SUPERSTEP_OP_BYTES);
            s.op.truncate(cut);
        }
        self.listeners.emit(move || ListenerEvent::TaskSupersteps {
            task_id: run.task_id,
            stage_id: run.stage_id,
            stage_attempt: run.stage_attempt,
            partition: run.partition,
            executor_id: run.executor_id.clone(),
            supersteps: b.supersteps,
            dropped: b.dropped,
            resumed_after: b.resumed.then_some(b.resumed_after),
            time_ms: now_ms(),
        });
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

    /// Reports a task's end to the listeners and to every job that uses the stage (a
    /// successful rank of a running barrier attempt: to the jobs once the attempt's
    /// outcome is known, see `barrier/outcome.rs`).
    pub(super) fn report_task_end(
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
        if success.is_some_and(|s| self.defer_barrier_end(run, metrics, s)) {
            return;
        }
        let accumulators = success.map(|s| &s.accumulators[..]);
        self.job_task_ended(
            run.stage_id,
            run.partition,
            &run.executor_id,
            metrics,
            success.is_some(),
            accumulators,
        );
    }

    /// Sends a task-ended event to every job that uses the stage; only the first job
    /// (and only the first successful attempt per partition) gets `counted`, and only
    /// when `accumulators` is given (a success whose updates may count).
    pub(super) fn job_task_ended(
        &mut self,
        stage_id: u32,
        partition: u32,
        executor_id: &str,
        metrics: TaskMetrics,
        succeeded: bool,
        accumulators: Option<&[AccumulatorUpdate]>,
    ) {
        let mut job_ids: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| j.stages.contains(&stage_id))
            .map(|j| j.id)
            .collect();
        job_ids.sort_unstable();
        let number = self.stage_number(stage_id);
        for (i, jid) in job_ids.into_iter().enumerate() {
            let Some(job) = self.jobs.get_mut(&jid) else {
                continue;
            };
            let counted =
                accumulators.is_some() && i == 0 && job.counted.insert((stage_id, partition));
            let _ = job.events.send(JobEvent::TaskEnded {
                stage_id: number,
                partition,
                executor_id: executor_id.to_string(),
                metrics,
                succeeded,
                counted,
                accumulators: match accumulators {
                    Some(a) if counted => a.to_vec(),
                    _ => Vec::new(),
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
            warn!(stage = self.stage_number(run.stage_id), stage_id = run.stage_id, partition = run.partition, executor = %run.executor_id, "malformed task status: {}", for_log(&message));
            let failure = TaskFailure {
                reason: Some(task_failure::Reason::UserError(message)),
            };
            return self.task_failed(run, failure, metrics);
        }
        let Some(st) = self.stages.get_mut(&run.stage_id) else {
            return;
        };
        let (kind, barrier) = (st.kind, st.barrier);
        if st.is_pending(run.stage_attempt, run.partition) {
            st.durations.push(run.started.elapsed());
        }
        // Only blocks of persisted nodes of the stage's plan, within their partitions.
        // One warning per task however many blocks it names (the list is the wire's).
        let mut ignored = 0usize;
        for b in &success.cached {
            let known = st
                .index
                .node(b.rdd_id)
                .is_some_and(|n| n.storage != 0 && b.partition < n.num_partitions);
            if !known {
                if ignored == 0 {
                    warn!(executor = %run.executor_id, rdd = b.rdd_id, partition = b.partition, "ignoring a cached block the plan does not persist");
                }
                ignored += 1;
                continue;
            }
            let holders = self.cache.entry((b.rdd_id, b.partition)).or_default();
            if !holders.contains(&run.executor_id) {
                holders.push(run.executor_id.clone());
                // Once per block and executor: a repeated report adds no event.
                if let Some(n) = st.index.node(b.rdd_id) {
                    let rdd =
                        self.cached_rdds
                            .entry(b.rdd_id)
                            .or_insert_with(|| super::CachedRdd {
                                application: st.plan.application.clone(),
                                name: n.name.clone(),
                                num_partitions: n.num_partitions,
                                storage: n.storage,
                            });
                    self.listeners.emit(|| {
                        rdd.block_cached(
                            b.rdd_id,
                            b.partition,
                            run.executor_id.clone(),
                            (b.memory_bytes, b.disk_bytes),
                            String::new(),
                        )
                    });
                }
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
                // Copies on executors lost meanwhile (or claimed on the writer itself)
                // are not copies.
                let replicas = ms
                    .replicas
                    .into_iter()
                    .filter(|r| {
                        let id = String::from_utf8_lossy(&r.executor_id);
                        id != run.executor_id.as_str() && self.executors.contains_key(id.as_ref())
                    })
                    .take(ember_proto::limits::MAX_SHUFFLE_REPLICAS)
                    .collect();
                self.tracker.register_output(
                    sid,
                    MapLocation {
                        map_partition: run.partition,
                        executor_id: run.executor_id.clone(),
                        shuffle_address,
                        block_sizes: ms.block_sizes,
                        first_reduce: 0,
                        stored: ms.stored,
                        from_storage: false,
                        replicas,
                    },
                );
                let Some(st) = self.stages.get_mut(&run.stage_id) else {
                    return;
                };
                if st.finish_partition(run.partition) {
                    self.barrier_attempt_succeeded(run.stage_id);
                    self.map_stage_finished(run.stage_id, sid);
                } else {
                    // A straggler of an earlier attempt may complete a stopped stage.
                    self.refresh_map_stage(sid);
                }
            }
            (StageKind::Result(job_id), Some(task_success::Output::Result(bytes))) if barrier => {
                self.barrier_result(job_id, &run, bytes)
            }
            (StageKind::Result(job_id), Some(task_success::Output::Result(bytes))) => {
                if let Some(st) = self.stages.get_mut(&run.stage_id) {
                    st.finish_partition(run.partition);
                }
                if self.deliver_result(job_id, run.stage_id, run.partition, &run.executor_id, bytes)
                {
                    self.result_stage_finished(job_id, run.stage_id);
                }
            }
            (_, _) => {} // refused by `check_success`
        }
    }

    /// Hands partition `partition`'s result to job `job_id` (the first time only), or
    /// fails the job once its results pass `max_result_bytes`; true when the job has
    /// every partition now.
    pub(super) fn deliver_result(
        &mut self,
        job_id: u64,
        stage_id: u32,
        partition: u32,
        executor_id: &str,
        result: Vec<u8>,
    ) -> bool {
        let max_bytes = self.config.limits.max_result_bytes;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return false;
        };
        if !job.done.insert(partition) {
            return false;
        }
        job.result_bytes = job.result_bytes.saturating_add(result.len() as u64);
        if job.result_bytes > max_bytes {
            let total = job.result_bytes;
            let failure = self.result_limit_failure(stage_id, partition, executor_id, total);
            self.fail_job(job_id, failure);
            return false;
        }
        let _ = job.events.send(JobEvent::TaskResult { partition, result });
        job.done.len() == job.partitions.len()
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
                stage = self.stage_number(run.stage_id),
                stage_id = run.stage_id,
                partition = run.partition,
                executor = %run.executor_id,
                "killed a redundant attempt: another one finished first"
            );
        }
    }

    /// Gives up on the running attempts `which` selects: asks their executors to kill
    /// them and keeps their slots taken (in `abandoned`) until their statuses arrive.
    pub(super) fn abandon_running(&mut self, which: impl Fn(&TaskRun) -> bool) -> Vec<TaskRun> {
        self.abandon_running_with(TaskStop::Kill, which)
    }

    /// [`Self::abandon_running`], stopping the attempts as `stop` says.
    pub(super) fn abandon_running_with(
        &mut self,
        stop: TaskStop,
        which: impl Fn(&TaskRun) -> bool,
    ) -> Vec<TaskRun> {
        let ids: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| which(r))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let run = self.take_running(id)?;
                match stop {
                    TaskStop::Kill => self.launcher.kill(&run.executor_id, id),
                    TaskStop::Interrupt => self.launcher.interrupt(&run.executor_id, id),
                }
                self.abandoned.insert(id, run.executor_id.clone());
                Some(run)
            })
            .collect()
    }
}

/// A failed attempt's reason as the listeners show it (bounded: the executor already cut
/// long messages).
pub(super) fn failure_text(f: &TaskFailure) -> String {
    match &f.reason {
        Some(task_failure::Reason::FetchFailed(ff)) => format!(
            "fetch failed: shuffle {} map {} on executor {}: {}",
            ff.shuffle_id, ff.map_partition, ff.executor_id, ff.message
        ),
        Some(task_failure::Reason::Killed(m)) => format!("killed: {m}"),
        Some(task_failure::Reason::WorkerEnded(m)) => format!("worker ended: {m}"),
        Some(task_failure::Reason::ExecutorLost(m)) => format!("executor lost: {m}"),
        Some(task_failure::Reason::UserError(m)) => m.clone(),
        None => "no reason given".to_string(),
    }
}
