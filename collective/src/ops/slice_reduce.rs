//! `all_reduce_slice` and `reduce_scatter_slice`: recursive doubling for small slices,
//! the ring for large ones ([`crate::ops::ALL_REDUCE_RING_MIN_BYTES`]).
//!
//! Recursive doubling with MPICH's fold for a world that is not a power of two: with
//! `p' = 2^floor(log2 p)` and `rem = p - p'`, each even rank below `2 rem` hands its slice
//! to the odd rank above it and sits out; the `p'` remaining ranks (new rank `r / 2` below
//! `2 rem`, `r - rem` above) exchange whole slices with new rank `nr ^ 2^k` in round `k`;
//! the odd ranks hand the result back.
//!
//! Invariants: every partial result covers a contiguous interval of ranks, and two are
//! always combined with the lower interval on the left, so both partners of an exchange
//! compute the same bits and the result is the same on every rank; the ring's order is
//! fixed too (`ring.rs`). The frame `aux` carries the slice length, so ranks with
//! different lengths fail rather than mix blocks.

use crate::call::Call;
use crate::element::{bytes, bytes_mut, reduce_keep_left, reduce_keep_right, Element, ReduceOp};
use crate::error::Result;
use crate::ops::{block_range, ring, AllReduceAlgorithm, Doubling, DoublingRole};

pub(crate) fn all_reduce<T: Element>(
    call: &mut Call<'_>,
    data: &mut [T],
    op: ReduceOp,
    algorithm: AllReduceAlgorithm,
) -> Result<()> {
    let aux = data.len() as u64;
    match algorithm {
        AllReduceAlgorithm::RecursiveDoubling => recursive_doubling(call, data, op, aux),
        AllReduceAlgorithm::Ring => {
            let (p, n) = (call.world, data.len());
            ring::reduce_scatter(call, data, op, 0, aux)?;
            let me = call.rank;
            ring::all_gather(call, data, me, |b| block_range(n, p, b), p - 1, aux)
        }
    }
}

pub(crate) fn reduce_scatter<T: Element>(
    call: &mut Call<'_>,
    data: &[T],
    op: ReduceOp,
    algorithm: AllReduceAlgorithm,
) -> Result<Vec<T>> {
    let (p, r, n) = (call.world, call.rank, data.len());
    let aux = n as u64;
    let mut work = data.to_vec();
    match algorithm {
        AllReduceAlgorithm::RecursiveDoubling => recursive_doubling(call, &mut work, op, aux)?,
        AllReduceAlgorithm::Ring => ring::reduce_scatter(call, &mut work, op, 0, aux)?,
    }
    let mine = block_range(n, p, r);
    if mine.start == 0 {
        work.truncate(mine.end);
        return Ok(work);
    }
    Ok(work[mine].to_vec())
}

fn recursive_doubling<T: Element>(
    call: &mut Call<'_>,
    data: &mut [T],
    op: ReduceOp,
    aux: u64,
) -> Result<()> {
    let (p, r) = (call.world, call.rank);
    if p == 1 {
        return Ok(());
    }
    let plan = Doubling::new(p, r);
    let (new_rank, absorbs) = match plan.role {
        DoublingRole::Folded { partner } => {
            // Folded: hand the slice to the pair's odd rank, take the result back.
            call.send(partner, 0, bytes(data), aux)?;
            return call.recv_into(partner, 1 + plan.rounds, bytes_mut(data), aux);
        }
        DoublingRole::Active { new_rank, absorbs } => (new_rank, absorbs),
    };
    call.with_scratch::<T, _>(data.len(), |call, scratch| {
        if let Some(lower) = absorbs {
            call.recv_into(lower, 0, bytes_mut(scratch), aux)?;
            reduce_keep_right(op, scratch, data);
        }
        for k in 0..plan.rounds {
            let (partner, partner_lower) = plan.partner(new_rank, k);
            call.sendrecv_into(
                partner,
                bytes(data),
                partner,
                bytes_mut(scratch),
                1 + k,
                aux,
            )?;
            if partner_lower {
                reduce_keep_right(op, scratch, data);
            } else {
                reduce_keep_left(op, data, scratch);
            }
        }
        // Unfold: hand the result back to the pair's even rank.
        if let Some(lower) = absorbs {
            call.send(lower, 1 + plan.rounds, bytes(data), aux)?;
        }
        Ok(())
    })
}
