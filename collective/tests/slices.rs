//! The slice collectives (`all_reduce_slice` with both algorithms and the size rule,
//! `reduce_scatter_slice`, `all_gather_slice`) for every element type and op, world sizes
//! 1 to 5 over Unix and TCP sockets, lengths from 0 across the ring switch point, each
//! rank checking its result against a sequential fold of every rank's input (exact inputs,
//! so the comparison is bit for bit).

mod common;

use common::*;
use ember_collective::{
    block_range, AllReduceAlgorithm, Communicator, Element, ReduceOp, ALL_REDUCE_RING_MIN_BYTES,
};

const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max];

fn lengths(world: usize, elem_bytes: usize) -> Vec<usize> {
    let switch = ALL_REDUCE_RING_MIN_BYTES / elem_bytes;
    let mut lens = vec![
        0,
        1,
        2,
        3,
        world + 1,
        2 * world - 1,
        1001,
        switch - 1,
        switch,
        switch + 3,
    ];
    lens.sort_unstable();
    lens.dedup();
    lens
}

/// The sequential reduction of every rank's input, lowest rank first.
fn reference<T: Element>(world: usize, op: ReduceOp, input: &impl Fn(usize) -> Vec<T>) -> Vec<T> {
    let mut acc = input(0);
    for r in 1..world {
        for (a, b) in acc.iter_mut().zip(input(r)) {
            *a = T::reduce(op, *a, b);
        }
    }
    acc
}

fn bits<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

/// Runs every slice collective on one element type and checks them.
fn check_type<T: Element + std::fmt::Debug>(
    comm: &mut Communicator,
    input: impl Fn(usize, usize, u64) -> Vec<T>,
) {
    let (p, r) = (comm.world(), comm.rank());
    for (seed, len) in lengths(p, size_of::<T>()).into_iter().enumerate() {
        let seed = seed as u64;
        let mine = |rank: usize| input(rank, len, seed);
        for op in OPS {
            let want = reference(p, op, &mine);
            let mut got = mine(r);
            comm.all_reduce_slice(&mut got, op).unwrap();
            assert_eq!(
                bits(&got),
                bits(&want),
                "all_reduce_slice {op:?} len {len} world {p} rank {r}"
            );
            for algorithm in [
                AllReduceAlgorithm::RecursiveDoubling,
                AllReduceAlgorithm::Ring,
            ] {
                let mut got = mine(r);
                comm.all_reduce_slice_with(&mut got, op, algorithm).unwrap();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{algorithm:?} {op:?} len {len} world {p} rank {r}"
                );
            }
            let got = comm.reduce_scatter_slice(&mine(r), op).unwrap();
            let block = block_range(len, p, r);
            assert_eq!(
                got.len(),
                len / p + usize::from(r < len % p),
                "block size len {len} world {p} rank {r}"
            );
            assert_eq!(
                bits(&got),
                bits(&want[block]),
                "reduce_scatter {op:?} len {len} world {p} rank {r}"
            );
        }
        let gathered = comm.all_gather_slice(&mine(r)).unwrap();
        let want: Vec<T> = (0..p).flat_map(mine).collect();
        assert_eq!(
            bits(&gathered),
            bits(&want),
            "all_gather_slice len {len} world {p} rank {r}"
        );
    }
}

fn run_all_types(transport: Transport) {
    for world in 1..=5 {
        run(world, transport, |comm| {
            check_type(comm, exact_f64);
            check_type(comm, exact_f32);
            check_type(comm, wide_i64);
            check_type(comm, wide_u64);
        });
    }
}

#[test]
fn slice_collectives_unix() {
    run_all_types(Transport::Unix);
}

#[test]
fn slice_collectives_tcp() {
    run_all_types(Transport::Tcp);
}

/// 64 MiB of f64 once (the ring with uneven blocks: 2^23 elements over 3 ranks), checked
/// element by element against the sum computed on the fly.
#[test]
fn all_reduce_64_mib_f64() {
    let len = (64 << 20) / 8;
    run(3, Transport::Unix, move |comm| {
        let r = comm.rank();
        let mut data = exact_f64(r, len, 99);
        comm.all_reduce_slice(&mut data, ReduceOp::Sum).unwrap();
        for (i, got) in data.iter().enumerate() {
            let want: f64 = (0..3).map(|q| exact_f64_at(q, i, 99)).sum();
            assert_eq!(got.to_bits(), want.to_bits(), "element {i} on rank {r}");
        }
    });
}

/// Wrapping and NaN semantics as documented: integer sums wrap, float Min/Max ignore NaN
/// unless every rank has it, a float sum with a NaN is NaN.
#[test]
fn overflow_wraps_and_nan_rules() {
    run(3, Transport::Unix, |comm| {
        let r = comm.rank();
        let mut ints = vec![i64::MAX, u64::MAX as i64];
        comm.all_reduce_slice(&mut ints, ReduceOp::Sum).unwrap();
        assert_eq!(ints, vec![i64::MAX.wrapping_mul(3), -3]);
        let mut unsigned = vec![u64::MAX; 2];
        comm.all_reduce_slice(&mut unsigned, ReduceOp::Sum).unwrap();
        assert_eq!(unsigned, vec![u64::MAX - 2; 2]);
        let nan_on_one = if r == 1 { f64::NAN } else { r as f64 };
        let mut floats = [nan_on_one, nan_on_one, f64::NAN, nan_on_one];
        comm.all_reduce_slice(&mut floats[..1], ReduceOp::Min)
            .unwrap();
        comm.all_reduce_slice(&mut floats[1..2], ReduceOp::Max)
            .unwrap();
        comm.all_reduce_slice(&mut floats[2..3], ReduceOp::Max)
            .unwrap();
        comm.all_reduce_slice(&mut floats[3..4], ReduceOp::Sum)
            .unwrap();
        assert_eq!(floats[0], 0.0);
        assert_eq!(floats[1], 2.0);
        assert!(floats[2].is_nan());
        assert!(floats[3].is_nan());
    });
}
