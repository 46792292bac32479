//! ember's collectives: the tasks of a barrier stage (ranks `0..world`) talk to each other
//! directly, by MPI's collectives over type-agnostic bytes and numeric slices.
//!
//! A rank's life:
//! 1. [`Endpoint::bind_unix`] (peers on one host) or [`Endpoint::bind_tcp`], then report
//!    [`Endpoint::addr`] (its string form, parsed back by [`PeerAddr::parse`]) to the
//!    driver; keep [`Endpoint::abort_handle`] where a task kill can reach it;
//! 2. get back the world's addresses (index = rank) and the stage's [`StageKey`], and
//!    [`Communicator::connect`]: a full mesh, each connection authenticated both ways by
//!    HMAC-SHA256 challenge-response under the key;
//! 3. call collectives — every rank the same ones in the same order;
//! 4. drop the communicator (its peers see the connections close).
//!
//! Guarantees:
//! - deterministic results: a reduction's order is a fixed function of ranks and sizes
//!   (never of arrival order), and the algorithm switch points are constants
//!   ([`ALL_REDUCE_RING_MIN_BYTES`], [`BROADCAST_SCATTER_MIN_BYTES`]), so a float
//!   all-reduce gives the same bits in every run and on every rank;
//! - byte-value reductions take `combine(lower_ranks_part, higher_ranks_part)`: lower ranks
//!   are always on the left, so only associativity is needed;
//! - nothing read from the wire sizes an allocation before it is checked: slice frames
//!   must have their exact expected size, byte values at most
//!   [`CommOptions::max_message_bytes`], handshake messages are fixed-size;
//! - no hang: a dead peer ends in EOF (one host) or keepalive / `TCP_USER_TIMEOUT`
//!   (across hosts), [`AbortHandle::abort`] ends a blocked call from another thread, and
//!   any failure shuts the rank's sockets so every peer fails too
//!   ([`CollectiveError`]);
//! - a world of one needs no socket; empty slices and values work.
//!
//! Transport: non-blocking Unix or TCP sockets (`TCP_NODELAY`), one `poll`-driven engine
//! that sends and receives at once (ring steps and pairwise exchanges never deadlock and
//! spawn no thread), payloads sent and received in place without staging copies.

mod abort;
mod addr;
mod auth;
mod call;
mod comm;
mod conn;
mod element;
mod endpoint;
mod error;
mod frame;
mod mesh;
mod ops;
mod options;
mod poll;
mod sendrecv;

pub use abort::AbortHandle;
pub use addr::{PeerAddr, MAX_ADDR_LEN, MAX_UNIX_PATH};
pub use auth::StageKey;
pub use call::CommStats;
pub use comm::Communicator;
pub use element::{Element, ReduceOp};
pub use endpoint::Endpoint;
pub use error::{BoxError, CollectiveError, Result, QUOTE_MAX};
pub use ops::{
    block_range, AllReduceAlgorithm, ALL_REDUCE_RING_MIN_BYTES, BROADCAST_SCATTER_MIN_BYTES,
};
pub use options::{CommOptions, Keepalive};

#[cfg(test)]
mod malicious_tests;

#[cfg(test)]
mod tests {
    /// The layer above moves a communicator into a task's thread and hands its abort
    /// handle to whatever kills the task.
    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Communicator>();
        send_sync::<crate::AbortHandle>();
        send_sync::<crate::Endpoint>();
        send_sync::<crate::CollectiveError>();
    }
}
