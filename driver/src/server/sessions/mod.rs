//! Client sessions: one per connected job client, from `OpenSession` until the client
//! drops the session stream.
//!
//! A session owns an [`IdRange`] (index `1..=IdRange::MAX_INDEX`; 0 is local mode's): its
//! RDD, shuffle and broadcast ids, so clients never touch each other's shuffles,
//! cached blocks or broadcasts. Each of its submitted jobs has a [`JobTrack`] here.
//! Starting jobs and their waiting for the running-jobs bounds is `starting`'s.
//!
//! Invariants:
//! - An id range is used by at most one session, and is freed only after the
//!   session's jobs have all ended and the scheduler (`ForgetIds`) and every executor
//!   (`CleanupSession`) were told to forget its ids; so a later session that reuses
//!   the range never sees anything of the earlier one.
//! - A job is registered with its session in the same critical section that submits
//!   it to the scheduler or queues it, so a closing session always knows every job it
//!   must cancel (queued ones are dropped unstarted).
//! - At most `--max-running-jobs-per-session` jobs of a session and
//!   `--max-running-jobs` of the driver are with the scheduler at once; the others wait
//!   in their session's [`WaitingJobs`] (at most `--max-queued-jobs-per-session`) and
//!   start as running jobs end, oldest submission first over all sessions.
//! - A session is usable only by the client that opened it: `OpenSession` hands that
//!   client a random 256-bit token, and every session-scoped call must carry it
//!   ([`SessionRegistry::with_session`], [`SessionRegistry::submit_job`] compare it in
//!   constant time, refusing with `PERMISSION_DENIED`). Tokens and shuffle keys are
//!   never logged, shown on the status page or echoed in an error.
//! - One client connection (its `ip:port`, tonic's `remote_addr`) holds at most
//!   `ServerLimits::max_sessions_per_connection` sessions, counted from `OpenSession`
//!   until the session's id range is freed, so one client cannot take every range.
//! - With a state directory (`--binary-dir`), every open session has a state file
//!   there ([`persist`]) until it is finalized; a driver that stops keeps them, and a
//!   driver that starts recovers each as a *detached* session (no client, no jobs) that
//!   its client may reopen with its token ([`resume`]) within the grace period, after
//!   which it is finalized like a closed one (its executors' files deleted).
//!   The driver holds only a token's SHA-256, in memory as on disk.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crossbeam_channel::Sender;
use ember_proto::{auth, IdRange};
use ember_proto::{session_event, CleanupSession, OpenSessionRequest, SessionEvent, SessionOpened};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::Stream;
use tonic::Status;
use tracing::{info, warn};

use super::job_queue::WaitingJobs;
use super::jobs::PendingJob;
use super::names;
use super::DriverState;
use ember_scheduler::events::{Broadcasts, SchedulerEvent};

mod persist;
mod resume;
mod starting;

pub(crate) use resume::expire_detached;
pub(crate) use starting::job_ended;

type Events = mpsc::UnboundedSender<Result<SessionEvent, Status>>;

/// One client session.
pub(crate) struct Session {
    pub id: u64,
    /// The application its jobs belong to (`Plan.application`): the client's app name
    /// (escaped and bounded, [`super::names::app_name`]) and the session id, so two
    /// clients of one name are two applications.
    pub application: String,
    /// Its RDD, shuffle and broadcast ids.
    pub range: IdRange,
    /// The client's application name (escaped and bounded).
    app_name: String,
    /// The SHA-256 (lower-case hex) of what the client must send with every call into
    /// this session.
    token_sha256: String,
    /// The credential its tasks fetch its shuffle blocks with (`Plan.shuffle_key`).
    pub shuffle_key: String,
    /// The binaries the session and its jobs use (kept by the binary store).
    pub binaries: HashSet<String>,
    /// Every broadcast the client has sent for this session, held once and shared by
    /// its jobs (a new value replaces the map of handles, never the values).
    pub broadcasts: Broadcasts,
    /// Jobs submitted and not yet ended (running or waiting), by submission number.
    pub jobs: HashMap<u64, Arc<JobTrack>>,
    /// Jobs handed to the scheduler and not yet ended.
    running: u32,
    /// Jobs waiting for a running-jobs bound, in the order they start.
    waiting: WaitingJobs<PendingJob>,
    /// The client has gone; the session ends when its last job has.
    closing: bool,
    /// The client connection that opened it (counted in `Inner::per_connection`).
    connection: Option<std::net::SocketAddr>,
    /// Keeps the client's session stream open.
    events: Option<Events>,
    /// Recovered from the state directory and not reopened yet: finalized at this
    /// instant unless its client reopens it first.
    detached_until: Option<std::time::Instant>,
}

