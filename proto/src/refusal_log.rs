//! Logging refused HTTP requests (the web UI, the history server, the executors'
//! metrics) without letting a flood of them fill the disk.
//!
//! Invariants: one [`RefusalLog`] per listening port writes at most one warn line per
//! second, carrying the peer address, a bounded prefix of the path and how many
//! refusals were left unlogged since the last line; never a credential or a header.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest prefix of a refused request's path that a log line quotes (bytes).
pub const MAX_PATH_CHARS: usize = 128;

/// At most one line per this long.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The refusals of one port.
pub struct RefusalLog {
    /// What the port serves, as the log line names it (e.g. `web UI`).
    what: &'static str,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last: Option<Instant>,
    suppressed: u64,
}

impl RefusalLog {
    pub fn new(what: &'static str) -> Self {
        RefusalLog {
            what,
            state: Mutex::new(State::default()),
        }
    }

    /// Records a refused request from `peer` for `path` with `status`; logs it unless
    /// a line went out less than [`INTERVAL`] ago (then it is counted for the next).
    pub fn refused(&self, peer: Option<SocketAddr>, path: &str, status: u16) {
        let now = Instant::now();
        let suppressed = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.last.is_some_and(|t| now.duration_since(t) < INTERVAL) {
                s.suppressed += 1;
                return;
            }
            s.last = Some(now);
            std::mem::take(&mut s.suppressed)
        };
        let peer = peer.map_or_else(|| "unknown peer".to_string(), |p| p.to_string());
        tracing::warn!(
            what = self.what,
            %peer,
            path = ?bounded(path),
            status,
            suppressed_since_last_line = suppressed,
            "refused a request"
        );
    }
}

/// At most [`MAX_PATH_CHARS`] bytes of `path`, cut at a character boundary.
fn bounded(path: &str) -> &str {
    &path[..path.floor_char_boundary(MAX_PATH_CHARS)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("/jobs"), "/jobs");
        let long = "é".repeat(100);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_PATH_CHARS && long.starts_with(cut));
    }

    #[test]
    fn refusals_within_the_interval_are_counted_not_logged() {
        let log = RefusalLog::new("test");
        log.refused(None, "/a", 401);
        log.refused(None, "/b", 401);
        log.refused(None, "/c", 401);
        assert_eq!(log.state.lock().unwrap().suppressed, 2);
    }
}
