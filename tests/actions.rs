//! Actions, checked against plain Rust; caching, persistence and stage skipping checked
//! through accumulators and job metrics.

mod common;

use std::collections::HashMap;

use common::*;
use ember::{Accumulator, EmberError, SaveOptions, StorageLevel};

fn nums(n: usize) -> Vec<i64> {
    let mut rng = SplitMix::new(99);
    (0..n).map(|_| rng.below(10_000) as i64 - 5000).collect()
}

#[test]
fn collect_and_count() {
    let c = ctx(2);
    let input = nums(10_000);
    for parts in [1, 3, 16] {
        let rdd = c.parallelize(input.clone(), parts);
        assert_eq!(rdd.collect().unwrap(), input);
        assert_eq!(rdd.count().unwrap(), 10_000);
    }
    assert_eq!(c.parallelize(Vec::<i64>::new(), 4).count().unwrap(), 0);
}

#[test]
fn first_and_reduce_on_empty_rdd_fail_with_empty_rdd() {
    let c = ctx(2);
    let empties = [
        c.empty::<i64>(),
        c.parallelize(Vec::<i64>::new(), 5),
        c.parallelize(nums(100), 4).filter(|_: &i64| false),
    ];
    for e in &empties {
        assert!(
            matches!(e.first(), Err(EmberError::EmptyRdd(_))),
            "first: {:?}",
            e.first()
        );
        assert!(
            matches!(e.reduce(|a, b| a + b), Err(EmberError::EmptyRdd(_))),
            "reduce: {:?}",
            e.reduce(|a, b| a + b)
        );
        assert!(e.take(5).unwrap().is_empty());
        assert!(e.take_ordered(3).unwrap().is_empty());
        assert!(e.top(3).unwrap().is_empty());
        assert_eq!(e.fold(0, |a, b| a + b).unwrap(), 0);
    }
}

#[test]
fn first_returns_first_record_in_partition_order() {
    let c = ctx(2);
    assert_eq!(c.parallelize(vec![5i64, 6, 7], 3).first().unwrap(), 5);
    // Leading partitions empty.
    assert_eq!(c.parallelize(vec![42i64], 8).first().unwrap(), 42);
    let rdd = c
        .parallelize((0..1000i64).collect(), 10)
        .filter(|x: &i64| *x >= 950);
    assert_eq!(rdd.first().unwrap(), 950);
}

#[test]
fn take_across_partitions() {
    let c = ctx(2);
    let input: Vec<i64> = (0..100).collect();
    let rdd = c.parallelize(input.clone(), 10);
    assert_eq!(rdd.take(0).unwrap(), Vec::<i64>::new());
    assert_eq!(rdd.take(1).unwrap(), vec![0]);
    assert_eq!(rdd.take(10).unwrap(), input[..10]);
    assert_eq!(rdd.take(35).unwrap(), input[..35]);
    assert_eq!(rdd.take(99).unwrap(), input[..99]);
    assert_eq!(rdd.take(100).unwrap(), input);
    assert_eq!(rdd.take(1000).unwrap(), input);

    // Sparse data: most partitions empty, including the first ones.
    let sparse = c
        .parallelize((0..1000i64).collect(), 20)
        .filter(|x: &i64| *x % 300 == 299);
    assert_eq!(sparse.take(2).unwrap(), vec![299, 599]);
    assert_eq!(sparse.take(10).unwrap(), vec![299, 599, 899]);

    // Bigger than a batch within one partition.
    let big = c.range(0, 20_000, 2);
    assert_eq!(big.take(9000).unwrap(), (0..9000).collect::<Vec<i64>>());
    assert_eq!(big.take(15_000).unwrap(), (0..15_000).collect::<Vec<i64>>());
}

