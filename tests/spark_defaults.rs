//! Spark's defaults for the common operators: the short name takes Spark's default
//! partition count (`sortByKey`/`sortBy`: the parent's; the by-key family, `groupBy`,
//! the joins and `intersection`: Spark's `defaultPartitioner`), the `_into` variant the
//! count given. Every result is compared with a plain-Rust computation of the same
//! answer, and every partition count with the rule Spark states.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{ctx, random_pairs, sorted, sorted_groups};
use ember::{Conf, Context, EmberError, DEFAULT_EXECUTOR_MEMORY};

/// A local context whose shuffles default to `n` partitions (`spark.default.parallelism`).
fn ctx_parallelism(n: usize) -> Context {
    let mut conf = Conf::local(2, DEFAULT_EXECUTOR_MEMORY);
    conf.progress = false;
    conf.default_parallelism = Some(n);
    Context::with_conf(conf).expect("local context")
}

fn sums(data: &[(u64, i64)]) -> Vec<(u64, i64)> {
    let mut m = BTreeMap::new();
    for &(k, v) in data {
        *m.entry(k).or_insert(0) += v;
    }
    m.into_iter().collect()
}

fn groups(data: &[(u64, i64)]) -> Vec<(u64, Vec<i64>)> {
    let mut m: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for &(k, v) in data {
        m.entry(k).or_default().push(v);
    }
    m.into_iter()
        .map(|(k, mut vs)| {
            vs.sort();
            (k, vs)
        })
        .collect()
}