/// What `Status` shows of a session.
pub(crate) struct SessionSummary {
    pub running_jobs: Vec<u64>,
}

#[derive(Default)]
struct Inner {
    next_session: u64,
    next_submission: u64,
    /// Jobs handed to the scheduler and not yet ended, over all sessions.
    running_jobs: u32,
    /// Tasks of the jobs waiting in session queues (added when a job is queued, taken
    /// off when it starts or is dropped unstarted), counted against `--max-queued-tasks`.
    waiting_tasks: u64,
    used_ranges: BTreeSet<IdRange>,
    sessions: BTreeMap<u64, Session>,
    /// Sessions (with their id ranges) held per client connection.
    per_connection: HashMap<Option<std::net::SocketAddr>, u32>,
    /// Where each open session's state file is kept (none: nothing survives a restart).
    state_dir: Option<std::path::PathBuf>,
    /// The driver is stopping: sessions whose client goes are kept (their state files
    /// stay for the next driver), not finalized.
    stopping: bool,
}

/// The driver's sessions.
#[derive(Default)]
pub struct SessionRegistry {
    inner: Mutex<Inner>,
}

impl SessionRegistry {
    /// Live sessions (closing ones included, until their jobs have ended).
    pub(crate) fn summaries(&self) -> Vec<SessionSummary> {
        let inner = self.inner.lock();
        inner
            .sessions
            .values()
            .map(|s| {
                let mut running_jobs: Vec<u64> =
                    s.jobs.values().filter_map(|t| t.running_job()).collect();
                running_jobs.sort_unstable();
                SessionSummary { running_jobs }
            })
            .collect()
    }

    /// The binaries that live sessions (closing ones included) and their jobs use.
    pub(crate) fn binaries_in_use(&self) -> HashSet<String> {
        let inner = self.inner.lock();
        inner
            .sessions
            .values()
            .flat_map(|s| s.binaries.iter().cloned())
            .collect()
    }

    /// Runs `f` on the open session `session_id` if `token` is its token.
    pub(crate) fn with_session<T>(
        &self,
        session_id: u64,
        token: Option<&str>,
        f: impl FnOnce(&Session) -> Result<T, Status>,
    ) -> Result<T, Status> {
        let mut inner = self.inner.lock();
        f(open_session(&mut inner.sessions, session_id, token)?)
    }

    /// The application of the open session whose token is `token` (each compared in
    /// constant time): what that token may see in the web UI.
    pub(crate) fn application_of_token(&self, token: &str) -> Option<String> {
        let inner = self.inner.lock();
        inner
            .sessions
            .values()
            .filter(|s| !s.closing)
            .find(|s| token_matches(s, token))
            .map(|s| s.application.clone())
    }

    /// Cancels running job `job_id` with `reason` (the path a client disconnect takes)
    /// if its session's application is `application` (any, if `None`); whether one was.
    pub(crate) fn cancel_running_job(
        &self,
        job_id: u64,
        application: Option<&str>,
        reason: &str,
        scheduler: &Sender<SchedulerEvent>,
    ) -> bool {
        let inner = self.inner.lock();
        let found = inner
            .sessions
            .values()
            .filter(|s| application.is_none_or(|a| a == s.application))
            .flat_map(|s| s.jobs.values())
            .find(|t| t.running_job() == Some(job_id));
        match found {
            Some(track) => {
                track.cancel(scheduler, reason);
                true
            }
            None => false,
        }
    }