#[test]
fn take_ordered_and_top() {
    let c = ctx(2);
    let input = nums(5000);
    let rdd = c.parallelize(input.clone(), 7);
    let asc = sorted(input.clone());
    let mut desc = asc.clone();
    desc.reverse();
    for n in [0usize, 1, 10, 2500, 4999, 5000, 6000] {
        assert_eq!(
            rdd.take_ordered(n).unwrap(),
            asc[..n.min(5000)],
            "take_ordered({n})"
        );
        assert_eq!(rdd.top(n).unwrap(), desc[..n.min(5000)], "top({n})");
    }
    // Duplicates and strings.
    let words: Vec<String> = (0..300).map(|i| format!("w{}", i % 17)).collect();
    let w = c.parallelize(words.clone(), 4);
    assert_eq!(w.take_ordered(20).unwrap(), sorted(words.clone())[..20]);
    let mut wd = sorted(words);
    wd.reverse();
    assert_eq!(w.top(20).unwrap(), wd[..20]);
}

#[test]
fn reduce_fold_aggregate() {
    let c = ctx(2);
    let input = nums(3000);
    for parts in [1, 4, 9] {
        let rdd = c.parallelize(input.clone(), parts);
        assert_eq!(rdd.reduce(|a, b| a + b).unwrap(), input.iter().sum::<i64>());
        assert_eq!(
            rdd.reduce(|a: i64, b: i64| a.max(b)).unwrap(),
            *input.iter().max().unwrap()
        );
        assert_eq!(
            rdd.fold(0, |a, b| a + b).unwrap(),
            input.iter().sum::<i64>()
        );
        assert_eq!(
            rdd.fold(i64::MAX, |a: i64, b: i64| a.min(b)).unwrap(),
            *input.iter().min().unwrap()
        );
        let (s, n) = rdd
            .aggregate(
                (0i64, 0u64),
                |(s, n): (i64, u64), x: i64| (s + x, n + 1),
                |a: (i64, u64), b: (i64, u64)| (a.0 + b.0, a.1 + b.1),
            )
            .unwrap();
        assert_eq!((s, n), (input.iter().sum::<i64>(), 3000));
        // aggregate to a different type: the set of distinct residues mod 10.
        let residues = rdd
            .aggregate(
                Vec::<i64>::new(),
                |mut v: Vec<i64>, x: i64| {
                    let r = x.rem_euclid(10);
                    if !v.contains(&r) {
                        v.push(r);
                    }
                    v
                },
                |mut a: Vec<i64>, b: Vec<i64>| {
                    for r in b {
                        if !a.contains(&r) {
                            a.push(r);
                        }
                    }
                    a
                },
            )
            .unwrap();
        assert_eq!(
            sorted(residues),
            ref_distinct(&input.iter().map(|x| x.rem_euclid(10)).collect::<Vec<_>>())
        );
    }
    // A single element.
    assert_eq!(
        c.parallelize(vec![7i64], 3).reduce(|a, b| a * b).unwrap(),
        7
    );
}

#[test]
fn fold_with_non_neutral_zero_follows_documented_semantics() {
    // "Folds each partition starting from zero, then folds the partition results
    // starting from zero": zero is applied once per partition and once more.
    let c = ctx(2);
    let rdd = c.parallelize((1..=10i64).collect(), 3);
    assert_eq!(rdd.fold(1, |a, b| a + b).unwrap(), 55 + 4);
    let agg = rdd
        .aggregate(1i64, |a, x: i64| a + x, |a, b| a + b)
        .unwrap();
    assert_eq!(agg, 55 + 4);
}

