//! Who owns SIGINT and SIGTERM in a process that runs local-mode jobs (see
//! `src/interrupt.rs`): ember takes a signal only over its default disposition, while a
//! local context lives, and gives the default back after the last one; a signal the
//! program ignores stays ignored; a handler the program installs later, chaining to
//! ember's as `signal-hook` and `tokio::signal` do, keeps the signal: it runs and the
//! process goes on. Alone in its binary: it changes the process's signal dispositions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, sighandler_t, SIGINT, SIGTERM, SIG_DFL, SIG_IGN};

fn disposition(sig: c_int) -> sighandler_t {
    // SAFETY: reads the current action into a zeroed out-parameter.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

fn set(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: a fully initialised action; the previous one is returned.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = handler;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, &new, &mut old), 0);
        old.sa_sigaction
    }
}

static PROGRAM_SAW_SIGINT: AtomicBool = AtomicBool::new(false);
static CHAINED_TO: AtomicUsize = AtomicUsize::new(0);

/// The program's own SIGINT handler: notes the signal, then calls the handler it
/// replaced, as signal-hook's registry does.
extern "C" fn program_handler(sig: c_int) {
    PROGRAM_SAW_SIGINT.store(true, Ordering::SeqCst);
    let prev = CHAINED_TO.load(Ordering::SeqCst);
    if prev != SIG_DFL && prev != SIG_IGN {
        // SAFETY: `prev` is the address of a handler taking the signal number.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(prev) };
        f(sig);
    }
}

fn local(work: &std::path::Path) -> ember::Context {
    let mut conf = ember::Conf::local(2, 64 << 20);
    conf.progress = false;
    conf.local_dir = Some(work.to_path_buf());
    ember::Context::with_conf(conf).unwrap()
}

fn work_dirs(work: &std::path::Path) -> usize {
    std::fs::read_dir(work).unwrap().count()
}

#[test]
fn ember_takes_only_default_signals_while_a_local_context_lives_and_leaves_the_programs_alone() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // The starting point: default dispositions. A test run started in the background by
    // a non-interactive shell inherits SIGINT ignored, so it is set, not assumed.
    set(SIGINT, SIG_DFL);
    set(SIGTERM, SIG_DFL);

    // Default dispositions: taken while a local context lives, given back after the last.
    let a = local(w);
    let b = local(w);
    assert_ne!(disposition(SIGINT), SIG_DFL);
    assert_ne!(disposition(SIGTERM), SIG_DFL);
    drop(a);
    assert_ne!(disposition(SIGINT), SIG_DFL, "b still lives");
    drop(b);
    assert_eq!(disposition(SIGINT), SIG_DFL);
    assert_eq!(disposition(SIGTERM), SIG_DFL);
    assert_eq!(work_dirs(w), 0);

    // An ignored signal stays ignored; the other is still taken.
    set(SIGINT, SIG_IGN);
    let c = local(w);
    assert_eq!(disposition(SIGINT), SIG_IGN);
    assert_ne!(disposition(SIGTERM), SIG_DFL);
    drop(c);
    assert_eq!(disposition(SIGINT), SIG_IGN);
    assert_eq!(disposition(SIGTERM), SIG_DFL);
    set(SIGINT, SIG_DFL);

    // The program's handler, installed after the context and chaining to ember's: a
    // SIGINT runs it, ember leaves the process and its work dir alone, and the program's
    // handler stays installed after the context is dropped.
    let ctx = local(w);
    let embers = set(
        SIGINT,
        program_handler as extern "C" fn(c_int) as sighandler_t,
    );
    assert_ne!(embers, SIG_DFL);
    CHAINED_TO.store(embers, Ordering::SeqCst);
    // SAFETY: raising a signal this process handles.
    assert_eq!(unsafe { libc::raise(SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !PROGRAM_SAW_SIGINT.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the program's handler never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Ember's watcher has had the chained call; had it acted, this process would be
    // gone and its work dir with it.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(work_dirs(w), 1);
    let n = ctx.parallelize((0..1000u32).collect(), 4).count().unwrap();
    assert_eq!(n, 1000);
    drop(ctx);
    assert_eq!(
        disposition(SIGINT),
        program_handler as extern "C" fn(c_int) as sighandler_t
    );
    assert_eq!(disposition(SIGTERM), SIG_DFL);
    assert_eq!(work_dirs(w), 0);
    set(SIGINT, SIG_DFL);
}
