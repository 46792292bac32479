//! Starting a session's jobs: a submitted job starts now if its session and the driver
//! are under their running-jobs bounds, else waits in its session's [`WaitingJobs`];
//! as running jobs end, waiting ones start, oldest submission first over all sessions
//! (the order `job_queue` documents).
//!
//! Invariants:
//! - `Inner::running_jobs` and each `Session::running` count exactly the jobs handed to
//!   the scheduler and not yet ended; `Inner::waiting_tasks` is the sum of the tasks of
//!   the jobs in session queues (added when one is queued, taken off when it starts or
//!   is dropped unstarted), counted against `--max-queued-tasks`.
//! - A job is registered with its session in the same critical section that starts or
//!   queues it.
//!
//! [`WaitingJobs`]: super::super::job_queue::WaitingJobs

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;
use tracing::{info, warn};

use super::super::job_queue::oldest_startable;
use super::super::jobs::{self, PendingJob, WireEvents};
use super::super::DriverState;
use super::{finalize, open_session, Inner, JobTrack, Session, SessionRegistry};
use ember_proto::Plan;
use ember_scheduler::events::{Broadcasts, SchedulerEvent};

impl SessionRegistry {
    /// Accepts a job into the open session `session_id` (`accept` validates it and
    /// returns its plan and broadcasts, under the registry's lock) and starts it now if
    /// the session and the driver are under their running-jobs bounds; else it waits in
    /// the session's queue, or is refused if that is full. Returns the job's tracker.
    pub(crate) fn submit_job(
        &self,
        state: &Arc<DriverState>,
        session_id: u64,
        token: Option<&str>,
        tasks: u64,
        accept: impl FnOnce(&mut Session) -> Result<(Plan, Broadcasts), Status>,
        tx: mpsc::UnboundedSender<WireEvents>,
    ) -> Result<Arc<JobTrack>, Status> {
        let limits = &state.limits;
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let session = open_session(&mut inner.sessions, session_id, token)?;
        // After the token: only the session's client learns the driver's queued tasks.
        jobs::check_queued_tasks(state, tasks, inner.waiting_tasks)?;
        let start_now = session.running < limits.max_running_jobs_per_session
            && inner.running_jobs < limits.max_running_jobs;
        if !start_now && !session.waiting.has_room() {
            // Jobs whose clients left while they waited make room first.
            for job in session.waiting.take_where(|j| j.track.cancel_requested()) {
                inner.waiting_tasks = inner.waiting_tasks.saturating_sub(job.tasks);
                session.jobs.remove(&job.submission);
                job.drop_unstarted("client disconnected");
            }
        }
        // Refused before `accept` keeps anything of the job (its broadcasts).
        if !start_now && !session.waiting.has_room() {
            warn!(
                session = session_id,
                running = session.running,
                waiting = session.waiting.len(),
                "refused a job: the session's queue of waiting jobs is full"
            );
            return Err(Status::resource_exhausted(format!(
                "session {session_id} has {} jobs running and {} waiting to start, the limit \
                 of waiting jobs (--max-queued-jobs-per-session {}); jobs start as running \
                 ones end (at most {} per session, --max-running-jobs-per-session, and {} on \
                 the driver, --max-running-jobs)",
                session.running,
                session.waiting.len(),
                limits.max_queued_jobs_per_session,
                limits.max_running_jobs_per_session,
                limits.max_running_jobs,
            )));
        }
        let (plan, broadcasts) = accept(session)?;
        inner.next_submission += 1;
        let submission = inner.next_submission;
        let track = Arc::new(JobTrack::default());
        session.jobs.insert(submission, track.clone());
        let job = PendingJob {
            session_id,
            submission,
            tasks,
            plan,
            broadcasts,
            track: track.clone(),
            tx,
        };
        if start_now {
            session.running += 1;
            inner.running_jobs += 1;
            jobs::start(state, job);
        } else {
            let waiting = session.waiting.len() + 1;
            // Room was checked above under the same lock; were it gone, the job ends.
            match session.waiting.push(job) {
                Ok(()) => inner.waiting_tasks = inner.waiting_tasks.saturating_add(tasks),
                Err(job) => {
                    session.jobs.remove(&submission);
                    job.drop_unstarted("the session's queue of waiting jobs is full");
                }
            }
            info!(
                session = session_id,
                running = session.running,
                waiting,
                "job waits for a running-jobs bound"
            );
        }
        Ok(track)
    }
}

