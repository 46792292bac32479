//! Partitioners, restated from Spark's `PartitioningSuite` and the partitioner parts of
//! `PairRDDFunctionsSuite` / `RDDSuite`: equality, which operators keep or drop a
//! partitioner, Spark's default partitioner choice, and the shuffles a known
//! partitioner saves (counted as stages run), each result checked against plain Rust.

mod common;

use std::collections::BTreeMap;

use common::{ctx, random_pairs, ref_join, ref_reduce, ref_subtract, sorted};
use ember::{Conf, Context, KeyPartitioner, Partitioner, PartitionerKind, Rdd};
use serde::{Deserialize, Serialize};

fn pairs(c: &Context, n: i64, parts: usize) -> Rdd<(i64, i64)> {
    c.parallelize((1..=n).collect::<Vec<i64>>(), parts)
        .map(|x: i64| (x, x))
}

fn hash(n: u32) -> Option<Partitioner> {
    Some(Partitioner::hash::<i64>(n))
}

/// The number of stages of the last job's DAG (run, or skipped because an earlier job
/// wrote their shuffle output).
fn stages_run(c: &Context) -> u32 {
    let m = c.last_job_metrics().expect("a job ran");
    m.stages_run + m.stages_skipped
}

// PartitioningSuite "HashPartitioner equality".
#[test]
fn hash_partitioners_are_equal_by_count() {
    let p2 = Partitioner::hash::<i64>(2);
    let p4 = Partitioner::hash::<i64>(4);
    assert_eq!(p2, p2.clone());
    assert_ne!(p2, p4);
    assert_eq!(p4, Partitioner::hash::<i64>(4));
    assert_eq!(p4.num_partitions(), 4);
    assert_eq!(*p4.kind(), PartitionerKind::Hash);
    // ember also tells key types apart: routing u32 keys is not routing i64 keys.
    assert_ne!(p4, Partitioner::hash::<u32>(4));
}

// PartitioningSuite "RangePartitioner equality" and "HashPartitioner not equal to
// RangePartitioner".
#[test]
fn range_partitioners_are_equal_by_bounds_and_direction() {
    let c = ctx(2);
    let same = c.parallelize(vec![1i64, 1, 1, 1], 2).map(|x: i64| (x, x));
    let p = |asc: bool, n: usize| same.sort_by_key_into(asc, n).partitioner().unwrap();
    // All keys equal: one bound, so 2 and 4 requested partitions give the same ranges.
    assert_eq!(p(true, 2), p(true, 4));
    assert_eq!(p(true, 4), p(true, 4));
    assert_eq!(p(false, 2), p(false, 4));
    assert_ne!(p(true, 2), p(false, 2));
    assert_eq!(
        *p(false, 2).kind(),
        PartitionerKind::Range { descending: true }
    );
    let ten = pairs(&c, 10, 2);
    let range2 = ten.sort_by_key_into(true, 2).partitioner().unwrap();
    assert_eq!(range2.num_partitions(), 2);
    assert_ne!(range2, Partitioner::hash::<i64>(2));
}

// PartitioningSuite "RangePartitioner getPartition": every key lands in the partition of
// its range, and every record of partition i is one the partitioner sends to i.
#[test]
fn range_partitioner_puts_each_key_in_its_range() {
    let c = ctx(2);
    let rdd = pairs(&c, 2000, 4);
    for n in [1usize, 2, 10, 100, 500] {
        let sorted_rdd = rdd.sort_by_key_into(true, n);
        let p = sorted_rdd.partitioner().unwrap();
        assert!(p.num_partitions() <= n && p.num_partitions() >= 1);
        assert_eq!(sorted_rdd.num_partitions(), p.num_partitions());
        let mut last = 0;
        for k in 1..=1000i64 {
            let part = p.partition_of(&k).unwrap();
            assert!(part >= last, "{n} partitions: key {k} went back to {part}");
            last = part;
        }
        let placed = sorted_rdd
            .map_partitions_with_index(|i: u32, it: ember::Records<(i64, i64)>| {
                it.map(move |(k, _)| (i, k))
            })
            .collect()
            .unwrap();
        assert_eq!(placed.len(), 2000);
        for (i, k) in placed {
            assert_eq!(p.partition_of(&k), Some(i), "{n} partitions, key {k}");
        }
    }
}