#[test]
fn foreach_with_accumulator() {
    let c = ctx(2);
    let input = nums(4000);
    let sum: Accumulator<i64> = c.accumulator("sum");
    let count: Accumulator<u64> = c.accumulator("count");
    c.parallelize(input.clone(), 6)
        .foreach_with(
            (sum.clone(), count.clone()),
            |(s, n): &(Accumulator<i64>, Accumulator<u64>), x: i64| {
                s.add(x);
                n.add(1);
            },
        )
        .unwrap();
    assert_eq!(sum.value(), input.iter().sum::<i64>());
    assert_eq!(count.value(), 4000);
    // A second run adds again.
    c.parallelize(vec![1i64, 2, 3], 2)
        .foreach_with(sum.clone(), |s: &Accumulator<i64>, x: i64| s.add(x))
        .unwrap();
    assert_eq!(sum.value(), input.iter().sum::<i64>() + 6);
    // Vec accumulator collects every record.
    let seen: Accumulator<Vec<i64>> = c.accumulator("seen");
    c.parallelize(input.clone(), 3)
        .foreach_with(seen.clone(), |s: &Accumulator<Vec<i64>>, x: i64| {
            s.add(vec![x])
        })
        .unwrap();
    assert_eq!(sorted(seen.value()), sorted(input));
    // Plain foreach runs (and can fail the job only by panicking).
    c.parallelize(vec![1i64, 2], 2)
        .foreach(|x: i64| assert!(x > 0))
        .unwrap();
}

