//! zip_partitions, the order actions by a key function, group_by, foreach_partition,
//! reduce_by_key_locally, the 4-way cogroup and sample_by_key_exact, checked against
//! plain-Rust computations and restating the Spark suites' assertions named per test.

mod common;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};

use common::*;
use ember::{Accumulator, EmberError, Records};

fn invalid_message<T: std::fmt::Debug>(r: ember::Result<T>) -> String {
    match r {
        Err(EmberError::InvalidArgument(m)) => m,
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

// ZippedPartitionsSuite "print sizes" (two-way): partition p of the result sees
// partition p of both sides, whatever their record counts.
#[test]
fn zip_partitions_sees_both_sides_partition_by_partition() {
    let c = ctx(2);
    let data1 = c.parallelize(vec![1, 2, 3, 4], 2);
    let data2 = c.parallelize(["1", "2", "3", "4", "5", "6"].map(String::from).to_vec(), 2);
    let sizes = data1.zip_partitions(&data2, |a: Records<i32>, b: Records<String>| {
        vec![a.count(), b.count()]
    });
    assert_eq!(sizes.num_partitions(), 2);
    assert_eq!(sizes.collect().unwrap(), vec![2, 3, 2, 3]);

    // Against a plain computation over the partitions (glom), with state.
    let left: Vec<i64> = (0..1000).collect();
    let right: Vec<i64> = (0..333).map(|x| x * 7).collect();
    let (l, r) = (
        c.parallelize(left.clone(), 5),
        c.parallelize(right.clone(), 5),
    );
    let got = l
        .zip_partitions_with(&r, 100i64, |k: &i64, a: Records<i64>, b: Records<i64>| {
            let a: Vec<i64> = a.collect();
            let b: Vec<i64> = b.collect();
            let k = *k;
            a.into_iter()
                .zip(b)
                .map(move |(x, y)| x * k + y)
                .collect::<Vec<_>>()
        })
        .glom()
        .collect()
        .unwrap();
    let want: Vec<Vec<i64>> = l
        .glom()
        .collect()
        .unwrap()
        .into_iter()
        .zip(r.glom().collect().unwrap())
        .map(|(a, b)| a.into_iter().zip(b).map(|(x, y)| x * 100 + y).collect())
        .collect();
    assert_eq!(got, want);

    // Empty partitions on one side; an RDD of no partitions with itself.
    let empty = c.parallelize(Vec::<i64>::new(), 5);
    let counts = l
        .zip_partitions(&empty, |a: Records<i64>, b: Records<i64>| {
            std::iter::once((a.count(), b.count()))
        })
        .collect()
        .unwrap();
    assert_eq!(counts, vec![(200, 0); 5]);
    let none = c.empty::<i64>();
    assert_eq!(
        none.zip_partitions(&none, |a: Records<i64>, _: Records<i64>| a)
            .collect()
            .unwrap(),
        Vec::<i64>::new()
    );

    // Different partition counts: an invalid argument at the action, not a panic.
    let bad = l.zip_partitions(
        &c.parallelize(right, 3),
        |a: Records<i64>, _: Records<i64>| a,
    );
    let m = invalid_message(bad.collect());
    assert!(m.contains("same number of partitions (5 and 3)"), "{m}");
    assert!(
        m.contains("zip_partitions at tests/spark_more_operators.rs"),
        "{m}"
    );
}

// RDDSuite "takeOrdered with custom ordering" and "top with custom ordering"
// (a reversed ordering), as key functions.
#[test]
fn take_ordered_by_and_top_by_use_the_key_order() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4, 5], 2);
    assert_eq!(
        nums.take_ordered_by(5, |x: &i32| Reverse(*x)).unwrap(),
        vec![5, 4, 3, 2, 1]
    );
    let words = c.parallelize(["a", "b", "c", "d"].map(String::from).to_vec(), 2);
    assert_eq!(
        words.top_by(2, |w: &String| Reverse(w.clone())).unwrap(),
        vec!["a".to_string(), "b".to_string()]
    );

    // Random records with many equal keys: exactly a stable sort of the records in
    // partition order, cut at n.
    let data = random_pairs(7, 5000, 50);
    let rdd = c.parallelize(data.clone(), 7);
    let key = |r: &(u64, i64)| r.0;
    for n in [0usize, 1, 10, 999, 5000, 6000] {
        let mut asc = data.clone();
        asc.sort_by_key(key);
        asc.truncate(n);
        assert_eq!(rdd.take_ordered_by(n, key).unwrap(), asc, "n = {n}");
        let mut desc = data.clone();
        desc.sort_by_key(|r| Reverse(r.0));
        desc.truncate(n);
        assert_eq!(rdd.top_by(n, key).unwrap(), desc, "n = {n}");
    }
    let empty = c.parallelize(Vec::<(u64, i64)>::new(), 3);
    assert!(empty.top_by(3, key).unwrap().is_empty());
    assert!(c
        .empty::<(u64, i64)>()
        .take_ordered_by(3, key)
        .unwrap()
        .is_empty());
}

