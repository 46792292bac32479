//! Four corners of Spark's semantics, each from Spark's own suites and code: how many
//! partitions `take` tries per round (`RDD.take`), `lookup` through a partitioner that
//! answers out of range, `distinct` and `repartition_and_sort_within_partitions` over
//! data already partitioned as asked (SPARK-32384), `map_partitions` that says it keeps
//! the partitioning, and `text_file` over a comma-separated list naming a path twice.

mod common;

use common::*;
use ember::{Accumulator, Context, EmberError, KeyPartitioner, Partitioner, Rdd, Records};
use serde::{Deserialize, Serialize};

/// Spark's `RDD.take` rounds, computed from the partitions' record counts alone: the
/// number of partitions each round tries (1 first; then 4x scanned if nothing was found,
/// else `ceil(1.5 * left * scanned / found)` capped at 4x scanned; never past the end).
fn spark_take_rounds(sizes: &[usize], n: usize) -> Vec<usize> {
    let (mut found, mut scanned, mut rounds) = (0usize, 0usize, Vec::new());
    while found < n && scanned < sizes.len() {
        let mut try_parts = 1usize;
        if scanned > 0 {
            let left = n - found;
            try_parts = if found == 0 {
                scanned * 4
            } else {
                let estimate = (1.5 * left as f64 * scanned as f64 / found as f64).ceil();
                (estimate as usize).min(scanned * 4)
            };
        }
        let upto = (scanned + try_parts).min(sizes.len());
        found += sizes[scanned..upto].iter().sum::<usize>();
        rounds.push(upto - scanned);
        scanned = upto;
    }
    rounds
}

/// An RDD whose partition `i` holds `sizes[i]` records (`i * 1000 + j`), and the
/// accumulator every partition computed adds its index to.
fn sized_partitions(c: &Context, sizes: &[usize]) -> (Rdd<u64>, Accumulator<Vec<u32>>) {
    let computed: Accumulator<Vec<u32>> = c.accumulator("partitions computed");
    let rdd = c
        .parallelize((0..sizes.len() as u32).collect::<Vec<u32>>(), sizes.len())
        .map_partitions_with_index_with(
            (computed.clone(), sizes.to_vec()),
            |(acc, sizes), i, _: Records<u32>| {
                acc.add(vec![i]);
                let base = u64::from(i) * 1000;
                (0..sizes[i as usize] as u64).map(move |j| base + j)
            },
        );
    (rdd, computed)
}

/// Runs `take(n)` over partitions of `sizes` records and checks it against Spark's
/// rounds: the records, every partition computed once in all, and the last round (the
/// last job) computing exactly as many partitions as Spark's last round.
fn check_take_rounds(sizes: &[usize], n: usize, expected_rounds: &[usize]) {
    assert_eq!(
        spark_take_rounds(sizes, n),
        expected_rounds,
        "model of {sizes:?}, take({n})"
    );
    // The reference: partition order, first n records.
    let all: Vec<u64> = sizes
        .iter()
        .enumerate()
        .flat_map(|(i, &s)| (0..s as u64).map(move |j| i as u64 * 1000 + j))
        .take(n)
        .collect();
    let c = ctx(2);
    let (rdd, computed) = sized_partitions(&c, sizes);
    assert_eq!(rdd.take(n).unwrap(), all, "take({n}) over {sizes:?}");
    let scanned: usize = expected_rounds.iter().sum();
    assert_eq!(
        sorted(computed.value()),
        (0..scanned as u32).collect::<Vec<u32>>(),
        "partitions computed by take({n}) over {sizes:?}"
    );
    assert_eq!(
        c.last_job_metrics().unwrap().tasks as usize,
        *expected_rounds.last().unwrap(),
        "partitions of take({n})'s last round over {sizes:?}"
    );
}