// PartitioningSuite "RangePartitioner should return a single partition for empty RDDs";
// SortingSuite: the sort has as many partitions as bounds + 1.
#[test]
fn a_sort_has_bounds_plus_one_partitions() {
    let c = ctx(2);
    let empty: Rdd<(i64, f64)> = c.empty();
    assert_eq!(empty.sort_by_key_into(true, 0).num_partitions(), 1);
    let none = c
        .parallelize(vec![0i64, 1], 2)
        .flat_map(|_: i64| Vec::<(i64, f64)>::new());
    let s = none.sort_by_key_into(true, 2);
    assert_eq!(s.num_partitions(), 1);
    assert_eq!(s.collect().unwrap(), vec![]);
    // Three distinct keys make at most three bounds (four ranges, the last one empty),
    // however many partitions are asked for.
    let few = c
        .parallelize((0..300i64).collect::<Vec<_>>(), 3)
        .map(|x: i64| (x % 3, x));
    let s = few.sort_by_key_into(true, 10);
    assert!(s.num_partitions() <= 4, "{}", s.num_partitions());
    assert_eq!(
        s.partitioner().unwrap().num_partitions(),
        s.num_partitions()
    );
    let got = s.collect().unwrap();
    assert_eq!(got.len(), 300);
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
    // Plenty of distinct keys: the count asked for.
    assert_eq!(
        pairs(&c, 1000, 3)
            .sort_by_key_into(false, 4)
            .num_partitions(),
        4
    );
}

// PartitioningSuite "partitioner preservation".
#[test]
fn operators_keep_or_drop_the_partitioner_as_spark_does() {
    let c = ctx(2);
    let rdd = pairs(&c, 10, 4);
    let grouped2 = rdd.group_by_key_into(2);
    let grouped4 = rdd.group_by_key_into(4);
    let reduced2 = rdd.reduce_by_key_into(|a: i64, b: i64| a + b, 2);
    let reduced4 = rdd.reduce_by_key_into(|a: i64, b: i64| a + b, 4);
    assert_eq!(rdd.partitioner(), None);
    assert_eq!(grouped2.partitioner(), hash(2));
    assert_eq!(grouped4.partitioner(), hash(4));
    assert_eq!(reduced2.partitioner(), hash(2));
    assert_eq!(reduced4.partitioner(), hash(4));

    assert_eq!(
        grouped2.group_by_key().partitioner(),
        grouped2.partitioner()
    );
    assert_ne!(
        grouped2.group_by_key_into(3).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2.group_by_key_into(2).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped4.group_by_key().partitioner(),
        grouped4.partitioner()
    );
    assert_ne!(
        grouped4.group_by_key_into(3).partitioner(),
        grouped4.partitioner()
    );
    assert_eq!(
        grouped4.group_by_key_into(4).partitioner(),
        grouped4.partitioner()
    );

    assert_eq!(
        grouped2.join(&grouped4).partitioner(),
        grouped4.partitioner()
    );
    assert_eq!(
        grouped2.left_outer_join(&grouped4).partitioner(),
        grouped4.partitioner()
    );
    assert_eq!(
        grouped2.right_outer_join(&grouped4).partitioner(),
        grouped4.partitioner()
    );
    assert_eq!(
        grouped2.full_outer_join(&grouped4).partitioner(),
        grouped4.partitioner()
    );
    assert_eq!(
        grouped2.cogroup(&grouped4).partitioner(),
        grouped4.partitioner()
    );

    assert_eq!(
        grouped2.join(&reduced2).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2.left_outer_join(&reduced2).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2.right_outer_join(&reduced2).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2.full_outer_join(&reduced2).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2.cogroup(&reduced2).partitioner(),
        grouped2.partitioner()
    );

    assert_eq!(grouped2.map(|_: (i64, Vec<i64>)| 1).partitioner(), None);
    assert_eq!(
        grouped2.map_values(|_: Vec<i64>| 1).partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2
            .flat_map_values(|_: Vec<i64>| vec![1])
            .partitioner(),
        grouped2.partitioner()
    );
    assert_eq!(
        grouped2
            .filter(|(k, _): &(i64, Vec<i64>)| *k > 4)
            .partitioner(),
        grouped2.partitioner()
    );
    // ember also keeps it through sample (Spark's PartitionwiseSampledRDD preserves it)
    // and through persisting, and drops it for keys() / values().
    assert_eq!(reduced2.sample(false, 0.5, 1).partitioner(), hash(2));
    assert_eq!(reduced2.cache().partitioner(), hash(2));
    assert_eq!(reduced2.keys().partitioner(), None);
}

