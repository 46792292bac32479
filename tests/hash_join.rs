//! The inner join as a shuffled hash join: the pairs equal a plain reference whichever
//! side is built, with co-partitioned sides read in place, under a memory limit the build
//! side outgrows (the partition falls back to the spilling cogroup) and with a hot key
//! whose millions of probe records must cost no memory.

mod common;

use std::collections::HashMap;

use common::*;

const MEMORY: u64 = 256 * 1024;

/// The pairs of a join of `left` and `right`, computed with a map of the right side.
fn reference<V: Clone + Ord, W: Clone + Ord>(
    left: &[(u64, V)],
    right: &[(u64, W)],
) -> Vec<(u64, (V, W))> {
    let mut by_key: HashMap<u64, Vec<W>> = HashMap::new();
    for (k, w) in right {
        by_key.entry(*k).or_default().push(w.clone());
    }
    let mut out = Vec::new();
    for (k, v) in left {
        for w in by_key.get(k).into_iter().flatten() {
            out.push((*k, (v.clone(), w.clone())));
        }
    }
    sorted(out)
}

/// Each side the smaller one in turn (the build side is the smaller by its shuffle bytes),
/// with duplicate keys on both sides and keys on one side only.
#[test]
fn either_side_built_gives_the_reference_pairs() {
    let c = ctx(2);
    let small: Vec<(u64, String)> = random_pairs(41, 300, 80)
        .into_iter()
        .map(|(k, v)| (k + 40, format!("s{v}")))
        .collect();
    let big: Vec<(u64, i64)> = random_pairs(42, 5_000, 120);
    for parts in [1, 3, 7] {
        let got = c
            .parallelize(big.clone(), 4)
            .join_into(&c.parallelize(small.clone(), 2), parts)
            .collect()
            .unwrap();
        assert_eq!(
            sorted(got),
            reference(&big, &small),
            "big join small, {parts}"
        );
        let got = c
            .parallelize(small.clone(), 2)
            .join_into(&c.parallelize(big.clone(), 4), parts)
            .collect()
            .unwrap();
        assert_eq!(
            sorted(got),
            reference(&small, &big),
            "small join big, {parts}"
        );
    }
    // An empty side.
    let none: Vec<(u64, String)> = Vec::new();
    let got = c
        .parallelize(big.clone(), 4)
        .join(&c.parallelize(none, 2))
        .collect()
        .unwrap();
    assert!(got.is_empty());
}

/// Sides already partitioned by the join's partitioner are read without a shuffle.
#[test]
fn co_partitioned_sides_join_in_place() {
    let c = ctx(2);
    let left = random_pairs(43, 2_000, 300);
    let right: Vec<(u64, i64)> = random_pairs(44, 700, 400);
    let l = c.parallelize(left.clone(), 3).partition_by(5);
    let r = c.parallelize(right.clone(), 2).partition_by(5);
    let joined = l.join(&r);
    assert_eq!(joined.num_partitions(), 5);
    assert_eq!(sorted(joined.collect().unwrap()), reference(&left, &right));
}

/// A build side larger than the memory limit: the partition falls back to the external
/// cogroup, which spills, and the pairs are still exactly the reference's.
#[test]
fn a_build_side_over_the_memory_limit_falls_back_and_spills() {
    let c = ctx_mem(2, MEMORY);
    let side = |seed: u64| -> Vec<(u64, String)> {
        random_pairs(seed, 30_000, 10_000)
            .into_iter()
            .map(|(k, v)| (k, format!("value-{v:012}-padding-to-grow-the-table")))
            .collect()
    };
    let (left, right) = (side(45), side(46));
    let joined = c
        .parallelize(left.clone(), 3)
        .join(&c.parallelize(right.clone(), 3));
    let first = joined.count().unwrap();
    // Again, with the map outputs reused: only the join's own tasks run, so what
    // spills is its fallback.
    let got = joined.collect().unwrap();
    let m = c.last_job_metrics().unwrap();
    assert_eq!(m.stages_skipped, 2, "the map stages are reused");
    assert!(
        m.totals.spill_count > 0,
        "the join's build side should not fit in {MEMORY} bytes"
    );
    let expected = reference(&left, &right);
    assert_eq!(first as usize, expected.len());
    assert_eq!(sorted(got), expected);
}

/// A hot key (90 % of the probe side) with a small build side: the probe records stream
/// past the table, so the join spills nothing under the memory limit, and every pair is
/// there.
#[test]
fn a_hot_key_on_the_probe_side_costs_no_memory() {
    let c = ctx_mem(2, MEMORY);
    let mut rng = SplitMix::new(47);
    let probe: Vec<(u64, u64)> = (0..200_000u64)
        .map(|i| {
            let k = if rng.below(10) < 9 {
                7
            } else {
                rng.below(1_000)
            };
            (k, i)
        })
        .collect();
    let mut build: Vec<(u64, u64)> = (0..1_000u64).map(|k| (k, k * 3)).collect();
    build.push((7, 1));
    let joined = c
        .parallelize(probe.clone(), 4)
        .join(&c.parallelize(build.clone(), 2))
        .map(|(k, (v, w)): (u64, (u64, u64))| (k, v ^ w));
    joined.count().unwrap();
    let got = joined.collect().unwrap();
    let m = c.last_job_metrics().unwrap();
    assert_eq!(m.stages_skipped, 2, "the map stages are reused");
    assert_eq!(
        m.totals.spill_count, 0,
        "the probe side is streamed, never held"
    );
    let expected: Vec<(u64, u64)> = reference(&probe, &build)
        .into_iter()
        .map(|(k, (v, w))| (k, v ^ w))
        .collect();
    assert!(expected.len() > 360_000, "the hot key matches twice");
    assert_eq!(sorted(got), sorted(expected));
}
