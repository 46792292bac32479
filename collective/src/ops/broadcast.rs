//! `broadcast`: a binomial tree from the root (MPICH's), or for large values in a world
//! of at least 3 ranks a binomial scatter + ring all-gather (van de Geijn).
//!
//! Ranks are taken relative to the root (`q = r - root mod p`); rank `q` receives once,
//! from `q - 2^k` where `2^k` is `q`'s lowest set bit, then sends to `q + 2^j` for every
//! `2^j` below that bit. Every frame's `aux` is the value's total length, so a receiver
//! learns it from its first frame and picks the same mode as the root
//! ([`crate::ops::BROADCAST_SCATTER_MIN_BYTES`]). In scatter mode the value is split by the
//! block distribution over relative ranks, and rank `q` first receives the blocks of its
//! subtree `[q, q + lowbit(q))`.
//!
//! Invariants: the total is bounded by `max_message_bytes` before anything is allocated
//! for it, and every frame's length must be exactly the part the mode implies; non-roots'
//! values are ignored.

use std::ops::Range;

use crate::call::Call;
use crate::error::{CollectiveError, Result};
use crate::ops::{block_range, ring, BROADCAST_SCATTER_MIN_BYTES};

fn scatter_mode(total: usize, p: usize) -> bool {
    total >= BROADCAST_SCATTER_MIN_BYTES && p >= 3
}

/// The bytes of blocks `first .. first + count` (relative ranks) of a `total`-byte value.
fn span(total: usize, p: usize, first: usize, count: usize) -> Range<usize> {
    let last = (first + count).min(p) - 1;
    block_range(total, p, first).start..block_range(total, p, last).end
}

pub(crate) fn broadcast(
    call: &mut Call<'_>,
    root: usize,
    value: Option<Vec<u8>>,
) -> Result<Vec<u8>> {
    let (p, r) = (call.world, call.rank);
    let q = (r + p - root) % p;
    let mut data = if r == root {
        let value = value.ok_or_else(|| {
            CollectiveError::InvalidArgument(format!(
                "broadcast: the root (rank {root}) passed no value"
            ))
        })?;
        call.check_own_size(value.len())?;
        Some(value)
    } else {
        None
    };
    // Receive from the parent.
    let mut mask = 1;
    while mask < p {
        if q & mask != 0 {
            let parent = (r + p - mask) % p;
            let frame = call.recv_owned(parent, 0, None)?;
            let total = frame.header.aux;
            if total > call.max_message {
                return Err(CollectiveError::MessageTooLarge {
                    rank: parent,
                    len: total,
                    max: call.max_message,
                });
            }
            let total = total as usize;
            let expected = if scatter_mode(total, p) {
                span(total, p, q, mask)
            } else {
                0..total
            };
            if frame.payload.len() != expected.len() {
                return Err(CollectiveError::Protocol {
                    rank: parent,
                    what: format!(
                        "broadcast of {total} bytes: a {}-byte part where {} bytes are expected",
                        frame.payload.len(),
                        expected.len()
                    ),
                });
            }
            data = Some(if expected.len() == total {
                frame.payload
            } else {
                let mut whole = vec![0u8; total];
                whole[expected].copy_from_slice(&frame.payload);
                whole
            });
            break;
        }
        mask <<= 1;
    }
    let mut data = data.expect("the root has its value and every other rank received");
    let total = data.len();
    let scatter = scatter_mode(total, p);
    // Send to the children.
    mask >>= 1;
    while mask > 0 {
        if q + mask < p {
            let child = (r + mask) % p;
            let part = if scatter {
                span(total, p, q + mask, mask)
            } else {
                0..total
            };
            call.send(child, 0, &data[part], total as u64)?;
        }
        mask >>= 1;
    }
    if scatter {
        ring::all_gather(
            call,
            &mut data,
            q,
            |b| block_range(total, p, b),
            1,
            total as u64,
        )?;
    }
    Ok(data)
}