/// A running job of session `session_id` has ended: starts the waiting jobs the
/// running-jobs bounds now allow (oldest submission first over all sessions) and
/// finishes a closing session's cleanup.
pub(crate) fn job_ended(state: &Arc<DriverState>, session_id: u64, submission: u64) {
    let mut guard = state.sessions.inner.lock();
    let inner = &mut *guard;
    if let Some(session) = inner.sessions.get_mut(&session_id) {
        if session.jobs.remove(&submission).is_some() {
            session.running = session.running.saturating_sub(1);
            inner.running_jobs = inner.running_jobs.saturating_sub(1);
        }
    }
    start_waiting(state, inner);
    let done = inner
        .sessions
        .get(&session_id)
        .is_some_and(|s| s.closing && s.jobs.is_empty());
    if done {
        finalize(state, inner, session_id);
    }
    if inner.running_jobs == 0 {
        shrink_when_idle(inner);
    }
}

/// Starts waiting jobs while the running-jobs bounds allow, oldest submission first
/// among the sessions under their own bound (one driver-wide FIFO, see `job_queue`), so
/// the session whose job just ended gets no head start over the others.
fn start_waiting(state: &Arc<DriverState>, inner: &mut Inner) {
    let limits = &state.limits;
    while inner.running_jobs < limits.max_running_jobs {
        let queues = inner.sessions.values().map(|s| {
            let under_bound = s.running < limits.max_running_jobs_per_session;
            (s.id, under_bound, &s.waiting)
        });
        let Some(id) = oldest_startable(queues, |job: &PendingJob| job.submission) else {
            return;
        };
        let Some(session) = inner.sessions.get_mut(&id) else {
            return;
        };
        let Some(job) = session.waiting.next() else {
            return;
        };
        inner.waiting_tasks = inner.waiting_tasks.saturating_sub(job.tasks);
        if job.track.cancel_requested() {
            // Its client left while it waited.
            session.jobs.remove(&job.submission);
            job.drop_unstarted("client disconnected");
            continue;
        }
        session.running += 1;
        inner.running_jobs += 1;
        jobs::start(state, job);
    }
}

/// No job is running: gives back the memory the sessions' job maps grew to.
fn shrink_when_idle(inner: &mut Inner) {
    for s in inner.sessions.values_mut() {
        s.jobs.shrink_to_fit();
    }
}

impl SessionRegistry {
    /// Cancels session `session_id`'s jobs of job group `group` (every job, with
    /// `None`), after checking `token`: those waiting to start end unstarted, and the
    /// scheduler is told to cancel the running ones, under the registry's lock, so a
    /// job of the group submitted after this call returns is not cancelled. Returns how
    /// many waiting jobs were cancelled.
    pub(crate) fn cancel_jobs(
        &self,
        session_id: u64,
        token: Option<&str>,
        group: Option<&str>,
        scheduler: &crossbeam_channel::Sender<SchedulerEvent>,
    ) -> Result<u32, Status> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let session = open_session(&mut inner.sessions, session_id, token)?;
        let in_group = |job: &PendingJob| {
            let g = job
                .plan
                .properties
                .as_ref()
                .map_or("", |p| p.job_group.as_str());
            group.is_none_or(|want| g == want)
        };
        let cancelled = session.waiting.take_where(in_group);
        let n = cancelled.len() as u32;
        for job in cancelled {
            inner.waiting_tasks = inner.waiting_tasks.saturating_sub(job.tasks);
            session.jobs.remove(&job.submission);
            job.drop_unstarted(match group {
                Some(_) => "its job group was cancelled",
                None => "all jobs of its session were cancelled",
            });
        }
        let _ = scheduler.send(SchedulerEvent::CancelJobGroup {
            application: session.application.clone(),
            group: group.map(str::to_string),
        });
        Ok(n)
    }
}
