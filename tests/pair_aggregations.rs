//! Key-value aggregations (map_values, keys/values, reduce/combine/fold/aggregate/group by
//! key, distinct, partition_by, repartition, partition counts of the shuffle operators and
//! narrow operators over shuffle outputs), each checked against a plain-Rust reference, with
//! duplicate keys, skewed keys, a single partition and empty partitions.

mod common;

use std::collections::HashMap;

use common::*;
use proptest::prelude::*;

/// A panic in the reduce function fails the job with its message, for a combiner held
/// as itself (a number) and one held as an `Option` (a string), on the map side and the
/// reduce side; the context then runs the next job.
#[test]
fn a_panicking_reduce_function_fails_the_job_and_leaves_the_context_usable() {
    let c = ctx(2);
    let pairs: Vec<(u64, u64)> = (0..4000u64).map(|i| (i % 50, i)).collect();
    let err = c
        .parallelize(pairs.clone(), 4)
        .reduce_by_key(|a: u64, b: u64| {
            if a + b > 100_000 {
                panic!("sum past the limit: {a} + {b}");
            }
            a + b
        })
        .collect()
        .unwrap_err()
        .to_string();
    assert!(err.contains("sum past the limit"), "{err}");
    let strings: Vec<(u64, String)> = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let err = c
        .parallelize(strings, 4)
        .reduce_by_key(|a: String, b: String| {
            if a.len() + b.len() > 200 {
                panic!("string past the limit: {} bytes", a.len() + b.len());
            }
            a + &b
        })
        .collect()
        .unwrap_err()
        .to_string();
    assert!(err.contains("string past the limit"), "{err}");
    let mut sums = c
        .parallelize(pairs.clone(), 4)
        .reduce_by_key(|a: u64, b: u64| a + b)
        .collect()
        .unwrap();
    sums.sort();
    let mut want: HashMap<u64, u64> = HashMap::new();
    for (k, v) in &pairs {
        *want.entry(*k).or_default() += v;
    }
    let mut want: Vec<(u64, u64)> = want.into_iter().collect();
    want.sort();
    assert_eq!(sums, want);
}

#[test]
fn map_values_flat_map_values_keys_values() {
    let c = ctx(2);
    let input = random_pairs(1, 2000, 50);
    let rdd = c.parallelize(input.clone(), 4);

    let mv = rdd.map_values(|v: i64| v * 10).collect().unwrap();
    assert_eq!(
        mv,
        input.iter().map(|&(k, v)| (k, v * 10)).collect::<Vec<_>>()
    );

    let fmv = rdd
        .flat_map_values(|v: i64| (0..v.rem_euclid(3)).map(move |i| v + i).collect::<Vec<_>>())
        .collect()
        .unwrap();
    let expected: Vec<(u64, i64)> = input
        .iter()
        .flat_map(|&(k, v)| (0..v.rem_euclid(3)).map(move |i| (k, v + i)))
        .collect();
    assert_eq!(fmv, expected);

    assert_eq!(
        rdd.keys().collect().unwrap(),
        input.iter().map(|p| p.0).collect::<Vec<_>>()
    );
    assert_eq!(
        rdd.values().collect().unwrap(),
        input.iter().map(|p| p.1).collect::<Vec<_>>()
    );
}

#[test]
fn reduce_by_key_matches_reference() {
    let c = ctx(2);
    for (parts, data) in [
        (4, random_pairs(2, 5000, 100)),
        (1, random_pairs(3, 3000, 30)),
        (6, skewed_pairs(4, 8000, 50)),
        (8, random_pairs(5, 5, 3)), // empty partitions
        (3, Vec::new()),
    ] {
        let rdd = c.parallelize(data.clone(), parts);
        let got = sorted(rdd.reduce_by_key(|a, b| a + b).collect().unwrap());
        assert_eq!(got, ref_reduce(&data, |a, b| a + b), "parts={parts}");
        let max = sorted(
            rdd.reduce_by_key(|a: i64, b: i64| a.max(b))
                .collect()
                .unwrap(),
        );
        assert_eq!(max, ref_reduce(&data, |a: i64, b: i64| a.max(b)));

        let into = rdd.reduce_by_key_into(|a, b| a + b, 3);
        assert_eq!(into.num_partitions(), 3);
        assert_eq!(
            sorted(into.collect().unwrap()),
            ref_reduce(&data, |a, b| a + b)
        );
    }
}