// RDDSuite "basic operations" (max/min), by a key: the first of equal extremes, and the
// empty-RDD error for none as max/min give.
#[test]
fn max_by_and_min_by_pick_the_first_extreme() {
    let c = ctx(2);
    let data = random_pairs(11, 3000, 40);
    let rdd = c.parallelize(data.clone(), 6);
    let first_max = data.iter().fold(None::<(u64, i64)>, |best, x| match best {
        Some(b) if b.0 >= x.0 => Some(b),
        _ => Some(*x),
    });
    let first_min = data.iter().fold(None::<(u64, i64)>, |best, x| match best {
        Some(b) if b.0 <= x.0 => Some(b),
        _ => Some(*x),
    });
    assert_eq!(
        rdd.max_by(|r: &(u64, i64)| r.0).unwrap(),
        first_max.unwrap()
    );
    assert_eq!(
        rdd.min_by(|r: &(u64, i64)| r.0).unwrap(),
        first_min.unwrap()
    );
    // By the value instead.
    let by_value = *data.iter().max_by_key(|r| (r.1, Reverse(r.0))).unwrap();
    assert_eq!(
        rdd.max_by(|r: &(u64, i64)| (r.1, Reverse(r.0))).unwrap(),
        by_value
    );
    let empty = c.parallelize(Vec::<i32>::new(), 2);
    assert!(matches!(
        empty.max_by(|x: &i32| *x),
        Err(EmberError::EmptyRdd("max_by"))
    ));
    assert!(matches!(
        c.empty::<i32>().min_by(|x: &i32| *x),
        Err(EmberError::EmptyRdd("min_by"))
    ));
}

// JavaAPISuite "groupBy": odds and evens, with the default and an explicit partition
// count.
#[test]
fn group_by_groups_records_by_the_computed_key() {
    let c = ctx(2);
    let rdd = c.parallelize(vec![1, 1, 2, 3, 5, 8, 13], 2);
    let is_even = |x: &i32| x % 2 == 0;
    for grouped in [rdd.group_by(is_even), rdd.group_by_into(is_even, 1)] {
        assert_eq!(grouped.count().unwrap(), 2);
        assert_eq!(grouped.lookup(true).unwrap()[0].len(), 2);
        assert_eq!(grouped.lookup(false).unwrap()[0].len(), 5);
    }
    assert_eq!(rdd.group_by(is_even).num_partitions(), 2);
    assert_eq!(rdd.group_by_into(is_even, 5).num_partitions(), 5);

    // Random data against a plain grouping.
    let data: Vec<i64> = random_pairs(3, 4000, 1000)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let keyed: Vec<(i64, i64)> = data.iter().map(|v| (v.rem_euclid(37), *v)).collect();
    let got = c
        .parallelize(data.clone(), 6)
        .group_by_into(|v: &i64| v.rem_euclid(37), 4)
        .collect()
        .unwrap();
    assert_eq!(sorted_groups(got), ref_group_sorted(&keyed));
    assert!(c
        .parallelize(Vec::<i64>::new(), 3)
        .group_by(|v: &i64| *v)
        .collect()
        .unwrap()
        .is_empty());
    let m = invalid_message(rdd.group_by_into(is_even, 0).collect());
    assert!(m.contains("0 partitions"), "{m}");
}

