//! Shuffle-heavy jobs under a 256 KiB executor memory limit: results must equal the
//! plain computation, and the job must actually spill.

mod common;

use common::*;
use ember::Context;

const MEMORY: u64 = 256 * 1024;
/// The full-size job (reduce_by_key): ~200k records over ~20k keys.
const RECORDS: usize = 200_000;
const KEYS: u64 = 20_000;
/// The other jobs use a smaller input (still many times the memory limit) so that the
/// suite stays fast in a debug build, where a 200k-record shuffle takes several seconds.
const SMALL_RECORDS: usize = 60_000;
const SMALL_KEYS: u64 = 6_000;

fn small_ctx() -> Context {
    ctx_mem(2, MEMORY)
}

/// `n` `(key, value)` records over about `keys` string keys with string values.
fn string_pairs(seed: u64, n: usize, keys: u64) -> Vec<(String, String)> {
    let mut rng = SplitMix::new(seed);
    (0..n)
        .map(|_| {
            let k = rng.below(keys);
            (
                format!("key-{k:05}"),
                format!("value-{}", rng.below(1_000_000)),
            )
        })
        .collect()
}

fn assert_spilled(ctx: &Context, what: &str) {
    let m = ctx.last_job_metrics().expect("a job ran");
    assert!(
        m.totals.spill_count > 0 && m.totals.bytes_spilled > 0,
        "{what}: expected spills under a {MEMORY}-byte limit, got spill_count={} bytes_spilled={}",
        m.totals.spill_count,
        m.totals.bytes_spilled
    );
}

fn max_string(a: String, b: String) -> String {
    if a >= b {
        a
    } else {
        b
    }
}

#[test]
fn reduce_by_key_spills_and_is_correct() {
    let c = small_ctx();
    let data = string_pairs(1, RECORDS, KEYS);
    let got = c
        .parallelize(data.clone(), 4)
        .reduce_by_key(max_string)
        .collect()
        .unwrap();
    assert_spilled(&c, "reduce_by_key");
    let got = sorted(got);
    let expected = ref_reduce(&data, max_string);
    assert!(expected.len() > 19_000, "test data should have ~20k keys");
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}

#[test]
fn count_by_string_key_spills_and_is_correct() {
    let c = small_ctx();
    let data = string_pairs(2, SMALL_RECORDS, SMALL_KEYS);
    let got = c
        .parallelize(data.clone(), 4)
        .map_values(|v: String| v.len() as u64)
        .reduce_by_key(|a, b| a + b)
        .collect()
        .unwrap();
    assert_spilled(&c, "reduce_by_key (sum)");
    let expected: Vec<(String, u64)> = ref_group(&data)
        .into_iter()
        .map(|(k, vs)| (k, vs.iter().map(|v| v.len() as u64).sum()))
        .collect();
    assert_eq!(sorted(got), expected);
}

#[test]
fn group_by_key_spills_and_is_correct() {
    let c = small_ctx();
    let data = string_pairs(3, SMALL_RECORDS, SMALL_KEYS);
    let got = c
        .parallelize(data.clone(), 4)
        .group_by_key()
        .collect()
        .unwrap();
    assert_spilled(&c, "group_by_key");
    assert_eq!(sorted_groups(got), ref_group_sorted(&data));
}

#[test]
fn group_by_key_with_skewed_key_spills_and_is_correct() {
    let c = small_ctx();
    // Half of the records under one key.
    let mut data = string_pairs(4, SMALL_RECORDS, SMALL_KEYS);
    for (i, rec) in data.iter_mut().enumerate() {
        if i % 2 == 0 {
            rec.0 = "hot".to_string();
        }
    }
    let got = c
        .parallelize(data.clone(), 4)
        .group_by_key()
        .collect()
        .unwrap();
    assert_spilled(&c, "skewed group_by_key");
    assert_eq!(sorted_groups(got), ref_group_sorted(&data));
}

#[test]
fn join_spills_and_is_correct() {
    let c = small_ctx();
    let left = string_pairs(5, SMALL_RECORDS, SMALL_KEYS);
    // One right value for every other key, two for every tenth: keys on one side only
    // and duplicates on both sides.
    let right: Vec<(String, u64)> = (0..SMALL_KEYS)
        .filter(|k| k % 2 == 0)
        .flat_map(|k| {
            let n = if k % 10 == 0 { 2 } else { 1 };
            (0..n).map(move |i| (format!("key-{k:05}"), k * 10 + i))
        })
        .collect();
    let got = c
        .parallelize(left.clone(), 4)
        .join(&c.parallelize(right.clone(), 3))
        .collect()
        .unwrap();
    assert_spilled(&c, "join");
    // Hash-join reference (the nested loop is too slow at this size; joins are checked
    // against nested loops in pair_joins_sorts).
    let by_key = ref_group(&right);
    let mut expected = Vec::new();
    for (k, v) in &left {
        if let Some(ws) = by_key.get(k) {
            for w in ws {
                expected.push((k.clone(), (v.clone(), *w)));
            }
        }
    }
    assert_eq!(got.len(), expected.len());
    assert_eq!(sorted(got), sorted(expected));
}