/// rdd1..rdd5 of Spark's "defaultPartitioner" tests.
fn default_partitioner_rdds(c: &Context) -> Vec<Rdd<(i64, i64)>> {
    let small = vec![(1i64, 2i64), (2, 3), (2, 4), (3, 4)];
    vec![
        pairs(c, 1000, 150),
        c.parallelize(small.clone(), 2).partition_by(10),
        c.parallelize(vec![(1i64, 6i64), (7, 8), (3, 10), (5, 12), (13, 14)], 2)
            .partition_by(100),
        c.parallelize(small.clone(), 2).partition_by(9),
        pairs(c, 10, 11),
        c.parallelize(small, 2).partition_by(3),
    ]
}

// PartitioningSuite "defaultPartitioner": the parent partitioner with the most
// partitions, if within 10x of the largest parent, else hash into the largest count.
#[test]
fn the_default_partitioner_is_sparks() {
    let c = ctx(2);
    let r = default_partitioner_rdds(&c);
    let parts = |a: &Rdd<(i64, i64)>, b: &Rdd<(i64, i64)>| a.cogroup(b).num_partitions();
    assert_eq!(parts(&r[0], &r[1]), 150, "10 is not eligible next to 150");
    assert_eq!(parts(&r[1], &r[2]), 100);
    assert_eq!(parts(&r[2], &r[0]), 100, "100 is eligible next to 150");
    assert_eq!(r[0].cogroup3(&r[1], &r[2]).num_partitions(), 100);
    assert_eq!(parts(&r[3], &r[4]), 9);
    assert_eq!(r[2].cogroup(&r[0]).partitioner(), hash(100));
    // The joins answer the same whichever partitioner they picked.
    let want = ref_join(&r[2].collect().unwrap(), &r[0].collect().unwrap());
    assert_eq!(sorted(r[2].join(&r[0]).collect().unwrap()), want);
}

// PartitioningSuite "defaultPartitioner when defaultParallelism is set".
#[test]
fn a_configured_default_parallelism_sizes_new_shuffles() {
    let mut conf = Conf::local(2, 256 << 20);
    conf.progress = false;
    conf.default_parallelism = Some(4);
    let c = Context::with_conf(conf).unwrap();
    assert_eq!(c.default_parallelism(), 4);
    let r = default_partitioner_rdds(&c);
    let parts = |a: &Rdd<(i64, i64)>, b: &Rdd<(i64, i64)>| a.cogroup(b).num_partitions();
    assert_eq!(parts(&r[0], &r[1]), 10, "the default 4 is below rdd2's 10");
    assert_eq!(parts(&r[1], &r[2]), 100);
    assert_eq!(parts(&r[2], &r[0]), 100);
    assert_eq!(r[0].cogroup3(&r[1], &r[2]).num_partitions(), 100);
    assert_eq!(parts(&r[3], &r[4]), 9);
    assert_eq!(parts(&r[4], &r[4]), 4, "no partitioner: the default");
    assert_eq!(
        parts(&r[0], &r[5]),
        4,
        "3 is neither eligible nor above the default"
    );
    // A shuffle given no count, over an RDD without a partitioner, uses it too.
    let reduced = r[0].reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(reduced.num_partitions(), 4);
    assert_eq!(
        sorted(reduced.collect().unwrap()),
        sorted(r[0].collect().unwrap())
    );
    // Sources with no count too; distinct keeps its own count as Spark's does.
    assert_eq!(
        c.parallelize(vec![1, 2, 3], c.default_parallelism())
            .num_partitions(),
        4
    );
    assert_eq!(r[0].keys().distinct().num_partitions(), 150);
}

