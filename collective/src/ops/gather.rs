//! `all_gather` (byte values of any sizes) and `all_gather_slice` (equal-length slices):
//! the ring, `p - 1` steps.
//!
//! Invariants: the result is in rank order on every rank; each byte value received is
//! bounded by `max_message_bytes`, and its frame's `aux` names the block (the rank whose
//! value it is), checked against the block this step must bring; slices are received
//! straight into their place in the result, with their exact length.

use crate::call::Call;
use crate::element::Element;
use crate::error::{CollectiveError, Result};
use crate::ops::ring;

pub(crate) fn all_gather(call: &mut Call<'_>, value: Vec<u8>) -> Result<Vec<Vec<u8>>> {
    let (p, r) = (call.world, call.rank);
    call.check_own_size(value.len())?;
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let mut blocks = vec![Vec::new(); p];
    blocks[r] = value;
    for s in 0..p - 1 {
        let send_block = (r + p - s) % p;
        let recv_block = (r + 2 * p - s - 1) % p;
        let out = &blocks[send_block];
        let inc = call.sendrecv_owned(right, out, send_block as u64, left, recv_block as u64, s)?;
        blocks[recv_block] = inc;
    }
    Ok(blocks)
}

pub(crate) fn all_gather_slice<T: Element>(call: &mut Call<'_>, data: &[T]) -> Result<Vec<T>> {
    let (p, r, n) = (call.world, call.rank, data.len());
    let total = n.checked_mul(p).ok_or_else(|| {
        CollectiveError::InvalidArgument(format!(
            "all_gather_slice: {n} elements times {p} ranks overflows"
        ))
    })?;
    let mut out = vec![T::zeroed(); total];
    out[r * n..(r + 1) * n].copy_from_slice(data);
    ring::all_gather(call, &mut out, r, |b| b * n..(b + 1) * n, 0, n as u64)?;
    Ok(out)
}
