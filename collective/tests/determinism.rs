//! Float reductions give the same bits on every rank, in every run, and over either
//! transport, on inputs whose sums round (so a different order would show), for sizes on
//! both sides of the ring switch point; and they stay within rounding of the exact sum.

mod common;

use common::*;
use ember_collective::{ReduceOp, ALL_REDUCE_RING_MIN_BYTES};

fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// One run: every rank's all-reduce and reduce-scatter result, as bits.
fn one_run(world: usize, transport: Transport, len: usize) -> Vec<(Vec<u64>, Vec<u64>)> {
    run(world, transport, move |comm| {
        let input = rounding_f64(comm.rank(), len, 5);
        let mut all = input.clone();
        comm.all_reduce_slice(&mut all, ReduceOp::Sum).unwrap();
        let scattered = comm.reduce_scatter_slice(&input, ReduceOp::Sum).unwrap();
        (bits(&all), bits(&scattered))
    })
}

#[test]
fn float_sums_are_bit_identical_across_ranks_runs_and_transports() {
    let switch = ALL_REDUCE_RING_MIN_BYTES / 8;
    for world in [2, 3, 4, 5] {
        for len in [100, switch - 1, switch, 3 * switch + 7] {
            let inputs: Vec<Vec<f64>> = (0..world).map(|r| rounding_f64(r, len, 5)).collect();
            let forward: Vec<f64> = (0..len)
                .map(|i| inputs.iter().map(|v| v[i]).sum())
                .collect();
            let backward: Vec<f64> = (0..len)
                .map(|i| inputs.iter().rev().map(|v| v[i]).sum())
                .collect();
            // (Two addends commute exactly; from three on, the order shows in the bits.)
            if world >= 3 {
                assert!(
                    bits(&forward) != bits(&backward),
                    "inputs that do not round prove nothing"
                );
            }

            let runs = [
                one_run(world, Transport::Unix, len),
                one_run(world, Transport::Unix, len),
                one_run(world, Transport::Tcp, len),
            ];
            let first = &runs[0][0].0;
            for (run, ranks) in runs.iter().enumerate() {
                for (rank, (all, scattered)) in ranks.iter().enumerate() {
                    assert!(
                        all == first,
                        "world {world} len {len}: run {run} rank {rank} differs"
                    );
                    let block = ember_collective::block_range(len, world, rank);
                    assert!(
                        *scattered == runs[0][rank].1,
                        "world {world} len {len}: reduce_scatter of run {run} rank {rank} differs"
                    );
                    assert_eq!(scattered.len(), block.len());
                }
            }
            for (i, (got, want)) in first.iter().zip(&forward).enumerate() {
                let got = f64::from_bits(*got);
                let scale: f64 = inputs.iter().map(|v| v[i].abs()).sum();
                assert!(
                    (got - want).abs() <= 1e-14 * scale,
                    "element {i}: {got} vs {want}"
                );
            }
        }
    }
}
