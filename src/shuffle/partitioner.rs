//! Partitioners: which reduce partition a key goes to.
//!
//! * [`hash_partition`]: foldhash (fast variant) with the fixed seed [`PARTITION_SEED`],
//!   mapped to `0..n` by multiply-shift. Identical in every process running the same
//!   binary and across runs (no `RandomState`, no per-process seed); it may change if the
//!   foldhash version or a key type's `Hash` impl changes, which is harmless because every
//!   process of a job runs the same binary. Do not hash reducer-side tables with this seed:
//!   the keys one reducer receives share their high hash bits, which would cluster them in
//!   a hash table using the same function.
//! * [`RangePartitioner`]: `n - 1` sorted, distinct upper bounds chosen from a sample
//!   (Spark's `determineBounds` with equal weights); partition `i` holds keys in
//!   `(bounds[i-1], bounds[i]]`, so partition numbers never decrease as keys grow
//!   (never increase, for `descending`). With few distinct keys in the sample there may be
//!   fewer bounds, i.e. [`RangePartitioner::num_partitions`] below the number requested;
//!   partitions beyond it simply stay empty.

use std::hash::{BuildHasher, Hash};

use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};

/// Seed of the partitioning hash ("ember_sh"). Changing it reshuffles every job's keys.
pub const PARTITION_SEED: u64 = 0x656d_6265_725f_7368;

const PARTITION_HASHER: FixedState = FixedState::with_seed(PARTITION_SEED);

/// The reduce partition in `0..n` of `key` (0 if `n` is 0 or 1).
#[inline]
pub fn hash_partition<K: Hash + ?Sized>(key: &K, n: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    let h = PARTITION_HASHER.hash_one(key);
    ((u128::from(h) * u128::from(n)) >> 64) as u32
}

/// Assigns keys to partitions by sorted ranges. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangePartitioner<K> {
    bounds: Vec<K>,
    descending: bool,
}

impl<K: Ord> RangePartitioner<K> {
    /// A partitioner with the given upper bounds (sorted and deduplicated here).
    pub fn new(mut bounds: Vec<K>, descending: bool) -> Self {
        bounds.sort_unstable();
        bounds.dedup();
        RangePartitioner { bounds, descending }
    }

    /// Chooses up to `partitions - 1` bounds at evenly spaced quantiles of `sample`, each
    /// sample key weighing the same; a key repeated in the sample becomes at most one bound.
    pub fn from_sample(mut sample: Vec<K>, partitions: u32, descending: bool) -> Self {
        let wanted = partitions.saturating_sub(1) as usize;
        let mut bounds: Vec<K> = Vec::with_capacity(wanted.min(sample.len()));
        if wanted > 0 && !sample.is_empty() {
            sample.sort_unstable();
            let total = sample.len() as u128;
            let parts = u128::from(partitions);
            // Bound j (1-based) is the first key, greater than the previous bound, whose
            // cumulative weight reaches j/partitions of the total: cum * parts >= j * total.
            for (i, key) in sample.into_iter().enumerate() {
                let cum = i as u128 + 1;
                let next = bounds.len() as u128 + 1;
                if cum * parts >= next * total && bounds.last().is_none_or(|b| key > *b) {
                    bounds.push(key);
                    if bounds.len() == wanted {
                        break;
                    }
                }
            }
        }
        RangePartitioner { bounds, descending }
    }

    /// The partition of `key`: binary search over the bounds.
    #[inline]
    pub fn partition(&self, key: &K) -> u32 {
        let p = self.bounds.partition_point(|b| b < key) as u32;
        if self.descending {
            self.bounds.len() as u32 - p
        } else {
            p
        }
    }

    /// Number of partitions keys can land in: bounds + 1.
    pub fn num_partitions(&self) -> u32 {
        self.bounds.len() as u32 + 1
    }

    /// The upper bounds, ascending.
    pub fn bounds(&self) -> &[K] {
        &self.bounds
    }

