//! [`Communicator`]: one rank's authenticated connections to every other rank of a
//! barrier stage, and the collectives over them.
//!
//! Invariants: every rank must make the same collective calls in the same order with
//! matching arguments (root, element type, op, slice length); frames carry the call's
//! number, collective, element type and op, step and length, so a mismatch is a
//! [`CollectiveError::Protocol`] naming the peer, never silently mixed data. Any failure
//! breaks the communicator: its sockets are shut down (so every peer waiting on this rank
//! fails too: one failure ends the whole stage, never a hang) and every later call
//! returns [`CollectiveError::Broken`]; after an abort, [`CollectiveError::Aborted`].
//! Dropping the communicator shuts its sockets down as well.

use std::time::Instant;

use crate::abort::AbortHandle;
use crate::addr::PeerAddr;
use crate::auth::StageKey;
use crate::call::{Call, CommStats};
use crate::conn::Conn;
use crate::element::{detail, Element, ReduceOp};
use crate::endpoint::Endpoint;
use crate::error::{BoxError, CollectiveError, Result};
use crate::frame::OpCode;
use crate::mesh;
use crate::ops::{self, AllReduceAlgorithm};
use crate::options::CommOptions;

/// One rank's side of a barrier stage's collectives.
pub struct Communicator {
    rank: usize,
    world: usize,
    conns: Vec<Option<Conn>>,
    abort: AbortHandle,
    opts: CommOptions,
    seq: u32,
    broken: Option<String>,
    stats: CommStats,
    scratch: Vec<u64>,
}

impl Communicator {
    /// Builds the full mesh: `endpoint` is this rank's (bound before its address was
    /// reported), `peers[j]` is rank `j`'s address (so `peers[rank]` is `endpoint.addr()`
    /// and `peers.len()` the world size), `key` the stage's secret. Blocks until every
    /// connection is authenticated, or fails by `opts.connect_timeout`. The endpoint is
    /// consumed: its socket file is removed once the mesh stands. A world of one opens no
    /// connection.
    pub fn connect(
        endpoint: Endpoint,
        rank: usize,
        peers: &[PeerAddr],
        key: &StageKey,
        opts: CommOptions,
    ) -> Result<Communicator> {
        let conns = mesh::build(&endpoint, rank, peers, key, &opts)?;
        let abort = endpoint.abort_handle();
        drop(endpoint);
        Ok(Communicator {
            rank,
            world: peers.len(),
            conns,
            abort,
            opts,
            seq: 0,
            broken: None,
            stats: CommStats::default(),
            scratch: Vec::new(),
        })
    }

    /// This rank, `0..world()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The handle that aborts this communicator from another thread.
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// Calls made and bytes moved so far.
    pub fn stats(&self) -> CommStats {
        self.stats
    }