#[test]
fn sort_by_key_defaults_to_the_parents_partition_count_and_returns_an_rdd() {
    let c = ctx(2);
    let data = random_pairs(31, 5000, 100_000);
    for parts in [1usize, 3, 7] {
        for ascending in [true, false] {
            let rdd = c.parallelize(data.clone(), parts);
            // No partition count, no `?`: the chain reads as Spark's `sortByKey(asc)`.
            let s = rdd.sort_by_key(ascending);
            assert_eq!(s.num_partitions(), parts, "asc={ascending}");
            assert_eq!(s.partitioner().unwrap().num_partitions(), parts);
            let got = s.collect().unwrap();
            let mut want = data.clone();
            want.sort_by_key(|p| p.0);
            if !ascending {
                want.reverse();
            }
            let keys = |v: &[(u64, i64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
            assert_eq!(keys(&got), keys(&want));
            assert_eq!(sorted(got), sorted(data.clone()));
        }
    }
    // `_into` takes the count, as Spark's `sortByKey(asc, n)`.
    let s = c.parallelize(data.clone(), 3).sort_by_key_into(true, 5);
    assert_eq!(s.num_partitions(), 5);
    let got: Vec<u64> = s.keys().collect().unwrap();
    let mut want: Vec<u64> = data.iter().map(|p| p.0).collect();
    want.sort();
    assert_eq!(got, want);
    // As Spark, fewer distinct keys than partitions give fewer ranges.
    let few = c.parallelize(vec![(1u8, 'a'), (2, 'b'), (1, 'c')], 6);
    let s = few.sort_by_key(true);
    assert!(s.num_partitions() <= 3, "{}", s.num_partitions());
    assert_eq!(s.keys().collect().unwrap(), vec![1, 1, 2]);
}

#[test]
fn sort_by_defaults_to_the_parents_partition_count() {
    let c = ctx(2);
    let words: Vec<String> = (0..2000)
        .map(|i| format!("w{}", (i * 7919) % 2000))
        .collect();
    let rdd = c.parallelize(words.clone(), 4);
    let s = rdd.sort_by(|w: &String| w.clone(), false);
    assert_eq!(s.num_partitions(), 4);
    let mut want = words.clone();
    want.sort();
    want.reverse();
    assert_eq!(s.collect().unwrap(), want);
    let s = rdd.sort_by_into(|w: &String| w.len(), true, 2);
    assert!(s.num_partitions() <= 2);
    let got = s.collect().unwrap();
    assert!(got.windows(2).all(|w| w[0].len() <= w[1].len()));
    assert_eq!(sorted(got), sorted(words));
}

#[test]
fn a_failing_sampling_job_fails_every_action_of_the_sort_naming_its_call_site() {
    let c = ctx(2);
    let bad = c
        .parallelize((0..100u32).collect::<Vec<_>>(), 2)
        .map(|x: u32| {
            if x == 77 {
                panic!("record 77 is bad");
            }
            (x, x)
        });
    let line = line!() + 1;
    let s = bad.sort_by_key(true);
    let e = s.map(|(k, _): (u32, u32)| k).count().unwrap_err();
    let m = match &e {
        EmberError::InvalidArgument(m) => m.clone(),
        other => panic!("expected an invalid-argument error, got {other}"),
    };
    assert!(
        m.starts_with(&format!("sort_by_key at tests/spark_defaults.rs:{line}:")),
        "{m}"
    );
    assert!(m.contains("sampling the keys"), "{m}");
    assert!(m.contains("record 77 is bad"), "{m}");
    // The error stays with the RDD: a second action fails the same way.
    assert_eq!(s.collect().unwrap_err().to_string(), e.to_string());
}

#[test]
fn key_wise_aggregations_take_spark_default_partitioner() {
    let data = random_pairs(32, 4000, 300);
    let want_sums = sums(&data);
    let want_groups = groups(&data);
    // Without a configured default: the parent's partition count; with one: that.
    for (c, want_n) in [(ctx(2), 5usize), (ctx_parallelism(7), 7)] {
        let rdd = c.parallelize(data.clone(), 5);
        let reduced = rdd.reduce_by_key(|a, b| a + b);
        let folded = rdd.fold_by_key(0, |a, b| a + b);
        let aggregated = rdd.aggregate_by_key(0i64, |a, v| a + v, |a, b| a + b);
        let combined = rdd.combine_by_key(|v: i64| v, |c: i64, v: i64| c + v, |a, b| a + b);
        let with_state = rdd.combine_by_key_with(
            2i64,
            |m: &i64, v: i64| v * m,
            |m: &i64, c: i64, v: i64| c + v * m,
            |_: &i64, a: i64, b: i64| a + b,
        );
        let grouped = rdd.group_by_key();
        for r in [&reduced, &folded, &aggregated, &combined] {
            assert_eq!(r.num_partitions(), want_n, "{}", r.name());
            assert_eq!(sorted(r.collect().unwrap()), want_sums, "{}", r.name());
        }
        assert_eq!(with_state.num_partitions(), want_n);
        let doubled: Vec<(u64, i64)> = want_sums.iter().map(|&(k, s)| (k, 2 * s)).collect();
        assert_eq!(sorted(with_state.collect().unwrap()), doubled);
        assert_eq!(grouped.num_partitions(), want_n);
        assert_eq!(sorted_groups(grouped.collect().unwrap()), want_groups);

        // `group_by(f)`: Spark's `groupBy(f)` uses the default partitioner too.
        let by_parity = c
            .parallelize((0..1000u64).collect::<Vec<_>>(), 5)
            .group_by(|x: &u64| x % 3);
        assert_eq!(by_parity.num_partitions(), want_n);
        let mut want: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for x in 0..1000u64 {
            want.entry(x % 3).or_default().push(x);
        }
        assert_eq!(
            sorted_groups(by_parity.collect().unwrap()),
            want.into_iter().collect::<Vec<_>>()
        );

        // `flat_map_reduce_by_key` is `flat_map(..).reduce_by_key(..)`, counts included.
        let lines = c.parallelize(vec!["a b a".to_string(), "c a".into(), "b".into()], 5);
        let counts = lines.flat_map_reduce_by_key(
            |l: &String, out: &mut ember::Emit<str, u64>| {
                for w in l.split_whitespace() {
                    out.emit(w, 1)
                }
            },
            |a, b| a + b,
        );
        assert_eq!(counts.num_partitions(), want_n);
        assert_eq!(
            sorted(counts.collect().unwrap()),
            vec![("a".to_string(), 3), ("b".into(), 2), ("c".into(), 1)]
        );
    }
}

#[test]
fn into_variants_take_the_partition_count() {
    let c = ctx_parallelism(7);
    let data = random_pairs(33, 3000, 200);
    let want_sums = sums(&data);
    let rdd = c.parallelize(data.clone(), 4);
    let reduced = rdd.reduce_by_key_into(|a, b| a + b, 3);
    let folded = rdd.fold_by_key_into(0, |a, b| a + b, 9);
    let aggregated = rdd.aggregate_by_key_into(0i64, |a, v| a + v, |a, b| a + b, 2);
    let combined = rdd.combine_by_key_into(|v: i64| v, |c: i64, v: i64| c + v, |a, b| a + b, 11);
    for (r, n) in [
        (&reduced, 3),
        (&folded, 9),
        (&aggregated, 2),
        (&combined, 11),
    ] {
        assert_eq!(r.num_partitions(), n, "{}", r.name());
        assert_eq!(r.partitioner().unwrap().num_partitions(), n);
        assert_eq!(sorted(r.collect().unwrap()), want_sums, "{}", r.name());
    }
    let counts = c
        .parallelize(vec!["x y".to_string(), "y".into()], 2)
        .flat_map_reduce_by_key_into(
            |l: &String, out: &mut ember::Emit<str, u64>| {
                for w in l.split_whitespace() {
                    out.emit(w, 1)
                }
            },
            |a, b| a + b,
            6,
        );
    assert_eq!(counts.num_partitions(), 6);
    assert_eq!(
        sorted(counts.collect().unwrap()),
        vec![("x".to_string(), 1), ("y".into(), 2)]
    );
    // A 0 count is the usual invalid-argument error at the first action.
    let e = rdd
        .fold_by_key_into(0, |a, b| a + b, 0)
        .count()
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot shuffle 4 partitions into 0"),
        "{e}"
    );
}

#[test]
fn joins_and_set_operators_take_spark_defaults_and_counts() {
    let c = ctx_parallelism(6);
    let left = random_pairs(34, 800, 60);
    let right = random_pairs(35, 500, 90);
    let l = c.parallelize(left.clone(), 3);
    let r = c.parallelize(right.clone(), 4);
    let right_keys: BTreeSet<u64> = right.iter().map(|p| p.0).collect();
    let left_keys: BTreeSet<u64> = left.iter().map(|p| p.0).collect();

    let mut want_left = Vec::new();
    for &(k, v) in &left {
        let ws: Vec<i64> = right.iter().filter(|p| p.0 == k).map(|p| p.1).collect();
        if ws.is_empty() {
            want_left.push((k, (v, None)));
        }
        want_left.extend(ws.into_iter().map(|w| (k, (v, Some(w)))));
    }
    let mut want_right = Vec::new();
    for &(k, w) in &right {
        let vs: Vec<i64> = left.iter().filter(|p| p.0 == k).map(|p| p.1).collect();
        if vs.is_empty() {
            want_right.push((k, (None, w)));
        }
        want_right.extend(vs.into_iter().map(|v| (k, (Some(v), w))));
    }
    let mut want_full: Vec<(u64, ember::OuterPair<i64, i64>)> = want_left
        .iter()
        .map(|&(k, (v, w))| (k, (Some(v), w)))
        .collect();
    want_full.extend(
        right
            .iter()
            .filter(|p| !left_keys.contains(&p.0))
            .map(|&(k, w)| (k, (None, Some(w)))),
    );
    let want_sub: Vec<(u64, i64)> = left
        .iter()
        .filter(|p| !right_keys.contains(&p.0))
        .copied()
        .collect();

    // Defaults: the configured default parallelism (neither side has a partitioner).
    let lo = l.left_outer_join(&r);
    let ro = l.right_outer_join(&r);
    let fo = l.full_outer_join(&r);
    assert_eq!(
        (
            lo.num_partitions(),
            ro.num_partitions(),
            fo.num_partitions()
        ),
        (6, 6, 6)
    );
    assert_eq!(sorted(lo.collect().unwrap()), sorted(want_left.clone()));
    assert_eq!(sorted(ro.collect().unwrap()), sorted(want_right.clone()));
    assert_eq!(sorted(fo.collect().unwrap()), sorted(want_full.clone()));
    // Spark's subtractByKey: this RDD's partition count.
    let sb = l.subtract_by_key(&r);
    assert_eq!(sb.num_partitions(), 3);
    assert_eq!(sorted(sb.collect().unwrap()), sorted(want_sub.clone()));

    // `_into`: the count given.
    let lo = l.left_outer_join_into(&r, 2);
    let ro = l.right_outer_join_into(&r, 5);
    let fo = l.full_outer_join_into(&r, 8);
    let sb = l.subtract_by_key_into(&r, 9);
    assert_eq!(
        (
            lo.num_partitions(),
            ro.num_partitions(),
            fo.num_partitions(),
            sb.num_partitions()
        ),
        (2, 5, 8, 9)
    );
    assert_eq!(sorted(lo.collect().unwrap()), sorted(want_left));
    assert_eq!(sorted(ro.collect().unwrap()), sorted(want_right));
    assert_eq!(sorted(fo.collect().unwrap()), sorted(want_full));
    assert_eq!(sorted(sb.collect().unwrap()), sorted(want_sub));

    // subtract / intersection of plain records.
    let a: Vec<u32> = (0..500).map(|i| i % 97).collect();
    let b: Vec<u32> = (0..300).map(|i| (i * 3) % 120).collect();
    let ra = c.parallelize(a.clone(), 3);
    let rb = c.parallelize(b.clone(), 5);
    let bset: BTreeSet<u32> = b.iter().copied().collect();
    let aset: BTreeSet<u32> = a.iter().copied().collect();
    let want_minus: Vec<u32> = a.iter().filter(|x| !bset.contains(x)).copied().collect();
    let want_both: Vec<u32> = aset.intersection(&bset).copied().collect();
    let minus = ra.subtract(&rb);
    assert_eq!(minus.num_partitions(), 3, "Spark: this RDD's count");
    assert_eq!(sorted(minus.collect().unwrap()), sorted(want_minus.clone()));
    let minus = ra.subtract_into(&rb, 4);
    assert_eq!(minus.num_partitions(), 4);
    assert_eq!(sorted(minus.collect().unwrap()), sorted(want_minus));
    let both = ra.intersection(&rb);
    assert_eq!(both.num_partitions(), 6, "Spark: the default partitioner");
    assert_eq!(sorted(both.collect().unwrap()), want_both);
    let both = ra.intersection_into(&rb, 2);
    assert_eq!(both.num_partitions(), 2);
    assert_eq!(sorted(both.collect().unwrap()), want_both);
}

#[test]
fn defaults_reuse_an_existing_partitioner_as_spark_does() {
    // A parent hash-partitioned into 4: the default partitioner is its own, so the
    // aggregation needs no shuffle and keeps 4 partitions, even with a configured
    // default of 7 (Spark's defaultPartitioner prefers an existing partitioner).
    let c = ctx_parallelism(7);
    let data = random_pairs(36, 2000, 150);
    let parted = c.parallelize(data.clone(), 3).partition_by(4);
    let reduced = parted.fold_by_key(0, |a, b| a + b);
    assert_eq!(reduced.num_partitions(), 4);
    assert_eq!(reduced.partitioner(), parted.partitioner());
    assert_eq!(sorted(reduced.collect().unwrap()), sums(&data));
    let grouped = parted.aggregate_by_key(
        Vec::new(),
        |mut a: Vec<i64>, v| {
            a.push(v);
            a
        },
        |mut a, b| {
            a.extend(b);
            a
        },
    );
    assert_eq!(grouped.num_partitions(), 4);
    assert_eq!(sorted_groups(grouped.collect().unwrap()), groups(&data));
    // `group_by` on a partitioned RDD: as many partitions as it has (Spark's groupBy
    // takes the parent's partitioner's count).
    let by = parted.group_by(|p: &(u64, i64)| p.0 % 5);
    assert_eq!(by.num_partitions(), 4);
    let total: usize = by
        .collect()
        .unwrap()
        .iter()
        .map(|(k, vs)| {
            assert!(vs.iter().all(|p| p.0 % 5 == *k));
            vs.len()
        })
        .sum();
    assert_eq!(total, data.len());
}
