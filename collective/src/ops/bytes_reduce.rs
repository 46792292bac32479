//! `reduce` and `all_reduce` over serialised values with the caller's associative
//! `combine(lower_ranks_part, higher_ranks_part)`; commutativity is never assumed.
//!
//! `reduce`: a binomial tree over the ranks in their own order, towards rank 0 (in round
//! `k`, a rank whose bit `k` is set sends its partial to `r - 2^k`, which puts it on the
//! right), then rank 0 hands the result to the root if that is another rank (MPICH's way
//! for non-commutative operations). `all_reduce`: recursive doubling with the
//! non-power-of-two fold, as in `slice_reduce.rs`.
//!
//! Invariants: every partial covers a contiguous interval of ranks and is combined with
//! the interval of lower ranks on the left, so the result equals
//! `combine(...combine(combine(v0, v1), v2)..., v_{p-1})` up to associativity, and with a
//! deterministic `combine` every rank of `all_reduce` gets the same bytes. Received values
//! are bounded by `max_message_bytes`, and so is each partial this rank produces.

use crate::call::Call;
use crate::error::{BoxError, CollectiveError, Result};
use crate::ops::{doubling_partner, pof2_floor};

/// The caller's combine function, as the algorithms take it.
pub(crate) type Combine<'f> = &'f mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<Vec<u8>, BoxError>;

/// The step of the final hand-over from rank 0 to a root other than 0.
const TO_ROOT_STEP: usize = 64;

fn combine_checked(
    call: &Call<'_>,
    combine: Combine<'_>,
    lower: Vec<u8>,
    higher: Vec<u8>,
) -> Result<Vec<u8>> {
    let out = combine(lower, higher).map_err(CollectiveError::Combine)?;
    call.check_own_size(out.len())?;
    Ok(out)
}

pub(crate) fn reduce(
    call: &mut Call<'_>,
    root: usize,
    value: Vec<u8>,
    combine: Combine<'_>,
) -> Result<Option<Vec<u8>>> {
    let (p, r) = (call.world, call.rank);
    call.check_own_size(value.len())?;
    let mut acc = value;
    let mut mask = 1;
    while mask < p {
        let step = mask.trailing_zeros() as usize;
        if r & mask != 0 {
            call.send(r - mask, step, &acc, 0)?;
            break;
        }
        if r + mask < p {
            let higher = call.recv_owned(r + mask, step, Some(0))?.payload;
            acc = combine_checked(call, combine, acc, higher)?;
        }
        mask <<= 1;
    }
    if root == 0 {
        return Ok((r == 0).then_some(acc));
    }
    if r == 0 {
        call.send(root, TO_ROOT_STEP, &acc, 0)?;
        Ok(None)
    } else if r == root {
        Ok(Some(call.recv_owned(0, TO_ROOT_STEP, Some(0))?.payload))
    } else {
        Ok(None)
    }
}

pub(crate) fn all_reduce(
    call: &mut Call<'_>,
    value: Vec<u8>,
    combine: Combine<'_>,
) -> Result<Vec<u8>> {
    let (p, r) = (call.world, call.rank);
    call.check_own_size(value.len())?;
    if p == 1 {
        return Ok(value);
    }
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    let mut acc = value;
    let new_rank = if r < 2 * rem {
        if r % 2 == 0 {
            call.send(r + 1, 0, &acc, 0)?;
            None
        } else {
            let lower = call.recv_owned(r - 1, 0, Some(0))?.payload;
            acc = combine_checked(call, combine, lower, acc)?;
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };
    let rounds = pof2.trailing_zeros() as usize;
    if let Some(nr) = new_rank {
        for k in 0..rounds {
            let (partner, partner_new) = doubling_partner(p, nr, k);
            let theirs = call.sendrecv_owned(partner, &acc, 0, partner, 0, 1 + k)?;
            acc = if partner_new < nr {
                combine_checked(call, combine, theirs, acc)?
            } else {
                combine_checked(call, combine, acc, theirs)?
            };
        }
    }
    if r < 2 * rem {
        if r % 2 == 0 {
            acc = call.recv_owned(r + 1, 1 + rounds, Some(0))?.payload;
        } else {
            call.send(r - 1, 1 + rounds, &acc, 0)?;
        }
    }
    Ok(acc)
}
