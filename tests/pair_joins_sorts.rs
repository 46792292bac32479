//! Key-value joins and sorts (cogroup, inner/outer joins, subtract_by_key, sort_by_key,
//! sort_by, chains of shuffles), each checked against a plain-Rust reference (nested loops
//! for joins), with duplicate keys, keys on one side only, skewed keys, a single partition
//! and empty partitions.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;

type Cogrouped = Vec<(u64, (Vec<i64>, Vec<String>))>;
type Pairs<V> = Vec<(u64, V)>;

#[test]
fn cogroup_matches_reference() {
    let c = ctx(2);
    // Keys 0..30 on the left, 20..50 on the right: some on one side only.
    let left: Vec<(u64, i64)> = random_pairs(15, 600, 30);
    let right: Vec<(u64, String)> = random_pairs(16, 400, 30)
        .into_iter()
        .map(|(k, v)| (k + 20, format!("r{v}")))
        .collect();
    let got = c
        .parallelize(left.clone(), 3)
        .cogroup(&c.parallelize(right.clone(), 4))
        .collect()
        .unwrap();
    let mut expected: BTreeMap<u64, (Vec<i64>, Vec<String>)> = BTreeMap::new();
    for (k, v) in &left {
        expected.entry(*k).or_default().0.push(*v);
    }
    for (k, w) in &right {
        expected.entry(*k).or_default().1.push(w.clone());
    }
    let expected: Cogrouped = expected
        .into_iter()
        .map(|(k, (a, b))| (k, (sorted(a), sorted(b))))
        .collect();
    let got: Cogrouped = sorted(
        got.into_iter()
            .map(|(k, (a, b))| (k, (sorted(a), sorted(b))))
            .collect(),
    );
    assert_eq!(got, expected);
}

fn join_inputs(seed: u64) -> (Pairs<i64>, Pairs<String>) {
    // Left keys 0..40, right keys 25..70; duplicates on both sides.
    let left = random_pairs(seed, 500, 40);
    let right = random_pairs(seed + 1, 300, 45)
        .into_iter()
        .map(|(k, v)| (k + 25, format!("w{v}")))
        .collect();
    (left, right)
}

#[test]
fn joins_match_nested_loop_reference() {
    let c = ctx(2);
    for (lp, rp, seed) in [(3, 4, 20), (1, 1, 21), (8, 2, 22)] {
        let (l, r) = join_inputs(seed);
        let left = c.parallelize(l.clone(), lp);
        let right = c.parallelize(r.clone(), rp);
        assert_eq!(
            sorted(left.join(&right).collect().unwrap()),
            ref_join(&l, &r),
            "join {lp}/{rp}"
        );
        assert_eq!(
            sorted(left.left_outer_join(&right).collect().unwrap()),
            ref_left_join(&l, &r),
            "left join"
        );
        assert_eq!(
            sorted(left.right_outer_join(&right).collect().unwrap()),
            ref_right_join(&l, &r),
            "right join"
        );
        assert_eq!(
            sorted(left.full_outer_join(&right).collect().unwrap()),
            ref_full_join(&l, &r),
            "full join"
        );
        assert_eq!(
            sorted(left.subtract_by_key(&right).collect().unwrap()),
            ref_subtract(&l, &r),
            "subtract_by_key"
        );
    }
}

#[test]
fn joins_with_empty_sides_and_skew() {
    let c = ctx(2);
    let l = skewed_pairs(30, 2000, 10);
    let r: Vec<(u64, i64)> = vec![(0, 1), (0, 2), (3, 3), (99, 4)];
    let left = c.parallelize(l.clone(), 4);
    let right = c.parallelize(r.clone(), 2);
    assert_eq!(
        sorted(left.join(&right).collect().unwrap()),
        ref_join(&l, &r)
    );
    assert_eq!(
        sorted(left.full_outer_join(&right).collect().unwrap()),
        ref_full_join(&l, &r)
    );
    assert_eq!(
        sorted(right.left_outer_join(&left).collect().unwrap()),
        ref_left_join(&r, &l)
    );

    let empty = c.parallelize(Vec::<(u64, i64)>::new(), 3);
    assert!(left.join(&empty).collect().unwrap().is_empty());
    assert!(empty.join(&left).collect().unwrap().is_empty());
    assert_eq!(
        sorted(left.left_outer_join(&empty).collect().unwrap()),
        ref_left_join(&l, &[] as &[(u64, i64)])
    );
    assert_eq!(
        sorted(empty.right_outer_join(&left).collect().unwrap()),
        ref_right_join(&[] as &[(u64, i64)], &l)
    );
    assert_eq!(
        sorted(left.subtract_by_key(&empty).collect().unwrap()),
        sorted(l.clone())
    );
    assert!(empty.full_outer_join(&empty).collect().unwrap().is_empty());
}

