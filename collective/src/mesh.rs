//! Building the full mesh: rank `r` dials every higher rank (highest first) and then
//! accepts one authenticated connection from every lower rank.
//!
//! Deadlock-free: the highest rank only accepts, and a rank dials only while it has not
//! started accepting, so every dial waits on a rank that will reach its accept loop after
//! finishing its own (higher) dials; an accepted connection is always from a rank that is
//! handshaking on it at that moment.
//!
//! Invariants: the whole build ends by `connect_timeout`; each incoming handshake by
//! `handshake_timeout` too, so a stray connection cannot hold the loop; an incoming
//! connection that fails its handshake (another stage's key, a rank that is not lower or
//! already connected, a bad proof) is refused and dropped, and the loop goes on waiting
//! for the real peers (the refusal is named in the timeout error if they never come);
//! every connection is registered with the abort handle once authenticated (a wait before
//! that polls the abort handle itself), and on any failure all of them are shut down, so
//! peers waiting on this rank fail instead of hang.

use std::sync::Arc;
use std::time::Instant;

use crate::abort::AbortHandle;
use crate::addr::PeerAddr;
use crate::auth::{self, HandshakeError, Refusal, StageKey, Wire};
use crate::conn::{self, Conn, WireError};
use crate::endpoint::Endpoint;
use crate::error::{CollectiveError, Result};
use crate::options::CommOptions;

/// The most refusals of stray connections quoted in a timeout error.
const REFUSALS_QUOTED: usize = 4;

/// Connects rank `rank` to every peer; `conns[j]` is the connection to rank `j` (`None`
/// at `rank`).
pub(crate) fn build(
    endpoint: &Endpoint,
    rank: usize,
    peers: &[PeerAddr],
    key: &StageKey,
    opts: &CommOptions,
) -> Result<Vec<Option<Conn>>> {
    let world = peers.len();
    if world == 0 || rank >= world {
        return Err(CollectiveError::InvalidArgument(format!(
            "rank {rank} of a world of {world} peers"
        )));
    }
    if u32::try_from(world).is_err() {
        return Err(CollectiveError::InvalidArgument(format!(
            "a world of {world} ranks"
        )));
    }
    if peers[rank] != *endpoint.addr() {
        return Err(CollectiveError::InvalidArgument(format!(
            "peers[{rank}] is {} but this endpoint is {}",
            peers[rank],
            endpoint.addr()
        )));
    }
    let abort = endpoint.abort_handle();
    let mut conns: Vec<Option<Conn>> = (0..world).map(|_| None).collect();
    let result = connect_all(endpoint, rank, peers, key, opts, &abort, &mut conns);
    if let Err(e) = result {
        abort.shutdown_all();
        return Err(if abort.is_aborted() {
            CollectiveError::Aborted
        } else {
            e
        });
    }
    tracing::debug!(rank, world, "collective mesh built");
    Ok(conns)
}

fn connect_all(
    endpoint: &Endpoint,
    rank: usize,
    peers: &[PeerAddr],
    key: &StageKey,
    opts: &CommOptions,
    abort: &AbortHandle,
    conns: &mut [Option<Conn>],
) -> Result<()> {
    let world = peers.len();
    let started = Instant::now();
    let deadline = started + opts.connect_timeout;
    let timeout = |waiting_for: String| CollectiveError::Timeout {
        after: opts.connect_timeout,
        waiting_for,
    };
    for peer in (rank + 1..world).rev() {
        let addr = &peers[peer];
        let wire_failure = |e: WireError, during: &str| match e {
            WireError::Aborted => CollectiveError::Aborted,
            WireError::Timeout => timeout(format!("{during} rank {peer} at {addr}")),
            WireError::Eof => CollectiveError::PeerLost {
                rank: peer,
                during: format!("{during} {addr}"),
                cause: "connection closed (EOF)".to_string(),
            },
            WireError::Io(e) => CollectiveError::PeerLost {
                rank: peer,
                during: format!("{during} {addr}"),
                cause: e.to_string(),
            },
        };
        let socket =
            conn::dial(addr, deadline, abort).map_err(|e| wire_failure(e, "connecting to"))?;
        conn::configure(&socket, matches!(addr, PeerAddr::Tcp(_)), opts).map_err(|e| {
            CollectiveError::io(format!("configuring the connection to rank {peer}"), e)
        })?;
        let wire = Wire {
            socket: &socket,
            deadline,
            abort,
        };
        auth::as_connector(&wire, key, rank as u32, peer as u32, world as u32).map_err(
            |e| match e {
                HandshakeError::Wire(e) => wire_failure(e, "authenticating with"),
                HandshakeError::RefusedByPeer(reason) => CollectiveError::AuthRefused {
                    peer: Some(peer),
                    reason: format!("rank {peer} refused this rank: {reason}"),
                },
                HandshakeError::Refused { refusal, claimed } => CollectiveError::AuthRefused {
                    peer: Some(peer),
                    reason: format!(
                        "this rank refused the listener at {addr} (claiming rank {}): {}",
                        claimed.map_or_else(|| "?".to_string(), |c| c.to_string()),
                        refusal.describe()
                    ),
                },
            },
        )?;
        let socket = Arc::new(socket);
        abort.register(&socket);
        conns[peer] = Some(Conn { socket, rank: peer });
    }

    let tcp = matches!(endpoint.addr(), PeerAddr::Tcp(_));
    let mut refusals: Vec<String> = Vec::new();
    while conns[..rank].iter().any(Option::is_none) {
        let Some(socket) = endpoint.accept(deadline)? else {
            let missing: Vec<usize> = (0..rank).filter(|&j| conns[j].is_none()).collect();
            let refused = if refusals.is_empty() {
                String::new()
            } else {
                format!(" (refused meanwhile: {})", refusals.join("; "))
            };
            return Err(timeout(format!(
                "waiting for rank(s) {missing:?} to connect{refused}"
            )));
        };
        if let Err(e) = conn::configure(&socket, tcp, opts) {
            tracing::warn!(error = %e, "configuring an incoming collective connection; dropped");
            continue;
        }
        let wire = Wire {
            socket: &socket,
            deadline: deadline.min(Instant::now() + opts.handshake_timeout),
            abort,
        };
        let admit = |from: u32| {
            let from = from as usize;
            if from >= rank {
                Err(Refusal::WrongRank)
            } else if conns[from].is_some() {
                Err(Refusal::Duplicate)
            } else {
                Ok(())
            }
        };
        match auth::as_acceptor(&wire, key, rank as u32, world as u32, admit) {
            Ok(from) => {
                let from = from as usize;
                let socket = Arc::new(socket);
                abort.register(&socket);
                conns[from] = Some(Conn { socket, rank: from });
            }
            Err(HandshakeError::Wire(WireError::Aborted)) => return Err(CollectiveError::Aborted),
            Err(e) => {
                let text = match e {
                    HandshakeError::Refused { refusal, claimed } => format!(
                        "a connection claiming rank {}: {}",
                        claimed.map_or_else(|| "?".to_string(), |c| c.to_string()),
                        refusal.describe()
                    ),
                    HandshakeError::RefusedByPeer(reason) => {
                        format!("a connection that refused this rank: {reason}")
                    }
                    HandshakeError::Wire(e) => {
                        format!("a connection that failed its handshake: {e:?}")
                    }
                };
                tracing::warn!(rank, "collective connection refused: {text}");
                if refusals.len() < REFUSALS_QUOTED {
                    refusals.push(text);
                }
            }
        }
    }
    Ok(())
}
