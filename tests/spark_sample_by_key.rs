//! PairRDDFunctionsSuite "sampleByKey" and RDDSuite "coalesce with shuffle", restated.

mod common;

use std::collections::HashMap;

use common::*;
use ember::EmberError;

#[test]
fn sample_by_key_keeps_each_key_at_its_fraction() {
    let c = ctx(2);
    let n = 100_000u64;
    let data = c.parallelize((0..n).map(|i| (i % 2, i)).collect::<Vec<_>>(), 4);
    let fractions: HashMap<u64, f64> = [(0, 0.1), (1, 0.5)].into();
    for with_replacement in [false, true] {
        let sample = data
            .sample_by_key(with_replacement, fractions.clone(), 42)
            .unwrap()
            .collect()
            .unwrap();
        for (key, f) in [(0u64, 0.1f64), (1, 0.5)] {
            let got = sample.iter().filter(|(k, _)| *k == key).count() as f64;
            let per_key = (n / 2) as f64;
            let sd = if with_replacement {
                (per_key * f).sqrt()
            } else {
                (per_key * f * (1.0 - f)).sqrt()
            };
            assert!(
                (got - per_key * f).abs() < 5.0 * sd,
                "replacement {with_replacement}, key {key}: {got} records"
            );
        }
        if !with_replacement {
            let mut values: Vec<u64> = sample.iter().map(|(_, v)| *v).collect();
            values.sort();
            values.dedup();
            assert_eq!(
                values.len(),
                sample.len(),
                "no record twice without replacement"
            );
        }
        // The same seed gives the same sample.
        let again = data
            .sample_by_key(with_replacement, fractions.clone(), 42)
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(again, sample);
    }
    // A key without a fraction fails the job, naming the cause.
    let only_zero: HashMap<u64, f64> = [(0, 0.5)].into();
    match data.sample_by_key(false, only_zero, 1).unwrap().count() {
        Err(EmberError::TaskFailed { message, .. }) => {
            assert!(message.contains("has no sampling fraction"), "{message}")
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    let bad: HashMap<u64, f64> = [(0, 1.5)].into();
    assert!(matches!(
        data.sample_by_key(false, bad, 1),
        Err(EmberError::InvalidArgument(_))
    ));
}

// RDDSuite "coalesced RDDs with shuffle": more or fewer partitions, every record kept.
#[test]
fn coalesce_with_shuffle_changes_the_partition_count_either_way() {
    let c = ctx(2);
    let data = c.parallelize((1..=10).collect::<Vec<i32>>(), 10);
    for n in [1, 3, 20] {
        let co = data.coalesce_with_shuffle(n);
        assert_eq!(co.num_partitions(), n);
        assert_eq!(
            sorted(co.collect().unwrap()),
            (1..=10).collect::<Vec<i32>>()
        );
    }
}
