//! The adaptive map-side combine (a map task stops combining once its first 100k records
//! turn out nearly all distinct) must give exactly the answer of combining everything:
//! `fold_by_key`'s zero and `combine_by_key`'s `create` once per key per map partition,
//! and `reduce_by_key` merged in the same order, floating point included. Each result
//! is checked against a plain-Rust computation of those semantics over the same
//! partitions, with partitions well past the probe size.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Records per partition, twice the probe size.
const PER_PART: u64 = 200_000;
/// Distinct keys per partition: 90 % of the records are a key's first occurrence.
const DISTINCT: u64 = 180_000;

/// `parts` partitions of `PER_PART` records. In each, record `i` has key
/// `(i * 7919) % DISTINCT` (a permutation of the keys for `i < DISTINCT`), so the keys of
/// the first 20,000 records come back in the last 20,000, after the probe has decided.
fn partitions(parts: u64) -> Vec<Vec<(u64, i64)>> {
    (0..parts)
        .map(|p| {
            (0..PER_PART)
                .map(|i| ((i * 7919) % DISTINCT, (p * PER_PART + i) as i64 % 1000 + 1))
                .collect()
        })
        .collect()
}

/// Per key: `create` on its first value in a partition, `merge_value` on the next ones,
/// then `merge_combiners` over the partitions in partition order.
fn reference<V: Clone, C: Clone>(
    parts: &[Vec<(u64, V)>],
    create: impl Fn(V) -> C,
    merge_value: impl Fn(C, V) -> C,
    merge_combiners: impl Fn(C, C) -> C,
) -> BTreeMap<u64, C> {
    let mut out: BTreeMap<u64, C> = BTreeMap::new();
    for part in parts {
        let mut local: BTreeMap<u64, C> = BTreeMap::new();
        for (k, v) in part {
            let c = match local.remove(k) {
                Some(c) => merge_value(c, v.clone()),
                None => create(v.clone()),
            };
            local.insert(*k, c);
        }
        for (k, c) in local {
            let c = match out.remove(&k) {
                Some(prev) => merge_combiners(prev, c),
                None => c,
            };
            out.insert(k, c);
        }
    }
    out
}

/// Equal maps, or a panic naming the first differing key (not a dump of 180k entries).
fn assert_same<C: PartialEq + std::fmt::Debug>(got: &BTreeMap<u64, C>, want: &BTreeMap<u64, C>) {
    assert_eq!(got.len(), want.len(), "number of keys");
    for (k, w) in want {
        assert_eq!(got.get(k), Some(w), "key {k}");
    }
}

fn flatten<V: Clone>(parts: &[Vec<(u64, V)>]) -> Vec<(u64, V)> {
    parts.iter().flatten().cloned().collect()
}

#[test]
fn fold_by_key_applies_a_non_neutral_zero_once_per_key_per_partition() {
    let c = ctx(2);
    for n in [1u64, 2] {
        let parts = partitions(n);
        let rdd = c.parallelize(flatten(&parts), n as usize);
        let got: BTreeMap<u64, i64> = rdd
            .fold_by_key(10, |a, b| a + b)
            .collect()
            .unwrap()
            .into_iter()
            .collect();
        let want = reference(&parts, |v| 10 + v, |c, v| c + v, |a, b| a + b);
        assert_eq!(got.len(), want.len());
        for (k, w) in &want {
            assert_eq!(got[k], *w, "key {k}, {n} partitions");
        }
        // The keys that occur twice in a partition carry the zero once per partition.
        let k = 0u64; // records 0 and 180,000 of each partition
        assert_eq!(
            got[&k],
            n as i64 * 10 + parts.iter().map(|p| p[0].1 + p[180_000].1).sum::<i64>()
        );
    }
}

