//! Clean interrupts of local-mode jobs. On SIGINT or SIGTERM, a process with a live
//! local-mode context removes what ember made and has not committed (each local
//! context's work directory, each output directory still being written), says so on
//! stderr, and then ends as the signal's default action ends it: the shell reports
//! status 130 (SIGINT) or 143 (SIGTERM) and a calling script sees the interrupt. The
//! next run of the same command finds no output directory in its way. A second signal
//! during the cleanup ends the process at once; a job that fails meanwhile (its files
//! removed under it) does not report it.
//!
//! Who owns a signal (the choice, documented in the README): ember installs its handler
//! only in local mode, when the first local context is created, and only for a signal
//! whose disposition is the default at that moment. A program that handles SIGINT or
//! SIGTERM itself before creating its context, or ignores it (as a background job of a
//! non-interactive shell does), keeps it, and cleans up by dropping its contexts as it
//! ends. A handler the program installs later replaces ember's (`sigaction`, the
//! `ctrlc` crate) or chains to it (`signal-hook`, `tokio::signal`); either way ember
//! leaves the signal to the program: a chained call finds ember's handler no longer
//! installed and does nothing. When the last local context is dropped the default
//! disposition is restored, if ember's handler is still the installed one.
//!
//! Cluster mode installs nothing (a client that dies ends its session, and the driver
//! cancels the session's jobs), and neither does a worker process (its executor stops
//! it).
//!
//! Invariants: the signal handler only writes the signal's number to a non-blocking
//! socket, which is async-signal-safe; the cleanup runs on the `ember-interrupt` thread.
//! A path is registered from its creation (an output: just before) until it is removed
//! or committed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// Set once an interrupt's cleanup has begun; the process ends soon after.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Blocks for good if an interrupt's cleanup has begun: a job failing because its files
/// are being removed must not report that failure (or let `main` end with it) before
/// the process ends by the signal.
pub(crate) fn wait_if_interrupted() {
    while INTERRUPTED.load(Ordering::Acquire) {
        std::thread::park();
    }
}

/// What the handler removes: registered paths by registration id.
struct Registry {
    next: u64,
    paths: Vec<(u64, PathBuf)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    paths: Vec::new(),
});

/// Removes `path` (a directory or file) if the process is interrupted, until dropped.
pub(crate) struct RemoveOnInterrupt {
    id: u64,
}

/// Registers `path` for removal on an interrupt; dropping the guard deregisters it.
pub(crate) fn remove_on_interrupt(path: &Path) -> RemoveOnInterrupt {
    let mut r = REGISTRY.lock();
    let id = r.next;
    r.next += 1;
    r.paths.push((id, path.to_path_buf()));
    RemoveOnInterrupt { id }
}

impl Drop for RemoveOnInterrupt {
    fn drop(&mut self) {
        REGISTRY.lock().paths.retain(|(id, _)| *id != self.id);
    }
}

/// Held by each live local-mode context: while one is held, ember handles SIGINT and
/// SIGTERM (see the module docs).
pub(crate) struct LocalHandlers {
    _private: (),
}

/// Installs the handlers if this is the first live local context.
pub(crate) fn local_context() -> LocalHandlers {
    #[cfg(unix)]
    unix::acquire();
    LocalHandlers { _private: () }
}

impl Drop for LocalHandlers {
    fn drop(&mut self) {
        #[cfg(unix)]
        unix::release();
    }
}