    /// Whether partition 0 holds the largest keys.
    pub fn descending(&self) -> bool {
        self.descending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_partition_is_stable_across_runs() {
        // Computed once; must never change for a given foldhash version (the data path
        // of every cluster depends on all processes agreeing).
        let got = [
            hash_partition(&0u64, 1000),
            hash_partition(&42u64, 1000),
            hash_partition("spark", 1000),
            hash_partition(&"ember".to_string(), 1000),
            hash_partition(&(7u32, "x"), 1000),
        ];
        assert_eq!(got, [768, 335, 406, 402, 54], "fixed values");
        assert_eq!(
            hash_partition("ember", 1000),
            hash_partition(&"ember".to_string(), 1000)
        );
    }

    #[test]
    fn hash_partition_in_range_and_balanced() {
        for n in [1u32, 2, 3, 7, 16, 200] {
            let mut counts = vec![0u32; n as usize];
            let keys = 20_000 * n;
            for k in 0..keys as u64 {
                counts[hash_partition(&k, n) as usize] += 1;
            }
            for s in 0..20_000u32 {
                let p = hash_partition(&format!("word{s}"), n);
                assert!(p < n);
            }
            let mean = f64::from(keys) / f64::from(n);
            for (p, &c) in counts.iter().enumerate() {
                let dev = (f64::from(c) - mean).abs() / mean;
                assert!(dev < 0.05, "n={n} partition {p} has {c}, mean {mean}");
            }
        }
        assert_eq!(hash_partition(&5u8, 0), 0);
    }

    #[test]
    fn range_partitions_are_monotone_and_balanced() {
        // A scrambled uniform sample of 0..10_000.
        let sample: Vec<u64> = (0..10_000u64).map(|i| (i * 7919) % 10_000).collect();
        let rp = RangePartitioner::from_sample(sample, 10, false);
        assert_eq!(rp.num_partitions(), 10);
        let mut counts = [0u32; 10];
        let mut last = 0;
        for k in 0..10_000u64 {
            let p = rp.partition(&k);
            assert!(p >= last, "key {k} went to {p} after {last}");
            last = p;
            counts[p as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (900..=1100).contains(&c)),
            "{counts:?}"
        );
        // Keys beyond the sample land in the edge partitions.
        assert_eq!(rp.partition(&u64::MAX), 9);
    }

    #[test]
    fn descending_reverses_the_order() {
        let sample: Vec<i32> = (0..1000).collect();
        let asc = RangePartitioner::from_sample(sample.clone(), 4, false);
        let desc = RangePartitioner::from_sample(sample, 4, true);
        assert!(desc.descending());
        let mut last = u32::MAX;
        for k in 0..1000 {
            let p = desc.partition(&k);
            assert!(p <= last);
            last = p;
            assert_eq!(p, 3 - asc.partition(&k));
        }
        assert_eq!(desc.partition(&-5), 3);
        assert_eq!(desc.partition(&5000), 0);
    }

    #[test]
    fn few_distinct_keys_and_degenerate_inputs() {
        let rp = RangePartitioner::from_sample(vec![5u8; 100], 8, false);
        assert_eq!(rp.bounds(), &[5]);
        assert_eq!((rp.partition(&5), rp.partition(&6)), (0, 1));
        let skew: Vec<u32> = (0..100).map(|i| if i < 90 { 1 } else { i }).collect();
        let rp = RangePartitioner::from_sample(skew, 4, false);
        assert!(rp.bounds().windows(2).all(|w| w[0] < w[1]));
        assert!(rp.num_partitions() <= 4);
        let empty = RangePartitioner::<u32>::from_sample(Vec::new(), 8, false);
        assert_eq!((empty.num_partitions(), empty.partition(&3)), (1, 0));
        let one = RangePartitioner::from_sample(vec![1, 2, 3], 1, true);
        assert_eq!((one.num_partitions(), one.partition(&3)), (1, 0));
        let manual = RangePartitioner::new(vec![30, 10, 20, 10], false);
        assert_eq!(manual.bounds(), &[10, 20, 30]);
        assert_eq!(manual.partition(&10), 0);
        assert_eq!(manual.partition(&11), 1);
    }

    #[test]
    fn serde_round_trip() {
        let rp =
            RangePartitioner::from_sample(vec!["b".to_string(), "a".into(), "c".into()], 3, true);
        let bytes = postcard::to_allocvec(&rp).unwrap();
        let back: RangePartitioner<String> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, rp);
        assert_eq!(
            back.partition(&"a".to_string()),
            rp.partition(&"a".to_string())
        );
    }
}