    /// Runs one collective call; on failure breaks the communicator.
    fn call<R>(
        &mut self,
        op: OpCode,
        detail: u8,
        body: impl FnOnce(&mut Call<'_>) -> Result<R>,
    ) -> Result<R> {
        if self.abort.is_aborted() {
            return Err(CollectiveError::Aborted);
        }
        if let Some(first) = &self.broken {
            return Err(CollectiveError::Broken {
                first: first.clone(),
            });
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.stats.calls += 1;
        let mut call = Call {
            rank: self.rank,
            world: self.world,
            max_message: self.opts.max_message_bytes as u64,
            conns: &self.conns,
            abort: &self.abort,
            seq,
            op,
            detail,
            deadline: self.opts.op_timeout.map(|t| Instant::now() + t),
            timeout: self.opts.op_timeout,
            stats: &mut self.stats,
            scratch: &mut self.scratch,
        };
        let result = body(&mut call);
        if let Err(e) = &result {
            tracing::warn!(rank = self.rank, op = op.name(), call = seq, error = %e, "collective failed; communicator broken");
            self.broken = Some(e.to_string());
            self.abort.shutdown_all();
            if self.abort.is_aborted() {
                return Err(CollectiveError::Aborted);
            }
        }
        result
    }

    fn check_root(&self, what: &str, root: usize) -> Result<()> {
        if root >= self.world {
            return Err(CollectiveError::InvalidArgument(format!(
                "{what}: root {root} in a world of {}",
                self.world
            )));
        }
        Ok(())
    }

    /// Returns once every rank has entered the barrier (dissemination).
    pub fn barrier(&mut self) -> Result<()> {
        self.call(OpCode::Barrier, 0, ops::barrier::barrier)
    }

    /// Every rank gets the root's value; the root passes `Some`, the others' values are
    /// ignored. Binomial tree; scatter + all-gather from
    /// [`ops::BROADCAST_SCATTER_MIN_BYTES`](crate::BROADCAST_SCATTER_MIN_BYTES) up.
    pub fn broadcast(&mut self, root: usize, value: Option<Vec<u8>>) -> Result<Vec<u8>> {
        let checked = self.check_root("broadcast", root);
        self.call(OpCode::Broadcast, 0, |call| {
            checked?;
            ops::broadcast::broadcast(call, root, value)
        })
    }

    /// The root gets `combine` over every rank's value in rank order (`Some`), the others
    /// `None`. `combine(lower_ranks_part, higher_ranks_part)` must be associative, need not
    /// be commutative.
    pub fn reduce<F>(
        &mut self,
        root: usize,
        value: Vec<u8>,
        mut combine: F,
    ) -> Result<Option<Vec<u8>>>
    where
        F: FnMut(Vec<u8>, Vec<u8>) -> Result<Vec<u8>, BoxError>,
    {
        let checked = self.check_root("reduce", root);
        self.call(OpCode::Reduce, 0, |call| {
            checked?;
            ops::bytes_reduce::reduce(call, root, value, &mut combine)
        })
    }

    /// Every rank gets `combine` over every rank's value in rank order (as
    /// [`Communicator::reduce`]); with a deterministic `combine` the bytes are the same on
    /// every rank. Recursive doubling.
    pub fn all_reduce<F>(&mut self, value: Vec<u8>, mut combine: F) -> Result<Vec<u8>>
    where
        F: FnMut(Vec<u8>, Vec<u8>) -> Result<Vec<u8>, BoxError>,
    {
        self.call(OpCode::AllReduce, 0, |call| {
            ops::bytes_reduce::all_reduce(call, value, &mut combine)
        })
    }

    /// Reduces `data` element-wise over every rank, in place; every rank ends with the
    /// same bits (see [`Element`] for the semantics of each op). Every rank must pass the
    /// same length. Recursive doubling below
    /// [`ALL_REDUCE_RING_MIN_BYTES`](crate::ALL_REDUCE_RING_MIN_BYTES), the ring from there.
    pub fn all_reduce_slice<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let algorithm = AllReduceAlgorithm::for_size(data.len(), size_of::<T>(), self.world);
        self.all_reduce_slice_with(data, op, algorithm)
    }

    /// [`Communicator::all_reduce_slice`] with the algorithm forced (every rank must force
    /// the same): for benchmarks and tests.
    pub fn all_reduce_slice_with<T: Element>(
        &mut self,
        data: &mut [T],
        op: ReduceOp,
        algorithm: AllReduceAlgorithm,
    ) -> Result<()> {
        let detail = detail::<T>(Some(op)) | algorithm_bit(algorithm);
        self.call(OpCode::AllReduceSlice, detail, |call| {
            ops::slice_reduce::all_reduce(call, data, op, algorithm)
        })
    }

    /// Reduces `data` element-wise over every rank and gives rank `r` block `r` of the
    /// result under MPI's block distribution ([`block_range`](crate::block_range): the
    /// first `len % world` ranks get one more element). Every rank must pass the same
    /// length.
    pub fn reduce_scatter_slice<T: Element>(&mut self, data: &[T], op: ReduceOp) -> Result<Vec<T>> {
        let algorithm = AllReduceAlgorithm::for_size(data.len(), size_of::<T>(), self.world);
        let detail = detail::<T>(Some(op)) | algorithm_bit(algorithm);
        self.call(OpCode::ReduceScatterSlice, detail, |call| {
            ops::slice_reduce::reduce_scatter(call, data, op, algorithm)
        })
    }

    /// Every rank gets every rank's value, in rank order; values may differ in size.
    pub fn all_gather(&mut self, value: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        self.call(OpCode::AllGather, 0, |call| {
            ops::gather::all_gather(call, value)
        })
    }

    /// Every rank gets the concatenation of every rank's slice, in rank order; every rank
    /// must pass the same length.
    pub fn all_gather_slice<T: Element>(&mut self, data: &[T]) -> Result<Vec<T>> {
        self.call(OpCode::AllGatherSlice, detail::<T>(None), |call| {
            ops::gather::all_gather_slice(call, data)
        })
    }

    /// `values[j]` goes to rank `j`; the result's `[j]` is what rank `j` sent to this rank.
    /// `values.len()` must be the world size.
    pub fn all_to_all(&mut self, values: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        self.call(OpCode::AllToAll, 0, |call| {
            ops::exchange::all_to_all(call, values)
        })
    }
}

fn algorithm_bit(algorithm: AllReduceAlgorithm) -> u8 {
    match algorithm {
        AllReduceAlgorithm::RecursiveDoubling => 0,
        AllReduceAlgorithm::Ring => 0x40,
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Closing would do, but a clone of a socket held elsewhere (none today) would keep
        // it open: shut down explicitly so the peers surely see this rank leave.
        self.abort.shutdown_all();
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("calls", &self.stats.calls)
            .field("broken", &self.broken)
            .finish()
    }
}
