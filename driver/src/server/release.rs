//! Releasing shuffles (the client's cleaner): checking a `ReleaseShuffles` call before
//! the scheduler is told to forget its shuffles.
//!
//! Invariants:
//! - A call reaches only its own session: the session token must match (as for every
//!   session-scoped call), and every id must lie in the session's [`IdRange`]; one id
//!   outside it refuses the whole call (`INVALID_ARGUMENT`), so nothing of another
//!   session is ever forgotten or deleted.
//! - At most [`MAX_RELEASED_SHUFFLES`] ids per call, checked before anything is
//!   allocated from them.
//! - The scheduler, not this module, decides when files go: it forgets a released
//!   shuffle only once no live job reads it, and only then has its launcher send
//!   `RemoveShuffles` to every executor (see `launcher`).
//!
//! [`IdRange`]: ember_proto::IdRange

use ember_proto::limits::MAX_RELEASED_SHUFFLES;
use ember_proto::ReleaseShufflesRequest;
use tonic::Status;

use super::DriverState;

/// The ids of `req`, sorted and deduplicated, if the call may release them.
pub(crate) fn check_release(
    state: &DriverState,
    req: &ReleaseShufflesRequest,
    token: Option<&str>,
) -> Result<Vec<u32>, Status> {
    let n = req.shuffle_ids.len();
    state.sessions.with_session(req.session_id, token, |s| {
        if n > MAX_RELEASED_SHUFFLES {
            return Err(Status::invalid_argument(format!(
                "a release names {n} shuffles; at most {MAX_RELEASED_SHUFFLES} per call"
            )));
        }
        let ids = s.range.ids();
        if let Some(bad) = req.shuffle_ids.iter().find(|id| !ids.contains(id)) {
            return Err(Status::invalid_argument(format!(
                "shuffle {bad} is outside this session's id range [{}, {}); nothing released",
                ids.start, ids.end
            )));
        }
        Ok(())
    })?;
    let mut out = req.shuffle_ids.clone();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
