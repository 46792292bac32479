//! Sessions across a driver restart: saving an open session's state file, recovering
//! the files as detached sessions when the driver starts, a client reopening its
//! detached session with its token, and finalizing the ones no client reopened in time.
//!
//! Invariants: a recovered session owns its id range from the start (no new session
//! can take it, so its executors' files and its shuffle key stay its own); only the
//! client holding the token whose digest the file holds can reopen it, and only while
//! no stream holds it; it is reopened with the same id, id range, shuffle key and
//! token, and no jobs (the client resubmits what was running). A detached session past
//! its deadline is finalized as a closed one: the scheduler forgets its ids and every
//! executor deletes its files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ember_proto::{session_event, IdRange, SessionEvent, SessionOpened};
use ember_scheduler::events::Broadcasts;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;
use tracing::{info, warn};

use super::super::job_queue::WaitingJobs;
use super::super::DriverState;
use super::persist::{self, SessionState};
use super::{check_token, finalize, Inner, Session, SessionGuard, SessionRegistry, SessionStream};

/// Writes `session`'s state file if the driver has a state directory (a failure is
/// logged: the session works, but would not survive a restart).
pub(super) fn save(inner: &Inner, session: &Session) {
    let Some(dir) = &inner.state_dir else {
        return;
    };
    let mut binaries: Vec<String> = session.binaries.iter().cloned().collect();
    binaries.sort();
    let state = SessionState {
        id: session.id,
        range: session.range.index(),
        app_name: session.app_name.clone(),
        token_sha256: session.token_sha256.clone(),
        shuffle_key: session.shuffle_key.clone(),
        binaries,
    };
    if let Err(e) = persist::save(dir, &state) {
        warn!(
            session = session.id,
            dir = %dir.display(),
            "cannot write the session's state file; it will not survive a driver restart: {e}"
        );
    }
}

impl SessionRegistry {
    /// A registry whose sessions are saved in `state_dir` (none: nothing survives a
    /// restart); the sessions found there are recovered, detached, each finalized
    /// unless its client reopens it within `grace`. How many were recovered.
    pub(crate) fn with_state_dir(
        state_dir: Option<PathBuf>,
        grace: Duration,
        max_queued_jobs_per_session: u32,
    ) -> (SessionRegistry, usize) {
        let registry = SessionRegistry::default();
        let recovered = {
            let mut inner = registry.inner.lock();
            inner.state_dir = state_dir.clone();
            let found = state_dir.as_deref().map(persist::load).unwrap_or_default();
            let until = Instant::now() + grace;
            let mut n = 0;
            for s in found {
                let Some(range) = IdRange::new(s.range) else {
                    continue;
                };
                if inner.used_ranges.contains(&range) || inner.sessions.contains_key(&s.id) {
                    warn!(
                        session = s.id,
                        "two state files claim one session or id range; keeping the first"
                    );
                    continue;
                }
                inner.used_ranges.insert(range);
                inner.next_session = inner.next_session.max(s.id);
                info!(session = s.id, id_range = s.range, app = %s.app_name, "session recovered from the state directory; waiting for its client");
                inner.sessions.insert(
                    s.id,
                    Session {
                        id: s.id,
                        application: format!("{} #{}", s.app_name, s.id),
                        app_name: s.app_name,
                        range,
                        token_sha256: s.token_sha256,
                        shuffle_key: s.shuffle_key,
                        binaries: s.binaries.into_iter().collect(),
                        broadcasts: Broadcasts::default(),
                        jobs: HashMap::new(),
                        running: 0,
                        waiting: WaitingJobs::new(max_queued_jobs_per_session as usize),
                        closing: false,
                        connection: None,
                        events: None,
                        detached_until: Some(until),
                    },
                );
                n += 1;
            }
            n
        };
        (registry, recovered)
    }
}

/// Reopens detached session `id` for the client proving it owns it with `token`; the
/// stream carries `SessionOpened` with the session's ids and token.
pub(super) fn reopen(
    state: &Arc<DriverState>,
    id: u64,
    token: Option<&str>,
    connection: Option<std::net::SocketAddr>,
) -> Result<SessionStream, Status> {
    let (tx, rx) = mpsc::unbounded_channel();
    {
        let mut guard = state.sessions.inner.lock();
        let inner = &mut *guard;
        let session = inner.sessions.get_mut(&id).ok_or_else(|| {
            Status::not_found(format!(
                "no session {id} to reopen on this driver: it was not recovered from the \
                 driver's state directory (--binary-dir), or no client reopened it in time"
            ))
        })?;
        check_token(session, token)?;
        if session.detached_until.is_none() {
            return Err(Status::failed_precondition(format!(
                "session {id} is open on another connection; a session has one client"
            )));
        }
        session.detached_until = None;
        session.connection = connection;
        session.events = Some(tx.clone());
        *inner.per_connection.entry(connection).or_insert(0) += 1;
        let (total_cores, executors) = state.executors.totals();
        let opened = SessionOpened {
            session_id: id,
            id_base: session.range.ids().start,
            broadcast_base: session.range.broadcasts().start,
            total_cores,
            executors,
            // The client proved it holds the token; the driver keeps only its digest.
            session_token: token.unwrap_or_default().to_string(),
        };
        let _ = tx.send(Ok(SessionEvent {
            event: Some(session_event::Event::Opened(opened)),
        }));
        info!(session = id, id_range = session.range.index(), app = %session.app_name, "session reopened by its client after a driver restart");
    }
    Ok(SessionStream {
        inner: UnboundedReceiverStream::new(rx),
        _guard: SessionGuard {
            state: state.clone(),
            id,
        },
    })
}

/// Finalizes the detached sessions whose client did not reopen them in time; how many.
pub(crate) fn expire_detached(state: &DriverState) -> usize {
    let mut guard = state.sessions.inner.lock();
    let inner = &mut *guard;
    let now = Instant::now();
    let expired: Vec<u64> = (inner.sessions.values())
        .filter(|s| s.detached_until.is_some_and(|t| t <= now))
        .map(|s| s.id)
        .collect();
    for &id in &expired {
        info!(
            session = id,
            "no client reopened the recovered session in time; its files are deleted"
        );
        finalize(state, inner, id);
    }
    expired.len()
}
