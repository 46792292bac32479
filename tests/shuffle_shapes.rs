//! Shuffles of unusual shapes give exact results: more reducers than records, map
//! outputs that are all or mostly empty, and reducers whose tasks read their shuffle
//! through steps that are not one-to-one (union, coalesce), which are sent every block
//! size instead of only their own.

mod common;

use std::collections::BTreeMap;

use common::*;

fn reference_sums(pairs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut m: BTreeMap<u64, u64> = BTreeMap::new();
    for (k, v) in pairs {
        *m.entry(*k).or_default() += v;
    }
    m.into_iter().collect()
}

#[test]
fn more_reducers_than_records_and_mostly_empty_map_outputs() {
    let c = ctx(2);
    // 9 records over 100 map partitions (91 of them empty) into 301 reducers.
    let pairs: Vec<(u64, u64)> = (0..9u64).map(|i| (i % 4, i)).collect();
    let rdd = c.parallelize(pairs.clone(), 100);
    let sums = rdd.reduce_by_key_into(|a, b| a + b, 301);
    assert_eq!(sums.num_partitions(), 301);
    assert_eq!(sorted(sums.collect().unwrap()), reference_sums(&pairs));
    assert_eq!(sums.count().unwrap(), 4);
    // repartition spreads 9 records over 2001 partitions, all of them still there.
    let spread = c
        .parallelize((0..9u64).collect::<Vec<_>>(), 100)
        .repartition(2001);
    assert_eq!(spread.num_partitions(), 2001);
    assert_eq!(
        sorted(spread.collect().unwrap()),
        (0..9u64).collect::<Vec<_>>()
    );
    let sizes = spread.glom().map(|p: Vec<u64>| p.len()).collect().unwrap();
    assert_eq!(sizes.len(), 2001);
    assert_eq!(sizes.iter().sum::<usize>(), 9);
}

#[test]
fn every_map_output_empty_gives_an_empty_result() {
    let c = ctx(2);
    let none = c
        .parallelize((0..50u64).collect::<Vec<_>>(), 10)
        .filter(|x: &u64| *x > 1000)
        .map(|x: u64| (x, 1u64))
        .reduce_by_key_into(|a, b| a + b, 64);
    assert_eq!(none.collect().unwrap(), Vec::<(u64, u64)>::new());
    assert_eq!(none.count().unwrap(), 0);
}

#[test]
fn reducers_below_union_and_coalesce_read_exactly_their_blocks() {
    let c = ctx(2);
    let a: Vec<(u64, u64)> = (0..500u64).map(|i| (i % 37, i)).collect();
    let b: Vec<(u64, u64)> = (0..300u64).map(|i| (i % 11, 2 * i)).collect();
    let ra = c
        .parallelize(a.clone(), 7)
        .reduce_by_key_into(|x, y| x + y, 13);
    let rb = c
        .parallelize(b.clone(), 5)
        .reduce_by_key_into(|x, y| x + y, 4);
    // union: partitions 0..13 read shuffle a, 13..17 shuffle b.
    let both = ra.union(&rb);
    let mut expected = reference_sums(&a);
    expected.extend(reference_sums(&b));
    expected.sort();
    assert_eq!(sorted(both.collect().unwrap()), expected);
    // coalesce: each of 3 partitions reads several reduce partitions of shuffle a.
    let fewer = ra.coalesce(3);
    assert_eq!(fewer.num_partitions(), 3);
    assert_eq!(sorted(fewer.collect().unwrap()), reference_sums(&a));
    // A map (one-to-one) below the union and a second shuffle on top.
    let total = both
        .map(|(k, v): (u64, u64)| (k % 5, v))
        .reduce_by_key_into(|x, y| x + y, 50);
    let flat: Vec<(u64, u64)> = expected.iter().map(|(k, v)| (k % 5, *v)).collect();
    assert_eq!(sorted(total.collect().unwrap()), reference_sums(&flat));
}

#[test]
fn a_join_of_two_wide_shuffles_with_few_records() {
    let c = ctx(2);
    let left: Vec<(u64, String)> = (0..20u64).map(|i| (i, format!("l{i}"))).collect();
    let right: Vec<(u64, u64)> = (10..40u64).map(|i| (i, i * i)).collect();
    let joined = c
        .parallelize(left.clone(), 40)
        .join(&c.parallelize(right.clone(), 60));
    assert_eq!(joined.num_partitions(), 60);
    let mut expected = Vec::new();
    for (k, l) in &left {
        for (k2, r) in &right {
            if k == k2 {
                expected.push((*k, (l.clone(), *r)));
            }
        }
    }
    expected.sort();
    assert_eq!(sorted(joined.collect().unwrap()), expected);
}
