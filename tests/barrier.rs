//! Barrier stages in local mode: every collective of `BarrierContext` against an
//! independent computation for world sizes 1 to 5 (odd and empty slices, large values),
//! float reductions bit-identical across runs and placements, stages before and after a
//! barrier stage, a rank that panics (the whole stage reruns, nothing hangs), a stage
//! wider than the cluster, and the operators refused on a barrier RDD.

mod common;

use common::ctx;
use ember::{BarrierContext, EmberError, Records, ReduceOp, Result};

/// What one rank saw of every collective.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Seen {
    rank: usize,
    world: usize,
    broadcast: Vec<u64>,
    reduce: Option<Vec<u64>>,
    all_reduce: String,
    sum_i64: Vec<i64>,
    min_f64: Vec<f64>,
    max_u64: Vec<u64>,
    sum_f32: Vec<f32>,
    reduce_scatter: Vec<i64>,
    all_gather: Vec<(usize, String)>,
    all_gather_slice: Vec<u64>,
    all_to_all: Vec<(usize, usize)>,
    empty: Vec<f64>,
}

/// Rank r's inputs, as a plain function the test recomputes independently.
fn input_i64(rank: usize, len: usize) -> Vec<i64> {
    (0..len)
        .map(|i| (i as i64 * 7919 + rank as i64 * 104_729) % 1_000_003 - 500_000)
        .collect()
}
fn input_f64(rank: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 31 + rank * 17) % 101) as f64 * 0.37 - 12.5)
        .collect()
}
fn input_u64(rank: usize, len: usize) -> Vec<u64> {
    (0..len)
        .map(|i| u64::MAX - ((i * 13 + rank * 101) % 977) as u64)
        .collect()
}
fn input_f32(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (i + rank) as f32).collect()
}

/// Odd lengths, one past the ring's 64 KiB switch point for i64.
const LEN: usize = 8_195 + 1_024;
const SMALL: usize = 7;

fn everything(b: BarrierContext, _records: Records<u32>) -> Result<Vec<Seen>> {
    let (rank, world) = (b.rank(), b.world());
    b.barrier()?;
    let root = world - 1;
    let broadcast = b.broadcast(
        root,
        (rank == root).then(|| vec![u64::MAX, 42, rank as u64]),
    )?;
    let reduce = b.reduce(0, vec![rank as u64], |mut a, b| {
        a.extend(b);
        a
    })?;
    let all_reduce = b.all_reduce(format!("<{rank}>"), |a, b| a + &b)?;
    let mut sum_i64 = input_i64(rank, LEN);
    b.all_reduce_slice(&mut sum_i64, ReduceOp::Sum)?;
    let mut min_f64 = input_f64(rank, SMALL);
    b.all_reduce_slice(&mut min_f64, ReduceOp::Min)?;
    let mut max_u64 = input_u64(rank, LEN);
    b.all_reduce_slice(&mut max_u64, ReduceOp::Max)?;
    let mut sum_f32 = input_f32(rank, SMALL);
    b.all_reduce_slice(&mut sum_f32, ReduceOp::Sum)?;
    let reduce_scatter = b.reduce_scatter(&input_i64(rank, SMALL), ReduceOp::Sum)?;
    let all_gather = b.all_gather((rank, "x".repeat(rank)))?;
    let all_gather_slice = b.all_gather_slice(&[rank as u64, u64::MAX])?;
    let all_to_all = b.all_to_all((0..world).map(|to| (rank, to)).collect())?;
    let mut empty: Vec<f64> = Vec::new();
    b.all_reduce_slice(&mut empty, ReduceOp::Sum)?;
    Ok(vec![Seen {
        rank,
        world,
        broadcast,
        reduce,
        all_reduce,
        sum_i64,
        min_f64,
        max_u64,
        sum_f32,
        reduce_scatter,
        all_gather,
        all_gather_slice,
        all_to_all,
        empty,
    }])
}