#[test]
fn reduce_by_key_with_string_keys_and_values() {
    let c = ctx(2);
    let mut rng = SplitMix::new(11);
    let data: Vec<(String, String)> = (0..3000)
        .map(|_| (format!("k{}", rng.below(200)), format!("{}", rng.below(10))))
        .collect();
    // Concatenation of sorted characters is commutative only after sorting; use max/min.
    let got = sorted(
        c.parallelize(data.clone(), 5)
            .reduce_by_key(|a: String, b: String| if a >= b { a } else { b })
            .collect()
            .unwrap(),
    );
    assert_eq!(
        got,
        ref_reduce(&data, |a: String, b: String| if a >= b { a } else { b })
    );
}

#[test]
fn combine_by_key_and_with_state() {
    let c = ctx(2);
    let data = random_pairs(6, 4000, 80);
    let rdd = c.parallelize(data.clone(), 5);
    // (sum, count) per key.
    let got = sorted(
        rdd.combine_by_key(
            |v: i64| (v, 1u64),
            |(s, n): (i64, u64), v: i64| (s + v, n + 1),
            |(s1, n1): (i64, u64), (s2, n2): (i64, u64)| (s1 + s2, n1 + n2),
        )
        .collect()
        .unwrap(),
    );
    let expected: Vec<(u64, (i64, u64))> = ref_group(&data)
        .into_iter()
        .map(|(k, vs)| (k, (vs.iter().sum(), vs.len() as u64)))
        .collect();
    assert_eq!(got, expected);

    // Combiners that collect the values: the full multiset per key.
    let lists = rdd
        .combine_by_key(
            |v: i64| vec![v],
            |mut c: Vec<i64>, v: i64| {
                c.push(v);
                c
            },
            |mut a: Vec<i64>, b: Vec<i64>| {
                a.extend(b);
                a
            },
        )
        .collect()
        .unwrap();
    assert_eq!(sorted_groups(lists), ref_group_sorted(&data));

    // With state and an explicit partition count.
    let with = rdd.combine_by_key_with_into(
        3i64,
        |m: &i64, v: i64| v * m,
        |m: &i64, c: i64, v: i64| c + v * m,
        |_: &i64, a: i64, b: i64| a + b,
        7,
    );
    assert_eq!(with.num_partitions(), 7);
    let expected: Vec<(u64, i64)> = ref_reduce(&data, |a, b| a + b)
        .into_iter()
        .map(|(k, s)| (k, 3 * s))
        .collect();
    assert_eq!(sorted(with.collect().unwrap()), expected);
}

#[test]
fn fold_by_key_and_aggregate_by_key() {
    let c = ctx(2);
    let data = skewed_pairs(7, 5000, 40);
    let rdd = c.parallelize(data.clone(), 4);
    let folded = sorted(rdd.fold_by_key(0i64, |a, b| a + b).collect().unwrap());
    assert_eq!(folded, ref_reduce(&data, |a, b| a + b));
    let maxed = sorted(
        rdd.fold_by_key(i64::MIN, |a: i64, b: i64| a.max(b))
            .collect()
            .unwrap(),
    );
    assert_eq!(maxed, ref_reduce(&data, |a: i64, b: i64| a.max(b)));

    let agg = sorted(
        rdd.aggregate_by_key(
            (0i64, 0u64, i64::MAX),
            |(s, n, m): (i64, u64, i64), v: i64| (s + v, n + 1, m.min(v)),
            |a: (i64, u64, i64), b: (i64, u64, i64)| (a.0 + b.0, a.1 + b.1, a.2.min(b.2)),
        )
        .collect()
        .unwrap(),
    );
    let expected: Vec<(u64, (i64, u64, i64))> = ref_group(&data)
        .into_iter()
        .map(|(k, vs)| {
            (
                k,
                (vs.iter().sum(), vs.len() as u64, *vs.iter().min().unwrap()),
            )
        })
        .collect();
    assert_eq!(agg, expected);

    // aggregate_by_key to a different type: distinct values per key as a sorted list.
    let distinct_vals = rdd
        .aggregate_by_key(
            Vec::<i64>::new(),
            |mut a: Vec<i64>, v: i64| {
                if let Err(i) = a.binary_search(&v) {
                    a.insert(i, v);
                }
                a
            },
            |a: Vec<i64>, b: Vec<i64>| {
                let mut m = a;
                m.extend(b);
                m.sort();
                m.dedup();
                m
            },
        )
        .collect()
        .unwrap();
    let expected: Vec<(u64, Vec<i64>)> = ref_group(&data)
        .into_iter()
        .map(|(k, vs)| (k, ref_distinct(&vs)))
        .collect();
    assert_eq!(sorted(distinct_vals), expected);
}

