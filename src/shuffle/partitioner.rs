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
//! * [`Partitioner`]: what an RDD knows about how its records are spread by key (hash
//!   with a count, range from a sort, or a user's [`KeyPartitioner`]). Two RDDs with equal
//!   partitioners hold each key in the same partition number, which is what lets key-wise
//!   operators skip a shuffle (see `rdd/partitioning.rs`). Equality is Spark's: hash
//!   partitioners by count, range partitioners by bounds and direction, user
//!   partitioners by type and serialised state.

use std::any::TypeId;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};

use crate::plan::op::BinaryChecked;

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

/// A user-defined partitioner (Spark's custom `Partitioner`): which of
/// [`num_partitions`](Self::num_partitions) partitions a key belongs to. It travels in
/// the plan serialised, so every process routes keys alike; two are the same partitioner
/// (and co-partitioned RDDs skip shuffles) when their type and serialised state agree.
pub trait KeyPartitioner<K>:
    Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
    /// Number of partitions (at least 1).
    fn num_partitions(&self) -> u32;
    /// The partition of `key`, in `0..num_partitions()`; anything else fails the task
    /// that routed the key, naming the partitioner.
    fn partition(&self, key: &K) -> u32;
}

/// Which family a [`Partitioner`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionerKind {
    /// [`hash_partition`] over the partition count.
    Hash,
    /// Sorted key ranges (from `sort_by_key`), descending or not.
    Range {
        /// Whether partition 0 holds the largest keys.
        descending: bool,
    },
    /// A [`KeyPartitioner`], by its type name.
    Custom {
        /// `std::any::type_name` of the partitioner.
        name: &'static str,
    },
}

/// Routes a key to its partition inside a task (loaded once per task).
pub(crate) type Router<K> = Box<dyn Fn(&K) -> u32>;
/// Builds a [`Router`] from a partitioner's serialised identity; named in plans by offset.
pub(crate) type RouterLoader<K> = fn(&[u8]) -> crate::error::Result<Router<K>>;

fn hash_router<K: Hash + 'static>(identity: &[u8]) -> crate::error::Result<Router<K>> {
    let n: u32 = crate::data::decode("hash partitioner", identity)?;
    Ok(Box::new(move |k: &K| hash_partition(k, n)))
}

fn range_router<K>(identity: &[u8]) -> crate::error::Result<Router<K>>
where
    K: Ord + serde::de::DeserializeOwned + 'static,
{
    let r: RangePartitioner<K> = crate::data::decode("range partitioner", identity)?;
    Ok(Box::new(move |k: &K| r.partition(k)))
}

fn custom_router<K: 'static, P: KeyPartitioner<K>>(
    identity: &[u8],
) -> crate::error::Result<Router<K>> {
    let p: P = crate::data::decode(std::any::type_name::<P>(), identity)?;
    Ok(Box::new(move |k: &K| p.partition(k)))
}

/// How an RDD's records are spread over its partitions by key, when that is known.
#[derive(Clone)]
pub struct Partitioner {
    kind: PartitionerKind,
    partitions: u32,
    /// The partition count, range bounds or user partitioner state, serialised: the
    /// identity, and what the router is loaded from.
    identity: Arc<[u8]>,
    /// The key type routed: a partitioner is only ever applied to keys of this type.
    key_type: TypeId,
    /// Its name, for `Debug`.
    key_name: &'static str,
    /// Offset (see `plan::op`) of the [`RouterLoader`] for `key_type`.
    router: i64,
}

impl PartialEq for Partitioner {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.partitions == other.partitions
            && self.key_type == other.key_type
            && self.identity == other.identity
    }
}
impl Eq for Partitioner {}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitioner")
            .field("kind", &self.kind)
            .field("partitions", &self.partitions)
            .field("key", &self.key_name)
            .finish()
    }
}

fn loader_offset<K>(f: RouterLoader<K>) -> i64 {
    crate::plan::op::offset_of(f as usize)
}

