//! The external aggregation map (Spark's `ExternalAppendOnlyMap`): combines values by key
//! in a hash table and spills it to disk as hash-sorted runs when the memory pool says no.
//!
//! Invariants:
//! * The in-memory table is an `AggTable`: one `hashbrown::HashTable<(K, C)>` while
//!   small, radix-partitioned sub-tables with staged inserts once large (its module doc
//!   has the invariants; a key's records are folded in insert order either way). It is
//!   hashed with the aggregator's `BuildHasher` (default: foldhash's deterministic
//!   `FixedState`). Hashes are not stored in the table, which keeps entries small and
//!   cache-friendly. They are recomputed when a table grows and when it spills.
//!   Inserting into an existing key does not allocate.
//! * Keys in the table are unique. A spill writes every entry as `(K, C)` in ascending hash
//!   order, so within a run keys are unique and sorted by hash. Hashes are not stored on
//!   disk: they are recomputed with the same hasher when a run is read.
//! * Reading back k-way merges the runs and the hash-sorted in-memory table by hash and
//!   yields each key exactly once; `merge` owns that merge and its invariants. Without
//!   spills the table is drained directly and not sorted.
//! * Memory accounting, the spill floor and merge fan-in are described in `spill/mod.rs`.
//!   A spill briefly needs about twice the table's memory (the table plus the hash-sorted
//!   vector it is drained into); that transient is not charged to the pool.
//!   After any `Err` the aggregator must be dropped: a failed spill loses the table.

use std::hash::{BuildHasher, Hash};
use std::path::PathBuf;
use std::sync::Arc;

use foldhash::fast::FixedState;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use super::aggregator::Aggregate;
use super::table::{AggTable, Pending};
use super::{Reserved, Source, SpillLimits, SpillMetrics, Spiller};
use crate::error::Result;
use crate::memory::Reservation;
use merge::{merge_runs, sorted_by_hash};

mod merge;

/// A hash aggregation map that spills to disk under memory pressure.
pub struct ExternalAggregator<K, V, C, A, S = FixedState> {
    agg: A,
    hasher: S,
    table: AggTable<K, V, C>,
    spiller: Spiller,
}

impl<K, V, C, A> ExternalAggregator<K, V, C, A, FixedState>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + 'static,
    V: Serialize + 'static,
    C: Serialize + DeserializeOwned + Send + 'static,
    A: Aggregate<K, V, C>,
{
    /// An empty aggregator that charges its memory to `reservation` and spills into
    /// `spill_dir` (created if missing).
    pub fn new(agg: A, reservation: Reservation, spill_dir: PathBuf) -> Self {
        Self::with_hasher(agg, reservation, spill_dir, FixedState::default())
    }
}