/// What rank `rank` of `world` must see, computed without ember.
fn expected(rank: usize, world: usize) -> Seen {
    let ranks = 0..world;
    let i64s: Vec<Vec<i64>> = ranks.clone().map(|r| input_i64(r, LEN)).collect();
    let small: Vec<Vec<i64>> = ranks.clone().map(|r| input_i64(r, SMALL)).collect();
    let u64s: Vec<Vec<u64>> = ranks.clone().map(|r| input_u64(r, LEN)).collect();
    let elementwise = |len: usize, f: &dyn Fn(usize, usize) -> i64| -> Vec<i64> {
        (0..len)
            .map(|i| ranks.clone().map(|r| f(r, i)).sum())
            .collect()
    };
    let sum_small = elementwise(SMALL, &|r, i| small[r][i]);
    // MPI's block distribution: the first len % world ranks get one more element.
    let (base, extra) = (SMALL / world, SMALL % world);
    let start = rank * base + rank.min(extra);
    let len = base + usize::from(rank < extra);
    Seen {
        rank,
        world,
        broadcast: vec![u64::MAX, 42, (world - 1) as u64],
        reduce: (rank == 0).then(|| (0..world as u64).collect()),
        all_reduce: ranks.clone().map(|r| format!("<{r}>")).collect(),
        sum_i64: elementwise(LEN, &|r, i| i64s[r][i]),
        min_f64: (0..SMALL)
            .map(|i| {
                ranks
                    .clone()
                    .map(|r| input_f64(r, SMALL)[i])
                    .fold(f64::INFINITY, f64::min)
            })
            .collect(),
        max_u64: (0..LEN)
            .map(|i| ranks.clone().map(|r| u64s[r][i]).max().unwrap())
            .collect(),
        // Small integers: exact in f32 whatever the order.
        sum_f32: (0..SMALL)
            .map(|i| ranks.clone().map(|r| (i + r) as f32).sum())
            .collect(),
        reduce_scatter: sum_small[start..start + len].to_vec(),
        all_gather: ranks.clone().map(|r| (r, "x".repeat(r))).collect(),
        all_gather_slice: ranks.clone().flat_map(|r| [r as u64, u64::MAX]).collect(),
        all_to_all: ranks.clone().map(|from| (from, rank)).collect(),
        empty: Vec::new(),
    }
}

#[test]
fn every_collective_matches_an_independent_computation_for_worlds_of_one_to_five() {
    let ctx = ctx(5);
    for world in 1..=5usize {
        let seen = ctx
            .parallelize((0..world as u32).collect(), world)
            .barrier()
            .map_partitions(everything)
            .collect()
            .unwrap();
        let want: Vec<Seen> = (0..world).map(|r| expected(r, world)).collect();
        assert_eq!(seen.len(), world);
        for (got, want) in seen.iter().zip(&want) {
            assert_eq!(got, want, "rank {} of {world}", want.rank);
        }
    }
}

/// A float all-reduce of `len` values per rank: every rank's result, as bits.
fn float_sums(threads: usize, world: usize, len: usize) -> Vec<Vec<u64>> {
    let ctx = ctx(threads);
    ctx.parallelize((0..world as u64).collect(), world)
        .barrier()
        .map_partitions_with(len, |len: &usize, b, _records: Records<u64>| {
            // Values whose sum depends on the order of additions.
            let mut v: Vec<f64> = (0..*len)
                .map(|i| {
                    let x = (i * 2_654_435_761 + b.rank() * 40_503) % 1_000_003;
                    (x as f64).sqrt() * 1e10_f64.powi((i % 5) as i32 - 2)
                })
                .collect();
            b.all_reduce_slice(&mut v, ReduceOp::Sum)?;
            Ok(vec![v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()])
        })
        .collect()
        .unwrap()
}

#[test]
fn float_reductions_are_bit_identical_across_ranks_runs_and_placements() {
    for len in [5, 100_003] {
        let first = float_sums(4, 4, len);
        assert!(
            first.iter().all(|r| *r == first[0]),
            "every rank the same bits (len {len})"
        );
        // Another run, and more slots than ranks (the ranks land on other threads).
        assert_eq!(float_sums(4, 4, len), first, "a second run (len {len})");
        assert_eq!(
            float_sums(6, 4, len),
            first,
            "another placement (len {len})"
        );
        // And close to the plain sum (the order differs, the bits may).
        let plain: Vec<f64> = (0..len)
            .map(|i| {
                (0..4)
                    .map(|r| {
                        let x = (i * 2_654_435_761 + r * 40_503) % 1_000_003;
                        (x as f64).sqrt() * 1e10_f64.powi((i % 5) as i32 - 2)
                    })
                    .sum()
            })
            .collect();
        for (bits, want) in first[0].iter().zip(&plain) {
            let got = f64::from_bits(*bits);
            assert!((got - want).abs() <= want.abs() * 1e-12, "{got} vs {want}");
        }
    }
}