#[test]
fn group_by_key_matches_reference() {
    let c = ctx(2);
    for (parts, data) in [
        (4, random_pairs(8, 5000, 60)),
        (1, random_pairs(9, 1000, 10)),
        (5, skewed_pairs(10, 6000, 30)),
        (7, random_pairs(11, 4, 2)),
        (2, Vec::new()),
    ] {
        let rdd = c.parallelize(data.clone(), parts);
        let g = rdd.group_by_key();
        assert_eq!(g.num_partitions(), parts);
        assert_eq!(
            sorted_groups(g.collect().unwrap()),
            ref_group_sorted(&data),
            "parts={parts}"
        );
        let g3 = rdd.group_by_key_into(3);
        assert_eq!(g3.num_partitions(), 3);
        let got = g3.collect().unwrap();
        // Each key exactly once.
        let keys: Vec<u64> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(sorted(keys.clone()), ref_distinct(&keys));
        assert_eq!(sorted_groups(got), ref_group_sorted(&data));
    }
}

#[test]
fn partition_by_puts_each_key_in_exactly_one_partition() {
    let c = ctx(2);
    let data = skewed_pairs(12, 4000, 200);
    for n in [1usize, 3, 8] {
        let p = c.parallelize(data.clone(), 5).partition_by(n);
        assert_eq!(p.num_partitions(), n);
        let parts = p.glom().collect().unwrap();
        assert_eq!(parts.len(), n);
        let mut home: HashMap<u64, usize> = HashMap::new();
        for (i, part) in parts.iter().enumerate() {
            for (k, _) in part {
                let h = *home.entry(*k).or_insert(i);
                assert_eq!(h, i, "key {k} in partitions {h} and {i}");
            }
        }
        assert_eq!(sorted(parts.concat()), sorted(data.clone()));
    }
}

#[test]
fn distinct_matches_reference() {
    let c = ctx(2);
    let mut rng = SplitMix::new(13);
    let nums: Vec<u32> = (0..5000).map(|_| rng.below(300) as u32).collect();
    assert_eq!(
        sorted(c.parallelize(nums.clone(), 4).distinct().collect().unwrap()),
        ref_distinct(&nums)
    );
    let words: Vec<String> = nums.iter().map(|n| format!("w{}", n % 37)).collect();
    assert_eq!(
        sorted(
            c.parallelize(words.clone(), 3)
                .distinct()
                .collect()
                .unwrap()
        ),
        ref_distinct(&words)
    );
    assert_eq!(
        c.parallelize(vec![5u8; 1000], 6)
            .distinct()
            .collect()
            .unwrap(),
        vec![5]
    );
    assert!(c
        .parallelize(Vec::<u8>::new(), 2)
        .distinct()
        .collect()
        .unwrap()
        .is_empty());
    let pairs = random_pairs(14, 3000, 5);
    let pairs: Vec<(u64, i64)> = pairs.into_iter().map(|(k, v)| (k, v % 4)).collect();
    assert_eq!(
        sorted(
            c.parallelize(pairs.clone(), 4)
                .distinct()
                .collect()
                .unwrap()
        ),
        ref_distinct(&pairs)
    );
}