    /// Whether a live or recovered session owns id range `range` with the shuffle key
    /// whose SHA-256 (hex) is `key_sha256` (compared in constant time): whether the
    /// outputs an executor holds under that key are this session's.
    pub(crate) fn owns(&self, range: IdRange, key_sha256: &str) -> bool {
        let inner = self.inner.lock();
        inner.sessions.values().any(|s| {
            s.range == range
                && auth::constant_time_eq(
                    sha256_hex(&s.shuffle_key).as_bytes(),
                    key_sha256.as_bytes(),
                )
        })
    }

    /// Ends every session stream (driver shutdown). With a state directory the
    /// sessions are not finalized: their files stay for the next driver.
    pub(crate) fn shutdown(&self) {
        let mut inner = self.inner.lock();
        inner.stopping = inner.state_dir.is_some();
        for s in inner.sessions.values_mut() {
            if let Some(tx) = s.events.take() {
                let _ = tx.send(Err(Status::unavailable("the driver is shutting down")));
            }
        }
    }
}

/// `PERMISSION_DENIED` unless `token` is `session`'s token (compared in constant time;
/// the message never contains a token).
/// Open session `session_id` of `sessions` if `token` is its token (else NOT_FOUND, or
/// PERMISSION_DENIED for a wrong or missing token).
fn open_session<'a>(
    sessions: &'a mut BTreeMap<u64, Session>,
    session_id: u64,
    token: Option<&str>,
) -> Result<&'a mut Session, Status> {
    let session = sessions
        .get_mut(&session_id)
        .filter(|s| !s.closing)
        .ok_or_else(|| Status::not_found(format!("no open session {session_id} on this driver")))?;
    check_token(session, token)?;
    Ok(session)
}

/// The SHA-256 (lower-case hex) of a session token or shuffle key, as the driver keeps
/// and compares them.
fn sha256_hex(secret: &str) -> String {
    use sha2::Digest;
    ember_proto::digest::to_hex(&sha2::Sha256::digest(secret.as_bytes()))
}

/// Whether `token` is `session`'s (its digest compared in constant time).
fn token_matches(session: &Session, token: &str) -> bool {
    auth::constant_time_eq(
        sha256_hex(token).as_bytes(),
        session.token_sha256.as_bytes(),
    )
}

fn check_token(session: &Session, token: Option<&str>) -> Result<(), Status> {
    let id = session.id;
    match token {
        Some(t) if token_matches(session, t) => Ok(()),
        Some(_) => {
            warn!(session = id, "refused a call with a wrong session token");
            Err(Status::permission_denied(format!(
                "session {id}: wrong session token; a session is usable only by the client \
                 that opened it"
            )))
        }
        None => {
            warn!(session = id, "refused a call without a session token");
            Err(Status::permission_denied(format!(
                "session {id}: the call carries no session token ({} metadata); a session \
                 is usable only by the client that opened it",
                auth::SESSION_TOKEN_METADATA
            )))
        }
    }
}

