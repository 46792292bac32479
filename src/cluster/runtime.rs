//! The tokio runtime behind the library's gRPC calls (client and shuffle fetch).
//!
//! Invariants: created on first use only, so local mode never starts it; it lives for
//! the rest of the process; library code on ordinary threads enters it with
//! [`block_on`] (or waits on a channel one of its tasks fills, `blocking_recv`, as a
//! remote block stream does), never from inside one of its own tasks.

use std::sync::OnceLock;

use tokio::runtime::Runtime;

/// The process-wide runtime (two worker threads: the I/O here is light).
pub(crate) fn get() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ember-io")
            .enable_all()
            .build()
            .expect("ember: cannot start the tokio runtime for cluster mode")
    })
}

/// Runs `fut` to completion from a non-runtime thread.
pub(crate) fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    get().block_on(fut)
}