// PairRDDFunctionsSuite "reduceByKey" on pre-partitioned data / Spark's combineByKey
// taking the narrow path: one stage fewer, the same answer.
#[test]
fn aggregations_on_data_partitioned_alike_need_no_shuffle() {
    let c = ctx(2);
    let data = random_pairs(7, 5000, 300);
    let rdd = c.parallelize(data.clone(), 5);
    let want = ref_reduce(&data, |a, b| a + b);

    let plain = rdd.reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(sorted(plain.collect().unwrap()), want);
    assert_eq!(stages_run(&c), 2);

    let parted = rdd.partition_by(4);
    let reduced = parted.reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(reduced.partitioner(), Some(Partitioner::hash::<u64>(4)));
    assert_eq!(sorted(reduced.collect().unwrap()), want);
    assert_eq!(stages_run(&c), 2, "partition_by's shuffle only");

    // An aggregation of an aggregation, through map_values, and a group_by_key.
    let twice = plain
        .map_values(|v: i64| v * 2)
        .reduce_by_key(|a: i64, b: i64| a + b);
    let want2: Vec<(u64, i64)> = want.iter().map(|(k, v)| (*k, v * 2)).collect();
    assert_eq!(sorted(twice.collect().unwrap()), want2);
    assert_eq!(stages_run(&c), 2);
    let groups = parted.group_by_key();
    let mut got: Vec<(u64, Vec<i64>)> = groups.collect().unwrap();
    got.iter_mut().for_each(|(_, v)| v.sort());
    got.sort();
    assert_eq!(got, common::ref_group_sorted(&data));
    assert_eq!(stages_run(&c), 2);

    // partition_by to the partitioner it has is the same RDD (Spark returns `this`).
    assert_eq!(parted.partition_by(4).id(), parted.id());
    assert_ne!(parted.partition_by(3).id(), parted.id());
    // map drops the partitioner: the aggregation shuffles again.
    let remapped = parted
        .map(|kv: (u64, i64)| kv)
        .reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(sorted(remapped.collect().unwrap()), want);
    assert_eq!(stages_run(&c), 3);
}

// PairRDDFunctionsSuite "join" of co-partitioned RDDs / CoGroupedRDD's one-to-one
// dependencies: neither side is shuffled again.
#[test]
fn joins_of_co_partitioned_rdds_shuffle_neither_side() {
    let c = ctx(2);
    let left = random_pairs(1, 3000, 400);
    let right = random_pairs(2, 2000, 500);
    let want = ref_join(&left, &right);
    let l = c.parallelize(left.clone(), 3).partition_by(4);
    let r = c
        .parallelize(right.clone(), 5)
        .reduce_by_key_into(|a: i64, b: i64| a.max(b), 4);
    let r_vals = r.collect().unwrap();
    let joined = l.join(&r);
    assert_eq!(joined.partitioner(), Some(Partitioner::hash::<u64>(4)));
    assert_eq!(sorted(joined.collect().unwrap()), ref_join(&left, &r_vals));
    assert_eq!(
        stages_run(&c),
        3,
        "the two map stages and the join's result stage"
    );
    // A side without the partitioner is shuffled by it; the other is not.
    let raw = c.parallelize(right.clone(), 5);
    assert_eq!(sorted(l.join(&raw).collect().unwrap()), want);
    assert_eq!(stages_run(&c), 3);
    let sub = l.subtract_by_key(&raw);
    assert_eq!(sub.num_partitions(), 4);
    assert_eq!(sorted(sub.collect().unwrap()), ref_subtract(&left, &right));
    assert_eq!(stages_run(&c), 3);
}

