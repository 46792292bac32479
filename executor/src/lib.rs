//! The `ember-executor` daemon as a library: everything but the command line, so the
//! integration tests can drive each part in-process.
//!
//! Modules, one purpose each:
//! * [`config`]: the daemon's settings and the layout of its work directory.
//! * [`driver_conn`]: the gRPC client of the driver (a leaf the others use).
//! * [`registration`]: the channel to the driver: register, heartbeat, dispatch driver
//!   messages, and on loss kill the workers and re-register with backoff, keeping the
//!   shuffle files for a driver that comes back ([`held_outputs`]: what it is told).
//! * [`workers`]: routes tasks to one worker per job binary.
//! * [`worker_env`]: what those workers share; the running-task set and status reports.
//! * [`binary_worker`]: one job binary's worker: broadcasts, the live process, its tasks.
//! * [`process`]: spawning a worker process and its `Ready` handshake.
//! * [`protocol`]: the executor <-> worker framing on the Unix socket.
//! * [`binaries`]: content-addressed store of job binaries, fetched from the driver and
//!   verified before use.
//! * [`blocks`]: the Shuffle gRPC service serving this executor's shuffle files.
//! * [`replicate`]: pushing a map output to peers before its task is reported finished
//!   (`replicated:N` shuffle durability); [`replica_store`]: storing what peers push;
//!   [`session_keys`]: each session's shuffle key, which fetches and pushes must carry.
//! * [`decommission`]: leaving gracefully (SIGTERM or the driver's request).
//! * [`cleanup`]: deleting shuffle files (by session id range, by released shuffle id,
//!   or all of them).
//!
//! Invariant: the executor never runs user code in its own process and never crashes
//! because of what a worker, the driver or a reducer sends it.

pub mod binaries;
pub mod binary_worker;
pub mod blocks;
pub mod cleanup;
pub mod config;
pub mod decommission;
pub mod driver_conn;
pub mod held_outputs;
pub mod metrics;
pub mod outbound;
pub mod process;
pub mod protocol;
pub mod raw_push;
pub mod registration;
pub mod replica_store;
pub mod replicate;
pub mod session_keys;
pub mod worker_env;
pub mod worker_users;
pub mod workers;
