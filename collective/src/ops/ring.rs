//! The ring passes shared by the large-size algorithms: reduce-scatter in place and
//! all-gather in place (Patarasuk and Yuan 2009), over blocks of one buffer.
//!
//! Invariants: in both passes rank `r` sends only to `r + 1` and receives only from
//! `r - 1` (mod `p`), one block per step, `p - 1` steps. After
//! [`reduce_scatter`], block `r` of rank `r`'s buffer is the reduction of every rank's
//! block `r`, accumulated in ring order starting at rank `r + 1` (partial on the left, the
//! receiving rank's own block on the right): a fixed order, so the bits never vary.
//! [`all_gather`] copies each rank's block to every rank unchanged, so all ranks end
//! with identical bits. Received blocks land directly in place (all-gather) or in one
//! block-sized scratch buffer (the communicator's, reused across calls; reduce-scatter), reduced chunk by chunk as they arrive.

use std::ops::Range;

use bytemuck::Pod;

use crate::call::Call;
use crate::element::{bytes, bytes_mut, reduce_keep_right, Element, ReduceOp};
use crate::error::Result;
use crate::ops::block_range;

/// Ring reduce-scatter over the block distribution of `data`; leaves block `call.rank`
/// reduced. Uses steps `step_base .. step_base + p - 1`.
pub(crate) fn reduce_scatter<T: Element>(
    call: &mut Call<'_>,
    data: &mut [T],
    op: ReduceOp,
    step_base: usize,
    aux: u64,
) -> Result<()> {
    let (p, r, n) = (call.world, call.rank, data.len());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    call.with_scratch::<T, _>(n.div_ceil(p), |call, scratch| {
        for s in 0..p.saturating_sub(1) {
            let send_block = block_range(n, p, (r + 2 * p - s - 1) % p);
            let recv_block = block_range(n, p, (r + 2 * p - s - 2) % p);
            let incoming = &mut scratch[..recv_block.len()];
            let (outgoing, target) = disjoint(data, send_block, recv_block);
            // Reduce each whole element as soon as it has arrived.
            let mut reduced = 0;
            let mut reduce_arrived = |prefix: &[u8]| {
                let complete = prefix.len() / size_of::<T>();
                if complete > reduced {
                    let arrived: &[T] = bytemuck::cast_slice(
                        &prefix[reduced * size_of::<T>()..complete * size_of::<T>()],
                    );
                    reduce_keep_right(op, arrived, &mut target[reduced..complete]);
                    reduced = complete;
                }
            };
            call.sendrecv_consume(
                right,
                bytes(outgoing),
                left,
                bytes_mut(incoming),
                Some(&mut reduce_arrived),
                step_base + s,
                aux,
            )?;
            debug_assert_eq!(reduced, target.len());
        }
        Ok(())
    })
}

/// Ring all-gather in place: rank `call.rank` holds block `me` (its index in the ring,
/// which must grow by one from each rank to the next) and ends with every block.
/// Uses steps `step_base .. step_base + p - 1`.
pub(crate) fn all_gather<T: Pod>(
    call: &mut Call<'_>,
    data: &mut [T],
    me: usize,
    block: impl Fn(usize) -> Range<usize>,
    step_base: usize,
    aux: u64,
) -> Result<()> {
    let (p, r) = (call.world, call.rank);
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for s in 0..p.saturating_sub(1) {
        let send_block = block((me + p - s) % p);
        let recv_block = block((me + 2 * p - s - 1) % p);
        let (outgoing, incoming) = disjoint(data, send_block, recv_block);
        call.sendrecv_into(
            right,
            bytes(outgoing),
            left,
            bytes_mut(incoming),
            step_base + s,
            aux,
        )?;
    }
    Ok(())
}

/// Two non-overlapping ranges of one slice, the first to read, the second to write.
pub(crate) fn disjoint<T>(
    data: &mut [T],
    read: Range<usize>,
    write: Range<usize>,
) -> (&[T], &mut [T]) {
    if read.end <= write.start {
        let (low, high) = data.split_at_mut(write.start);
        (&low[read], &mut high[..write.len()])
    } else {
        assert!(
            write.end <= read.start,
            "overlapping blocks {read:?} and {write:?}"
        );
        let (low, high) = data.split_at_mut(read.start);
        (&high[..read.len()], &mut low[write])
    }
}

#[cfg(test)]
mod tests {
    use super::disjoint;

    #[test]
    fn disjoint_splits_either_order_and_empty_blocks() {
        let mut v = [0, 1, 2, 3, 4, 5];
        let (r, w) = disjoint(&mut v, 0..2, 4..6);
        assert_eq!(r, &[0, 1]);
        w.copy_from_slice(&[9, 9]);
        let (r, w) = disjoint(&mut v, 3..5, 0..1);
        assert_eq!(r, &[3, 9]);
        assert_eq!(w, &mut [0]);
        let (r, w) = disjoint(&mut v, 2..2, 2..4);
        assert!(r.is_empty());
        assert_eq!(w, &mut [2, 3]);
        let (r, w) = disjoint(&mut v, 2..4, 2..2);
        assert_eq!(r, &[2, 3]);
        assert!(w.is_empty());
    }
}