#[test]
fn sort_by_key_spills_and_is_correct() {
    let c = small_ctx();
    let data: Vec<(String, u32)> = string_pairs(6, SMALL_RECORDS, SMALL_KEYS)
        .into_iter()
        .zip(0u32..)
        .map(|((_, v), i)| (v, i))
        .collect();
    sorts_spill_and_keep_every_record(&c, &data, "sort_by_key");
}

/// `sort_by_key_into` both ways under the small memory limit: it spills, orders by key
/// and returns every record once.
fn sorts_spill_and_keep_every_record<K, V>(c: &Context, data: &[(K, V)], what: &str)
where
    K: ember::Data + Ord + std::fmt::Debug,
    V: ember::Data + Ord + std::fmt::Debug,
{
    for ascending in [true, false] {
        let got = c
            .parallelize(data.to_vec(), 4)
            .sort_by_key_into(ascending, 4)
            .collect()
            .unwrap();
        assert_spilled(c, what);
        assert_sorted_by(&got, |p| p.0.clone(), ascending);
        assert_eq!(sorted(got), sorted(data.to_vec()));
    }
}

/// Integer keys (the radix sort) with `CompactString` values, inline (up to 24 bytes) and
/// on the heap: sorted through spills, every record comes back once, with its value, and
/// the text written is the values' bytes.
#[test]
fn sort_by_integer_key_of_compact_strings_spills_and_is_correct() {
    let c = small_ctx();
    let mut rng = SplitMix::new(7);
    let data: Vec<(u64, ember::CompactString)> = (0..SMALL_RECORDS)
        .map(|i| {
            let k = rng.below(SMALL_KEYS);
            let pad = "x".repeat(i % 40); // 0 to 39 bytes: both sides of 24
            (k, ember::CompactString::from(format!("{k},{i}é{pad}")))
        })
        .collect();
    sorts_spill_and_keep_every_record(&c, &data, "sort_by_key of compact strings");
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("sorted");
    c.parallelize(data.clone(), 4)
        .sort_by_key_into(true, 3)
        .values()
        .save_as_text_file(&dir)
        .unwrap();
    let mut text = String::new();
    for part in 0..3 {
        text += &std::fs::read_to_string(dir.join(format!("part-{part:05}"))).unwrap();
    }
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), data.len());
    let keys: Vec<u64> = lines
        .iter()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "keys out of order");
    let mut want: Vec<&str> = data.iter().map(|(_, v)| v.as_str()).collect();
    want.sort_unstable();
    let mut got = lines.clone();
    got.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn distinct_spills_and_is_correct() {
    let c = small_ctx();
    let data: Vec<String> = string_pairs(7, SMALL_RECORDS, SMALL_KEYS)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let got = c.parallelize(data.clone(), 4).distinct().collect().unwrap();
    assert_spilled(&c, "distinct");
    assert_eq!(sorted(got), ref_distinct(&data));
}

#[test]
fn records_larger_than_the_memory_limit() {
    // Single records bigger than the whole executor memory must still go through a
    // shuffle, an aggregation and a sort.
    let c = small_ctx();
    let big: Vec<(u32, String)> = (0..12u32)
        .map(|i| (i % 4, format!("{i:02}").repeat(200 * 1024)))
        .collect();
    let lens = sorted(
        c.parallelize(big.clone(), 3)
            .reduce_by_key(max_string)
            .map_values(|v: String| v.len())
            .collect()
            .unwrap(),
    );
    let expected: Vec<(u32, usize)> = ref_reduce(&big, max_string)
        .into_iter()
        .map(|(k, v)| (k, v.len()))
        .collect();
    assert_eq!(lens, expected);
    let grouped = c
        .parallelize(big.clone(), 3)
        .group_by_key()
        .collect()
        .unwrap();
    assert_eq!(sorted_groups(grouped), ref_group_sorted(&big));
    let sorted_big = c
        .parallelize(big.clone(), 3)
        .sort_by_key_into(false, 2)
        .collect()
        .unwrap();
    assert_sorted_by(&sorted_big, |p| p.0, false);
    assert_eq!(sorted(sorted_big), sorted(big));
}
