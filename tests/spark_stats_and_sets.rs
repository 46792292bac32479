//! Spark's assertions on numeric actions, max/min/isEmpty and subtract/intersection,
//! restated against ember (DoubleRDDSuite, RDDSuite, PairRDDFunctionsSuite), plus checks
//! against a plain two-pass computation on data spread over many partitionings.

mod common;

use common::*;
use ember::{EmberError, StatCounter};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

// DoubleRDDSuite "sum zero" / StatCounter on no values.
#[test]
fn sums_and_stats_of_nothing_are_spark_s_values() {
    let c = ctx(2);
    let empty = c.parallelize(Vec::<f64>::new(), 2);
    assert_eq!(empty.sum().unwrap(), 0.0);
    let s = empty.stats().unwrap();
    assert_eq!(s.count(), 0);
    assert_eq!(s.mean(), 0.0);
    assert!(s.variance().is_nan() && s.sample_variance().is_nan());
    assert_eq!((s.max(), s.min()), (f64::NEG_INFINITY, f64::INFINITY));
    // No partitions at all: the same (Spark's stats() would fail there).
    assert_eq!(c.empty::<f64>().stats().unwrap().count(), 0);
    assert_eq!(c.empty::<f64>().sum().unwrap(), 0.0);
}

// JavaDoubleRDD stdev of [2, 4, 10] = 3.39934634239519; DoubleRDDFunctions' accessors.
#[test]
fn stats_of_known_values() {
    let c = ctx(2);
    let r = c.parallelize(vec![2.0, 4.0, 10.0], 2);
    assert!(close(r.stdev().unwrap(), 3.39934634239519));
    let r = c.parallelize(vec![1.0, 2.0, 3.0, 4.0], 2);
    assert_eq!(r.sum().unwrap(), 10.0);
    assert!(close(r.mean().unwrap(), 2.5));
    assert!(close(r.variance().unwrap(), 1.25));
    assert!(close(r.sample_variance().unwrap(), 5.0 / 3.0));
    assert!(close(r.sample_stdev().unwrap(), (5.0f64 / 3.0).sqrt()));
    let s = r.stats().unwrap();
    assert_eq!((s.count(), s.max(), s.min()), (4, 4.0, 1.0));
    assert!(close(s.sum(), 10.0));
    // One value: variance 0, sample variance undefined.
    let one = c.parallelize(vec![7.5], 3).stats().unwrap();
    assert_eq!((one.count(), one.mean(), one.variance()), (1, 7.5, 0.0));
    assert!(one.sample_variance().is_nan());
}

#[test]
fn stats_match_a_two_pass_computation_for_every_partitioning() {
    let c = ctx(2);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let values: Vec<f64> = (0..5000)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // skewed magnitudes: a few huge values among small ones
            let v = (x % 10_000) as f64 / 7.0;
            if i % 997 == 0 {
                v * 1e6
            } else {
                v - 600.0
            }
        })
        .collect();
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let max = values.iter().cloned().fold(f64::MIN, f64::max);
    let min = values.iter().cloned().fold(f64::MAX, f64::min);
    for parts in [1, 2, 3, 7, 64, 5000] {
        let s = c.parallelize(values.clone(), parts).stats().unwrap();
        assert_eq!(s.count(), values.len() as u64, "{parts} partitions");
        assert!(
            close(s.mean(), mean),
            "{parts}: mean {} vs {mean}",
            s.mean()
        );
        assert!(
            close(s.variance(), var),
            "{parts}: variance {} vs {var}",
            s.variance()
        );
        assert_eq!((s.max(), s.min()), (max, min), "{parts}");
    }
    // Merging counters equals counting everything at once.
    let (a, b) = values.split_at(1234);
    let merged = StatCounter::of(a.iter().copied()).merge(StatCounter::of(b.iter().copied()));
    let all = StatCounter::of(values.iter().copied());
    assert_eq!(merged.count(), all.count());
    assert!(close(merged.mean(), all.mean()) && close(merged.variance(), all.variance()));
}

// RDDSuite "basic operations": nums = 1 to 4 in 2 partitions; max 4, min 1.
#[test]
fn max_and_min_of_ordered_records() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    assert_eq!(nums.max().unwrap(), 4);
    assert_eq!(nums.min().unwrap(), 1);
    let words = c.parallelize(vec!["pear".to_string(), "apple".into(), "zoo".into()], 3);
    assert_eq!(words.max().unwrap(), "zoo");
    assert_eq!(words.min().unwrap(), "apple");
    // An empty collection is an error naming the action, as Spark's reduce is.
    match c.parallelize(Vec::<i32>::new(), 2).max() {
        Err(EmberError::EmptyRdd(what)) => assert_eq!(what, "max"),
        other => panic!("expected the empty-collection error, got {other:?}"),
    }
    assert!(matches!(
        c.empty::<i32>().min(),
        Err(EmberError::EmptyRdd("min"))
    ));
}

// RDDSuite "isEmpty".
#[test]
fn is_empty_as_spark_defines_it() {
    let c = ctx(2);
    assert!(c.empty::<i32>().is_empty().unwrap());
    assert!(c.parallelize(Vec::<i32>::new(), 2).is_empty().unwrap());
    assert!(!c.parallelize(vec![1], 1).is_empty().unwrap());
    let three = c.parallelize(vec![1, 2, 3], 3);
    assert!(three.filter(|x: &i32| *x < 0).is_empty().unwrap());
    assert!(!three.filter(|x: &i32| *x > 1).is_empty().unwrap());
}

