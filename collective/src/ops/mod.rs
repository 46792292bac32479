//! The collective algorithms, each a function of a [`Call`](crate::call::Call), and the
//! constants that choose between them.
//!
//! Invariants: every choice of algorithm is a function of the world size and of sizes all
//! ranks share (a slice's length, checked in every frame's `aux`; a broadcast's total,
//! announced by the root), never of timing, so every rank runs the same algorithm and a
//! reduction's order is a fixed function of ranks and sizes. The switch points below are
//! constants, not options.

use std::ops::Range;

pub(crate) mod barrier;
pub(crate) mod broadcast;
pub(crate) mod bytes_reduce;
pub(crate) mod exchange;
pub(crate) mod gather;
pub(crate) mod ring;
pub(crate) mod slice_reduce;

/// `all_reduce_slice` (and `reduce_scatter_slice`) switch from recursive doubling
/// (`ceil(log2 p)` rounds, each moving the whole slice: latency-optimal) to the ring
/// reduce-scatter + all-gather (`2(p-1)` rounds moving `1/p` of it each:
/// bandwidth-optimal) at this many bytes of slice, provided the slice has at least one
/// element per rank. Measured with `examples/coll_bench.rs --sweep` (Unix sockets, one
/// two-core host, f64 sums, median of the slowest rank): 2 ranks, 32 KiB: recursive
/// doubling 10.7 us, ring 17.2 us; 64 KiB: 25.7 us against 22.3 us; 4 ranks, 32 KiB:
/// 60.9 us against 64.6 us; 64 KiB: 113 us against 79 us. The ring's lead grows with
/// size (1 MiB, 2 ranks: 656 us against 294 us).
pub const ALL_REDUCE_RING_MIN_BYTES: usize = 64 << 10;

/// `broadcast` switches from the binomial tree (the whole value down `ceil(log2 p)`
/// levels) to a binomial scatter + ring all-gather (about `2 n` bytes through each rank,
/// whatever `p`) at this many bytes, when the world has at least 3 ranks (with 2 both
/// move `n` bytes once).
pub const BROADCAST_SCATTER_MIN_BYTES: usize = 512 << 10;

/// Which algorithm a slice all-reduce runs; [`crate::Communicator::all_reduce_slice`]
/// picks by [`ALL_REDUCE_RING_MIN_BYTES`], `all_reduce_slice_with` forces one (for
/// benchmarks and tests; every rank must force the same, which the frames check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllReduceAlgorithm {
    /// Recursive doubling with the non-power-of-two fold (MPICH's): lower ranks' part
    /// always on the left.
    RecursiveDoubling,
    /// Ring reduce-scatter then ring all-gather (Patarasuk and Yuan 2009).
    Ring,
}

impl AllReduceAlgorithm {
    /// The algorithm the size-based rule picks for `len` elements of `elem_bytes` each.
    pub fn for_size(len: usize, elem_bytes: usize, world: usize) -> AllReduceAlgorithm {
        if len.saturating_mul(elem_bytes) >= ALL_REDUCE_RING_MIN_BYTES && len >= world {
            AllReduceAlgorithm::Ring
        } else {
            AllReduceAlgorithm::RecursiveDoubling
        }
    }
}

/// MPI's block distribution of `len` items over `world` parts: part `index` gets
/// `len / world` items, and one more if `index < len % world`; parts are contiguous and in
/// index order. `reduce_scatter_slice` gives rank `r` the reduction of block `r`.
pub fn block_range(len: usize, world: usize, index: usize) -> Range<usize> {
    assert!(index < world, "block {index} of a world of {world}");
    let (base, extra) = (len / world, len % world);
    let start = index * base + index.min(extra);
    start..start + base + usize::from(index < extra)
}

/// The largest power of two not above `p` (p >= 1).
pub(crate) fn pof2_floor(p: usize) -> usize {
    1 << (usize::BITS - 1 - p.leading_zeros())
}

/// One rank's part in recursive doubling over a world of `p` folded to a power of two:
/// the first `2 * (p - pof2)` ranks pair up, the odd one of each pair standing in for
/// both. Steps: 0 is the fold, `1 + k` round `k`, `1 + rounds` the unfold.
pub(crate) struct Doubling {
    /// Rounds among the `pof2` participants.
    pub rounds: usize,
    pub role: DoublingRole,
    rem: usize,
}

pub(crate) enum DoublingRole {
    /// An even rank of a pair: hands its value to `partner` (the odd one) in the fold
    /// and takes the result back from it in the unfold.
    Folded { partner: usize },
    /// A participant, number `new_rank` of `pof2`; `absorbs`: the even rank of its pair
    /// (if any), whose value it folds in first and to which it gives the result back.
    Active {
        new_rank: usize,
        absorbs: Option<usize>,
    },
}

impl Doubling {
    /// Rank `r`'s part (`p` >= 2).
    pub(crate) fn new(p: usize, r: usize) -> Doubling {
        let pof2 = pof2_floor(p);
        let rem = p - pof2;
        let role = match r {
            r if r < 2 * rem && r % 2 == 0 => DoublingRole::Folded { partner: r + 1 },
            r if r < 2 * rem => DoublingRole::Active {
                new_rank: r / 2,
                absorbs: Some(r - 1),
            },
            r => DoublingRole::Active {
                new_rank: r - rem,
                absorbs: None,
            },
        };
        Doubling {
            rounds: pof2.trailing_zeros() as usize,
            role,
            rem,
        }
    }

    /// The partner of participant `new_rank` in round `k`: its real rank, and whether
    /// it holds lower ranks' values (its participant number is the smaller).
    pub(crate) fn partner(&self, new_rank: usize, k: usize) -> (usize, bool) {
        let partner_new = new_rank ^ (1 << k);
        let partner = if partner_new < self.rem {
            2 * partner_new + 1
        } else {
            partner_new + self.rem
        };
        (partner, partner_new < new_rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_distribution_is_mpis() {
        assert_eq!(block_range(10, 4, 0), 0..3);
        assert_eq!(block_range(10, 4, 1), 3..6);
        assert_eq!(block_range(10, 4, 2), 6..8);
        assert_eq!(block_range(10, 4, 3), 8..10);
        assert_eq!(block_range(2, 5, 1), 1..2);
        assert_eq!(block_range(2, 5, 4), 2..2);
        for len in 0..40 {
            for world in 1..7 {
                let mut next = 0;
                for i in 0..world {
                    let r = block_range(len, world, i);
                    assert_eq!(r.start, next);
                    assert_eq!(r.len(), len / world + usize::from(i < len % world));
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
        assert_eq!((pof2_floor(1), pof2_floor(5), pof2_floor(8)), (1, 4, 8));
    }
}