/// Opens a session for `req`; the returned stream carries `SessionOpened` and then
/// stays open until the driver shuts down. Dropping it closes the session.
pub(crate) fn open(
    state: &Arc<DriverState>,
    req: OpenSessionRequest,
    token: Option<&str>,
    connection: Option<std::net::SocketAddr>,
) -> Result<SessionStream, Status> {
    if req.resume_session_id != 0 {
        return resume::reopen(state, req.resume_session_id, token, connection);
    }
    super::binaries::check_sha256(&req.binary_sha256)?;
    if !state.binaries.contains(&req.binary_sha256) {
        return Err(Status::failed_precondition(format!(
            "binary {} is not on this driver; upload it first",
            req.binary_sha256
        )));
    }
    let token = auth::random_token().map_err(Status::internal)?;
    let shuffle_key = auth::random_token().map_err(Status::internal)?;
    let (tx, rx) = mpsc::unbounded_channel();
    // Escaped and cut once: the name is logged, shown and written to the event log.
    let app_name = super::names::app_name(&req.app_name);
    let (id, range) = {
        let mut inner = state.sessions.inner.lock();
        let limit = state.limits.max_sessions_per_connection;
        let held = inner.per_connection.get(&connection).copied().unwrap_or(0);
        if held >= limit {
            let peer = connection.map_or_else(|| "unknown peer".to_string(), |a| a.to_string());
            warn!(%peer, held, "refused a session: too many on one connection");
            return Err(Status::resource_exhausted(format!(
                "this connection ({peer}) already holds {held} sessions, the most one \
                 connection may open (--max-sessions-per-connection {limit}); close one first"
            )));
        }
        let range = (1..=IdRange::MAX_INDEX)
            .filter_map(IdRange::new)
            .find(|r| !inner.used_ranges.contains(r))
            .ok_or_else(|| {
                Status::resource_exhausted(format!(
                    "all {} session id ranges are in use; close a session first",
                    IdRange::MAX_INDEX
                ))
            })?;
        inner.used_ranges.insert(range);
        *inner.per_connection.entry(connection).or_insert(0) += 1;
        inner.next_session += 1;
        let id = inner.next_session;
        let session = Session {
            id,
            application: format!("{app_name} #{id}"),
            app_name: app_name.clone(),
            range,
            token_sha256: sha256_hex(&token),
            shuffle_key,
            binaries: [req.binary_sha256.clone()].into(),
            broadcasts: Broadcasts::default(),
            jobs: HashMap::new(),
            running: 0,
            waiting: WaitingJobs::new(state.limits.max_queued_jobs_per_session as usize),
            closing: false,
            connection,
            events: Some(tx.clone()),
            detached_until: None,
        };
        // Before the client hears of the session: what the client may reopen after a
        // driver restart is on disk first.
        resume::save(&inner, &session);
        let (total_cores, executors) = state.executors.totals();
        let opened = SessionOpened {
            session_id: id,
            id_base: range.ids().start,
            broadcast_base: range.broadcasts().start,
            total_cores,
            executors,
            session_token: token,
        };
        let _ = tx.send(Ok(SessionEvent {
            event: Some(session_event::Event::Opened(opened)),
        }));
        inner.sessions.insert(id, session);
        (id, range)
    };
    info!(session = id, id_range = range.index(), app = %app_name, binary = %req.binary_sha256, "session opened");
    // The client's configuration (none from an older client), bounded here (the
    // store cuts each text again).
    if !req.conf.is_empty() {
        state.executors.send_to_ui(ember_ui::AppEvent::Environment {
            application: format!("{app_name} #{id}"),
            section: "Configuration".into(),
            entries: (req.conf.iter().take(names::MAX_CONF_ENTRIES))
                .map(|e| (names::conf_text(&e.name), names::conf_text(&e.value)))
                .collect(),
            time_ms: ember_scheduler::listener::now_ms(),
        });
    }
    Ok(SessionStream {
        inner: UnboundedReceiverStream::new(rx),
        _guard: SessionGuard {
            state: state.clone(),
            id,
        },
    })
}

/// The client has gone: cancels the session's jobs and, once none is left, forgets
/// the session.
fn close(state: &DriverState, id: u64) {
    let mut guard = state.sessions.inner.lock();
    let inner = &mut *guard;
    let Some(session) = inner.sessions.get_mut(&id) else {
        return;
    };
    session.events = None;
    if inner.stopping {
        // The driver stops: the session stays on disk for the next one.
        return;
    }
    session.closing = true;
    let reason = format!("client session {id} disconnected");
    for job in session.waiting.take_all() {
        inner.waiting_tasks = inner.waiting_tasks.saturating_sub(job.tasks);
        session.jobs.remove(&job.submission);
        job.drop_unstarted(&reason);
    }
    for track in session.jobs.values() {
        track.cancel(&state.to_scheduler, &reason);
    }
    info!(
        session = id,
        jobs = session.jobs.len(),
        "client session disconnected"
    );
    if session.jobs.is_empty() {
        finalize(state, inner, id);
    }
}