// RDDSuite "partitioner aware union".
#[test]
fn a_union_of_co_partitioned_rdds_keeps_the_partitioner() {
    let c = ctx(2);
    let a = c.parallelize(random_pairs(3, 500, 50), 3).partition_by(3);
    let b = c.parallelize(random_pairs(4, 700, 80), 2).partition_by(3);
    let u = a.union(&b);
    assert_eq!(u.num_partitions(), 3);
    assert_eq!(u.partitioner(), Some(Partitioner::hash::<u64>(3)));
    let p = u.partitioner().unwrap();
    let placed = u
        .map_partitions_with_index(|i: u32, it: ember::Records<(u64, i64)>| {
            it.map(move |(k, _)| (i, k))
        })
        .collect()
        .unwrap();
    assert_eq!(placed.len(), 1200);
    assert!(placed.iter().all(|(i, k)| p.partition_of(k) == Some(*i)));
    let mut all = a.collect().unwrap();
    all.extend(b.collect().unwrap());
    let sums = u.reduce_by_key(|x: i64, y: i64| x + y);
    assert_eq!(
        sorted(sums.collect().unwrap()),
        ref_reduce(&all, |x, y| x + y)
    );
    assert_eq!(
        stages_run(&c),
        3,
        "the two partition_by map stages and the result"
    );
    // Different partitioners: partitions concatenated, no partitioner.
    let other = c.parallelize(random_pairs(5, 100, 10), 2).partition_by(2);
    let mixed = a.union(&other);
    assert_eq!((mixed.num_partitions(), mixed.partitioner()), (5, None));
    let many = c.union(&[a.clone(), b.clone(), a.clone()]);
    assert_eq!(many.num_partitions(), 3);
    assert_eq!(many.count().unwrap(), 1700);
}

// PairRDDFunctionsSuite "lookup" / "lookup with partitioner": a partitioned RDD computes
// one partition.
#[test]
fn lookup_on_a_partitioned_rdd_runs_one_task() {
    let c = ctx(2);
    let data = random_pairs(9, 4000, 100);
    let mut want: Vec<i64> = data.iter().filter(|(k, _)| *k == 17).map(|x| x.1).collect();
    want.sort();
    let parted = c.parallelize(data.clone(), 4).partition_by(6);
    assert_eq!(parted.count().unwrap(), 4000, "the shuffle is written");
    assert_eq!(sorted(parted.lookup(17).unwrap()), want);
    assert_eq!(c.last_job_metrics().unwrap().tasks, 1);
    let plain = c.parallelize(data, 4);
    assert_eq!(sorted(plain.lookup(17).unwrap()), want);
    assert_eq!(c.last_job_metrics().unwrap().tasks, 4);
    assert_eq!(parted.lookup(1_000_000).unwrap(), Vec::<i64>::new());
}

/// A user partitioner: keys by residue.
#[derive(Clone, Serialize, Deserialize)]
struct Modulo(u32);
impl KeyPartitioner<u64> for Modulo {
    fn num_partitions(&self) -> u32 {
        self.0
    }
    fn partition(&self, key: &u64) -> u32 {
        (*key % u64::from(self.0)) as u32
    }
}

/// Sends every key out of range.
#[derive(Clone, Serialize, Deserialize)]
struct Broken;
impl KeyPartitioner<u64> for Broken {
    fn num_partitions(&self) -> u32 {
        3
    }
    fn partition(&self, _: &u64) -> u32 {
        7
    }
}

