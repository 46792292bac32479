//! How stages and jobs end: a shuffle-map stage finishing (and waking the waiting
//! stages that read its output), a result stage finishing its job, and a job failing
//! or being forgotten (its orphaned stages stopped, their running attempts abandoned).
//!
//! Invariants: a job ends once (`jobs` no longer holds it afterwards), its client hears
//! exactly one `JobSucceeded` or `JobFailed`, and stages another live job still uses
//! keep running.

use std::collections::HashSet;

use tracing::debug;

use super::cancel::TaskStop;
use super::{Scheduler, StageState};
use crate::events::{JobEvent, JobFailure};
use crate::listener::{now_ms, ListenerEvent};

impl Scheduler {
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
        debug!(job_id, "job succeeded");
        self.finish_job(job_id, TaskStop::Kill);
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

    pub(super) fn jobs_using(&self, stage_id: u32) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| j.stages.contains(&stage_id))
            .map(|j| j.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Fails a job: tells its client, stops its tasks, forgets its state.
    pub(super) fn fail_job(&mut self, job_id: u64, failure: JobFailure) {
        self.fail_job_stopping(job_id, failure, TaskStop::Kill);
    }

    /// [`Self::fail_job`], stopping its tasks (those no other live job needs) as `stop`
    /// says.
    pub(super) fn fail_job_stopping(
        &mut self,
        job_id: u64,
        mut failure: JobFailure,
        stop: TaskStop,
    ) {
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
        self.finish_job(job_id, stop);
    }

    /// The number within its application of stage `stage_id` (the id itself for a
    /// stage already forgotten).
    pub(super) fn stage_number(&self, stage_id: u32) -> u32 {
        self.stages.get(&stage_id).map_or(stage_id, |s| s.number)
    }

    fn finish_job(&mut self, job_id: u64, stop: TaskStop) {
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
        self.queue.retain_stages(|s| !orphaned.contains(&s));
        self.abandon_running_with(stop, |r| orphaned.contains(&r.stage_id));
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
