//! The byte-value collectives (`barrier`, `broadcast`, `reduce`, `all_reduce`,
//! `all_gather`, `all_to_all`) for world sizes 1 to 5 over Unix and TCP sockets, every
//! root, empty values and sizes across the broadcast switch point, each rank checking
//! against what it computes itself from every rank's deterministic input. The reductions
//! use concatenation, which is associative but not commutative, so any order other than
//! rank order fails.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use ember_collective::{BoxError, Communicator, BROADCAST_SCATTER_MIN_BYTES};

fn concat(mut lower: Vec<u8>, higher: Vec<u8>) -> Result<Vec<u8>, BoxError> {
    lower.extend_from_slice(&higher);
    Ok(lower)
}

/// Rank `rank`'s value for reductions, of a size that varies by rank (0 on rank 0).
fn value(rank: usize, seed: u64) -> Vec<u8> {
    bytes_of(rank, rank * 37 + (seed as usize % 5), seed)
}

fn check_everything(comm: &mut Communicator) {
    let (p, r) = (comm.world(), comm.rank());
    // broadcast: every root, sizes across the scatter switch point.
    let sizes = [
        0,
        1,
        1000,
        BROADCAST_SCATTER_MIN_BYTES - 1,
        BROADCAST_SCATTER_MIN_BYTES,
        BROADCAST_SCATTER_MIN_BYTES + 5,
    ];
    for root in 0..p {
        for (seed, size) in sizes.into_iter().enumerate() {
            let want = bytes_of(root, size, seed as u64);
            // Non-roots' values are ignored: pass one on some of them.
            let mine = (r == root || r % 2 == 1).then(|| bytes_of(r + 100, 3, 0));
            let mine = if r == root { Some(want.clone()) } else { mine };
            let got = comm.broadcast(root, mine).unwrap();
            assert!(
                got == want,
                "broadcast root {root} size {size} world {p} rank {r}"
            );
        }
    }
    // reduce and all_reduce in rank order.
    for seed in 0..3u64 {
        let want: Vec<u8> = (0..p).flat_map(|q| value(q, seed)).collect();
        for root in 0..p {
            let got = comm.reduce(root, value(r, seed), concat).unwrap();
            if r == root {
                assert!(
                    got.as_deref() == Some(&want[..]),
                    "reduce root {root} world {p}"
                );
            } else {
                assert!(got.is_none(), "reduce gave a non-root a value");
            }
        }
        let got = comm.all_reduce(value(r, seed), concat).unwrap();
        assert!(got == want, "all_reduce world {p} rank {r}");
    }
    // all_gather with sizes that differ by rank (rank 0's is empty).
    for seed in 0..3u64 {
        let got = comm.all_gather(value(r, seed)).unwrap();
        let want: Vec<Vec<u8>> = (0..p).map(|q| value(q, seed)).collect();
        assert!(got == want, "all_gather world {p} rank {r}");
    }
    // all_to_all: the value from rank i to rank j is a function of (i, j).
    let to_from = |from: usize, to: usize| bytes_of(from * 100 + to, (from + 2 * to) % 4 * 11, 7);
    let got = comm
        .all_to_all((0..p).map(|j| to_from(r, j)).collect())
        .unwrap();
    let want: Vec<Vec<u8>> = (0..p).map(|i| to_from(i, r)).collect();
    assert!(got == want, "all_to_all world {p} rank {r}");
    // A combine that parses its operands: sums of 8-byte little-endian integers.
    let sum = comm
        .all_reduce((r as u64 + 1).to_le_bytes().to_vec(), |a, b| {
            let a = u64::from_le_bytes(a.try_into().map_err(|_| "not 8 bytes")?);
            let b = u64::from_le_bytes(b.try_into().map_err(|_| "not 8 bytes")?);
            Ok((a + b).to_le_bytes().to_vec())
        })
        .unwrap();
    assert_eq!(
        u64::from_le_bytes(sum.try_into().unwrap()),
        (p * (p + 1) / 2) as u64
    );
    let stats = comm.stats();
    assert!(stats.calls > 0);
    assert_eq!(stats.bytes_sent > 0, p > 1);
}

#[test]
fn byte_collectives_unix() {
    for world in 1..=5 {
        run(world, Transport::Unix, check_everything);
    }
}

#[test]
fn byte_collectives_tcp() {
    for world in 1..=5 {
        run(world, Transport::Tcp, check_everything);
    }
}

/// No rank leaves a barrier before every rank entered it: each rank counts itself in
/// before the barrier and sees every rank counted after it, round after round.
#[test]
fn barrier_waits_for_every_rank() {
    for transport in TRANSPORTS {
        for world in 1..=5 {
            let entered = Arc::new(AtomicUsize::new(0));
            run(world, transport, move |comm| {
                for round in 1..=20 {
                    if comm.rank() == round % comm.world() {
                        // One rank dawdles each round.
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    entered.fetch_add(1, Ordering::SeqCst);
                    comm.barrier().unwrap();
                    assert!(
                        entered.load(Ordering::SeqCst) >= round * comm.world(),
                        "left round {round} early"
                    );
                }
            });
        }
    }
}