#[test]
fn sort_by_key_ascending_and_descending() {
    let c = ctx(2);
    let mut rng = SplitMix::new(40);
    let data: Vec<(i64, u32)> = (0..5000)
        .map(|i| (rng.below(1000) as i64 - 500, i))
        .collect();
    for parts in [1usize, 3, 8] {
        for ascending in [true, false] {
            let s = c
                .parallelize(data.clone(), 4)
                .sort_by_key_into(ascending, parts);
            assert_eq!(s.num_partitions(), parts);
            let got = s.collect().unwrap();
            assert_sorted_by(&got, |p| p.0, ascending);
            assert_eq!(
                sorted(got),
                sorted(data.clone()),
                "parts={parts} asc={ascending}"
            );
        }
    }
    // Partitions hold contiguous, ordered ranges.
    let parts = c
        .parallelize(data.clone(), 4)
        .sort_by_key_into(true, 4)
        .glom()
        .collect()
        .unwrap();
    assert_eq!(parts.len(), 4);
    let nonempty = parts.iter().filter(|p| !p.is_empty()).count();
    assert!(
        nonempty >= 3,
        "range partitioning left {nonempty} of 4 partitions used"
    );
}

#[test]
fn sort_by_key_edge_cases() {
    let c = ctx(2);
    // All keys equal, heavily skewed, empty, empty partitions.
    let same: Vec<(u8, u32)> = (0..3000).map(|i| (7, i)).collect();
    let got = c
        .parallelize(same.clone(), 3)
        .sort_by_key_into(true, 4)
        .collect()
        .unwrap();
    assert_eq!(sorted(got), same);

    let skew = skewed_pairs(41, 6000, 100);
    for asc in [true, false] {
        let got = c
            .parallelize(skew.clone(), 5)
            .sort_by_key_into(asc, 6)
            .collect()
            .unwrap();
        assert_sorted_by(&got, |p| p.0, asc);
        assert_eq!(sorted(got), sorted(skew.clone()));
    }

    let empty = c
        .parallelize(Vec::<(i32, i32)>::new(), 3)
        .sort_by_key_into(false, 2);
    assert!(empty.collect().unwrap().is_empty());

    let sparse = vec![(3, 'c'), (1, 'a'), (2, 'b')];
    let got = c
        .parallelize(sparse, 9)
        .sort_by_key_into(false, 5)
        .collect()
        .unwrap();
    assert_eq!(got, vec![(3, 'c'), (2, 'b'), (1, 'a')]);

    let strings: Vec<(String, usize)> = (0..2000)
        .map(|i| (format!("{:x}", (i * 7919) % 2003), i))
        .collect();
    let got = c
        .parallelize(strings.clone(), 3)
        .sort_by_key_into(true, 3)
        .collect()
        .unwrap();
    assert_sorted_by(&got, |p| p.0.clone(), true);
    assert_eq!(sorted(got), sorted(strings));
}

#[test]
fn sort_by_computed_key() {
    let c = ctx(2);
    let words: Vec<String> = (0..3000)
        .map(|i| "z".repeat(i % 17) + &format!("{}", i % 101))
        .collect();
    for asc in [true, false] {
        let s = c
            .parallelize(words.clone(), 4)
            .sort_by_into(|w: &String| w.len(), asc, 3);
        assert_eq!(s.num_partitions(), 3);
        let got = s.collect().unwrap();
        assert_sorted_by(&got, |w| w.len(), asc);
        assert_eq!(sorted(got), sorted(words.clone()));
    }
    let nums: Vec<i64> = (0..1000).map(|i| (i * 37) % 1000 - 500).collect();
    let got = c
        .parallelize(nums.clone(), 3)
        .sort_by_into(|x: &i64| x.abs(), true, 2)
        .collect()
        .unwrap();
    assert_sorted_by(&got, |x| x.abs(), true);
    assert_eq!(sorted(got), sorted(nums));
}