#[test]
fn aggregate_by_key_with_a_non_neutral_zero_matches_the_reference() {
    let c = ctx(2);
    let parts = partitions(2);
    let rdd = c.parallelize(flatten(&parts), 2);
    let got: BTreeMap<u64, (i64, u32)> = rdd
        .aggregate_by_key(
            (100i64, 0u32),
            |(s, n): (i64, u32), v: i64| (s + v, n + 1),
            |(s1, n1), (s2, n2)| (s1 + s2, n1 + n2),
        )
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    let want = reference(
        &parts,
        |v| (100 + v, 1u32),
        |(s, n), v| (s + v, n + 1),
        |(s1, n1), (s2, n2)| (s1 + s2, n1 + n2),
    );
    assert_same(&got, &want);
}

#[test]
fn combine_by_key_runs_create_once_per_key_per_partition() {
    let c = ctx(2);
    let parts = partitions(2);
    let rdd = c.parallelize(flatten(&parts), 2);
    // The combiner counts how often `create` ran for its key.
    let got: BTreeMap<u64, (i64, u64)> = rdd
        .combine_by_key(
            |v: i64| (v, 1u64),
            |(s, n): (i64, u64), v: i64| (s + v, n),
            |(s1, n1), (s2, n2)| (s1 + s2, n1 + n2),
        )
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    let creates: u64 = got.values().map(|c| c.1).sum();
    assert_eq!(creates, 2 * DISTINCT, "one create per key per partition");
    let want = reference(
        &parts,
        |v| (v, 1u64),
        |(s, n), v| (s + v, n),
        |(s1, n1), (s2, n2)| (s1 + s2, n1 + n2),
    );
    assert_same(&got, &want);
}

/// Values whose sum depends on how it is grouped: 1e16 + 1 rounds back to 1e16.
fn float_parts(parts: u64) -> Vec<Vec<(u64, f64)>> {
    partitions(parts)
        .into_iter()
        .enumerate()
        .map(|(p, part)| {
            part.into_iter()
                .enumerate()
                .map(|(i, (k, v))| {
                    // A key's two records in a partition get different classes.
                    let class = (i % 4 + usize::from(i >= DISTINCT as usize) + p) % 4;
                    let x = match class {
                        0 => 1e16,
                        1 => -1e16,
                        2 => 1.0,
                        _ => v as f64 * 0.001,
                    };
                    (k, x)
                })
                .collect()
        })
        .collect()
}

#[test]
fn reduce_by_key_that_stops_combining_merges_floats_in_the_plain_order() {
    let c = ctx(2);
    let parts = float_parts(3);
    let want = reference(&parts, |v| v, |a, b| a + b, |a, b| a + b);
    let rdd = c.parallelize(flatten(&parts), 3);
    let got: BTreeMap<u64, f64> = rdd
        .reduce_by_key(|a, b| a + b)
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    // The map tasks did stop combining (the fast path is what is under test).
    let written = c.last_job_metrics().unwrap().totals.shuffle_records_written;
    assert!(
        written > 3 * (PER_PART - 5_000),
        "combining went on: {written} records written"
    );
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        assert_eq!(
            got[k].to_bits(),
            w.to_bits(),
            "key {k}: {} vs {}",
            got[k],
            w
        );
    }
    // Not vacuous: some key's plain order gives another float than summing in the
    // order the records arrive at the reducer would.
    let arrival = reference(&[flatten(&parts)], |v| v, |a, b| a + b, |a, b| a + b);
    assert!(want
        .iter()
        .any(|(k, w)| arrival[k].to_bits() != w.to_bits()));

    // The same through flat_map_reduce_by_key, with string keys.
    let strings: Vec<Vec<(String, f64)>> = parts
        .iter()
        .map(|p| p.iter().map(|(k, v)| (format!("k{k}"), *v)).collect())
        .collect();
    let flat: Vec<(String, f64)> = strings.iter().flatten().cloned().collect();
    let got: BTreeMap<String, f64> = c
        .parallelize(flat, 3)
        .flat_map_reduce_by_key(
            |(k, v): &(String, f64), out: &mut ember::Emit<str, f64>| out.emit(k.as_str(), *v),
            |a, b| a + b,
        )
        .collect()
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got.len(), want.len());
    for (k, w) in &want {
        assert_eq!(got[&format!("k{k}")].to_bits(), w.to_bits(), "key k{k}");
    }
}
