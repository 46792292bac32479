//! Spark's `SortingSuite` restated (sortByKey, partition balance, filterByRange) and
//! `repartitionAndSortWithinPartitions` from `PairRDDFunctionsSuite` /
//! `JavaAPISuite`; results compared with plain Rust sorts.

mod common;

use common::{ctx, sorted, SplitMix};
use ember::{KeyPartitioner, Records};
use serde::{Deserialize, Serialize};

fn shuffled(n: i64, seed: u64) -> Vec<(i64, i64)> {
    let mut v: Vec<(i64, i64)> = (0..n).map(|x| (x, x)).collect();
    let mut rng = SplitMix::new(seed);
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

// SortingSuite "sortByKey", "large array", "sort descending", "more partitions than
// elements", "empty RDD".
#[test]
fn sort_by_key_orders_every_record() {
    let c = ctx(2);
    let data = shuffled(1000, 1);
    let asc = c.parallelize(data.clone(), 2).sort_by_key_into(true, 2);
    assert_eq!(asc.collect().unwrap(), sorted(data.clone()));
    let desc = c.parallelize(data.clone(), 3).sort_by_key_into(false, 3);
    let mut want = sorted(data.clone());
    want.reverse();
    assert_eq!(desc.collect().unwrap(), want);
    let few = c.parallelize(vec![(2i64, 1i64), (1, 2)], 1);
    let s = few.sort_by_key_into(true, 30);
    assert!(s.num_partitions() <= 3);
    assert_eq!(s.collect().unwrap(), vec![(1, 2), (2, 1)]);
    let empty = c.parallelize(Vec::<(i64, i64)>::new(), 2);
    assert_eq!(empty.sort_by_key_into(true, 2).collect().unwrap(), vec![]);
}

// SortingSuite "partition balancing": partitions hold contiguous, similar-sized ranges.
#[test]
fn sorted_partitions_are_balanced_ranges() {
    let c = ctx(2);
    let s = c
        .parallelize(shuffled(1000, 2), 2)
        .sort_by_key_into(true, 4);
    let parts = s.glom().collect().unwrap();
    assert_eq!(parts.len(), 4);
    for w in parts.windows(2) {
        assert!(w[0].last().unwrap().0 < w[1].first().unwrap().0);
    }
    for p in &parts {
        assert!((150..=350).contains(&p.len()), "{} records", p.len());
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}

// SortingSuite "get a range of elements in a sorted RDD that is on one partition".
#[test]
fn filter_by_range_within_one_partition_computes_one_partition() {
    let c = ctx(2);
    let pairs: Vec<(i64, i64)> = (1..=1000).map(|x| (x, x)).collect();
    let s = c.parallelize(pairs, 10).sort_by_key_into(true, 10);
    assert_eq!(s.count().unwrap(), 1000, "the sort's shuffle is written");
    let range = s.filter_by_range(20, 40);
    assert_eq!(
        range.num_partitions(),
        1,
        "only the partition holding 20..=40"
    );
    let keys: Vec<i64> = range.collect().unwrap().into_iter().map(|x| x.0).collect();
    assert_eq!(keys, (20..=40).collect::<Vec<_>>());
    assert_eq!(c.last_job_metrics().unwrap().tasks, 1);
}

// SortingSuite "get a range of elements over multiple partitions in a 2-level sorted
// RDD" and "... but not taking up full partitions" (descending).
#[test]
fn filter_by_range_over_several_partitions() {
    let c = ctx(2);
    let pairs: Vec<(i64, i64)> = (0..1000).map(|x| (x, x)).collect();
    let twice = c
        .parallelize(pairs.clone(), 10)
        .sort_by_key_into(true, 10)
        .sort_by_key_into(true, 10);
    let keys: Vec<i64> = twice
        .filter_by_range(200, 800)
        .collect()
        .unwrap()
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(keys, (200..=800).collect::<Vec<_>>());
    let desc = c.parallelize(pairs, 10).sort_by_key_into(false, 10);
    let range = desc.filter_by_range(250, 850);
    assert!(range.num_partitions() < 10);
    let keys: Vec<i64> = range.collect().unwrap().into_iter().map(|x| x.0).collect();
    assert_eq!(keys, (250..=850).rev().collect::<Vec<_>>());
}

// SortingSuite "get a range of elements in an array not partitioned by a range
// partitioner": a plain filter over every partition.
#[test]
fn filter_by_range_without_a_range_partitioner_filters_everything() {
    let c = ctx(2);
    let rdd = c.parallelize(shuffled(1000, 3), 10);
    let range = rdd.filter_by_range(200, 800);
    assert_eq!(range.num_partitions(), 10);
    let keys: Vec<i64> = range.collect().unwrap().into_iter().map(|x| x.0).collect();
    assert_eq!(sorted(keys), (200..=800).collect::<Vec<_>>());
    assert_eq!(
        rdd.filter_by_range(900, 100).count().unwrap(),
        0,
        "empty range"
    );
}

/// Spark's test partitioner: keys by parity.
#[derive(Clone, Serialize, Deserialize)]
struct Parity;
impl KeyPartitioner<i64> for Parity {
    fn num_partitions(&self) -> u32 {
        2
    }
    fn partition(&self, key: &i64) -> u32 {
        key.rem_euclid(2) as u32
    }
}

/// Sorts records of equal keys by value (the sort orders by key only).
fn by_key_then_value(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort();
    v
}

// PairRDDFunctionsSuite / JavaAPISuite "repartitionAndSortWithinPartitions".
#[test]
fn repartition_and_sort_within_partitions_sorts_each_partition() {
    let c = ctx(2);
    let data = vec![(0i64, 5i64), (3, 8), (2, 6), (0, 8), (3, 8), (1, 3)];
    let r = c
        .parallelize(data, 2)
        .repartition_and_sort_within_partitions_with(Parity);
    let parts = r.glom().collect().unwrap();
    assert_eq!(parts.len(), 2);
    assert!(parts.iter().all(|p| p.windows(2).all(|w| w[0].0 <= w[1].0)));
    assert_eq!(
        by_key_then_value(parts[0].clone()),
        vec![(0, 5), (0, 8), (2, 6)]
    );
    assert_eq!(
        by_key_then_value(parts[1].clone()),
        vec![(1, 3), (3, 8), (3, 8)]
    );
    // Hash partitioning into n, on more data: every partition sorted, nothing lost.
    let big = shuffled(5000, 4);
    let h = c
        .parallelize(big.clone(), 3)
        .repartition_and_sort_within_partitions(4);
    assert_eq!(h.num_partitions(), 4);
    let p = h.partitioner().unwrap();
    let placed = h
        .map_partitions_with_index(|i: u32, it: Records<(i64, i64)>| it.map(move |kv| (i, kv)))
        .collect()
        .unwrap();
    let mut last: Option<(u32, i64)> = None;
    for (i, (k, _)) in &placed {
        assert_eq!(p.partition_of(k), Some(*i));
        if let Some((li, lk)) = last {
            assert!(
                li < *i || (li == *i && lk <= *k),
                "partition {i} not sorted at {k}"
            );
        }
        last = Some((*i, *k));
    }
    let all: Vec<(i64, i64)> = placed.into_iter().map(|x| x.1).collect();
    assert_eq!(sorted(all), sorted(big));
    let err = c
        .parallelize(vec![(1i64, 1i64)], 1)
        .repartition_and_sort_within_partitions(0)
        .count()
        .unwrap_err()
        .to_string();
    assert!(err.contains("must be positive"), "{err}");
}