// RDD.take: after 1 partition found 1 of 3 records, Spark tries ceil(1.5 * 2 * 1 / 1) = 3
// more (4 in all), not ceil(1.5 * 3 * 1 / 1) - 1 = 4 (5 in all).
#[test]
fn take_tries_as_many_partitions_per_round_as_spark() {
    check_take_rounds(&[1; 10], 3, &[1, 3]);
    // 100 partitions of 10, take(100): 1; min(ceil(1.5 * 90 / 10), 4) = 4;
    // min(ceil(1.5 * 50 * 5 / 50), 20) = 8.
    check_take_rounds(&[10; 100], 100, &[1, 4, 8]);
    // Nothing found: 4x scanned, then capped at the partitions left.
    check_take_rounds(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0], 1, &[1, 4, 7]);
    // Nothing in 5 partitions, then a record in each: 1, 4x1 = 4, 4x5 = 20.
    let mut sizes = vec![0usize; 5];
    sizes.extend([1usize; 40]);
    check_take_rounds(&sizes, 3, &[1, 4, 20]);
    // 1 record found in the first 5 partitions, 2 left: ceil(1.5 * 2 * 5 / 1) = 15
    // (not ceil(1.5 * 3 * 5 / 1) - 5 = 18).
    let mut sizes = vec![0usize, 1, 0, 0, 0];
    sizes.extend([1usize; 40]);
    check_take_rounds(&sizes, 3, &[1, 4, 15]);
    // first() and is_empty() are take(1): one partition when it holds a record.
    let c = ctx(2);
    let (rdd, computed) = sized_partitions(&c, &[1, 1, 1, 1]);
    assert_eq!(rdd.first().unwrap(), 0);
    assert_eq!(computed.value(), vec![0]);
    let (rdd, computed) = sized_partitions(&c, &[0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(rdd.is_empty().unwrap());
    assert_eq!(sorted(computed.value()), (0..8).collect::<Vec<u32>>());
    assert_eq!(c.last_job_metrics().unwrap().tasks, 3, "rounds 1, 4, 3");
}

/// Key `k` to partition `k % 3`, over only 2 partitions: keys with `k % 3 == 2` are out
/// of range (Spark's suite uses `hashCode % 2`, negative for negative keys).
#[derive(Clone, Serialize, Deserialize)]
struct ModThreeOfTwo;
impl KeyPartitioner<u64> for ModThreeOfTwo {
    fn num_partitions(&self) -> u32 {
        2
    }
    fn partition(&self, key: &u64) -> u32 {
        (*key % 3) as u32
    }
}

// PairRDDFunctionsSuite "lookup with bad partitioner": an out-of-range partition fails.
#[test]
fn lookup_through_a_partitioner_answering_out_of_range_fails_naming_the_partition() {
    let c = ctx(2);
    let pairs: Vec<(u64, i64)> = vec![(1, 2), (3, 4), (4, 6), (4, 7), (6, 8)];
    let parted = c
        .parallelize(pairs.clone(), 3)
        .partition_by_with(ModThreeOfTwo);
    assert_eq!(
        parted.partitioner(),
        Some(Partitioner::custom::<u64, _>(&ModThreeOfTwo))
    );
    for key in [1u64, 3, 4, 6, 9] {
        let want: Vec<i64> = pairs
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(sorted(parted.lookup(key).unwrap()), want, "lookup({key})");
    }
    match parted.lookup(5) {
        Err(EmberError::InvalidArgument(m)) => {
            assert!(
                m.contains("partition 2, but the RDD has 2 partitions"),
                "{m}"
            );
            assert!(m.contains("lookup"), "{m}");
        }
        other => panic!("lookup(5) through an out-of-range partitioner: {other:?}"),
    }
}

/// The number of stages of the last job's DAG (run, or skipped because an earlier job
/// wrote their shuffle output).
fn stages_of_last_job(c: &Context) -> u32 {
    let m = c.last_job_metrics().expect("a job ran");
    m.stages_run + m.stages_skipped
}

/// Whether every record of `parts` (partition by partition) is in the partition its
/// partitioner names.
fn placed_by(parts: &[Vec<(u64, i64)>], p: &Partitioner) -> bool {
    parts.iter().enumerate().all(|(i, part)| {
        part.iter()
            .all(|(k, _)| p.partition_of(k) == Some(i as u32))
    })
}

// RDDSuite "distinct with known partitioner preserves partitioning" (RDD.distinct: with a
// partitioner and an unchanged partition count, duplicates go within each partition).
#[test]
fn distinct_of_partitioned_data_keeps_the_partitioner_without_a_shuffle() {
    let c = ctx(2);
    // Few distinct pairs, each many times.
    let data: Vec<(u64, i64)> = random_pairs(5, 3000, 40)
        .into_iter()
        .map(|(k, v)| (k, v.rem_euclid(3)))
        .collect();
    let want: Vec<(u64, i64)> = sorted(data.clone())
        .into_iter()
        .fold(Vec::new(), |mut acc, x| {
            if acc.last() != Some(&x) {
                acc.push(x);
            }
            acc
        });
    let parted = c.parallelize(data.clone(), 4).partition_by(3);
    let hash3 = Partitioner::hash::<u64>(3);

    let distinct = parted.distinct();
    assert_eq!(distinct.partitioner(), Some(hash3.clone()));
    assert_eq!(distinct.num_partitions(), 3);
    let parts = distinct.glom().collect().unwrap();
    assert_eq!(stages_of_last_job(&c), 2, "partition_by's shuffle only");
    assert!(placed_by(&parts, &hash3));
    assert_eq!(sorted(parts.concat()), want);

    let same_count = parted.distinct_into(3);
    assert_eq!(same_count.partitioner(), Some(hash3.clone()));
    assert_eq!(sorted(same_count.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 2);

    // Another partition count shuffles, as before.
    let other_count = parted.distinct_into(5);
    assert_eq!(other_count.num_partitions(), 5);
    assert_eq!(sorted(other_count.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 3);

    // A range partitioner (Spark's suite uses sortByKey) is kept too.
    let by_range = c.parallelize(data.clone(), 4).sort_by_key_into(true, 3);
    let range = by_range
        .partitioner()
        .expect("sort_by_key's range partitioner");
    let distinct = by_range.distinct();
    assert_eq!(distinct.partitioner(), Some(range.clone()));
    let parts = distinct.glom().collect().unwrap();
    assert!(placed_by(&parts, &range));
    assert_eq!(sorted(parts.concat()), want);

    // Without a partitioner: a shuffle, no partitioner.
    let plain = c.parallelize(data, 4).distinct();
    assert_eq!(sorted(plain.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 2);
}

// SPARK-32384: repartitionAndSortWithinPartitions by the partitioner the data already has
// sorts each partition in place: 2 stages (the first shuffle and the result), not 3.
#[test]
fn repartition_and_sort_by_the_partitioner_the_data_has_adds_no_shuffle() {
    let c = ctx(2);
    let data = random_pairs(9, 4000, 500);
    let parted = c.parallelize(data.clone(), 4).partition_by(3);
    let hash3 = Partitioner::hash::<u64>(3);
    // The reference: each partition of `parted`, stably sorted by key.
    let unsorted = parted.glom().collect().unwrap();

    let sorted_parts = parted.repartition_and_sort_within_partitions(3);
    assert_eq!(sorted_parts.partitioner(), Some(hash3.clone()));
    let parts = sorted_parts.glom().collect().unwrap();
    assert_eq!(stages_of_last_job(&c), 2);
    assert_eq!(parts.len(), 3);
    for (got, before) in parts.iter().zip(&unsorted) {
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "sorted by key");
        assert_eq!(
            sorted(got.clone()),
            sorted(before.clone()),
            "the same records"
        );
    }
    assert_eq!(sorted(parts.concat()), sorted(data.clone()));

    // A user partitioner the data already has: the same.
    let modulo = c.parallelize(data.clone(), 4).partition_by_with(ModTwo);
    let again = modulo.repartition_and_sort_within_partitions_with(ModTwo);
    assert_eq!(again.partitioner(), modulo.partitioner());
    let parts = again.glom().collect().unwrap();
    assert_eq!(stages_of_last_job(&c), 2);
    assert!(parts.iter().all(|p| p.windows(2).all(|w| w[0].0 <= w[1].0)));
    assert!(placed_by(&parts, &modulo.partitioner().unwrap()));
    assert_eq!(sorted(parts.concat()), sorted(data.clone()));

    // Another partitioner shuffles again: 3 stages.
    let other = parted.repartition_and_sort_within_partitions(4);
    assert_eq!(sorted(other.collect().unwrap()), sorted(data));
    assert_eq!(stages_of_last_job(&c), 3);
}

/// Key `k` to partition `k % 2`.
#[derive(Clone, Serialize, Deserialize)]
struct ModTwo;
impl KeyPartitioner<u64> for ModTwo {
    fn num_partitions(&self) -> u32 {
        2
    }
    fn partition(&self, key: &u64) -> u32 {
        (*key % 2) as u32
    }
}

// RDD.mapPartitions(f, preservesPartitioning = true): a key-preserving partition-wise step
// keeps the partitioner, so reduce_by_key by the same partitioner does not shuffle.
#[test]
fn map_partitions_preserving_keeps_the_partitioner_and_saves_the_next_shuffle() {
    let c = ctx(2);
    let data = random_pairs(13, 5000, 300);
    // The reference: positive values doubled, summed per key.
    let mut want: std::collections::BTreeMap<u64, i64> = Default::default();
    for (k, v) in data.iter().filter(|(_, v)| *v > 0) {
        *want.entry(*k).or_default() += v * 2;
    }
    let want: Vec<(u64, i64)> = want.into_iter().collect();
    let parted = c.parallelize(data.clone(), 4).partition_by(3);
    let hash3 = Partitioner::hash::<u64>(3);

    let doubled = parted.map_partitions_preserving(|it: Records<(u64, i64)>| {
        it.filter(|(_, v)| *v > 0).map(|(k, v)| (k, v * 2))
    });
    assert_eq!(doubled.partitioner(), Some(hash3.clone()));
    let summed = doubled.reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(summed.partitioner(), Some(hash3.clone()));
    assert_eq!(sorted(summed.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 2, "partition_by's shuffle only");

    // The _with form: state and the partition index; each record tagged with its
    // partition, which must be its key's partition under the kept partitioner.
    let tagged = parted.map_partitions_preserving_with(
        2i64,
        |factor: &i64, i: u32, it: Records<(u64, i64)>| {
            let factor = *factor;
            it.filter(|(_, v)| *v > 0)
                .map(move |(k, v)| (k, (i, v * factor)))
        },
    );
    assert_eq!(tagged.partitioner(), Some(hash3.clone()));
    let got = tagged.collect().unwrap();
    assert!(got
        .iter()
        .all(|(k, (i, _))| hash3.partition_of(k) == Some(*i)));
    let summed = tagged
        .map_values(|(_, v): (u32, i64)| v)
        .reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(sorted(summed.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 2);

    // Plain map_partitions says nothing: the partitioner is dropped and it shuffles.
    let plain = parted.map_partitions(|it: Records<(u64, i64)>| {
        it.filter(|(_, v)| *v > 0).map(|(k, v)| (k, v * 2))
    });
    assert_eq!(plain.partitioner(), None);
    let summed = plain.reduce_by_key(|a: i64, b: i64| a + b);
    assert_eq!(sorted(summed.collect().unwrap()), want);
    assert_eq!(stages_of_last_job(&c), 3);
}

// Spark's textFile("a,a") reads `a` twice (Hadoop's FileInputFormat keeps the list as
// given): each listed path is read as many times as listed, in the order listed; a
// directory or glob expands as before (its files sorted, each once).
#[test]
fn text_file_reads_a_path_listed_twice_twice() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a: Vec<String> = (0..50).map(|i| format!("a line {i}")).collect();
    let b: Vec<String> = (0..30).map(|i| format!("b line {i}")).collect();
    std::fs::write(d.join("a.txt"), a.join("\n") + "\n").unwrap();
    std::fs::write(d.join("b.txt"), b.join("\n") + "\n").unwrap();
    let (pa, pb) = (d.join("a.txt"), d.join("b.txt"));
    let (pa, pb) = (pa.to_str().unwrap(), pb.to_str().unwrap());
    let c = ctx(2);

    let twice = c.text_file(&format!("{pa},{pa}"), 1).unwrap();
    assert_eq!(twice.collect().unwrap(), [a.clone(), a.clone()].concat());
    assert_eq!(twice.count().unwrap(), 100);

    // The order listed, each as often as listed, in any number of partitions.
    let want = [b.clone(), a.clone(), b.clone()].concat();
    for parts in [1, 3, 7] {
        let rdd = c.text_file(&format!("{pb}, {pa},{pb}"), parts).unwrap();
        assert_eq!(rdd.collect().unwrap(), want, "{parts} partitions");
    }
    // With positions: each copy's lines carry their own file and offsets.
    let with_pos = c
        .text_file_with_positions(&format!("{pa},{pa}"), 2)
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(with_pos.len(), 100);
    assert_eq!(
        with_pos.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>(),
        [a.clone(), a.clone()].concat()
    );

    // A directory or a glob expands as before: its files sorted, each once; listed
    // beside one of its files, that file comes twice.
    let ds = d.to_str().unwrap();
    assert_eq!(
        c.text_file(ds, 2).unwrap().collect().unwrap(),
        [a.clone(), b.clone()].concat()
    );
    assert_eq!(
        c.text_file(&format!("{ds}/*.txt,{pa}"), 2)
            .unwrap()
            .collect()
            .unwrap(),
        [a.clone(), b.clone(), a.clone()].concat()
    );
}
