//! The crate's one error type, [`CollectiveError`], and the bounded quoting of bad input.
//!
//! Invariants: every variant that concerns a peer names its rank (or says the peer was
//! not yet identified); text quoted from the wire or from a caller is cut to
//! [`QUOTE_MAX`] characters; a failed collective leaves the communicator broken, and
//! every later call returns [`CollectiveError::Broken`] (or [`CollectiveError::Aborted`]
//! after an abort).

use std::time::Duration;

/// An error from a caller's combine function, carried through [`CollectiveError::Combine`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`CollectiveError`].
pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;

/// The longest prefix of bad input (an address string, a peer's announcement) that an
/// error quotes.
pub const QUOTE_MAX: usize = 64;

/// Why a collective, or setting up the mesh, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectiveError {
    /// The connection to a peer ended (EOF, reset, broken pipe, keepalive timeout): the
    /// peer died, was aborted, or failed a collective itself and shut its sockets.
    #[error("peer rank {rank} lost while {during}: {cause}")]
    PeerLost {
        rank: usize,
        during: String,
        cause: String,
    },
    /// A deadline passed: the connect deadline while building the mesh, or the
    /// communicator's per-call deadline in a collective.
    #[error("timed out after {after:?} {waiting_for}")]
    Timeout {
        after: Duration,
        waiting_for: String,
    },
    /// The handshake with a peer failed: another stage's key, a wrong rank or world size,
    /// a proof that does not verify. `peer` is `None` for an incoming connection that
    /// never named a valid rank.
    #[error("authentication with {} refused: {reason}", peer_name(*.peer))]
    AuthRefused { peer: Option<usize>, reason: String },
    /// A peer sent what this rank's own call does not expect: another collective, another
    /// step, another element type or length, a malformed header.
    #[error("protocol violation by rank {rank}: {what}")]
    Protocol { rank: usize, what: String },
    /// A frame's announced length is above the bound (`max_message_bytes` for byte
    /// values); refused before anything is allocated for it.
    #[error("message of {len} bytes from {} exceeds the bound of {max} bytes", peer_name(Some(*.rank)))]
    MessageTooLarge { rank: usize, len: u64, max: u64 },
    /// [`crate::AbortHandle::abort`] was called (before or during this call).
    #[error("collective aborted")]
    Aborted,
    /// An earlier collective failed on this communicator (its sockets are shut); the
    /// message is that first failure.
    #[error("communicator unusable after an earlier failure: {first}")]
    Broken { first: String },
    /// The caller's arguments are wrong (a root out of range, an all-to-all input whose
    /// length is not the world size, a rank not in the peer list).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer address string does not parse or names no usable address.
    #[error("invalid peer address {input:?}: {reason}")]
    InvalidAddress { input: String, reason: &'static str },
    /// The caller's combine function failed.
    #[error("combine function failed: {0}")]
    Combine(#[source] BoxError),
    /// Any other I/O failure (binding, socket options, poll).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl CollectiveError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CollectiveError::Io {
            what: what.into(),
            source,
        }
    }
}

fn peer_name(peer: Option<usize>) -> String {
    match peer {
        Some(rank) => format!("rank {rank}"),
        None => "an unidentified incoming connection".to_string(),
    }
}

/// At most [`QUOTE_MAX`] characters of `input`, with "..." when cut.
pub(crate) fn quote(input: &str) -> String {
    match input.char_indices().nth(QUOTE_MAX) {
        None => input.to_string(),
        Some((cut, _)) => format!("{}...", &input[..cut]),
    }
}