#[test]
fn repartition_preserves_records_and_yields_n_partitions() {
    let c = ctx(2);
    let input: Vec<String> = (0..10_000).map(|i| format!("rec{}", i % 2500)).collect();
    let rdd = c.parallelize(input.clone(), 3);
    for n in [1usize, 2, 5, 11] {
        let r = rdd.repartition(n);
        assert_eq!(r.num_partitions(), n);
        let parts = r.glom().collect().unwrap();
        assert_eq!(parts.len(), n);
        assert_eq!(sorted(parts.concat()), sorted(input.clone()), "n={n}");
        // Roughly equal sizes.
        let avg = input.len() / n;
        for (i, p) in parts.iter().enumerate() {
            assert!(
                p.len() > avg / 2 && p.len() < avg * 3 / 2,
                "n={n}: partition {i} has {} records, mean {avg}",
                p.len()
            );
        }
    }
    // From partitions with skew and empty partitions.
    let few = c.parallelize(vec![1i32, 2, 3], 6).repartition(4);
    assert_eq!(few.glom().collect().unwrap().len(), 4);
    assert_eq!(sorted(few.collect().unwrap()), vec![1, 2, 3]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn prop_reduce_by_key(data in prop::collection::vec((0u8..20, -100i64..100), 0..400), parts in 1usize..8) {
        let c = ctx(2);
        let got = sorted(c.parallelize(data.clone(), parts).reduce_by_key(|a, b| a + b).collect().unwrap());
        prop_assert_eq!(got, ref_reduce(&data, |a, b| a + b));
    }

    #[test]
    fn prop_group_by_key_and_distinct(data in prop::collection::vec((0u8..10, 0u8..5), 0..300), parts in 1usize..8) {
        let c = ctx(2);
        let rdd = c.parallelize(data.clone(), parts);
        prop_assert_eq!(sorted_groups(rdd.group_by_key().collect().unwrap()), ref_group_sorted(&data));
        prop_assert_eq!(sorted(rdd.distinct().collect().unwrap()), ref_distinct(&data));
    }

    #[test]
    fn prop_repartition(data in prop::collection::vec(any::<u16>(), 0..300), parts in 1usize..8, n in 1usize..8) {
        let c = ctx(2);
        let parts_out = c.parallelize(data.clone(), parts).repartition(n).glom().collect().unwrap();
        prop_assert_eq!(parts_out.len(), n);
        prop_assert_eq!(sorted(parts_out.concat()), sorted(data));
    }
}

#[test]
fn narrow_operators_over_shuffled_rdds() {
    let c = ctx(2);
    let data = random_pairs(61, 3000, 200);
    let sums = c
        .parallelize(data.clone(), 4)
        .reduce_by_key_into(|a, b| a + b, 5);
    let ref_sums = ref_reduce(&data, |a, b| a + b);

    // coalesce, glom, zip_with_index, take, union and sample over a shuffle output.
    let co = sums.coalesce(2);
    assert_eq!(co.num_partitions(), 2);
    assert_eq!(sorted(co.collect().unwrap()), ref_sums);
    assert_eq!(co.glom().collect().unwrap().len(), 2);

    let all = sums.collect().unwrap();
    let zipped = sums.zip_with_index().collect().unwrap();
    assert_eq!(zipped, all.iter().cloned().zip(0u64..).collect::<Vec<_>>());
    assert_eq!(sums.take(37).unwrap(), all[..37]);
    assert_eq!(sums.first().unwrap(), all[0]);

    let u = sums.union(&c.parallelize(data.clone(), 2));
    assert_eq!(u.num_partitions(), 7);
    assert_eq!(
        sorted(u.collect().unwrap()),
        sorted([ref_sums.clone(), data.clone()].concat())
    );

    let s1 = sums.sample(false, 0.5, 3).collect().unwrap();
    assert_eq!(s1, sums.sample(false, 0.5, 3).collect().unwrap());
    assert!(s1.iter().all(|p| all.contains(p)));

    // Cached shuffle output feeding further shuffles.
    let cached = sums.cache();
    let sorted_sums = cached
        .map(|(k, v): (u64, i64)| (v, k))
        .sort_by_key_into(false, 3)
        .collect()
        .unwrap();
    assert_sorted_by(&sorted_sums, |p| p.0, false);
    assert_eq!(
        sorted(sorted_sums),
        sorted(ref_sums.iter().map(|&(k, v)| (v, k)).collect())
    );
    assert_eq!(cached.count().unwrap(), ref_sums.len() as u64);
    cached.unpersist();
    assert_eq!(sorted(cached.collect().unwrap()), ref_sums);
}

#[test]
fn partition_counts_of_shuffle_operators() {
    let c = ctx(2);
    let data = random_pairs(62, 500, 40);
    let a = c.parallelize(data.clone(), 3);
    let b = c.parallelize(data.clone(), 6);
    assert_eq!(a.reduce_by_key(|x, y| x + y).num_partitions(), 3);
    assert_eq!(a.group_by_key().num_partitions(), 3);
    assert_eq!(a.distinct().num_partitions(), 3);
    assert_eq!(a.cogroup(&b).num_partitions(), 6);
    assert_eq!(b.join(&a).num_partitions(), 6);
    assert_eq!(a.cogroup_into(&b, 2).num_partitions(), 2);
    // Shuffling 3 partitions into 0 is an invalid argument, reported by the action.
    for bad in [a.group_by_key_into(0).count(), a.partition_by(0).count()] {
        assert!(
            matches!(bad, Err(ember::EmberError::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let g = a.cogroup_into(&b, 4).collect().unwrap();
    let keys: Vec<u64> = g.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        sorted(keys),
        ref_distinct(&data.iter().map(|p| p.0).collect::<Vec<_>>())
    );
    for (k, (vs, ws)) in g {
        let expected = sorted(
            data.iter()
                .filter(|p| p.0 == k)
                .map(|p| p.1)
                .collect::<Vec<_>>(),
        );
        assert_eq!(sorted(vs), expected);
        assert_eq!(sorted(ws), expected);
    }
}

/// A word count by `flat_map_reduce_by_key`, the words borrowed from each line.
fn word_counts(lines: &ember::Rdd<String>) -> ember::Rdd<(String, u64)> {
    lines.flat_map_reduce_by_key(
        |line: &String, out: &mut ember::Emit<str, u64>| {
            for w in line.split_whitespace() {
                out.emit(w, 1)
            }
        },
        |a, b| a + b,
    )
}

#[test]
fn flat_map_reduce_by_key_equals_flat_map_then_reduce_by_key() {
    let ctx = common::ctx(2);
    let lines: Vec<String> = (0..3000)
        .map(|i| {
            let words: Vec<String> = (0..(i % 7))
                .map(|j| format!("w{}", (i * 31 + j * 17) % 211))
                .collect();
            words.join(if i % 3 == 0 { "  " } else { " " })
        })
        .collect();
    let rdd = ctx.parallelize(lines.clone(), 5);
    let fast = word_counts(&rdd).collect().unwrap();
    let mut expected: HashMap<String, u64> = HashMap::new();
    for l in &lines {
        for w in l.split_whitespace() {
            *expected.entry(w.to_string()).or_default() += 1;
        }
    }
    let got: HashMap<String, u64> = fast.iter().cloned().collect();
    assert_eq!(got.len(), fast.len(), "each key exactly once");
    assert_eq!(got, expected);

    // A sized borrowed key (Q = K = u64) takes the generic path.
    let sums = ctx
        .range(0, 10_000, 3)
        .flat_map_reduce_by_key(
            |x: &i64, out: &mut ember::Emit<u64, i64>| {
                out.emit(&((*x as u64) % 13), *x);
                out.emit(&100, 1);
            },
            |a, b| a + b,
        )
        .collect_as_map()
        .unwrap();
    for k in 0..13u64 {
        let want: i64 = (0..10_000i64).filter(|x| (*x as u64) % 13 == k).sum();
        assert_eq!(sums[&k], want, "key {k}");
    }
    assert_eq!(sums[&100], 10_000);
}

/// The map side queues the words of a line (keys inside the record) and inserts them
/// after prefetching; keys from elsewhere (temporaries, statics) go in at once. Floats
/// whose sum depends on the order show that every key still folds in emission order,
/// with long lines (past the queue), many keys (a partitioned table) and both kinds of
/// key interleaved.
#[test]
fn flat_map_reduce_by_key_folds_in_emission_order_with_keys_from_the_line_and_elsewhere() {
    let ctx = common::ctx(2);
    let lines: Vec<String> = (0..4000u64)
        .map(|i| {
            let n = (i * 37) % 150;
            let words: Vec<String> = (0..n)
                .map(|j| format!("w{}", (i * 7919 + j * 104_729) % 90_000))
                .collect();
            words.join(" ")
        })
        .collect();
    fn value(i: usize, j: usize) -> f64 {
        match (i + j) % 5 {
            0 => 1e16,
            1 => -1e16,
            2 => 1.0,
            _ => ((i * 13 + j) % 1000) as f64 * 0.001,
        }
    }
    // The plain answer: one partition, so each key is the left fold of its values in the
    // order they are emitted.
    let emitted = |i: usize, line: &str| {
        let mut out: Vec<(String, f64)> = Vec::new();
        for (j, w) in line.split_whitespace().enumerate() {
            out.push((w.to_string(), value(i, j)));
            if j % 9 == 4 {
                out.push((format!("{w}x"), value(i, j + 1)));
            }
            if j % 13 == 0 {
                out.push(("static".to_string(), value(i, j + 2)));
            }
            if j % 11 == 3 {
                out.push((w.to_string(), value(i, j + 3)));
            }
        }
        out
    };
    let pairs: Vec<(String, f64)> = lines
        .iter()
        .enumerate()
        .flat_map(|(i, l)| emitted(i, l))
        .collect();
    // The records are the lines themselves (only `String` records take the queue), with
    // their index in front.
    let keyed: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{i:04}|{l}"))
        .collect();
    let got: HashMap<String, f64> = ctx
        .parallelize(keyed, 1)
        .flat_map_reduce_by_key(
            |rec: &String, out: &mut ember::Emit<str, f64>| {
                let (i, line) = rec.split_once('|').unwrap();
                let i: usize = i.parse().unwrap();
                for (j, w) in line.split_whitespace().enumerate() {
                    out.emit(w, value(i, j));
                    if j % 9 == 4 {
                        out.emit(&format!("{w}x"), value(i, j + 1));
                    }
                    if j % 13 == 0 {
                        out.emit("static", value(i, j + 2));
                    }
                    // The same key as the line's word, from a temporary copy.
                    if j % 11 == 3 {
                        let copy: String = w.chars().collect();
                        out.emit(&copy, value(i, j + 3));
                    }
                }
            },
            |a, b| a + b,
        )
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    let keys = assert_left_folds(&pairs, &got);
    assert!(keys > 40_000, "the table partitions: {keys} keys");
}

/// Asserts that `got` holds, for every key of `pairs`, the left fold of its values in
/// the order of `pairs` (the plain answer of one partition), bit for bit, and that the
/// check is not vacuous: folding in reverse order changes some key's sum. Returns the
/// number of keys.
fn assert_left_folds(pairs: &[(String, f64)], got: &HashMap<String, f64>) -> usize {
    let fold = |pairs: &mut dyn Iterator<Item = &(String, f64)>| {
        let mut sums: HashMap<String, f64> = HashMap::new();
        for (k, v) in pairs {
            sums.entry(k.clone()).and_modify(|c| *c += v).or_insert(*v);
        }
        sums
    };
    let want = fold(&mut pairs.iter());
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        assert_eq!(got[k].to_bits(), w.to_bits(), "key {k}: {} vs {w}", got[k]);
    }
    let reversed = fold(&mut pairs.iter().rev());
    assert!(
        want.iter()
            .any(|(k, w)| reversed[k].to_bits() != w.to_bits()),
        "the values' sums depend on their order"
    );
    want.len()
}

#[test]
fn map_side_combine_is_skipped_when_keys_do_not_repeat_and_results_stay_exact() {
    // One partition of 150k records: the first 100k keys are all distinct (the probe
    // sees nothing to combine), the last 50k repeat earlier keys. With combining the
    // map task would write 100k records; skipping it writes nearly all 150k (only the
    // repeats inside the probe's last batch are combined).
    let ctx = common::ctx(1);
    let n = 150_000i64;
    let reduced = ctx
        .range(0, n, 1)
        .map(|x: i64| (x % 100_000, 1u64))
        .reduce_by_key(|a, b| a + b);
    let got = reduced.collect().unwrap();
    assert_combining_was_skipped(&ctx);
    assert_eq!(got.len(), 100_000);
    assert!(got
        .iter()
        .all(|(k, c)| *c == if *k < 50_000 { 2 } else { 1 }));

    let fast = ctx
        .range(0, n, 1)
        .flat_map_reduce_by_key(
            |x: &i64, out: &mut ember::Emit<str, u64>| out.emit(&format!("k{}", x % 100_000), 1),
            |a, b| a + b,
        )
        .collect()
        .unwrap();
    assert_combining_was_skipped(&ctx);
    assert_eq!(fast.len(), 100_000);
    let total: u64 = fast.iter().map(|(_, c)| c).sum();
    assert_eq!(total, n as u64);

    // Words borrowed from the records themselves (lines, which the map side queues)
    // reach the probe too.
    let lines: Vec<String> = (0..n).map(|i| format!("word{}", i % 100_000)).collect();
    let counts = word_counts(&ctx.parallelize(lines, 1))
        .collect_as_map()
        .unwrap();
    assert_combining_was_skipped(&ctx);
    assert_eq!(counts.len(), 100_000);
    for i in 0..100_000 {
        let want = if i < n - 100_000 { 2 } else { 1 };
        assert_eq!(counts[&format!("word{i}")], want, "word{i}");
    }
}

/// The last job's map side wrote nearly all of its 150k records: it stopped combining.
fn assert_combining_was_skipped(ctx: &ember::Context) {
    let written = ctx
        .last_job_metrics()
        .unwrap()
        .totals
        .shuffle_records_written;
    assert!(
        written > 145_000,
        "combining should have been skipped: {written} records written"
    );
}

/// Lines of 2,000 words, none from a temporary: the map side's key queue fills
/// mid-line again and again, and every key still folds its values in emission order
/// (floats whose sum depends on the order).
#[test]
fn flat_map_reduce_by_key_folds_long_lines_in_emission_order() {
    let ctx = common::ctx(1);
    fn value(i: u64, j: u64) -> f64 {
        match (i * 3 + j) % 5 {
            0 => 1e16,
            1 => -1e16,
            2 => 1.0,
            _ => ((i * 13 + j) % 1000) as f64 * 0.001,
        }
    }
    // 300 lines of 2,000 words: 600,000 words over 50,000 keys.
    let lines: Vec<String> = (0..300u64)
        .map(|i| {
            let words: Vec<String> = (0..2000u64)
                .map(|j| format!("k{}", (i * 7919 + j * 104_729) % 50_000))
                .collect();
            format!("{i:03}|{}", words.join(" "))
        })
        .collect();
    let mut pairs: Vec<(String, f64)> = Vec::new();
    for l in &lines {
        let (i, line) = l.split_once('|').unwrap();
        let i: u64 = i.parse().unwrap();
        for (j, w) in line.split(' ').enumerate() {
            pairs.push((w.to_string(), value(i, j as u64)));
        }
    }
    let got = ctx
        .parallelize(lines, 1)
        .flat_map_reduce_by_key(
            |rec: &String, out: &mut ember::Emit<str, f64>| {
                let (i, line) = rec.split_once('|').unwrap();
                let i: u64 = i.parse().unwrap();
                for (j, w) in line.split(' ').enumerate() {
                    out.emit(w, value(i, j as u64));
                }
            },
            |a, b| a + b,
        )
        .collect_as_map()
        .unwrap();
    assert_left_folds(&pairs, &got);
}

#[test]
fn flat_map_reduce_by_key_spills_under_a_tiny_memory_limit() {
    let ctx = common::ctx_mem(2, 256 * 1024);
    let n = 300_000i64;
    let counts = ctx
        .range(0, n, 2)
        .flat_map_reduce_by_key(
            |x: &i64, out: &mut ember::Emit<str, u64>| out.emit(&format!("key-{}", x / 2), 1),
            |a, b| a + b,
        )
        .collect()
        .unwrap();
    let metrics = ctx.last_job_metrics().unwrap();
    assert!(
        metrics.totals.spill_count > 0,
        "expected spills: {metrics:?}"
    );
    assert_eq!(counts.len() as i64, n / 2);
    assert!(counts.iter().all(|(_, c)| *c == 2));
}