#[test]
fn shuffles_chain() {
    // reduce_by_key -> join -> sort_by_key -> group_by_key: several shuffles in one job.
    let c = ctx(2);
    let a = random_pairs(50, 3000, 100);
    let b = random_pairs(51, 200, 150);
    let sums = c.parallelize(a.clone(), 4).reduce_by_key(|x, y| x + y);
    let joined = sums.join(&c.parallelize(b.clone(), 3));
    let resorted = joined
        .map(|(k, (s, w)): (u64, (i64, i64))| (s + w, k))
        .sort_by_key_into(true, 3);
    let got = resorted.collect().unwrap();
    let ref_sums = ref_reduce(&a, |x, y| x + y);
    let expected: Vec<(i64, u64)> = ref_join(&ref_sums, &b)
        .into_iter()
        .map(|(k, (s, w))| (s + w, k))
        .collect();
    assert_sorted_by(&got, |p| p.0, true);
    assert_eq!(sorted(got), sorted(expected.clone()));
    let grouped = resorted
        .map(|(s, k): (i64, u64)| (k, s))
        .group_by_key()
        .collect()
        .unwrap();
    let expected_groups =
        ref_group_sorted(&expected.iter().map(|&(s, k)| (k, s)).collect::<Vec<_>>());
    assert_eq!(sorted_groups(grouped), expected_groups);
    assert!(c.last_job_metrics().unwrap().stages_run >= 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn prop_joins(
        l in prop::collection::vec((0u8..15, -50i32..50), 0..120),
        r in prop::collection::vec((5u8..20, any::<bool>()), 0..120),
        lp in 1usize..8,
        rp in 1usize..8,
    ) {
        let c = ctx(2);
        let left = c.parallelize(l.clone(), lp);
        let right = c.parallelize(r.clone(), rp);
        prop_assert_eq!(sorted(left.join(&right).collect().unwrap()), ref_join(&l, &r));
        prop_assert_eq!(sorted(left.full_outer_join(&right).collect().unwrap()), ref_full_join(&l, &r));
        prop_assert_eq!(sorted(left.subtract_by_key(&right).collect().unwrap()), ref_subtract(&l, &r));
    }

    #[test]
    fn prop_sort_by_key(data in prop::collection::vec((any::<i16>(), any::<u8>()), 0..500), parts in 1usize..8, out in 1usize..8, asc in any::<bool>()) {
        let c = ctx(2);
        let got = c.parallelize(data.clone(), parts).sort_by_key_into(asc, out).collect().unwrap();
        let keys: Vec<i16> = got.iter().map(|p| p.0).collect();
        let mut expected_keys: Vec<i16> = data.iter().map(|p| p.0).collect();
        expected_keys.sort();
        if !asc {
            expected_keys.reverse();
        }
        prop_assert_eq!(keys, expected_keys);
        prop_assert_eq!(sorted(got), sorted(data));
    }
}

#[test]
fn self_join_and_diamond_over_one_shuffle() {
    let c = ctx(2);
    let data = random_pairs(60, 400, 30);
    let rdd = c.parallelize(data.clone(), 3);
    assert_eq!(
        sorted(rdd.join(&rdd).collect().unwrap()),
        ref_join(&data, &data)
    );

    // The same shuffled RDD on both sides of a join (one shuffle read twice in a job).
    let sums = rdd.reduce_by_key(|a, b| a + b);
    let ref_sums = ref_reduce(&data, |a, b| a + b);
    assert_eq!(
        sorted(sums.join(&sums).collect().unwrap()),
        ref_join(&ref_sums, &ref_sums)
    );
    let both = sums
        .union(&sums.map_values(|v: i64| -v))
        .reduce_by_key(|a, b| a + b);
    let zeros: Vec<(u64, i64)> = ref_sums.iter().map(|&(k, _)| (k, 0)).collect();
    assert_eq!(sorted(both.collect().unwrap()), zeros);
}

#[test]
fn sort_samples_large_text_splits_in_windows_and_caches_nothing_partial() {
    // Two ~10 MiB files: large enough that the sampling job reads only windows of them.
    let dir = tempfile::tempdir().unwrap();
    let mut want = Vec::new();
    for f in 0..2u64 {
        let mut text = String::new();
        for i in 0..400_000u64 {
            let key = (i * 7919 + f * 104_729) % 1_000_003;
            text.push_str(&format!("{key:07},{f}-{i}-padding-padding\n"));
            want.push(format!("{key:07},{f}-{i}-padding-padding"));
        }
        std::fs::write(dir.path().join(format!("f{f}.txt")), text).unwrap();
    }
    want.sort_by_key(|l| l[..7].parse::<u64>().unwrap());
    let c = ctx(2);
    let keyed = c
        .text_file(dir.path().to_str().unwrap(), 2)
        .unwrap()
        .map(|l: String| (l[..7].parse::<u64>().unwrap(), l))
        .cache();
    let sorted = keyed.sort_by_key_into(true, 4);
    let sampled = c.last_job_metrics().unwrap().totals.records_in;
    assert!(
        sampled > 1000 && sampled < 200_000,
        "the sampling job read {sampled} of 800000 lines"
    );
    // The cached RDD holds whole partitions, not the sampled windows.
    assert_eq!(keyed.count().unwrap(), 800_000);
    let got: Vec<String> = sorted.values().collect().unwrap();
    let keys = |v: &[String]| v.iter().map(|l| l[..7].to_string()).collect::<Vec<_>>();
    assert_eq!(keys(&got), keys(&want), "keys in order");
    assert_eq!(sorted_copy(got), sorted_copy(want), "every line once");
}

fn sorted_copy(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}
