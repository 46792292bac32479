//! Job submission: validating a client's plan against its session, handing it to the
//! scheduler, and streaming the job's events back until it ends.
//!
//! Invariants:
//! - A plan only names node and shuffle ids inside its session's id range, and only
//!   broadcasts inside its session's broadcast range; anything else is refused before
//!   the scheduler sees it.
//! - A plan reaches the scheduler only from the session's own client (its token
//!   checked), carrying that session's shuffle key and nobody else's.
//! - Each job stream ends with the job's `succeeded` or `failed` event (or an error
//!   if the scheduler stopped). A client that drops the stream before then cancels
//!   the job, which kills its running tasks.
//! - A job's [`JobTrack`] is ended, and its session told, before its last event is
//!   sent: a cancel that races with the end is never sent for an ended job, and a
//!   client that has seen the end knows the driver is done with the job.
//! - A job's events are followed by a task on the async runtime, woken by the
//!   scheduler ([`JobEventSender::with_wake`]): no thread per job.
//! - A job's broadcasts are its session's, shared ([`Broadcasts`]): submitting a job
//!   copies no broadcast value.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use ember_proto::{dependency, limits, Plan, SubmitJobRequest};
use prost::Message;
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::Stream;
use tonic::Status;
use tracing::{debug, info};

use super::sessions::{self, JobTrack};
use super::{DriverState, ServerLimits};
use ember_proto::{BROADCASTS_PER_SESSION, IDS_PER_SESSION};
use ember_scheduler::events::{Broadcasts, JobEvent, JobEventSender, SchedulerEvent};
use ember_scheduler::wire::to_wire;

pub(crate) type WireEvents = Result<ember_proto::JobEvents, Status>;

