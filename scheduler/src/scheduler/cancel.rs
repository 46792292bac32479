//! Cancelling jobs: one job (its client left, or the UI killed it), a session's job
//! group or all its jobs (Spark's `cancelJobGroup`, `cancelAllJobs`), and the jobs of
//! a stage (the UI's kill of a stage); and how a cancelled job's running tasks stop.
//!
//! Invariants: a cancellation reaches only jobs of the application it names (a
//! session never cancels another's); a cancelled job ends like any failed job (its
//! client hears one `JobFailed` with `Cancelled`: a group's cancel names the group, a
//! stage kill the stage), and its tasks that another live job still needs keep
//! running; a task given up on this way stays in `abandoned`, holding its slot until
//! its status comes back, so no slot is offered twice.

use tracing::info;

use super::Scheduler;
use crate::events::JobFailure;
use crate::limits::bounded;

/// How a given-up attempt is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskStop {
    /// Told to stop at its next batch (Spark's killed flag, checked between records
    /// whatever `interruptOnCancel` says): a task inside user code runs that code out.
    Kill,
    /// Told to stop, and its worker process ended if it does not (stuck in user code):
    /// Spark's `Thread.interrupt()` of `interruptOnCancel`.
    Interrupt,
}

impl Scheduler {
    /// Cancels job `job_id` (its client gave up, or the UI's kill): its tasks are
    /// killed, interrupted if the job asked for that.
    pub(super) fn cancel_job(&mut self, job_id: u64, reason: String) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let stop = if job.properties.interrupt_on_cancel {
            TaskStop::Interrupt
        } else {
            TaskStop::Kill
        };
        self.fail_job_stopping(job_id, JobFailure::Cancelled(reason), stop);
    }

    /// Cancels the running jobs of `application` in job group `group` (every job of
    /// the application with `None`).
    pub(super) fn cancel_job_group(&mut self, application: &str, group: Option<&str>) {
        if group == Some("") {
            return; // no job is in the empty group (jobs without one are not)
        }
        let mut ids: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| &*j.application == application)
            .filter(|j| group.is_none_or(|g| j.properties.job_group == g))
            .map(|j| j.id)
            .collect();
        ids.sort_unstable();
        info!(
            jobs = ids.len(),
            group = group.map(bounded).as_deref(),
            "cancelling jobs of a job group"
        );
        for job_id in ids {
            let reason = match group {
                Some(g) => format!("part of cancelled job group {:?}", bounded(g)),
                None => "cancelled with all jobs of its session (cancel_all_jobs)".to_string(),
            };
            self.cancel_job(job_id, reason);
        }
    }

    /// Cancels every job (of `application`, unless `None`) that needs stage
    /// `stage_id`.
    pub(super) fn cancel_stage(&mut self, stage_id: u32, application: Option<&str>, reason: &str) {
        let number = self.stage_number(stage_id);
        let ids: Vec<u64> = self
            .jobs_using(stage_id)
            .into_iter()
            .filter(|id| {
                self.jobs
                    .get(id)
                    .is_some_and(|j| application.is_none_or(|a| &*j.application == a))
            })
            .collect();
        for job_id in ids {
            self.cancel_job(job_id, format!("stage {number} was cancelled: {reason}"));
        }
    }
}