#[test]
fn foreach_panic_fails_the_job() {
    let c = ctx(2);
    let r = c
        .parallelize((0..100i64).collect(), 4)
        .foreach(|x: i64| assert!(x != 77, "boom at 77"));
    match r {
        Err(EmberError::TaskFailed { message, .. }) => {
            assert!(message.contains("boom at 77"), "{message}")
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
    // The context is still usable afterwards.
    assert_eq!(c.parallelize(vec![1i64, 2, 3], 2).count().unwrap(), 3);
}

#[test]
fn count_by_key_count_by_value_collect_as_map_lookup() {
    let c = ctx(2);
    let pairs = skewed_pairs(5, 3000, 40);
    let rdd = c.parallelize(pairs.clone(), 5);
    assert_eq!(
        rdd.count_by_key().unwrap(),
        ref_counts(pairs.iter().map(|p| p.0))
    );

    let words: Vec<String> = (0..2000).map(|i| format!("w{}", (i * i) % 53)).collect();
    assert_eq!(
        c.parallelize(words.clone(), 3).count_by_value().unwrap(),
        ref_counts(words.iter().cloned())
    );
    assert!(c
        .parallelize(Vec::<u8>::new(), 2)
        .count_by_value()
        .unwrap()
        .is_empty());

    // Unique keys: exactly the map.
    let unique: Vec<(String, i64)> = (0..500).map(|i| (format!("k{i}"), i * 2)).collect();
    let expected: HashMap<String, i64> = unique.iter().cloned().collect();
    assert_eq!(c.parallelize(unique, 4).collect_as_map().unwrap(), expected);
    // Duplicate keys: one of that key's values.
    let m = rdd.collect_as_map().unwrap();
    let groups = ref_group(&pairs);
    assert_eq!(m.len(), groups.len());
    for (k, v) in &m {
        assert!(
            groups[k].contains(v),
            "collect_as_map gave {k} -> {v}, not one of its values"
        );
    }

    for key in [0u64, 1, 17, 39] {
        let expected: Vec<i64> = pairs.iter().filter(|p| p.0 == key).map(|p| p.1).collect();
        assert_eq!(rdd.lookup(key).unwrap(), expected, "lookup({key})");
    }
    assert!(rdd.lookup(12345).unwrap().is_empty());
}

fn temp_path(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("ember-test-{tag}-{}-{nanos}", std::process::id()))
}

fn read_parts(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("part-"))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for n in names {
        let text = std::fs::read_to_string(dir.join(n)).unwrap();
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

#[test]
fn save_as_text_file_writes_all_records() {
    let c = ctx(2);
    let out = temp_path("save");
    let input = nums(2000);
    let rdd = c.parallelize(input.clone(), 4);
    rdd.save_as_text_file(&out).unwrap();
    assert!(out.join("_SUCCESS").exists());
    let lines = read_parts(&out);
    // Part files in order hold the records in order.
    assert_eq!(
        lines,
        input.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    );

    // Writing again fails without overwrite, succeeds with it.
    assert!(matches!(
        rdd.save_as_text_file(&out),
        Err(EmberError::OutputExists { .. })
    ));
    c.parallelize(vec!["a".to_string(), "b".to_string()], 2)
        .save_as_text_file_with(&out, SaveOptions { overwrite: true })
        .unwrap();
    assert_eq!(read_parts(&out), vec!["a", "b"]);
    std::fs::remove_dir_all(&out).unwrap();

    // Empty RDD: empty output, still marked successful.
    let empty_out = temp_path("save-empty");
    c.parallelize(Vec::<i64>::new(), 3)
        .save_as_text_file(&empty_out)
        .unwrap();
    assert!(empty_out.join("_SUCCESS").exists());
    assert!(read_parts(&empty_out).is_empty());
    std::fs::remove_dir_all(&empty_out).unwrap();
}

#[test]
fn cache_computes_each_record_once() {
    let c = ctx(2);
    let input = nums(5000);
    let evals: Accumulator<u64> = c.accumulator("evals");
    let rdd = c
        .parallelize(input.clone(), 4)
        .map_with(evals.clone(), |a: &Accumulator<u64>, x: i64| {
            a.add(1);
            x * 2
        })
        .cache();
    let expected: Vec<i64> = input.iter().map(|x| x * 2).collect();
    assert_eq!(rdd.count().unwrap(), 5000);
    assert_eq!(evals.value(), 5000);
    assert_eq!(rdd.collect().unwrap(), expected);
    assert_eq!(evals.value(), 5000, "second action recomputed a cached RDD");
    // A child of the cached RDD reads the cache too.
    assert_eq!(
        rdd.map(|x: i64| x + 1).reduce(|a, b| a + b).unwrap(),
        expected.iter().map(|x| x + 1).sum::<i64>()
    );
    assert_eq!(evals.value(), 5000, "child of a cached RDD recomputed it");

    // unpersist: recomputed on every action again.
    rdd.unpersist();
    assert_eq!(rdd.collect().unwrap(), expected);
    assert_eq!(evals.value(), 10_000, "unpersisted RDD was not recomputed");
    assert_eq!(rdd.count().unwrap(), 5000);
    assert_eq!(evals.value(), 15_000);
}

#[test]
fn persist_disk_computes_each_record_once() {
    let c = ctx(2);
    let input: Vec<String> = (0..6000).map(|i| format!("s{}", i * 7)).collect();
    let evals: Accumulator<u64> = c.accumulator("evals");
    let rdd = c
        .parallelize(input.clone(), 3)
        .map_with(evals.clone(), |a: &Accumulator<u64>, s: String| {
            a.add(1);
            (s.len(), s)
        })
        .persist(StorageLevel::Disk);
    let expected: Vec<(usize, String)> = input.iter().map(|s| (s.len(), s.clone())).collect();
    assert_eq!(rdd.collect().unwrap(), expected);
    assert_eq!(evals.value(), 6000);
    assert_eq!(rdd.collect().unwrap(), expected);
    assert_eq!(rdd.count().unwrap(), 6000);
    assert_eq!(evals.value(), 6000, "disk-persisted RDD was recomputed");
    // Shuffle reading from the persisted RDD.
    let counts = sorted(
        rdd.map_values(|_: String| 1u64)
            .reduce_by_key(|a, b| a + b)
            .collect()
            .unwrap(),
    );
    let mut exp: Vec<(usize, u64)> = ref_counts(input.iter().map(|s| s.len()))
        .into_iter()
        .collect();
    exp.sort();
    assert_eq!(counts, exp);
    assert_eq!(evals.value(), 6000);
    rdd.unpersist();
    assert_eq!(rdd.count().unwrap(), 6000);
    assert_eq!(evals.value(), 12_000, "unpersisted RDD was not recomputed");
}

#[test]
fn cache_of_a_partially_consumed_rdd_is_complete() {
    // take() computes only some partitions (and stops early); the cache must not keep
    // a partial partition.
    let c = ctx(2);
    let evals: Accumulator<u64> = c.accumulator("evals");
    let rdd = c
        .range(0, 20_000, 4)
        .map_with(evals.clone(), |a: &Accumulator<u64>, x: i64| {
            a.add(1);
            x
        })
        .cache();
    assert_eq!(rdd.take(3).unwrap(), vec![0, 1, 2]);
    assert_eq!(rdd.collect().unwrap(), (0..20_000).collect::<Vec<i64>>());
    assert_eq!(rdd.count().unwrap(), 20_000);
    let after = evals.value();
    assert_eq!(rdd.count().unwrap(), 20_000);
    assert_eq!(evals.value(), after, "fully cached RDD recomputed");
    assert!(
        after <= 20_000 + 5000,
        "computed {after} records for a 20000-record cached RDD"
    );
}

#[test]
fn second_action_on_shuffled_rdd_skips_map_stage() {
    let c = ctx(2);
    let pairs = random_pairs(3, 5000, 100);
    let evals: Accumulator<u64> = c.accumulator("evals");
    let reduced = c
        .parallelize(pairs.clone(), 4)
        .map_with(evals.clone(), |a: &Accumulator<u64>, p: (u64, i64)| {
            a.add(1);
            p
        })
        .reduce_by_key(|a, b| a + b);
    let expected = ref_reduce(&pairs, |a, b| a + b);
    assert_eq!(sorted(reduced.collect().unwrap()), expected);
    let first = c.last_job_metrics().unwrap();
    assert_eq!(first.stages_run, 2);
    assert_eq!(first.stages_skipped, 0);
    assert!(first.totals.shuffle_records_written > 0);
    assert_eq!(evals.value(), 5000);

    assert_eq!(sorted(reduced.collect().unwrap()), expected);
    let second = c.last_job_metrics().unwrap();
    assert!(second.stages_skipped >= 1, "{second:?}");
    assert_eq!(second.stages_run, 1, "{second:?}");
    assert_eq!(evals.value(), 5000, "map stage ran again");

    // A different action on a child also reuses the shuffle output.
    assert_eq!(reduced.count().unwrap(), expected.len() as u64);
    assert!(c.last_job_metrics().unwrap().stages_skipped >= 1);
    assert_eq!(evals.value(), 5000);
}

#[test]
fn job_metrics_count_records() {
    let c = ctx(2);
    let n = c
        .parallelize(nums(1234), 3)
        .map(|x: i64| x + 1)
        .count()
        .unwrap();
    assert_eq!(n, 1234);
    let m = c.last_job_metrics().unwrap();
    assert_eq!(m.tasks, 3);
    assert_eq!(m.totals.records_in, 1234);
    assert_eq!(m.totals.spill_count, 0);
}

/// A shuffle's reducers count every record they read (the reader counts a block at a
/// time): as many as the map side wrote, whether the reduce side consumes its input whole
/// (a sort) or record by record down a pipeline (a repartition then a count).
#[test]
fn job_metrics_count_every_shuffle_record_read() {
    let c = ctx(2);
    let pairs: Vec<(i64, i64)> = (0..5000).map(|i| ((i * 7919) % 1013, i)).collect();
    let sorted = c
        .parallelize(pairs.clone(), 4)
        .sort_by_key_into(true, 3)
        .count()
        .unwrap();
    assert_eq!(sorted, 5000);
    let m = c.last_job_metrics().unwrap();
    assert_eq!(m.totals.shuffle_records_written, 5000);
    assert_eq!(m.totals.shuffle_records_read, 5000);
    let n = c.parallelize(pairs, 4).repartition(5).count().unwrap();
    assert_eq!(n, 5000);
    let m = c.last_job_metrics().unwrap();
    assert_eq!(m.totals.shuffle_records_written, 5000);
    assert_eq!(m.totals.shuffle_records_read, 5000);
    // records_in: the map tasks' 5000 source records and the reducers' 5000.
    assert_eq!(m.totals.records_in, 10_000);
}

/// Partitions `take(n)` computes over 100 partitions of 10 records, counted by an
/// accumulator that every computed partition adds 1 to.
fn partitions_computed_by_take(n: usize) -> (Vec<u32>, u64) {
    let c = ctx(2);
    let computed: Accumulator<u64> = c.accumulator("partitions computed");
    let rdd = c
        .parallelize((0..1000u32).collect::<Vec<u32>>(), 100)
        .map_partitions_with_index_with(computed.clone(), |acc, _, it: ember::Records<u32>| {
            acc.add(1);
            it
        });
    let got = rdd.take(n).unwrap();
    (got, computed.value())
}

// Spark's take: 1 partition, then an estimate from what was found, capped at 4x.
#[test]
fn take_scans_as_spark_does_never_computing_partitions_it_does_not_need() {
    // take(25): 1 partition gives 10; ceil(1.5 * 15 * 1 / 10) = 3 more: 4 in all.
    let (got, computed) = partitions_computed_by_take(25);
    assert_eq!(got, (0..25).collect::<Vec<u32>>());
    assert_eq!(computed, 4);
    // take(10): the first partition is enough.
    assert_eq!(partitions_computed_by_take(10).1, 1);
    // take(100): 1, then min(ceil(1.5 * 90 * 1 / 10), 4) = 4, then
    // min(ceil(1.5 * 50 * 5 / 50), 20) = 8: 13 partitions.
    let (got, computed) = partitions_computed_by_take(100);
    assert_eq!(got, (0..100).collect::<Vec<u32>>());
    assert_eq!(computed, 13);
}

// RDDSuite "toLocalIterator": all records, in partition order, one partition per job.
#[test]
fn to_local_iterator_yields_every_record_one_partition_at_a_time() {
    let c = ctx(2);
    let computed: Accumulator<u64> = c.accumulator("partitions computed");
    let rdd = c
        .parallelize((0..100u32).collect::<Vec<u32>>(), 10)
        .map_partitions_with_index_with(computed.clone(), |acc, _, it: ember::Records<u32>| {
            acc.add(1);
            it
        });
    let mut it = rdd.to_local_iterator();
    let first: Vec<u32> = it.by_ref().take(15).map(|r| r.unwrap()).collect();
    assert_eq!(first, (0..15).collect::<Vec<u32>>());
    assert_eq!(
        computed.value(),
        2,
        "only the partitions reached so far were computed"
    );
    let rest: Vec<u32> = it.map(|r| r.unwrap()).collect();
    assert_eq!(rest, (15..100).collect::<Vec<u32>>());
    assert_eq!(computed.value(), 10);
    assert_eq!(c.empty::<u32>().to_local_iterator().count(), 0);
}

// RDDSuite "treeAggregate" / "treeReduce": the same as aggregate and reduce at any depth.
#[test]
fn tree_aggregate_and_tree_reduce_equal_the_flat_ones() {
    let c = ctx(2);
    let rdd = c.parallelize((-1000i64..1000).collect::<Vec<i64>>(), 10);
    for depth in 1..=10 {
        let sum = rdd
            .tree_aggregate(0i64, |acc, x| acc + x, |a, b| a + b, depth)
            .unwrap();
        assert_eq!(sum, (-1000i64..1000).sum::<i64>(), "depth {depth}");
        assert_eq!(rdd.tree_reduce(|a, b| a.max(b), depth).unwrap(), 999);
    }
    assert!(matches!(
        rdd.tree_reduce(|a, b| a + b, 0),
        Err(EmberError::InvalidArgument(_))
    ));
    assert!(matches!(
        c.parallelize(Vec::<i64>::new(), 3)
            .tree_reduce(|a, b| a + b, 2),
        Err(EmberError::EmptyRdd("tree_reduce"))
    ));
}
