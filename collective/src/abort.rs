//! [`AbortHandle`]: ends a rank's collectives from another thread, and the shutdown of a
//! communicator's sockets that makes its peers fail instead of waiting.
//!
//! Invariants: once [`AbortHandle::abort`] ran, the wake socket stays readable (it is never
//! drained), so every wait in this crate (each polls it) returns at once, and every
//! registered socket is shut down in both directions, so peers blocked on this rank read
//! EOF. A socket registered after the abort is shut down as it is registered (the flag is
//! read under the same lock that `abort` takes). The handle holds the sockets weakly: a
//! shutdown upgrades first, so it reaches the socket while it is open and never a reused
//! descriptor, and a dropped communicator's sockets close even while the handle lives.

use std::io::Write;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use socket2::Socket;

/// Ends the collectives of one rank: whatever call is blocked (in any thread) returns
/// [`crate::CollectiveError::Aborted`] promptly, later calls fail at once, and the peers
/// see this rank's connections close. From [`crate::Endpoint::abort_handle`] (it covers
/// building the mesh too) or [`crate::Communicator::abort_handle`]; both give the same
/// handle.
#[derive(Clone)]
pub struct AbortHandle {
    inner: Arc<Inner>,
}

struct Inner {
    aborted: AtomicBool,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
    sockets: Mutex<Vec<Weak<Socket>>>,
}

impl AbortHandle {
    pub(crate) fn new() -> std::io::Result<AbortHandle> {
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        Ok(AbortHandle {
            inner: Arc::new(Inner {
                aborted: AtomicBool::new(false),
                wake_tx,
                wake_rx,
                sockets: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Aborts: idempotent, never blocks for long (one lock, one byte, the shutdowns).
    pub fn abort(&self) {
        if self.inner.aborted.swap(true, Ordering::SeqCst) {
            return;
        }
        // A full buffer cannot happen (one byte, written once); any error leaves the
        // shutdowns below to wake the waiters.
        let _ = (&self.inner.wake_tx).write(&[1]);
        self.shutdown_all();
        tracing::debug!("collective communicator aborted");
    }

    /// Whether [`AbortHandle::abort`] has been called.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::SeqCst)
    }

    /// The descriptor every wait polls for readability: readable once aborted.
    pub(crate) fn wake_fd(&self) -> RawFd {
        self.inner.wake_rx.as_raw_fd()
    }

    /// Adds a peer connection to what `abort` shuts down.
    pub(crate) fn register(&self, socket: &Arc<Socket>) {
        let mut sockets = lock(&self.inner.sockets);
        if self.is_aborted() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        sockets.retain(|s| s.strong_count() > 0);
        sockets.push(Arc::downgrade(socket));
    }

    /// Shuts every registered socket down in both directions (abort, a failed collective,
    /// the communicator's drop): peers blocked on this rank read EOF.
    pub(crate) fn shutdown_all(&self) {
        for socket in lock(&self.inner.sockets).iter().filter_map(Weak::upgrade) {
            // ENOTCONN when the peer is gone already: nothing left to do.
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The lists are only pushed to and iterated: a panic elsewhere leaves them whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