impl Partitioner {
    /// Hash partitioning of keys of type `K` into `partitions`.
    pub fn hash<K: Hash + 'static>(partitions: u32) -> Self {
        Partitioner {
            kind: PartitionerKind::Hash,
            partitions,
            identity: postcard::to_allocvec(&partitions)
                .unwrap_or_default()
                .into(),
            key_type: TypeId::of::<K>(),
            key_name: std::any::type_name::<K>(),
            router: loader_offset::<K>(hash_router::<K>),
        }
    }

    /// The partitioner of a range shuffle (`bounds + 1` partitions).
    pub fn range<K>(range: &RangePartitioner<K>) -> Self
    where
        K: Ord + Serialize + serde::de::DeserializeOwned + 'static,
    {
        Partitioner {
            kind: PartitionerKind::Range {
                descending: range.descending(),
            },
            partitions: range.num_partitions(),
            identity: postcard::to_allocvec(range).unwrap_or_default().into(),
            key_type: TypeId::of::<K>(),
            key_name: std::any::type_name::<K>(),
            router: loader_offset::<K>(range_router::<K>),
        }
    }

    /// The partitioner of a user's [`KeyPartitioner`].
    pub fn custom<K: 'static, P: KeyPartitioner<K>>(p: &P) -> Self {
        Partitioner {
            kind: PartitionerKind::Custom {
                name: std::any::type_name::<P>(),
            },
            partitions: p.num_partitions(),
            identity: postcard::to_allocvec(p).unwrap_or_default().into(),
            key_type: TypeId::of::<K>(),
            key_name: std::any::type_name::<K>(),
            router: loader_offset::<K>(custom_router::<K, P>),
        }
    }

    /// Which family it is.
    pub fn kind(&self) -> &PartitionerKind {
        &self.kind
    }

    /// Number of partitions keys are spread over.
    pub fn num_partitions(&self) -> usize {
        self.partitions as usize
    }

    /// Whether it routes keys of type `K`.
    pub fn routes<K: 'static>(&self) -> bool {
        self.key_type == TypeId::of::<K>()
    }

    /// The partition `key` is in: `None` if `K` is not this partitioner's key type or a
    /// user partitioner answers out of range.
    pub fn partition_of<K: 'static>(&self, key: &K) -> Option<u32> {
        let route = self.router::<K>()?.ok()?;
        Some(route(key)).filter(|&p| p < self.partitions)
    }

    /// This process's router for keys of type `K` (`None` for another key type).
    pub(crate) fn router<K: 'static>(&self) -> Option<crate::error::Result<Router<K>>> {
        let load = self.loader::<K>()?;
        Some(load(&self.identity))
    }

    /// The loader of this partitioner's router and what to load it from, as a plan
    /// carries them (`None` for another key type).
    pub(crate) fn loader<K: 'static>(&self) -> Option<RouterLoader<K>> {
        if !self.routes::<K>() {
            return None;
        }
        // SAFETY: a `Partitioner` is made only in this process (it is not
        // deserialisable), so its offset was made here.
        let here = unsafe { BinaryChecked::vouch() };
        // SAFETY: `router` is the offset of a `RouterLoader<K'>` with `TypeId::of::<K'>()`
        // equal to `key_type`, checked equal to `K`'s just above.
        Some(unsafe { loader_from_offset::<K>(self.router, here) })
    }

    pub(crate) fn router_offset(&self) -> i64 {
        self.router
    }

    pub(crate) fn identity(&self) -> &[u8] {
        &self.identity
    }
}

/// The router loader an offset names: one offset field holds loaders of many key
/// types, so the type is the caller's to argue (the binary is `checked`'s).
///
/// # Safety
/// `offset` must come from [`loader_offset`] of a `RouterLoader<K>` (the same `K`).
pub(crate) unsafe fn loader_from_offset<K>(offset: i64, checked: BinaryChecked) -> RouterLoader<K> {
    // SAFETY: per the function's contract; `RouterLoader<K>` is a `fn` pointer.
    unsafe { crate::plan::op::fn_at(offset, checked) }
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