/// Checks that every id `plan` names lies in `[lo, hi)`.
pub fn check_plan_ids(plan: &Plan, lo: u32, hi: u32) -> Result<(), String> {
    let outside = |what: &str, id: u32| {
        Err(format!(
            "{what} {id} is outside this session's id range [{lo}, {hi})"
        ))
    };
    let ok = |id: u32| id >= lo && id < hi;
    if !ok(plan.final_rdd) {
        return outside("final node", plan.final_rdd);
    }
    for node in &plan.nodes {
        if !ok(node.id) {
            return outside("node", node.id);
        }
        for dep in &node.deps {
            match &dep.kind {
                Some(dependency::Kind::Narrow(n)) if !ok(n.parent) => {
                    return outside("parent node", n.parent)
                }
                Some(dependency::Kind::Shuffle(s)) => {
                    if !ok(s.shuffle_id) {
                        return outside("shuffle", s.shuffle_id);
                    }
                    if !ok(s.parent) {
                        return outside("parent node", s.parent);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// `Err(RESOURCE_EXHAUSTED)` if adding `new` to a session's `held` broadcasts would
/// pass the session's count or byte limit (a value sent again under its id replaces
/// the old one).
fn check_broadcast_limits(
    held: &HashMap<u64, Bytes>,
    new: &[ember_proto::BroadcastValue],
    limits: &ServerLimits,
) -> Result<(), Status> {
    let mut count = held.len() as u64;
    let mut bytes: u64 = held.values().map(|v| v.len() as u64).sum();
    for b in new {
        match held.get(&b.id) {
            Some(old) => bytes -= old.len() as u64,
            None => count += 1,
        }
        bytes += b.value.len() as u64;
    }
    let max_count = u64::from(limits.max_broadcasts_per_session);
    if count > max_count {
        return Err(Status::resource_exhausted(format!(
            "the session would hold {count} broadcasts, over the limit of {max_count} \
             (--max-broadcasts-per-session)"
        )));
    }
    let max_bytes = limits.max_broadcast_bytes_per_session;
    if bytes > max_bytes {
        return Err(Status::resource_exhausted(format!(
            "the session's broadcasts would total {bytes} bytes, over the limit of \
             {max_bytes} (--max-broadcast-bytes-per-session)"
        )));
    }
    Ok(())
}

/// `Err(RESOURCE_EXHAUSTED)` if a job of `tasks` tasks would take the tasks waiting to
/// run past `--max-queued-tasks`: those waiting for a slot (as the scheduler last
/// counted them) and `in_waiting_jobs`, the tasks of jobs waiting in session queues.
/// A job alone is always let in when nothing waits, whatever its size
/// (`--max-tasks-per-job` bounds it).
pub(crate) fn check_queued_tasks(
    state: &DriverState,
    tasks: u64,
    in_waiting_jobs: u64,
) -> Result<(), Status> {
    let for_slot = state.scheduler.queued_tasks() as u64;
    let queued = for_slot.saturating_add(in_waiting_jobs);
    let limit = state.limits.max_queued_tasks;
    if queued > 0 && queued.saturating_add(tasks) > limit {
        return Err(Status::resource_exhausted(format!(
            "the driver has {queued} tasks waiting ({for_slot} for a slot, \
             {in_waiting_jobs} in jobs waiting to start); this job's {tasks} more would \
             pass the limit of {limit} (--max-queued-tasks)"
        )));
    }
    Ok(())
}

/// A job accepted into its session, to be handed to the scheduler now or once the
/// running-jobs bounds allow (it then waits in its session's [`WaitingJobs`]).
///
/// [`WaitingJobs`]: super::job_queue::WaitingJobs
pub(crate) struct PendingJob {
    pub session_id: u64,
    pub submission: u64,
    /// Its tasks over all stages (counted against `--max-queued-tasks` while it waits).
    pub tasks: u64,
    pub plan: Plan,
    /// The session's broadcasts as of the submission: shared, not copied.
    pub broadcasts: Broadcasts,
    pub track: Arc<JobTrack>,
    /// The client's job stream.
    pub tx: mpsc::UnboundedSender<WireEvents>,
}

impl PendingJob {
    /// The job will never start (its session ended or its client left while it waited):
    /// ends its track and tells the client, if still there.
    pub(crate) fn drop_unstarted(self, reason: &str) {
        self.track.end();
        let _ = self.tx.send(Err(Status::cancelled(format!(
            "the job was cancelled before it started: {reason}"
        ))));
    }
}

/// Validates a job and hands it to its session, which starts it now or queues it; the
/// returned stream carries its events.
pub(crate) fn submit(
    state: &Arc<DriverState>,
    req: SubmitJobRequest,
    token: Option<&str>,
) -> Result<JobStream, Status> {
    let session_id = req.session_id;
    // Refuse an unknown session, or one that is not the caller's, before the plan.
    state.sessions.with_session(session_id, token, |_| Ok(()))?;
    let mut plan = req
        .plan
        .ok_or_else(|| Status::invalid_argument("SubmitJob without a plan"))?;
    // Sizes before anything else looks at the plan (the scheduler checks them again).
    let tasks = ember_scheduler::limits::check_plan_tasks(&plan, &state.plan_limits)
        .map_err(|e| Status::resource_exhausted(e.to_string()))?;
    if !state.binaries.contains(&plan.binary_hash) {
        return Err(Status::invalid_argument(format!(
            "the plan's binary {:?} is not on this driver; upload it first",
            ember_scheduler::limits::bounded(&plan.binary_hash)
        )));
    }
    let description = super::names::logged(&plan.description);
    let new_broadcasts = req.new_broadcasts;
    let (tx, rx) = mpsc::unbounded_channel();
    let accept = |session: &mut sessions::Session| {
        let (lo, hi) = (session.range.ids().start, session.range.ids().end);
        debug_assert_eq!(hi - lo, IDS_PER_SESSION);
        check_plan_ids(&plan, lo, hi).map_err(Status::invalid_argument)?;
        let (blo, bhi) = (
            session.range.broadcasts().start,
            session.range.broadcasts().end,
        );
        debug_assert_eq!(bhi - blo, BROADCASTS_PER_SESSION);
        if let Some(b) = new_broadcasts.iter().find(|b| b.id < blo || b.id >= bhi) {
            return Err(Status::invalid_argument(format!(
                "broadcast {} is outside this session's broadcast range [{blo}, {bhi})",
                b.id
            )));
        }
        check_broadcast_limits(&session.broadcasts, &new_broadcasts, &state.limits)?;
        if !new_broadcasts.is_empty() {
            // Copy-on-write of the map of handles only (the values are shared): the
            // session's earlier jobs keep the values they were submitted with.
            let held = Arc::make_mut(&mut session.broadcasts);
            for b in new_broadcasts {
                held.insert(b.id, b.value);
            }
        }
        // Whatever the client put there: its tasks fetch shuffle blocks with this.
        plan.shuffle_key = session.shuffle_key.clone();
        plan.application = session.application.clone();
        session.binaries.insert(plan.binary_hash.clone());
        Ok((plan, session.broadcasts.clone()))
    };
    let track = state
        .sessions
        .submit_job(state, session_id, token, tasks, accept, tx)?;
    debug!(session = session_id, "job submitted: {description}");
    Ok(JobStream {
        inner: UnboundedReceiverStream::new(rx),
        _guard: JobGuard {
            track,
            scheduler: state.to_scheduler.clone(),
        },
    })
}

/// Hands `job` to the scheduler and follows its events on the async runtime (no
/// thread per job); must run inside the driver's tokio runtime.
pub(crate) fn start(state: &Arc<DriverState>, job: PendingJob) {
    let (etx, erx) = crossbeam_channel::unbounded();
    let wake = Arc::new(Notify::new());
    let waker = wake.clone();
    let events = JobEventSender::with_wake(etx, move || waker.notify_one());
    match state
        .recovery_until
        .filter(|t| *t > tokio::time::Instant::now())
    {
        // A driver that recovered sessions gives the executors a moment to come back
        // with their map outputs before it plans a job (its stages then skip).
        Some(until) => {
            let scheduler = state.scheduler.clone();
            let (plan, broadcasts) = (job.plan, job.broadcasts);
            tokio::spawn(async move {
                tokio::time::sleep_until(until).await;
                scheduler.submit_to(plan, broadcasts, events);
            });
        }
        None => state.scheduler.submit_to(job.plan, job.broadcasts, events),
    }
    tokio::spawn(bridge(
        state.clone(),
        job.track,
        erx,
        wake,
        job.tx,
        (job.session_id, job.submission),
    ));
}

/// Forwards a job's events from the scheduler to its client stream, as many to a
/// message as have arrived by the time one is sent (bounded by
/// [`limits::MAX_EVENT_BATCH`] and [`limits::BATCH_BYTES`]); tells the session the job
/// ended before the last event goes out, so a client that has seen its job end knows
/// the driver is done with it (a closed session's cleanup included). Waits on `wake`,
/// which the scheduler notifies after every event and when it lets go of the job.
async fn bridge(
    state: Arc<DriverState>,
    track: Arc<JobTrack>,
    events: Receiver<JobEvent>,
    wake: Arc<Notify>,
    tx: mpsc::UnboundedSender<WireEvents>,
    (session_id, submission): (u64, u64),
) {
    // A client that has gone still gets its job cancelled by the stream's guard; keep
    // draining until the scheduler ends the job, so sends may fail.
    let send = |events: Vec<ember_proto::JobEvent>| {
        let _ = tx.send(Ok(ember_proto::JobEvents { events }));
    };
    loop {
        let first = match events.try_recv() {
            Ok(ev) => ev,
            Err(TryRecvError::Empty) => {
                wake.notified().await;
                continue;
            }
            Err(TryRecvError::Disconnected) => break,
        };
        let mut batch = EventBatch::default();
        let mut next = Some(first);
        while let Some(ev) = next.take() {
            let last = ev.ends_job();
            if let JobEvent::Started { job_id, .. } = ev {
                if let Some(reason) = track.started(job_id) {
                    info!(job_id, "cancelling job: {reason}");
                    let _ = state
                        .to_scheduler
                        .send(SchedulerEvent::CancelJob { job_id, reason });
                }
            }
            if let Some(full) = batch.push(to_wire(ev)) {
                send(full);
            }
            if last {
                track.end();
                sessions::job_ended(&state, session_id, submission);
                send(batch.take());
                return;
            }
            next = events.try_recv().ok();
        }
        send(batch.take());
        // Let the other jobs' streams (and calls) run between batches.
        tokio::task::yield_now().await;
    }
    track.end();
    sessions::job_ended(&state, session_id, submission);
    let _ = tx.send(Err(Status::unavailable(
        "the scheduler stopped before the job ended",
    )));
}

/// Wire events on their way into one `JobEvents` message.
#[derive(Default)]
struct EventBatch {
    events: Vec<ember_proto::JobEvent>,
    bytes: usize,
}

impl EventBatch {
    /// Adds `event`; returns the batch so far first if `event` would take it past
    /// [`limits::MAX_EVENT_BATCH`] events or [`limits::BATCH_BYTES`] (a batch holds at
    /// least one event, whatever its size).
    fn push(&mut self, event: ember_proto::JobEvent) -> Option<Vec<ember_proto::JobEvent>> {
        let len = event.encoded_len();
        let full = (!self.events.is_empty()
            && (self.events.len() >= limits::MAX_EVENT_BATCH
                || self.bytes + len > limits::BATCH_BYTES))
            .then(|| self.take());
        self.bytes += len;
        self.events.push(event);
        full
    }

    /// The events gathered, leaving the batch empty.
    fn take(&mut self) -> Vec<ember_proto::JobEvent> {
        self.bytes = 0;
        std::mem::take(&mut self.events)
    }
}

/// Cancels its job when dropped, unless the job has ended.
struct JobGuard {
    track: Arc<JobTrack>,
    scheduler: Sender<SchedulerEvent>,
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        self.track.cancel(&self.scheduler, "client disconnected");
    }
}

/// The response stream of `SubmitJob`.
pub struct JobStream {
    inner: UnboundedReceiverStream<WireEvents>,
    _guard: JobGuard,
}

impl Stream for JobStream {
    type Item = WireEvents;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_proto::{Dependency, RddNode, ShuffleDependency};

    fn node(id: u32, deps: Vec<Dependency>) -> RddNode {
        RddNode {
            id,
            num_partitions: 1,
            deps,
            ..Default::default()
        }
    }

    fn task_result(partition: u32, bytes: usize) -> ember_proto::JobEvent {
        to_wire(JobEvent::TaskResult {
            partition,
            result: vec![7; bytes],
        })
    }

    #[test]
    fn event_batches_are_bounded_in_count_and_bytes_and_keep_order() {
        let mut batch = EventBatch::default();
        let mut sent = Vec::new();
        let total = 2 * limits::MAX_EVENT_BATCH + 5;
        for p in 0..total as u32 {
            sent.extend(batch.push(task_result(p, 8)));
        }
        sent.push(batch.take());
        let sizes: Vec<usize> = sent.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            vec![limits::MAX_EVENT_BATCH, limits::MAX_EVENT_BATCH, 5]
        );
        let order: Vec<u32> = sent
            .iter()
            .flatten()
            .map(|e| match &e.event {
                Some(ember_proto::job_event::Event::TaskResult(r)) => r.partition,
                other => panic!("not a result: {other:?}"),
            })
            .collect();
        assert_eq!(order, (0..total as u32).collect::<Vec<_>>());
        assert!(batch.take().is_empty());

        // Bytes: two results of 40 % of the bound fit, a third starts a new batch; one
        // bigger than the bound travels alone.
        let big = limits::BATCH_BYTES * 2 / 5;
        assert!(batch.push(task_result(0, big)).is_none());
        assert!(batch.push(task_result(1, big)).is_none());
        assert_eq!(batch.push(task_result(2, big)).map(|b| b.len()), Some(2));
        assert_eq!(
            batch
                .push(task_result(3, limits::BATCH_BYTES + 1))
                .map(|b| b.len()),
            Some(1)
        );
        assert_eq!(batch.push(task_result(4, 1)).map(|b| b.len()), Some(1));
        let rest = batch.take();
        assert_eq!(rest.len(), 1);
        assert!(rest.iter().map(|e| e.encoded_len()).sum::<usize>() <= limits::BATCH_BYTES);
    }

    #[test]
    fn plan_ids_must_stay_in_the_session_range() {
        let shuffle = |shuffle_id, parent| Dependency {
            kind: Some(dependency::Kind::Shuffle(ShuffleDependency {
                shuffle_id,
                parent,
                ..Default::default()
            })),
        };
        let plan = |nodes: Vec<RddNode>, final_rdd| Plan {
            nodes,
            final_rdd,
            ..Default::default()
        };
        let (lo, hi) = (1 << 20, 2 << 20);
        let good = plan(
            vec![node(lo, vec![]), node(lo + 2, vec![shuffle(lo + 1, lo)])],
            lo + 2,
        );
        assert!(check_plan_ids(&good, lo, hi).is_ok());
        let bad_node = plan(vec![node(5, vec![])], lo);
        assert!(check_plan_ids(&bad_node, lo, hi)
            .unwrap_err()
            .contains("node 5"));
        let bad_shuffle = plan(
            vec![node(lo, vec![]), node(lo + 2, vec![shuffle(7, lo)])],
            lo + 2,
        );
        assert!(check_plan_ids(&bad_shuffle, lo, hi)
            .unwrap_err()
            .contains("shuffle 7"));
        let bad_final = plan(vec![node(lo, vec![])], hi);
        assert!(check_plan_ids(&bad_final, lo, hi)
            .unwrap_err()
            .contains("final node"));
    }
}