impl<K, V, C, A, S> ExternalAggregator<K, V, C, A, S>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + 'static,
    V: Serialize + 'static,
    C: Serialize + DeserializeOwned + Send + 'static,
    A: Aggregate<K, V, C>,
    S: BuildHasher + Clone + Send + 'static,
{
    /// Like [`new`](ExternalAggregator::new) with an explicit hasher. It must be
    /// deterministic for the aggregator's lifetime, since runs are ordered by its hashes.
    pub fn with_hasher(agg: A, reservation: Reservation, spill_dir: PathBuf, hasher: S) -> Self {
        ExternalAggregator {
            agg,
            hasher,
            table: AggTable::new(),
            spiller: Spiller::new(reservation, spill_dir),
        }
    }

    /// Sets when it may spill and how it merges back (default [`SpillLimits::default`]).
    pub fn with_limits(mut self, limits: SpillLimits) -> Self {
        self.spiller.limits = limits;
        self
    }

    /// Folds a value into its key's combiner (creating it for a new key).
    pub fn insert(&mut self, k: K, v: V) -> Result<()> {
        let hash = self.hasher.hash_one(&k);
        self.table
            .upsert(&self.agg, &self.hasher, hash, k, Pending::Value(v));
        self.after_insert()
    }

    /// Like [`insert`](Self::insert) with a borrowed key (a `&str` for a `String` key):
    /// the key is turned into an owned `K` by `to_key` only the first time it is seen, so
    /// combining many records of few keys allocates nothing per record. `Q` hashes like
    /// `K` (the `Borrow` contract), so both forms find the same entry.
    pub fn insert_ref<Q>(&mut self, q: &Q, v: V, to_key: impl FnOnce(&Q) -> K) -> Result<()>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(q);
        self.insert_ref_hashed(hash, q, v, to_key)
    }

    /// The hasher keys are hashed with (for a caller that hashes keys ahead of
    /// [`insert_ref_hashed`](Self::insert_ref_hashed)).
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Asks the cache for what inserting a key of hash `hash` will read first, so that a
    /// caller who knows its next keys can overlap their cache misses. Only a hint.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        self.table.prefetch(hash)
    }

    /// [`insert_ref`](Self::insert_ref) with `hash`, which must be
    /// [`hasher`](Self::hasher)`().hash_one(q)`.
    #[inline]
    pub fn insert_ref_hashed<Q>(
        &mut self,
        hash: u64,
        q: &Q,
        v: V,
        to_key: impl FnOnce(&Q) -> K,
    ) -> Result<()>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        debug_assert_eq!(hash, self.hasher.hash_one(q), "hash of another key");
        self.table
            .upsert_ref(&self.agg, &self.hasher, hash, q, v, to_key);
        self.after_insert()
    }

    /// Folds a combiner (for example a map-side partial aggregate) into its key's combiner.
    pub fn insert_combiner(&mut self, k: K, c: C) -> Result<()> {
        let hash = self.hasher.hash_one(&k);
        self.table
            .upsert(&self.agg, &self.hasher, hash, k, Pending::Combiner(c));
        self.after_insert()
    }

    /// Spills so far.
    pub fn metrics(&self) -> SpillMetrics {
        self.spiller.metrics
    }

    /// Keys currently held in memory (applying staged inserts first, so this is exact).
    pub fn in_memory_len(&mut self) -> usize {
        self.table.settle(&self.agg, &self.hasher);
        self.table.keys()
    }

    /// Estimated bytes of the in-memory table and its staged inserts.
    pub fn estimated_bytes(&self) -> u64 {
        self.table.estimated_bytes()
    }

    #[inline]
    fn after_insert(&mut self) -> Result<()> {
        if !self.spiller.tick() {
            return Ok(());
        }
        let entries = self.table.keys() + self.table.staged();
        if !self.spiller.must_spill(self.estimated_bytes(), entries) {
            return Ok(());
        }
        // Applying what is staged and freeing its buffers may free enough; a spill needs
        // it done anyway, so its run holds every record so far.
        self.table.settle(&self.agg, &self.hasher);
        self.table.release_staging();
        if self
            .spiller
            .must_spill(self.estimated_bytes(), self.table.keys())
        {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the (settled) table as one run.
    fn spill(&mut self) -> Result<()> {
        let entries = sorted_by_hash(self.table.take_entries(), &self.hasher);
        self.spiller
            .spill(entries.into_iter().map(|(_, k, c)| (k, c)))
    }

    /// Consumes the aggregator: yields every key exactly once with its fully merged
    /// combiner, in no particular order. Streams from disk if anything was spilled. With more
    /// runs than the merge fan-in, intermediate merge passes run here before returning. The
    /// iterator keeps the reservation and the spill files until it is dropped.
    // Named as the engine's API asks. It returns a `Result`, so it cannot be `IntoIterator`.
    #[allow(clippy::type_complexity, clippy::should_implement_trait)]
    pub fn into_iter(self) -> Result<Box<dyn Iterator<Item = Result<(K, C)>> + Send>> {
        let ExternalAggregator {
            agg,
            hasher,
            mut table,
            mut spiller,
        } = self;
        table.settle(&agg, &hasher);
        table.release_staging();
        let entries = table.take_entries();
        if spiller.runs.is_empty() {
            return Ok(Box::new(Reserved {
                inner: entries.map(Ok),
                _reservation: spiller.reservation,
            }));
        }
        let agg = Arc::new(agg);
        spiller.merge_down(|runs| {
            Ok(Box::new(merge_runs::<K, V, C, A, S>(runs, None, &hasher, &agg)?) as Source<(K, C)>)
        })?;
        let mem = sorted_by_hash(entries, &hasher);
        let runs = std::mem::take(&mut spiller.runs);
        let merged = merge_runs(runs, Some(Box::new(mem.into_iter().map(Ok))), &hasher, &agg)?;
        Ok(Box::new(Reserved {
            inner: merged,
            _reservation: spiller.reservation,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EmberError;
    use crate::memory::MemoryPool;
    use crate::spill::test_data::{records, Collect};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::hash::Hasher;
    use std::path::Path;

    /// Counts values and sums their lengths.
    struct CountLen;
    impl<K: 'static> Aggregate<K, String, (u64, u64)> for CountLen {
        fn create(&self, _: &K, v: String) -> (u64, u64) {
            (1, v.len() as u64)
        }
        fn merge_value(&self, c: &mut (u64, u64), v: String) {
            c.0 += 1;
            c.1 += v.len() as u64;
        }
        fn merge_combiners(&self, c: &mut (u64, u64), o: (u64, u64)) {
            c.0 += o.0;
            c.1 += o.1;
        }
    }

    /// Sends every key to one of `n` hashes.
    #[derive(Clone, Default)]
    struct FewHashes<const N: u64>;
    struct FewHasher<const N: u64>(u64);
    impl<const N: u64> Hasher for FewHasher<N> {
        fn finish(&self) -> u64 {
            self.0 % N
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.wrapping_mul(31).wrapping_add(*b as u64);
            }
        }
    }
    impl<const N: u64> BuildHasher for FewHashes<N> {
        type Hasher = FewHasher<N>;
        fn build_hasher(&self) -> FewHasher<N> {
            FewHasher(0)
        }
    }

    fn files_in(dir: &Path) -> usize {
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    fn expected_counts(recs: &[(u64, String)]) -> HashMap<u64, (u64, u64)> {
        let mut m = HashMap::new();
        for (k, v) in recs {
            let e = m.entry(*k).or_insert((0, 0));
            e.0 += 1;
            e.1 += v.len() as u64;
        }
        m
    }

    fn collect_unique<K: Hash + Eq + std::fmt::Debug, C>(
        it: Box<dyn Iterator<Item = Result<(K, C)>> + Send>,
    ) -> HashMap<K, C> {
        let mut out = HashMap::new();
        for r in it {
            let (k, c) = r.unwrap();
            let key = format!("{k:?}");
            assert!(out.insert(k, c).is_none(), "key {key} yielded twice");
        }
        out
    }

    #[test]
    fn large_limit_does_not_spill() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(1 << 30);
        let recs = records(50_000, 5_000, 1);
        let mut agg = ExternalAggregator::new(CountLen, pool.reservation("agg"), dir.path().into());
        for (k, v) in recs.iter().cloned() {
            agg.insert(k, v).unwrap();
        }
        assert_eq!(agg.metrics(), SpillMetrics::default());
        assert!(
            pool.used() > 5_000 * 40,
            "map is accounted: {}",
            pool.used()
        );
        let got = collect_unique(agg.into_iter().unwrap());
        assert_eq!(got, expected_counts(&recs));
        assert_eq!(pool.used(), 0);
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn a_partitioned_table_spills_and_merges_correctly() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = dir.path().join("spill");
        let pool = MemoryPool::new(6 << 20);
        let recs = records(600_000, 150_000, 5);
        let mut agg = ExternalAggregator::new(CountLen, pool.reservation("agg"), spill_dir.clone());
        let mut partitioned = false;
        for (k, v) in recs.iter().cloned() {
            agg.insert(k, v).unwrap();
            partitioned |= agg.table.is_partitioned();
        }
        assert!(partitioned, "the table split into sub-tables");
        let m = agg.metrics();
        assert!(m.spill_count > 0, "{m:?}");
        assert_eq!(files_in(&spill_dir) as u64, m.spill_count);
        let got = collect_unique(agg.into_iter().unwrap());
        assert_eq!(got, expected_counts(&recs));
        assert_eq!(pool.used(), 0);
        assert_eq!(files_in(&spill_dir), 0);
    }

    #[test]
    fn tiny_limit_spills_and_merges_correctly() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = dir.path().join("spill");
        let pool = MemoryPool::new(64 << 10);
        let recs = records(200_000, 10_000, 2);
        let mut agg = ExternalAggregator::new(CountLen, pool.reservation("agg"), spill_dir.clone());
        for (k, v) in recs.iter().cloned() {
            agg.insert(k, v).unwrap();
        }
        let m = agg.metrics();
        assert!(m.spill_count > 0 && m.bytes_spilled > 0, "{m:?}");
        // More runs than the default fan-in (64), so intermediate merges happen too.
        assert!(m.spill_count > 64, "{m:?}");
        assert_eq!(files_in(&spill_dir) as u64, m.spill_count);
        let it = agg.into_iter().unwrap();
        assert!(pool.used() <= pool.limit());
        let got = collect_unique(it);
        assert_eq!(got, expected_counts(&recs));
        assert_eq!(pool.used(), 0);
        assert_eq!(files_in(&spill_dir), 0);
    }

    #[test]
    fn growing_combiners_and_insert_combiner() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(256 << 10);
        let recs = records(30_000, 2_000, 3);
        // Map side: two partial aggregations, each spilling.
        let mut partials = Vec::new();
        for (i, half) in recs.chunks(recs.len() / 2).enumerate() {
            let res = pool.reservation(&format!("map{i}"));
            let mut agg = ExternalAggregator::new(Collect, res, dir.path().into());
            for (k, v) in half.iter().cloned() {
                agg.insert(k, v).unwrap();
            }
            assert!(agg.metrics().spill_count > 0);
            partials.extend(agg.into_iter().unwrap().map(Result::unwrap));
        }
        // Reduce side merges the combiners.
        let mut reduce =
            ExternalAggregator::new(Collect, pool.reservation("reduce"), dir.path().into())
                .with_limits(
                    SpillLimits::default()
                        .with_min_spill(200, 1 << 20)
                        .with_merge_fan_in(3),
                );
        for (k, c) in partials {
            reduce.insert_combiner(k, c).unwrap();
        }
        assert!(reduce.metrics().spill_count > 3);
        let mut got = collect_unique(reduce.into_iter().unwrap());
        let mut expected: HashMap<u64, Vec<String>> = HashMap::new();
        for (k, v) in recs {
            expected.entry(k).or_default().push(v);
        }
        for v in got.values_mut().chain(expected.values_mut()) {
            v.sort_unstable();
        }
        assert_eq!(got, expected);
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn hash_collisions_are_merged_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(4 << 10);
        let recs = records(20_000, 700, 4);
        let mut agg = ExternalAggregator::with_hasher(
            CountLen,
            pool.reservation("agg"),
            dir.path().into(),
            FewHashes::<3>,
        )
        .with_limits(
            SpillLimits::default()
                .with_min_spill(100, 1 << 20)
                .with_merge_fan_in(4),
        );
        for (k, v) in recs.iter().cloned() {
            agg.insert(k, v).unwrap();
        }
        assert!(agg.metrics().spill_count > 10);
        assert_eq!(
            collect_unique(agg.into_iter().unwrap()),
            expected_counts(&recs)
        );

        // String keys, all with the same hash, no spill.
        let mut agg = ExternalAggregator::with_hasher(
            CountLen,
            MemoryPool::new(1 << 30).reservation("agg"),
            dir.path().into(),
            FewHashes::<1>,
        );
        for i in 0..300 {
            agg.insert(format!("k{}", i % 50), "ab".to_string())
                .unwrap();
        }
        let got = collect_unique(agg.into_iter().unwrap());
        assert_eq!(got.len(), 50);
        assert!(got.values().all(|c| *c == (6, 12)));
    }

    #[test]
    fn corrupt_spill_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::new(16 << 10);
        let mut agg = ExternalAggregator::new(CountLen, pool.reservation("agg"), dir.path().into());
        for (k, v) in records(20_000, 5_000, 5) {
            agg.insert(k, v).unwrap();
        }
        assert!(agg.metrics().spill_count > 0);
        let victim = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut bytes = std::fs::read(&victim).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&victim, bytes).unwrap();
        let err = agg
            .into_iter()
            .and_then(|it| it.collect::<Result<Vec<_>>>())
            .unwrap_err();
        assert!(matches!(err, EmberError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains(&victim.display().to_string()),
            "{err}"
        );
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn is_send() {
        fn send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let agg: ExternalAggregator<u64, String, (u64, u64), CountLen> = ExternalAggregator::new(
            CountLen,
            MemoryPool::new(1).reservation("a"),
            dir.path().into(),
        );
        send(&agg);
        send(&agg.into_iter().unwrap());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn matches_hashmap(
            recs in prop::collection::vec((0u16..300, "[a-z]{0,12}"), 0..3000),
            fan_in in 2usize..6,
            min_spill in 1usize..200,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let pool = MemoryPool::new(2 << 10);
            let mut agg = ExternalAggregator::with_hasher(
                CountLen, pool.reservation("agg"), dir.path().into(), FewHashes::<64>,
            )
            .with_limits(
                SpillLimits::default()
                    .with_min_spill(min_spill, u64::MAX)
                    .with_merge_fan_in(fan_in),
            );
            let mut expected: HashMap<u16, (u64, u64)> = HashMap::new();
            for (k, v) in recs {
                let e = expected.entry(k).or_default();
                e.0 += 1;
                e.1 += v.len() as u64;
                agg.insert(k, v).unwrap();
            }
            prop_assert_eq!(collect_unique(agg.into_iter().unwrap()), expected);
            prop_assert_eq!(files_in(dir.path()), 0);
            prop_assert_eq!(pool.used(), 0);
        }
    }
}