// JavaAPISuite "foreachPartition": every record seen once, one call per partition.
#[test]
fn foreach_partition_runs_once_per_partition() {
    let c = ctx(2);
    let seen: Accumulator<u64> = c.accumulator("seen");
    c.parallelize(["Hello", "World"].map(String::from).to_vec(), 2)
        .foreach_partition_with(
            seen.clone(),
            |acc: &Accumulator<u64>, it: Records<String>| {
                for _ in it {
                    acc.add(1)
                }
            },
        )
        .unwrap();
    assert_eq!(seen.value(), 2);

    let calls: Accumulator<u64> = c.accumulator("calls");
    let sums: Accumulator<Vec<i64>> = c.accumulator("sums");
    let data: Vec<i64> = (0..1000).collect();
    let rdd = c.parallelize(data.clone(), 7);
    rdd.foreach_partition_with(
        (calls.clone(), sums.clone()),
        |(n, s): &(Accumulator<u64>, Accumulator<Vec<i64>>), it: Records<i64>| {
            n.add(1);
            s.add(vec![it.sum()]);
        },
    )
    .unwrap();
    assert_eq!(calls.value(), 7);
    let want: Vec<i64> = rdd
        .glom()
        .collect()
        .unwrap()
        .iter()
        .map(|p| p.iter().sum())
        .collect();
    assert_eq!(sorted(sums.value()), sorted(want));
    // Plain form; a panic in it fails the job.
    rdd.foreach_partition(|it: Records<i64>| assert!(it.count() > 0))
        .unwrap();
    match rdd.foreach_partition(|it: Records<i64>| assert!(it.count() > 1000, "small partition")) {
        Err(EmberError::TaskFailed { message, .. }) => {
            assert!(message.contains("small partition"), "{message}")
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    // No partitions: nothing runs.
    c.empty::<i64>()
        .foreach_partition(|_: Records<i64>| panic!("no partition to run"))
        .unwrap();
}

// JavaAPISuite "reduceByKey" (its reduceByKeyLocally part).
#[test]
fn reduce_by_key_locally_merges_on_the_driver() {
    let c = ctx(2);
    let pairs = c.parallelize(vec![(2, 1), (2, 1), (1, 1), (3, 2), (3, 1)], 2);
    let local = pairs.reduce_by_key_locally(|a: i32, b: i32| a + b).unwrap();
    assert_eq!(local, HashMap::from([(1, 1), (2, 2), (3, 3)]));

    let data = random_pairs(5, 20_000, 300);
    let got = c
        .parallelize(data.clone(), 9)
        .reduce_by_key_locally(|a: i64, b: i64| a + b)
        .unwrap();
    let want: HashMap<u64, i64> = ref_reduce(&data, |a, b| a + b).into_iter().collect();
    assert_eq!(got, want);
    let max = c
        .parallelize(data.clone(), 4)
        .reduce_by_key_locally(|a: i64, b: i64| a.max(b))
        .unwrap();
    assert_eq!(
        max,
        ref_reduce(&data, |a: i64, b| a.max(b))
            .into_iter()
            .collect()
    );
    assert!(c
        .parallelize(Vec::<(u64, i64)>::new(), 3)
        .reduce_by_key_locally(|a: i64, b: i64| a + b)
        .unwrap()
        .is_empty());
}

// PairRDDFunctionsSuite "cogroup4".
#[test]
fn cogroup4_groups_four_sides() {
    let c = ctx(2);
    let rdd1 = c.parallelize(vec![(1, 1), (1, 2), (2, 1), (3, 1)], 2);
    let rdd2 = c.parallelize(vec![(1, 'x'), (2, 'y'), (2, 'z'), (4, 'w')], 2);
    let rdd3 = c.parallelize(vec![(1, 'a'), (3, 'b'), (4, 'c'), (4, 'd')], 3);
    let rdd4 = c.parallelize(vec![(2, '@')], 1);
    let joined = rdd1.cogroup4(&rdd2, &rdd3, &rdd4);
    assert_eq!(joined.num_partitions(), 3);
    let got: Vec<(i32, ember::Groups4<i32, char, char, char>)> = sorted(
        joined
            .collect()
            .unwrap()
            .into_iter()
            .map(|(k, (a, b, c, d))| (k, (sorted(a), sorted(b), sorted(c), sorted(d))))
            .collect(),
    );
    assert_eq!(
        got,
        vec![
            (1, (vec![1, 2], vec!['x'], vec!['a'], vec![])),
            (2, (vec![1], vec!['y', 'z'], vec![], vec!['@'])),
            (3, (vec![1], vec![], vec!['b'], vec![])),
            (4, (vec![], vec!['w'], vec!['c', 'd'], vec![])),
        ]
    );

    // Random sides against a plain grouping of each.
    let sides: Vec<Vec<(u64, i64)>> = (0..4).map(|s| random_pairs(s, 500, 60)).collect();
    let rdds: Vec<_> = sides
        .iter()
        .enumerate()
        .map(|(i, d)| c.parallelize(d.clone(), i + 1))
        .collect();
    let got = rdds[0]
        .cogroup4(&rdds[1], &rdds[2], &rdds[3])
        .collect()
        .unwrap();
    let groups: Vec<BTreeMap<u64, Vec<i64>>> = sides.iter().map(|d| ref_group(d)).collect();
    let keys: HashSet<u64> = groups.iter().flat_map(|g| g.keys().copied()).collect();
    assert_eq!(got.len(), keys.len());
    for (k, (a, b, cc, d)) in got {
        for (i, vs) in [a, b, cc, d].into_iter().enumerate() {
            let want = groups[i].get(&k).cloned().unwrap_or_default();
            assert_eq!(sorted(vs), sorted(want), "key {k} side {i}");
        }
    }
    // All sides empty.
    let e = c.parallelize(Vec::<(u64, i64)>::new(), 2);
    assert!(e.cogroup4(&e, &e, &e).collect().unwrap().is_empty());
}

/// PairRDDFunctionsSuite's `StratifiedAuxiliary.stratifier`.
fn stratum(fraction_positive: f64, x: i64) -> String {
    if x % 10 < (10.0 * fraction_positive) as i64 {
        "1".into()
    } else {
        "0".into()
    }
}

// PairRDDFunctionsSuite "sampleByKeyExact" (testSampleExact: testBernoulli and
// testPoisson with exact = true).
#[test]
fn sample_by_key_exact_restates_spark() {
    let c = ctx(2);
    let n = 100i64;
    let seed = 1u64;
    for fraction_positive in [0.1, 0.3, 0.5, 0.7, 0.9] {
        let data: Vec<(String, i64)> = (1..=n)
            .map(|x| (stratum(fraction_positive, x), x))
            .collect();
        let stratified = c.parallelize(data, 2);
        let trials = stratified.count_by_key().unwrap();
        for rate in [0.1, 0.5, 1.0] {
            let fractions: HashMap<String, f64> =
                [("1".to_string(), rate), ("0".to_string(), rate)].into();
            for with_replacement in [false, true] {
                let sample = stratified
                    .sample_by_key_exact(with_replacement, fractions.clone(), seed)
                    .unwrap();
                let counts = sample.count_by_key().unwrap();
                let taken = sample.collect().unwrap();
                for (k, v) in &counts {
                    assert_eq!(*v, (rate * trials[k] as f64).ceil() as u64, "key {k}");
                }
                assert!(taken.iter().all(|(_, x)| (1..=n).contains(x)));
                let distinct: HashSet<&(String, i64)> = taken.iter().collect();
                if !with_replacement {
                    assert_eq!(distinct.len(), taken.len());
                } else {
                    for (k, v) in &counts {
                        let d = distinct.iter().filter(|(key, _)| key == k).count() as u64;
                        assert!(d <= *v, "key {k}: {d} distinct of {v}");
                    }
                }
            }
        }
    }
}

#[test]
fn sample_by_key_exact_is_exact_deterministic_and_checks_its_arguments() {
    let c = ctx(2);
    // Key k has 1000 * (k + 1) records; ids are unique.
    let data: Vec<(u64, u64)> = (0..4u64)
        .flat_map(|k| (0..1000 * (k + 1)).map(move |i| (k, k * 1_000_000 + i)))
        .collect();
    let rdd = c.parallelize(data.clone(), 5);
    let fractions: HashMap<u64, f64> = [(0, 0.0), (1, 0.013), (2, 0.5), (3, 1.0)].into();
    let by_key = ref_counts(data.iter().map(|(k, _)| *k));
    let ids: HashSet<(u64, u64)> = data.iter().copied().collect();
    for with_replacement in [false, true] {
        let s = rdd
            .sample_by_key_exact(with_replacement, fractions.clone(), 9)
            .unwrap();
        let got = s.collect().unwrap();
        let counts = ref_counts(got.iter().map(|(k, _)| *k));
        for (k, f) in &fractions {
            let want = (f * by_key[k] as f64).ceil() as u64;
            assert_eq!(counts.get(k).copied().unwrap_or(0), want, "key {k}");
        }
        assert!(got.iter().all(|r| ids.contains(r)));
        let distinct: HashSet<&(u64, u64)> = got.iter().collect();
        if with_replacement {
            assert!(distinct.len() < got.len(), "a 4000-draw sample repeats");
        } else {
            assert_eq!(distinct.len(), got.len());
        }
        // The same seed gives the same sample; another seed another one.
        let again = rdd
            .sample_by_key_exact(with_replacement, fractions.clone(), 9)
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(again, got);
        let other = rdd
            .sample_by_key_exact(with_replacement, fractions.clone(), 10)
            .unwrap()
            .collect()
            .unwrap();
        assert_ne!(sorted(other), sorted(got));
    }
    // With replacement a fraction above 1 is allowed: more draws than records.
    let big = rdd
        .filter(|(k, _): &(u64, u64)| *k == 0)
        .sample_by_key_exact(true, [(0, 2.5)].into(), 3)
        .unwrap();
    assert_eq!(big.count().unwrap(), 2500);

    // Without replacement, every record is about equally likely to be chosen.
    let small = c.parallelize((0..20u64).map(|i| (7u8, i)).collect::<Vec<_>>(), 3);
    let mut hits = [0u32; 20];
    for seed in 0..200 {
        let s = small
            .sample_by_key_exact(false, [(7u8, 0.25)].into(), seed)
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(s.len(), 5);
        for (_, i) in s {
            hits[i as usize] += 1;
        }
    }
    // Each record is expected 50 times (sd about 6).
    assert!(hits.iter().all(|h| (20..=80).contains(h)), "{hits:?}");

    // Empty input: an empty sample.
    let empty = c.parallelize(Vec::<(u64, u64)>::new(), 3);
    assert!(empty
        .sample_by_key_exact(false, HashMap::new(), 1)
        .unwrap()
        .collect()
        .unwrap()
        .is_empty());
    // A key without a fraction, a fraction out of range: invalid arguments.
    let missing: HashMap<u64, f64> = [(0, 0.5), (1, 0.5)].into();
    let m = invalid_message(rdd.sample_by_key_exact(false, missing, 1));
    assert!(m.contains("has no sampling fraction"), "{m}");
    for (with_replacement, bad) in [(false, 1.5), (false, -0.1), (true, -1.0), (true, f64::NAN)] {
        let fractions: HashMap<u64, f64> = [(0, bad), (1, 0.5), (2, 0.5), (3, 0.5)].into();
        invalid_message(rdd.sample_by_key_exact(with_replacement, fractions, 1));
    }
}
