//! Shared helpers for the integration tests: contexts, deterministic data, and plain-Rust
//! reference implementations of the operators (to compare ember's results against).
#![allow(dead_code)]

pub mod cluster;
pub mod faultjob;
pub mod moto;
pub mod process;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use ember::{Conf, Context, DEFAULT_EXECUTOR_MEMORY};

/// A local context with `threads` task slots and the default memory limit.
pub fn ctx(threads: usize) -> Context {
    ctx_mem(threads, DEFAULT_EXECUTOR_MEMORY)
}

/// A local context with `threads` task slots and `memory` bytes of executor memory.
pub fn ctx_mem(threads: usize, memory: u64) -> Context {
    let mut conf = Conf::local(threads, memory);
    conf.progress = false;
    Context::with_conf(conf).expect("local context")
}

/// Lines of `content` (with `\n` or `\r\n` endings, no lone `\r`) as a reader of text
/// files should see them.
pub fn reference_lines(content: &str) -> Vec<String> {
    let mut lines: Vec<String> = content
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
        .collect();
    if content.ends_with('\n') || content.is_empty() {
        lines.pop();
    }
    lines
}

/// `v`, sorted (for order-independent comparison).
pub fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Key-value pairs sorted by key with each value list sorted too.
pub fn sorted_groups<K: Ord, V: Ord>(v: Vec<(K, Vec<V>)>) -> Vec<(K, Vec<V>)> {
    let mut v: Vec<(K, Vec<V>)> = v
        .into_iter()
        .map(|(k, mut vs)| {
            vs.sort();
            (k, vs)
        })
        .collect();
    v.sort();
    v
}

/// A tiny deterministic generator (splitmix64), so tests need no extra dependency.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// `n` pairs with keys in `0..keys` and values in `-1000..1000`.
pub fn random_pairs(seed: u64, n: usize, keys: u64) -> Vec<(u64, i64)> {
    let mut rng = SplitMix::new(seed);
    (0..n)
        .map(|_| (rng.below(keys), rng.below(2000) as i64 - 1000))
        .collect()
}

/// `n` pairs where key 0 holds about 90% of the records and the rest spread over
/// `1..keys`.
pub fn skewed_pairs(seed: u64, n: usize, keys: u64) -> Vec<(u64, i64)> {
    let mut rng = SplitMix::new(seed);
    (0..n)
        .map(|_| {
            let k = if rng.below(10) < 9 {
                0
            } else {
                1 + rng.below(keys.max(2) - 1)
            };
            (k, rng.below(2000) as i64 - 1000)
        })
        .collect()
}

/// Reference `group_by_key`: key -> values (values in input order).
pub fn ref_group<K: Ord + Clone, V: Clone>(data: &[(K, V)]) -> BTreeMap<K, Vec<V>> {
    let mut m: BTreeMap<K, Vec<V>> = BTreeMap::new();
    for (k, v) in data {
        m.entry(k.clone()).or_default().push(v.clone());
    }
    m
}

/// Reference `group_by_key` with sorted value lists, as a sorted vector.
pub fn ref_group_sorted<K: Ord + Clone, V: Ord + Clone>(data: &[(K, V)]) -> Vec<(K, Vec<V>)> {
    sorted_groups(ref_group(data).into_iter().collect())
}

/// Reference `reduce_by_key`, sorted by key.
pub fn ref_reduce<K: Ord + Clone, V: Clone>(data: &[(K, V)], f: impl Fn(V, V) -> V) -> Vec<(K, V)> {
    ref_group(data)
        .into_iter()
        .map(|(k, vs)| {
            let mut it = vs.into_iter();
            let first = it.next().expect("group has a value");
            (k, it.fold(first, &f))
        })
        .collect()
}

/// Reference inner join by nested loops, sorted.
pub fn ref_join<K: Ord + Clone, V: Ord + Clone, W: Ord + Clone>(
    l: &[(K, V)],
    r: &[(K, W)],
) -> Vec<(K, (V, W))> {
    let mut out = Vec::new();
    for (k, v) in l {
        for (k2, w) in r {
            if k == k2 {
                out.push((k.clone(), (v.clone(), w.clone())));
            }
        }
    }
    sorted(out)
}

/// Reference left outer join by nested loops, sorted.
pub fn ref_left_join<K: Ord + Clone, V: Ord + Clone, W: Ord + Clone>(
    l: &[(K, V)],
    r: &[(K, W)],
) -> Vec<(K, (V, Option<W>))> {
    let mut out = Vec::new();
    for (k, v) in l {
        let mut matched = false;
        for (k2, w) in r {
            if k == k2 {
                matched = true;
                out.push((k.clone(), (v.clone(), Some(w.clone()))));
            }
        }
        if !matched {
            out.push((k.clone(), (v.clone(), None)));
        }
    }
    sorted(out)
}

/// Reference right outer join by nested loops, sorted.
pub fn ref_right_join<K: Ord + Clone, V: Ord + Clone, W: Ord + Clone>(
    l: &[(K, V)],
    r: &[(K, W)],
) -> Vec<(K, (Option<V>, W))> {
    let mut out = Vec::new();
    for (k2, w) in r {
        let mut matched = false;
        for (k, v) in l {
            if k == k2 {
                matched = true;
                out.push((k.clone(), (Some(v.clone()), w.clone())));
            }
        }
        if !matched {
            out.push((k2.clone(), (None, w.clone())));
        }
    }
    sorted(out)
}

/// The result of a full outer join.
pub type FullJoin<K, V, W> = Vec<(K, (Option<V>, Option<W>))>;

/// Reference full outer join by nested loops, sorted.
pub fn ref_full_join<K: Ord + Clone, V: Ord + Clone, W: Ord + Clone>(
    l: &[(K, V)],
    r: &[(K, W)],
) -> FullJoin<K, V, W> {
    let mut out: FullJoin<K, V, W> = ref_left_join(l, r)
        .into_iter()
        .map(|(k, (v, w))| (k, (Some(v), w)))
        .collect();
    for (k2, w) in r {
        if !l.iter().any(|(k, _)| k == k2) {
            out.push((k2.clone(), (None, Some(w.clone()))));
        }
    }
    sorted(out)
}

/// Reference `subtract_by_key`, sorted.
pub fn ref_subtract<K: Ord + Clone, V: Ord + Clone, W>(l: &[(K, V)], r: &[(K, W)]) -> Vec<(K, V)> {
    sorted(
        l.iter()
            .filter(|(k, _)| !r.iter().any(|(k2, _)| k2 == k))
            .cloned()
            .collect(),
    )
}

/// Occurrences of each item.
pub fn ref_counts<T: Hash + Eq + Clone>(items: impl IntoIterator<Item = T>) -> HashMap<T, u64> {
    let mut m = HashMap::new();
    for x in items {
        *m.entry(x).or_insert(0) += 1;
    }
    m
}

/// Sorted distinct items.
pub fn ref_distinct<T: Ord + Clone>(items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    v.sort();
    v.dedup();
    v
}

/// Asserts that `v` is sorted ascending (or descending) by `key`.
pub fn assert_sorted_by<T: std::fmt::Debug, K: Ord>(
    v: &[T],
    key: impl Fn(&T) -> K,
    ascending: bool,
) {
    for (i, w) in v.windows(2).enumerate() {
        let (a, b) = (key(&w[0]), key(&w[1]));
        let ok = if ascending { a <= b } else { a >= b };
        assert!(
            ok,
            "not sorted (ascending={ascending}) at {i}: {:?} then {:?}",
            w[0], w[1]
        );
    }
}