/// What tells an executor to forget the session of id range `range`: its RDD, shuffle
/// and broadcast ids.
pub(crate) fn cleanup_of(range: IdRange) -> CleanupSession {
    let (ids, broadcasts) = (range.ids(), range.broadcasts());
    CleanupSession {
        id_lo: ids.start,
        id_hi: ids.end,
        broadcast_lo: broadcasts.start,
        broadcast_hi: broadcasts.end,
    }
}

/// Tells the scheduler and the executors to forget the session's ids, then frees its
/// id range. Called with the registry locked, so no new session takes the range meanwhile.
fn finalize(state: &DriverState, inner: &mut Inner, id: u64) {
    let Some(session) = inner.sessions.remove(&id) else {
        return;
    };
    if let Some(dir) = &inner.state_dir {
        persist::remove(dir, id);
    }
    // A recovered session never reopened was never counted on a connection.
    let counted = session.detached_until.is_none();
    if let Some(held) = (inner.per_connection.get_mut(&session.connection)).filter(|_| counted) {
        *held -= 1;
        if *held == 0 {
            inner.per_connection.remove(&session.connection);
        }
    }
    let ids = session.range.ids();
    let _ = state.to_scheduler.send(SchedulerEvent::ForgetIds {
        id_lo: ids.start,
        id_hi: ids.end,
    });
    let _ = state.to_scheduler.send(SchedulerEvent::ApplicationEnded {
        application: session.application.clone(),
    });
    state.executors.cleanup_session(cleanup_of(session.range));
    inner.used_ranges.remove(&session.range);
    info!(
        session = id,
        id_range = session.range.index(),
        "session ended; its ids are forgotten"
    );
}

#[derive(Default)]
struct TrackState {
    job_id: Option<u64>,
    ended: bool,
    /// Cancel requested before the scheduler gave the job an id.
    cancel: Option<String>,
}

/// What the driver knows about one submitted job: its id once started, whether it has
/// ended, and a cancel request that came before the id.
#[derive(Default)]
pub struct JobTrack {
    state: Mutex<TrackState>,
}

impl JobTrack {
    /// The job's id if it has started and not ended.
    pub fn running_job(&self) -> Option<u64> {
        let s = self.state.lock();
        s.job_id.filter(|_| !s.ended)
    }

    /// Records the job id; returns a cancel reason requested before it.
    pub(crate) fn started(&self, job_id: u64) -> Option<String> {
        let mut s = self.state.lock();
        s.job_id = Some(job_id);
        s.cancel.take()
    }

    pub(crate) fn end(&self) {
        self.state.lock().ended = true;
    }

    /// Whether a cancel came before the job started (its client left).
    pub(crate) fn cancel_requested(&self) -> bool {
        self.state.lock().cancel.is_some()
    }

    /// Cancels the job (now, or as soon as it has an id) unless it has ended.
    pub(crate) fn cancel(&self, scheduler: &Sender<SchedulerEvent>, reason: &str) {
        let mut s = self.state.lock();
        if s.ended {
            return;
        }
        match s.job_id {
            Some(job_id) => {
                info!(job_id, "cancelling job: {reason}");
                let _ = scheduler.send(SchedulerEvent::CancelJob {
                    job_id,
                    reason: reason.to_string(),
                });
            }
            None => {
                if s.cancel.is_none() {
                    s.cancel = Some(reason.to_string());
                }
            }
        }
    }
}

/// Closes its session when dropped.
struct SessionGuard {
    state: Arc<DriverState>,
    id: u64,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        close(&self.state, self.id);
    }
}

/// The response stream of `OpenSession`.
pub struct SessionStream {
    inner: UnboundedReceiverStream<Result<SessionEvent, Status>>,
    _guard: SessionGuard,
}

impl Stream for SessionStream {
    type Item = Result<SessionEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}