// PairRDDFunctionsSuite "subtract": a = (1, 2, 3) in 2, b = (2, 3, 4) in 4;
// a.subtract(b) = {1}, with a's partition count.
#[test]
fn subtract_keeps_the_left_records_absent_on_the_right_and_the_left_count() {
    let c = ctx(2);
    let a = c.parallelize(vec![1, 2, 3], 2);
    let b = c.parallelize(vec![2, 3, 4], 4);
    let d = a.subtract(&b);
    assert_eq!(sorted(d.collect().unwrap()), vec![1]);
    assert_eq!(d.num_partitions(), a.num_partitions());
    // Duplicates on the left are kept (Spark's subtract is not a set difference).
    let dup = c.parallelize(vec![1, 1, 2, 5, 5, 5], 3);
    assert_eq!(
        sorted(dup.subtract(&c.parallelize(vec![2], 1)).collect().unwrap()),
        vec![1, 1, 5, 5, 5]
    );
    assert_eq!(c.empty::<i32>().subtract(&b).num_partitions(), 0);
}

// RDDSuite "intersection" and "intersection strips duplicates in an input".
#[test]
fn intersection_is_the_distinct_common_records() {
    let c = ctx(2);
    let all = c.parallelize((1..=10).collect::<Vec<i32>>(), 4);
    let evens = c.parallelize((2..=10).step_by(2).collect::<Vec<i32>>(), 3);
    let both = all.intersection(&evens);
    assert_eq!(sorted(both.collect().unwrap()), vec![2, 4, 6, 8, 10]);
    assert_eq!(both.num_partitions(), 4);
    let a = c.parallelize(vec![1, 2, 3, 3, 3], 2);
    let b = c.parallelize(vec![1, 1, 2, 3], 2);
    assert_eq!(sorted(a.intersection(&b).collect().unwrap()), vec![1, 2, 3]);
}

fn h(values: &[f64], boundaries: &[f64]) -> Vec<u64> {
    ctx(2)
        .parallelize(values.to_vec(), 2)
        .histogram_with(boundaries)
        .unwrap()
}

// DoubleRDDSuite's histogram tests with given buckets.
#[test]
fn histogram_with_given_buckets() {
    assert_eq!(h(&[], &[0.0, 10.0]), vec![0]); // WorksOnEmpty
    assert_eq!(h(&[10.01, -0.01], &[0.0, 10.0]), vec![0]); // OutOfRangeWithOneBucket
    assert_eq!(h(&[1.0, 2.0, 3.0, 4.0], &[0.0, 10.0]), vec![4]); // InRangeWithOneBucket
    assert_eq!(h(&[1.0, 2.0, 3.0, 4.0], &[1.0, 4.0]), vec![4]); // ...ExactMatch
    assert_eq!(h(&[10.01, -0.01], &[0.0, 5.0, 10.0]), vec![0, 0]); // OutOfRangeWithTwoBuckets
    assert_eq!(h(&[1.0, 2.0, 3.0, 5.0, 6.0], &[0.0, 5.0, 10.0]), vec![3, 2]); // InRangeWithTwoBuckets
    assert_eq!(
        h(&[1.0, 2.0, 3.0, 5.0, 6.0, f64::NAN], &[0.0, 5.0, 10.0]),
        vec![3, 2]
    ); // ...AndNaN
    assert_eq!(
        h(
            &[-0.01, 0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 11.0, 11.01],
            &[0.0, 5.0, 11.0]
        ),
        vec![4, 3]
    ); // MixedRangeWithTwoUnevenBuckets
    let err = ctx(1)
        .parallelize(vec![1.0], 1)
        .histogram_with(&[5.0, 1.0])
        .unwrap_err();
    assert!(matches!(err, EmberError::InvalidArgument(_)), "{err}");
}

// DoubleRDDSuite's histogram tests without buckets (evenly spaced).
#[test]
fn histogram_with_even_buckets() {
    let c = ctx(2);
    let hist = |v: Vec<f64>, n: usize| c.parallelize(v, 2).histogram(n).unwrap();
    assert_eq!(hist(vec![1.0, 2.0, 3.0, 4.0], 1), (vec![1.0, 4.0], vec![4]));
    assert_eq!(hist(vec![1.0], 1), (vec![1.0, 1.0], vec![1]));
    assert_eq!(hist(vec![1.0, 1.0, 1.0, 1.0], 1), (vec![1.0, 1.0], vec![4]));
    assert_eq!(
        hist(vec![1.0, 2.0, 3.0, 4.0], 2),
        (vec![1.0, 2.5, 4.0], vec![2, 2])
    );
    // More buckets than records.
    let (bounds, counts) = hist(vec![1.0, 2.0], 10);
    assert_eq!(bounds.len(), 11);
    for (i, b) in bounds.iter().enumerate() {
        assert!(close(*b, 1.0 + 0.1 * i as f64), "bound {i} = {b}");
    }
    assert_eq!(counts, vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // ThrowsExceptionOnInvalidRDDs: empty, infinity, NaN.
    for bad in [vec![], vec![1.0, f64::INFINITY], vec![1.0, f64::NAN]] {
        let err = c.parallelize(bad.clone(), 2).histogram(3).unwrap_err();
        assert!(
            matches!(err, EmberError::InvalidArgument(_)),
            "{bad:?}: {err}"
        );
    }
}

// A NaN record poisons the statistics, as Java's Math.max does in Spark's StatCounter.
#[test]
fn nan_makes_the_statistics_nan() {
    let s = ctx(2)
        .parallelize(vec![1.0, f64::NAN, 3.0], 3)
        .stats()
        .unwrap();
    assert_eq!(s.count(), 3);
    assert!(s.mean().is_nan() && s.max().is_nan() && s.min().is_nan());
}