// PartitioningSuite / PairRDDFunctionsSuite "partitionBy with a custom partitioner".
#[test]
fn a_user_partitioner_routes_keys_and_is_reused() {
    let c = ctx(2);
    let data = random_pairs(11, 2000, 90);
    let parted = c.parallelize(data.clone(), 4).partition_by_with(Modulo(3));
    let p = parted.partitioner().unwrap();
    assert_eq!(p.num_partitions(), 3);
    assert!(matches!(p.kind(), PartitionerKind::Custom { name } if name.ends_with("Modulo")));
    assert_eq!(p, Partitioner::custom::<u64, _>(&Modulo(3)));
    assert_ne!(p, Partitioner::custom::<u64, _>(&Modulo(4)));
    let by_part: BTreeMap<u32, Vec<u64>> = parted
        .glom()
        .collect()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, recs)| (i as u32, recs.into_iter().map(|(k, _)| k).collect()))
        .collect();
    for (i, keys) in &by_part {
        assert!(keys.iter().all(|k| k % 3 == u64::from(*i)), "partition {i}");
    }
    let other = c
        .parallelize(random_pairs(12, 500, 90), 2)
        .partition_by_with(Modulo(3));
    let want = ref_join(&data, &other.collect().unwrap());
    let joined = parted.join(&other);
    assert_eq!(joined.partitioner(), Some(p));
    assert_eq!(sorted(joined.collect().unwrap()), want);
    assert_eq!(stages_run(&c), 3);
    let err = c
        .parallelize(data, 2)
        .partition_by_with(Broken)
        .count()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("partition 7") && err.contains("3 partitions"),
        "{err}"
    );
}

// A range-partitioned side sets the join's partitioner (it has the most partitions);
// the other side is routed by the same ranges.
#[test]
fn a_join_with_a_sorted_rdd_routes_the_other_side_by_its_ranges() {
    let c = ctx(2);
    let left = random_pairs(21, 3000, 1000);
    let right = random_pairs(22, 1000, 1000);
    let sorted_left = c.parallelize(left.clone(), 2).sort_by_key_into(true, 4);
    let range = sorted_left.partitioner().unwrap();
    assert_eq!(range.num_partitions(), 4);
    let joined = sorted_left.join(&c.parallelize(right.clone(), 3));
    assert_eq!(joined.partitioner(), Some(range.clone()));
    let placed = joined
        .map_partitions_with_index(|i: u32, it: ember::Records<(u64, (i64, i64))>| {
            it.map(move |(k, v)| (i, (k, v)))
        })
        .collect()
        .unwrap();
    assert!(placed
        .iter()
        .all(|(i, (k, _))| range.partition_of(k) == Some(*i)));
    let got: Vec<(u64, (i64, i64))> = placed.into_iter().map(|(_, kv)| kv).collect();
    assert_eq!(sorted(got), ref_join(&left, &right));
}

// PairRDDFunctionsSuite "subtract" / "subtractByKey": the left side's partition count.
#[test]
fn subtractions_keep_the_left_partition_count() {
    let c = ctx(2);
    let left = random_pairs(31, 1000, 100);
    let right = random_pairs(32, 300, 200);
    let l = c.parallelize(left.clone(), 5);
    let r = c.parallelize(right.clone(), 7);
    let sub = l.subtract_by_key(&r);
    assert_eq!(sub.num_partitions(), 5);
    assert_eq!(sorted(sub.collect().unwrap()), ref_subtract(&left, &right));
    let s = l.subtract(&r);
    assert_eq!(s.num_partitions(), 5);
    let rs: std::collections::HashSet<(u64, i64)> = right.into_iter().collect();
    let want: Vec<(u64, i64)> = left.into_iter().filter(|x| !rs.contains(x)).collect();
    assert_eq!(sorted(s.collect().unwrap()), sorted(want));
    // A partitioned left side keeps its partitioner, so nothing of it is reshuffled.
    let pl = l.partition_by(3);
    assert_eq!(
        pl.subtract_by_key(&r).partitioner(),
        Some(Partitioner::hash::<u64>(3))
    );
}
