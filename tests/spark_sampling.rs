//! RDDSuite's randomSplit and takeSample assertions, restated against ember.

mod common;

use std::collections::BTreeSet;

use common::*;

// RDDSuite "randomSplit".
#[test]
fn random_split_is_disjoint_covering_weighted_and_repeatable() {
    let c = ctx(2);
    let n = 600u64;
    let data = c.parallelize((1..=n).collect::<Vec<u64>>(), 2);
    let weights = [1.0, 2.0, 3.0];
    for seed in 1..=5u64 {
        let splits = data.random_split(&weights, seed).unwrap();
        assert_eq!(splits.len(), 3);
        let mut all = Vec::new();
        for (s, w) in splits.iter().zip(weights) {
            let got = s.collect().unwrap();
            // Within 4 standard deviations of the binomial expectation.
            let p = w / 6.0;
            let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
            assert!(
                (got.len() as f64 - mean).abs() < 4.0 * sd,
                "seed {seed}: {} records for weight {w}",
                got.len()
            );
            all.extend(got);
        }
        all.sort();
        assert_eq!(
            all,
            (1..=n).collect::<Vec<u64>>(),
            "seed {seed}: each record once"
        );
        // The same seed gives the same splits.
        let again = data.random_split(&weights, seed).unwrap();
        assert_eq!(again[1].collect().unwrap(), splits[1].collect().unwrap());
    }
    assert!(data.random_split(&[1.0, -1.0], 1).is_err());
    assert!(data.random_split(&[0.0, 0.0], 1).is_err());
    assert!(data.random_split(&[], 1).is_err());
}

// RDDSuite "takeSample".
#[test]
fn take_sample_returns_exactly_num_distinct_records() {
    let c = ctx(2);
    let n = 1000u64;
    let data = c.parallelize((1..=n).collect::<Vec<u64>>(), 2);
    for (num, seed) in [(5, 1u64), (20, 2), (100, 3)] {
        let sample = data.take_sample(false, num, seed).unwrap();
        assert_eq!(sample.len(), num);
        assert_eq!(
            sample.iter().collect::<BTreeSet<_>>().len(),
            num,
            "distinct"
        );
        assert!(sample.iter().all(|x| (1..=n).contains(x)));
        assert_eq!(
            data.take_sample(false, num, seed).unwrap(),
            sample,
            "repeatable"
        );
    }
    // More than there are: every record once.
    let all = data.take_sample(false, (n + 100) as usize, 7).unwrap();
    assert_eq!(sorted(all), (1..=n).collect::<Vec<u64>>());
    // With replacement: exactly num, also past the count.
    assert_eq!(data.take_sample(true, 20, 8).unwrap().len(), 20);
    let twice = data.take_sample(true, 2 * n as usize, 9).unwrap();
    assert_eq!(twice.len(), 2 * n as usize);
    assert!(twice.iter().all(|x| (1..=n).contains(x)));
    assert!(data.take_sample(false, 0, 1).unwrap().is_empty());
    assert!(c
        .empty::<u64>()
        .take_sample(false, 5, 1)
        .unwrap()
        .is_empty());
}
