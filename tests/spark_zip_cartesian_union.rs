//! RDDSuite's assertions on zip, cartesian, zipWithUniqueId, SparkContext.union and the
//! partition-count variants of distinct and join, restated against ember.

mod common;

use std::collections::BTreeSet;

use common::*;
use ember::EmberError;

// RDDSuite "zipped RDDs".
#[test]
fn zip_pairs_partition_by_partition() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let zipped = nums.zip(&nums.map(|x: i32| x as f64 + 1.0));
    assert_eq!(
        zipped.glom().collect().unwrap(),
        vec![vec![(1, 2.0), (2, 3.0)], vec![(3, 4.0), (4, 5.0)]]
    );
    // Different partition counts: an invalid argument.
    let err = nums
        .zip(&c.parallelize(vec![1, 2, 3, 4], 1))
        .collect()
        .unwrap_err();
    match err {
        EmberError::InvalidArgument(m) => {
            assert!(m.contains("same number of partitions (2 and 1)"), "{m}")
        }
        other => panic!("expected an invalid argument, got {other:?}"),
    }
    // Same partition count, different record counts in a partition: the task fails.
    let uneven = c.parallelize(vec![1, 2, 3], 2);
    match nums.zip(&uneven).collect().unwrap_err() {
        EmberError::TaskFailed { message, .. } => assert!(
            message.contains("same number of records in each partition")
                && message.contains("more records on the left side"),
            "{message}"
        ),
        other => panic!("expected a task failure, got {other:?}"),
    }
}

// RDDSuite "cartesian on empty RDD" and "cartesian on non-empty RDDs".
#[test]
fn cartesian_pairs_everything_with_everything() {
    let c = ctx(2);
    let a = c.parallelize(vec![1, 2, 3, 4], 2);
    let b = c.parallelize(vec!['x', 'y', 'z'], 3);
    let product = a.cartesian(&b);
    assert_eq!(product.num_partitions(), 6);
    let got = sorted(product.collect().unwrap());
    let mut want = Vec::new();
    for x in [1, 2, 3, 4] {
        for y in ['x', 'y', 'z'] {
            want.push((x, y));
        }
    }
    assert_eq!(got, want);
    assert_eq!(product.count().unwrap(), 12);
    let empty = c.parallelize(Vec::<i32>::new(), 2);
    assert_eq!(
        empty.cartesian(&b).collect().unwrap(),
        Vec::<(i32, char)>::new()
    );
    assert_eq!(a.cartesian(&c.empty::<char>()).num_partitions(), 0);
    assert_eq!(a.cartesian(&c.empty::<char>()).count().unwrap(), 0);
}

// RDDSuite "zipWithUniqueId".
#[test]
fn zip_with_unique_id_numbers_by_partition_stride() {
    let c = ctx(2);
    for parts in [1, 2, 3, 5, 10] {
        let n = 10;
        let ids: Vec<(i32, u64)> = c
            .parallelize((1..=n).collect::<Vec<i32>>(), parts)
            .zip_with_unique_id()
            .collect()
            .unwrap();
        let unique: BTreeSet<u64> = ids.iter().map(|(_, id)| *id).collect();
        assert_eq!(unique.len(), n as usize, "{parts} partitions: ids unique");
        // The j-th record of partition k has id j * parts + k.
        let glommed = c
            .parallelize((1..=n).collect::<Vec<i32>>(), parts)
            .glom()
            .collect()
            .unwrap();
        let mut want = Vec::new();
        for (k, part) in glommed.iter().enumerate() {
            for (j, x) in part.iter().enumerate() {
                want.push((*x, (j * parts + k) as u64));
            }
        }
        assert_eq!(ids, want, "{parts} partitions");
    }
}

// SparkContextSuite/RDDSuite "union": sc.union(Seq(nums, nums)) concatenates.
#[test]
fn context_union_concatenates_in_order() {
    let c = ctx(2);
    let nums = c.parallelize(vec![1, 2, 3, 4], 2);
    let u = c.union(&[nums.clone(), nums.clone()]);
    assert_eq!(u.collect().unwrap(), vec![1, 2, 3, 4, 1, 2, 3, 4]);
    assert_eq!(u.num_partitions(), 4);
    let many: Vec<_> = (0..50).map(|i| c.parallelize(vec![i], 1)).collect();
    assert_eq!(
        c.union(&many).collect().unwrap(),
        (0..50).collect::<Vec<_>>()
    );
    assert_eq!(c.union::<i32>(&[]).num_partitions(), 0);
}

// RDDSuite "basic operations": distinct(n) has n partitions; join(other, n) likewise.
#[test]
fn distinct_and_join_into_a_given_partition_count() {
    let c = ctx(2);
    let dups = c.parallelize(vec![1, 1, 2, 2, 3, 3, 4, 4], 2);
    let d = dups.distinct_into(3);
    assert_eq!(d.num_partitions(), 3);
    assert_eq!(sorted(d.collect().unwrap()), vec![1, 2, 3, 4]);
    let left = c.parallelize(vec![(1, 'a'), (2, 'b'), (2, 'c')], 2);
    let right = c.parallelize(vec![(2, 10), (3, 30)], 2);
    let j = left.join_into(&right, 5);
    assert_eq!(j.num_partitions(), 5);
    assert_eq!(
        sorted(j.collect().unwrap()),
        vec![(2, ('b', 10)), (2, ('c', 10))]
    );
}

// PairRDDFunctionsSuite "cogroup with 3 RDDs" (keys in any subset of the three).
#[test]
fn cogroup_of_three_rdds_groups_every_key_of_any() {
    let c = ctx(2);
    let a = c.parallelize(vec![(1, 'a'), (1, 'b'), (2, 'c')], 2);
    let b = c.parallelize(vec![(1, 10), (3, 30)], 3);
    let x = c.parallelize(
        vec![(1, "x".to_string()), (2, "y".into()), (4, "z".into())],
        1,
    );
    let g = a.cogroup3(&b, &x);
    assert_eq!(g.num_partitions(), 3);
    let mut got = g.collect().unwrap();
    got.sort_by_key(|(k, _)| *k);
    for (_, (vs, ws, xs)) in got.iter_mut() {
        vs.sort();
        ws.sort();
        xs.sort();
    }
    assert_eq!(
        got,
        vec![
            (1, (vec!['a', 'b'], vec![10], vec!["x".to_string()])),
            (2, (vec!['c'], vec![], vec!["y".to_string()])),
            (3, (vec![], vec![30], vec![])),
            (4, (vec![], vec![], vec!["z".to_string()])),
        ]
    );
}