/// Removes every registered path, retrying while a task still running creates files
/// in it; returns the paths that are still there.
#[cfg_attr(not(unix), allow(dead_code))]
fn remove_registered() -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = REGISTRY
        .lock()
        .paths
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    let gone = |p: &Path| std::fs::symlink_metadata(p).is_err();
    // Two passes: the second catches a directory a task re-created after the first.
    for _ in 0..2 {
        for p in &paths {
            for _ in 0..100 {
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(p)
                } else {
                    std::fs::remove_file(p)
                };
                if gone(p) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    paths.into_iter().filter(|p| !gone(p)).collect()
}

#[cfg(unix)]
mod unix {
    use std::io::{IsTerminal, Read};
    use std::os::fd::IntoRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicI32, Ordering};

    use libc::c_int;
    use parking_lot::Mutex;

    /// The signals a local job handles.
    const SIGNALS: [c_int; 2] = [libc::SIGINT, libc::SIGTERM];

    /// The write end the handler wakes the watcher through (-1 before the first install).
    static WAKE: AtomicI32 = AtomicI32::new(-1);

    struct Handlers {
        /// Live local contexts.
        holders: usize,
        /// The signals ember's handler was installed for by the current holders.
        installed: Vec<c_int>,
    }

    static HANDLERS: Mutex<Handlers> = Mutex::new(Handlers {
        holders: 0,
        installed: Vec::new(),
    });

    /// The handler: hands the signal to the watcher thread, nothing else.
    extern "C" fn on_signal(sig: c_int) {
        let fd = WAKE.load(Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        let byte = sig as u8;
        let saved = errno();
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local byte.
        unsafe {
            libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
        }
        set_errno(saved);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn errno_location() -> *mut c_int {
        // SAFETY: returns the calling thread's errno slot.
        unsafe { libc::__errno_location() }
    }

    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    fn errno_location() -> *mut c_int {
        // SAFETY: returns the calling thread's errno slot.
        unsafe { libc::__error() }
    }

    // Elsewhere there is no slot: errno is not restored after the handler's write.
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    fn errno_location() -> *mut c_int {
        std::ptr::null_mut()
    }

    fn errno() -> c_int {
        let slot = errno_location();
        if slot.is_null() {
            return 0;
        }
        // SAFETY: a non-null slot is the calling thread's own.
        unsafe { *slot }
    }

    fn set_errno(v: c_int) {
        let slot = errno_location();
        if !slot.is_null() {
            // SAFETY: a non-null slot is the calling thread's own.
            unsafe { *slot = v }
        }
    }

    fn handler_address() -> libc::sighandler_t {
        on_signal as extern "C" fn(c_int) as libc::sighandler_t
    }

    /// The current action for `sig`.
    fn current(sig: c_int) -> Option<libc::sigaction> {
        // SAFETY: a zeroed sigaction is a valid out-parameter; a null new action only
        // reads the current one.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(sig, std::ptr::null(), &mut old) == 0).then_some(old)
        }
    }

    /// Whether ember's handler is the one installed for `sig`.
    pub(super) fn ours(sig: c_int) -> bool {
        current(sig).is_some_and(|a| a.sa_sigaction == handler_address())
    }

    fn set(sig: c_int, handler: libc::sighandler_t) -> Option<libc::sigaction> {
        // SAFETY: the action is fully initialised (empty mask, flags, handler); `old`
        // receives the previous action.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler;
            new.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(sig, &new, &mut old) == 0).then_some(old)
        }
    }

    pub(super) fn acquire() {
        let mut h = HANDLERS.lock();
        h.holders += 1;
        if h.holders > 1 {
            return;
        }
        if !start_watcher() {
            return;
        }
        for sig in SIGNALS {
            // Only a signal left at its default is taken (see the module docs).
            if current(sig).is_some_and(|a| a.sa_sigaction == libc::SIG_DFL) {
                match set(sig, handler_address()) {
                    // Someone installed theirs in between: give it back.
                    Some(old) if old.sa_sigaction != libc::SIG_DFL => {
                        // SAFETY: `old` is the action the kernel just returned.
                        unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
                    }
                    Some(_) => h.installed.push(sig),
                    None => {}
                }
            }
        }
    }

    pub(super) fn release() {
        let mut h = HANDLERS.lock();
        h.holders = h.holders.saturating_sub(1);
        if h.holders > 0 {
            return;
        }
        for sig in std::mem::take(&mut h.installed) {
            // A handler the program installed since is the program's: leave it.
            if ours(sig) {
                set(sig, libc::SIG_DFL);
            }
        }
    }

    /// Starts the watcher thread once per process; false if it cannot run.
    fn start_watcher() -> bool {
        if WAKE.load(Ordering::Acquire) >= 0 {
            return true;
        }
        let Ok((tx, rx)) = UnixStream::pair() else {
            return false;
        };
        if tx.set_nonblocking(true).is_err() {
            return false;
        }
        let spawned = std::thread::Builder::new()
            .name("ember-interrupt".into())
            .spawn(move || watch(rx));
        if spawned.is_err() {
            return false;
        }
        // The write end lives as long as the process.
        WAKE.store(tx.into_raw_fd(), Ordering::Release);
        true
    }

    fn watch(mut rx: UnixStream) {
        let mut byte = [0u8; 1];
        loop {
            match rx.read(&mut byte) {
                Ok(1) => {}
                Ok(_) => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
            let sig = c_int::from(byte[0]);
            // A handler the program installed after ember's called ember's: the
            // program owns the signal now.
            if ours(sig) {
                interrupted(sig);
            }
        }
    }

    /// Removes the uncommitted paths and ends the process as `sig`'s default action.
    fn interrupted(sig: c_int) {
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        super::INTERRUPTED.store(true, std::sync::atomic::Ordering::Release);
        // A second Ctrl-C during the cleanup ends the process at once.
        set(sig, libc::SIG_DFL);
        let left = super::remove_registered();
        // Past a progress line left mid-way.
        let lead = if std::io::stderr().is_terminal() {
            "\n"
        } else {
            ""
        };
        if left.is_empty() {
            eprintln!("{lead}ember: interrupted by {name}: removed the job's work directory and uncommitted output");
        } else {
            eprintln!(
                "{lead}ember: interrupted by {name}: could not remove {}",
                left.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        // SAFETY: sending a signal to this process; its default action ends it.
        unsafe {
            libc::kill(libc::getpid(), sig);
        }
        // Delivered to another thread, the default action may take a moment.
        std::thread::sleep(std::time::Duration::from_secs(1));
        std::process::exit(128 + sig);
    }
}
