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
use crate::ops::{Doubling, DoublingRole};

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
    let plan = Doubling::new(p, r);
    let (new_rank, absorbs) = match plan.role {
        DoublingRole::Folded { partner } => {
            call.send(partner, 0, &value, 0)?;
            return Ok(call.recv_owned(partner, 1 + plan.rounds, Some(0))?.payload);
        }
        DoublingRole::Active { new_rank, absorbs } => (new_rank, absorbs),
    };
    let mut acc = value;
    if let Some(lower) = absorbs {
        let theirs = call.recv_owned(lower, 0, Some(0))?.payload;
        acc = combine_checked(call, combine, theirs, acc)?;
    }
    for k in 0..plan.rounds {
        let (partner, partner_lower) = plan.partner(new_rank, k);
        let theirs = call.sendrecv_owned(partner, &acc, 0, partner, 0, 1 + k)?;
        acc = if partner_lower {
            combine_checked(call, combine, theirs, acc)?
        } else {
            combine_checked(call, combine, acc, theirs)?
        };
    }
    if let Some(lower) = absorbs {
        call.send(lower, 1 + plan.rounds, &acc, 0)?;
    }
    Ok(acc)
}
