//! Cluster mode, seen from the library: the pieces of a job binary that talk to the
//! daemons.
//!
//! - [`client`]: a [`Context`](crate::Context) with an `http://` master connects to the
//!   driver, uploads its own binary if the driver lacks it, opens a session, submits
//!   each action's plan and turns the streamed events back into the scheduler's
//!   `JobEvent`s, so the rest of the library cannot tell local from cluster mode.
//! - [`worker`]: the same binary started by an executor enters worker mode inside
//!   `Context::from_env()`: it runs the tasks the executor hands it over a Unix socket
//!   and never returns to `main`.
//! - [`fetch`]: reducers in a worker read map outputs held by other executors over the
//!   executors' shuffle service.
//! - [`session`]: the client's session with the driver: opening it (and uploading the
//!   binary), holding it, and reopening it when the driver restarts.
//! - [`binary`]: the SHA-256 identity of the running binary.
//! - [`runtime`]: the one tokio runtime the library starts for all of this.
//!
//! Invariants: nothing here runs in local mode (which needs no runtime and no network);
//! every call of the client to the driver carries the cluster secret when one is
//! configured; a worker's shuffle fetches carry only its session's shuffle key.

pub(crate) mod binary;
pub(crate) mod client;
pub(crate) mod fetch;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod worker;

/// The cluster secret the client uses: `EMBER_SECRET_FILE`, else
/// `EMBER_SECRET`, else none.
pub(crate) fn client_secret() -> crate::Result<Option<String>> {
    ember_proto::auth::load_secret(None).map_err(crate::EmberError::Config)
}