#[test]
fn stages_before_and_after_a_barrier_stage_are_ordinary() {
    let ctx = ctx(3);
    // A shuffle in, a cached barrier stage, a shuffle out.
    let counts = ctx
        .range(0, 30_000, 4)
        .map(|x: i64| (x % 3, 1i64))
        .reduce_by_key_into(|a, b| a + b, 3);
    let normalised = counts
        .barrier()
        .map_partitions(|b, records: Records<(i64, i64)>| {
            let mine: Vec<(i64, i64)> = records.collect();
            let local: i64 = mine.iter().map(|(_, c)| c).sum();
            let total = b.all_reduce(local, |a, b| a + b)?;
            Ok(mine
                .into_iter()
                .map(move |(k, c)| (k % 2, (c, total)))
                .collect::<Vec<_>>())
        });
    normalised.cache();
    let out = normalised
        .reduce_by_key(|a, b| (a.0 + b.0, a.1))
        .collect()
        .unwrap();
    let mut out = out;
    out.sort();
    assert_eq!(out, vec![(0, (20_000, 30_000)), (1, (10_000, 30_000))]);
    // The cached barrier output serves a second action.
    assert_eq!(normalised.count().unwrap(), 3);
}

#[test]
fn a_rank_that_panics_ends_its_peers_and_the_stage_reruns() {
    let ctx = ctx(3);
    let out = ctx
        .parallelize(vec![0u32, 1, 2], 3)
        .barrier()
        .map_partitions(|b, _r: Records<u32>| {
            if b.rank() == 1 && b.stage_attempt() == 1 {
                panic!("rank 1 fails its first attempt");
            }
            // The others block here until rank 1 is gone (attempt 1) or arrives.
            b.barrier()?;
            let sum = b.all_reduce(b.rank() as u64, |a, b| a + b)?;
            Ok(vec![(b.rank(), b.stage_attempt(), sum)])
        })
        .collect()
        .unwrap();
    assert_eq!(out, vec![(0, 2, 3), (1, 2, 3), (2, 2, 3)]);
}

#[test]
fn a_rank_failing_every_attempt_fails_the_job_with_its_error() {
    let ctx = ctx(2);
    let err = ctx
        .parallelize(vec![0u32, 1], 2)
        .barrier()
        .map_partitions(|b, _r: Records<u32>| {
            if b.rank() == 0 {
                return Err(EmberError::InvalidArgument("rank 0 always fails".into()));
            }
            b.barrier()?;
            Ok(vec![1u8])
        })
        .collect()
        .unwrap_err()
        .to_string();
    assert!(err.contains("rank 0 always fails"), "{err}");
}

#[test]
fn a_stage_wider_than_the_cluster_fails_at_once_naming_both_numbers() {
    let ctx = ctx(2);
    let err = ctx
        .parallelize((0..4u32).collect(), 4)
        .barrier()
        .map_partitions(|b, r: Records<u32>| {
            b.barrier()?;
            Ok(r)
        })
        .count()
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs 4 slots but the cluster has 2"), "{err}");
}

#[test]
fn operators_that_run_a_subset_of_a_barrier_stage_are_refused() {
    let ctx = ctx(2);
    let b = ctx
        .parallelize((0..10u32).collect(), 2)
        .barrier()
        .map_partitions(|_b, r: Records<u32>| Ok(r));
    let take = b.take(1).unwrap_err().to_string();
    assert!(
        take.contains("1 of the 2 partitions of a barrier RDD"),
        "{take}"
    );
    let first = b.first().unwrap_err().to_string();
    assert!(first.contains("of a barrier RDD"), "{first}");
    let coalesced = b.coalesce(1).collect().unwrap_err().to_string();
    assert!(
        coalesced.contains("coalesce at") && coalesced.contains("cannot change their number"),
        "{coalesced}"
    );
    let plain = ctx.parallelize((0..10u32).collect(), 2);
    let zipped = b
        .zip_partitions(&plain, |x: Records<u32>, y: Records<u32>| x.zip(y))
        .collect()
        .unwrap_err()
        .to_string();
    assert!(
        zipped.contains("combines the partitions of 2 RDDs"),
        "{zipped}"
    );
    // Through a shuffle, the barrier stage runs whole and the rest is ordinary.
    let mut all = b.repartition(1).collect().unwrap();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<u32>>());
    assert_eq!(b.repartition(1).take(3).unwrap().len(), 3);
}

