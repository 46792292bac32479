//! `poll(2)` with a deadline: the one wait every blocking step of this crate goes through
//! (connect, accept, handshake, frames), always with the abort handle's wake descriptor in
//! the set.
//!
//! Invariants: [`wait`] returns `Ok(false)` only once the deadline has passed; `EINTR`
//! retries with the time left; a deadline of `None` waits without limit.

use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

pub(crate) use libc::{POLLIN, POLLOUT};

/// One descriptor and the events awaited on it.
pub(crate) fn entry(fd: RawFd, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Whether `entry` reported anything (readiness, an error or a hang-up).
pub(crate) fn ready(entry: &libc::pollfd) -> bool {
    entry.revents != 0
}

/// [`wait`], after polling without blocking for up to `spin` (yielding the core between
/// polls, so a busy host loses little).
pub(crate) fn wait_spinning(
    fds: &mut [libc::pollfd],
    deadline: Option<Instant>,
    spin: std::time::Duration,
) -> io::Result<bool> {
    let until = Instant::now() + spin;
    loop {
        // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if n > 0 {
            return Ok(true);
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if Instant::now() >= until || deadline.is_some_and(|d| Instant::now() >= d) {
            return wait(fds, deadline);
        }
        std::thread::yield_now();
    }
}

/// Waits until one of `fds` is ready (`Ok(true)`) or `deadline` passes (`Ok(false)`).
pub(crate) fn wait(fds: &mut [libc::pollfd], deadline: Option<Instant>) -> io::Result<bool> {
    loop {
        let timeout_ms: libc::c_int = match deadline {
            None => -1,
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    0
                } else {
                    // Round up so a wait never ends just before the deadline.
                    let ms = (deadline - now).as_micros().div_ceil(1000);
                    ms.min(libc::c_int::MAX as u128) as libc::c_int
                }
            }
        };
        for fd in fds.iter_mut() {
            fd.revents = 0;
        }
        // SAFETY: `fds` is a live, exclusively borrowed slice of `pollfd`; poll reads and
        // writes only its `len()` elements and keeps no pointer after returning.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            continue;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