/// 40 supersteps over 3 ranks, checkpointing every 5; on attempt 1, rank 2 fails at
/// superstep 23. Each rank returns (first superstep it ran, attempt, final state bits).
fn supersteps(fail: bool) -> Vec<(u64, u32, Vec<u64>)> {
    let ctx = ctx(3);
    ctx.parallelize(vec![0u32, 1, 2], 3)
        .barrier()
        .map_partitions_with(fail, |fail: &bool, b, _r: Records<u32>| {
            let (mut first, mut state) = (0u64, vec![1.0f64, -2.0, 0.5]);
            if let Some((step, saved)) = b.restore_state::<Vec<f64>>()? {
                (first, state) = (step + 1, saved);
            }
            for step in first..40 {
                if *fail && b.stage_attempt() == 1 && b.rank() == 2 && step == 23 {
                    panic!("rank 2 dies in superstep 23");
                }
                let mut mix: Vec<f64> = state.iter().map(|x| x * (b.rank() as f64 + 1.5)).collect();
                b.all_reduce_slice(&mut mix, ReduceOp::Sum)?;
                state = mix.iter().map(|x| (x / 4.5).sin() + 0.25).collect();
                if (step + 1) % 5 == 0 {
                    b.checkpoint_state(step, &state)?;
                }
            }
            Ok(vec![(
                first,
                b.stage_attempt(),
                state.iter().map(|x| x.to_bits()).collect(),
            )])
        })
        .collect()
        .unwrap()
}

#[test]
fn a_rerun_resumes_from_the_last_committed_superstep_with_the_fault_free_answer() {
    let clean = supersteps(false);
    assert!(clean
        .iter()
        .all(|(first, attempt, _)| *first == 0 && *attempt == 1));
    let faulty = supersteps(true);
    for (rank, ((first, attempt, bits), (_, _, want))) in faulty.iter().zip(&clean).enumerate() {
        // Superstep 19's checkpoint is the last committed before 23 failed: the rerun
        // starts at 20, four supersteps (fewer than the period of 5) run again.
        assert_eq!((*first, *attempt), (20, 2), "rank {rank}");
        assert_eq!(bits, want, "rank {rank}: the fault-free state, bit for bit");
    }
}

#[test]
fn logreg_barrier_and_tree_aggregate_forms_give_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let weights = |mode: &str| -> Vec<f64> {
        let args = [
            "--master",
            "local[3]",
            "--mode",
            mode,
            "--rows",
            "3001",
            "--features",
            "5",
            "--iterations",
            "25",
            "--seed",
            "7",
        ];
        let run = common::process::run_example("logreg", &args, tmp.path());
        assert!(run.success, "logreg --mode {mode}: {run:?}");
        let line = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("weights="))
            .unwrap_or_else(|| panic!("no weights line: {}", run.stdout));
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with("per_iteration_ms=")),
            "{}",
            run.stdout
        );
        line.split(',').map(|w| w.parse().unwrap()).collect()
    };
    let barrier = weights("barrier");
    let tree = weights("tree");
    let floor = weights("floor");
    assert_eq!(barrier.len(), 5);
    for other in [&tree, &floor] {
        for (a, b) in barrier.iter().zip(other) {
            assert!(
                (a - b).abs() <= 1e-12 * a.abs().max(b.abs()),
                "{barrier:?} vs {other:?}"
            );
        }
    }
    // Gradient descent moved the weights toward the generating ones' signs.
    assert!(barrier[0] < 0.0 && barrier[4] > 0.0, "{barrier:?}");
}
