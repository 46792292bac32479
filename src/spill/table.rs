//! The in-memory table of an [`ExternalAggregator`](super::ExternalAggregator): one hash
//! table while it is small; once it outgrows a core's cache, [`FANOUT`] sub-tables picked
//! by bits of the key's hash, with inserts staged per sub-table and applied one
//! sub-table at a time (a radix-partitioned hash aggregation).
//!
//! Why: inserting straight into one table of a few hundred thousand keys misses cache on
//! nearly every record. Profile of kvsum (50 M records, 5 M keys, 16 reducers of 312,000
//! keys each): 25 % of the job in the reduce side's `ExternalAggregator::insert`, mostly
//! waiting on the entry's cache line. Applying a bucket of staged records one after
//! another keeps its sub-table (a 64th of the table) in cache.
//!
//! Invariants:
//! * A key lives in exactly one sub-table, [`part`]`(hash)`, and its staged records wait
//!   in the bucket of the same index, so sub-tables hold disjoint keys.
//! * A key's records are applied in the order they were inserted: a bucket is drained
//!   front to back, and drained before any direct operation on its sub-table
//!   ([`AggTable::upsert_ref`]). Every key's combiner is therefore the same fold, in the
//!   same order, as with one table and no staging: the plain path's answer exactly.
//! * [`AggTable::settle`] applies everything staged. Whoever reads the table (spill,
//!   read back, the map-side probe's key count) settles first.
//! * Staged records are charged like entries: their slots at `size_of` plus their sampled
//!   heap bytes. At most `max(STAGE_MIN, STAGE_PER_KEY * keys)` records wait, so staging
//!   stays a small multiple of the table it feeds.
//! * The plain table switches to sub-tables once, when it reaches [`PARTITION_AT`] keys,
//!   and never switches back (a spill empties the sub-tables but keeps them).
//! * Each table's [`Anchor`] is where its entries end and its control bytes begin, read
//!   off the entry of the last insert; it is refreshed after every insert (the only way a
//!   table grows) and cleared when the table is replaced. [`AggTable::prefetch`] only
//!   computes hint addresses from it, so a stale or wrong anchor costs speed, never a value.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use serde::Serialize;

use super::aggregator::Aggregate;
use super::anchor::Anchor;
use super::size::SizeEstimator;

/// Sub-tables of a partitioned table (a power of two).
const FANOUT: usize = 64;
/// Keys at which the plain table splits into sub-tables: 32,768 entries of 32 bytes are
/// about 1 MiB, one core's L2 cache here.
const PARTITION_AT: usize = 32 * 1024;
/// Staged records that may always wait, however few keys the table holds.
const STAGE_MIN: usize = 64 * 1024;
/// Staged records allowed per key held: a bucket's batch then touches each entry of its
/// sub-table about this many times, so most of its accesses hit cache.
const STAGE_PER_KEY: usize = 2;
/// Bits of the hash below the sub-table index. hashbrown takes a bucket from the low bits
/// and its control tag from the top 7, so the index comes from bits they leave alone.
const PART_SHIFT: u32 = 40;

/// A bucket of at least `1/WARM_BELOW` of its sub-table's keys prefetches the sub-table
/// first (see [`warm`]).
const WARM_BELOW: usize = 4;

/// Asks the cache for every entry of `table`, front to back, before a bucket's records
/// hit it in hash order. A sweep in address order is a stream the memory system serves at
/// bandwidth; the bucket's own lookups are random and would each wait on a miss (kvsum's
/// profile: the reduce side's key compare in [`AggTable::apply`], 19 % of the job, nearly
/// all of it that load). A prefetch is only a hint: it changes no value and cannot fault.
#[inline]
fn warm<T>(table: &HashTable<T>) {
    #[cfg(target_arch = "x86_64")]
    for e in table.iter() {
        // SAFETY: `_mm_prefetch` only hints the cache; any address is allowed, and this
        // one is a live entry. SSE is part of every x86_64 target.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                (e as *const T).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = table;
}

/// Bytes past a bucket's end that [`prefetch_ahead`] asks for.
const STAGE_PREFETCH_BYTES: usize = 256;

/// Asks the cache for the line a few pushes ahead of `bucket`'s end. With [`FANOUT`]
/// buckets filling at once, the hardware's stream prefetch does not follow them all, and
/// every push that starts a line waited on it (kvsum's profile after [`warm`]: the store
/// of a staged record, half of `read_grouped`'s samples).
#[inline]
fn prefetch_ahead<T>(bucket: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let ahead = bucket
            .as_ptr_range()
            .end
            .cast::<i8>()
            .wrapping_add(STAGE_PREFETCH_BYTES);
        // SAFETY: a prefetch is a hint: it neither faults nor changes memory, whatever the
        // address (past the allocation it is simply wasted).
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ahead) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bucket;
}

/// The sub-table of a key with hash `hash` under `mask` (0 for a plain table).
#[inline]
fn part(hash: u64, mask: usize) -> usize {
    (hash >> PART_SHIFT) as usize & mask
}

/// A staged operation on a key: a value to fold in, or a combiner to merge.
#[derive(Serialize)]
pub(crate) enum Pending<V, C> {
    Value(V),
    Combiner(C),
}

type Staged<K, V, C> = (u64, K, Pending<V, C>);

/// See the module doc.
pub(crate) struct AggTable<K, V, C> {
    /// One table (plain) or [`FANOUT`] sub-tables.
    tables: Vec<HashTable<(K, C)>>,
    /// Per table, its [`Anchor`].
    anchors: Vec<Anchor>,
    /// `tables.len() - 1`.
    mask: usize,
    /// Per sub-table, the records waiting for it; empty while plain.
    buckets: Vec<Vec<Staged<K, V, C>>>,
    staged: usize,
    keys: usize,
    estimator: SizeEstimator,
    staged_estimator: SizeEstimator,
}

impl<K, V, C> AggTable<K, V, C>
where
    K: Hash + Eq + Serialize,
    V: Serialize,
    C: Serialize,
{
    pub(crate) fn new() -> Self {
        AggTable {
            tables: vec![HashTable::new()],
            anchors: vec![Anchor::default()],
            mask: 0,
            buckets: Vec::new(),
            staged: 0,
            keys: 0,
            // One control byte per slot.
            estimator: SizeEstimator::new::<(K, C)>(1),
            staged_estimator: SizeEstimator::new::<Staged<K, V, C>>(0),
        }
    }

    /// Keys held in the tables (not counting staged records).
    pub(crate) fn keys(&self) -> usize {
        self.keys
    }

    /// True once the table has split into sub-tables.
    #[cfg(test)]
    pub(crate) fn is_partitioned(&self) -> bool {
        self.mask != 0
    }

    /// Records staged and not yet applied.
    pub(crate) fn staged(&self) -> usize {
        self.staged
    }

    /// Estimated bytes: sampled entries plus empty slots of every table, plus the staging
    /// buckets' slots and the sampled heap of what they hold.
    pub(crate) fn estimated_bytes(&self) -> u64 {
        let fixed = self.estimator.fixed_bytes();
        let mut bytes = self.estimator.estimate(self.keys as u64);
        for t in &self.tables {
            let (len, cap) = (t.len() as u64, t.capacity() as u64);
            // hashbrown keeps 1/8 of its buckets empty.
            let slots = if cap == 0 { 0 } else { (cap * 8 / 7).max(len) };
            bytes += (slots - len) * fixed;
        }
        if !self.buckets.is_empty() {
            let slots: usize = self.buckets.iter().map(Vec::capacity).sum();
            bytes += slots as u64 * self.staged_estimator.fixed_bytes()
                + self.staged as u64 * self.staged_estimator.heap_bytes_per_record();
        }
        bytes
    }

    /// Asks the cache for what a lookup of `hash` will read first (see [`Anchor`]). Only
    /// a hint: it changes nothing.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let p = part(hash, self.mask);
        self.anchors[p].prefetch::<(K, C)>(hash);
    }

    /// Folds `op` into the key's combiner: at once while plain, else staged for its
    /// sub-table (applying every bucket when staging is full).
    #[inline]
    pub(crate) fn upsert<A, S>(&mut self, agg: &A, hasher: &S, hash: u64, k: K, op: Pending<V, C>)
    where
        A: Aggregate<K, V, C>,
        S: BuildHasher,
    {
        if self.mask == 0 {
            self.apply(agg, hasher, 0, hash, k, op);
            return;
        }
        let staged = (hash, k, op);
        self.staged_estimator.update(&staged);
        let bucket = &mut self.buckets[part(hash, self.mask)];
        bucket.push(staged);
        prefetch_ahead(bucket);
        self.staged += 1;
        if self.staged >= self.stage_limit() {
            self.settle(agg, hasher);
        }
    }

    /// Folds `v` into the combiner of the key `q` borrows, making the owned key with
    /// `to_key` only for a new key. Not staged (staging would need the owned key per
    /// record); drains the key's bucket first so the key's order holds.
    pub(crate) fn upsert_ref<Q, A, S>(
        &mut self,
        agg: &A,
        hasher: &S,
        hash: u64,
        q: &Q,
        v: V,
        to_key: impl FnOnce(&Q) -> K,
    ) where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        A: Aggregate<K, V, C>,
        S: BuildHasher,
    {
        let p = part(hash, self.mask);
        if self.mask != 0 && !self.buckets[p].is_empty() {
            self.drain_bucket(agg, hasher, p);
        }
        if let Some(e) = self.tables[p].find_mut(hash, |e| e.0.borrow() == q) {
            agg.merge_value(&mut e.1, v);
            self.estimator.update(&*e);
        } else {
            let k = to_key(q);
            let c = agg.create(&k, v);
            self.insert_new(hasher, p, hash, (k, c));
        }
    }

    /// Applies every staged record, bucket by bucket.
    pub(crate) fn settle<A: Aggregate<K, V, C>, S: BuildHasher>(&mut self, agg: &A, hasher: &S) {
        for p in 0..self.buckets.len() {
            self.drain_bucket(agg, hasher, p);
        }
    }

    fn drain_bucket<A: Aggregate<K, V, C>, S: BuildHasher>(
        &mut self,
        agg: &A,
        hasher: &S,
        p: usize,
    ) {
        let mut bucket = std::mem::take(&mut self.buckets[p]);
        self.staged -= bucket.len();
        if bucket.len() >= self.tables[p].len() / WARM_BELOW {
            warm(&self.tables[p]);
        }
        for (hash, k, op) in bucket.drain(..) {
            self.apply(agg, hasher, p, hash, k, op);
        }
        // Keep the allocation for the next batch (it is charged as staging slots).
        self.buckets[p] = bucket;
    }

    /// Staged records at which everything staged is applied.
    #[inline]
    fn stage_limit(&self) -> usize {
        STAGE_MIN.max(STAGE_PER_KEY.saturating_mul(self.keys))
    }

    /// What a staging bucket is given as the table splits: its share of
    /// [`stage_limit`](Self::stage_limit) and a quarter more for an uneven split. Why:
    /// buckets that grew by doubling from empty were 2.5 % of parquet_etl's time, in
    /// `realloc` copying staged records (64 reducers, each a new table of 64 buckets).
    /// Only then: a bucket replaced by a bigger one after each drain cost wordcount's
    /// reducers fresh pages (page faults, +70 MiB peak) for every batch.
    fn bucket_capacity(&self) -> usize {
        let share = self.stage_limit() / FANOUT;
        share + share / 4
    }

    #[inline]
    fn apply<A: Aggregate<K, V, C>, S: BuildHasher>(
        &mut self,
        agg: &A,
        hasher: &S,
        p: usize,
        hash: u64,
        k: K,
        op: Pending<V, C>,
    ) {
        if let Some(e) = self.tables[p].find_mut(hash, |e| e.0 == k) {
            match op {
                Pending::Value(v) => agg.merge_value(&mut e.1, v),
                Pending::Combiner(c) => agg.merge_combiners(&mut e.1, c),
            }
            self.estimator.update(&*e);
        } else {
            let c = match op {
                Pending::Value(v) => agg.create(&k, v),
                Pending::Combiner(c) => c,
            };
            self.insert_new(hasher, p, hash, (k, c));
        }
    }

    /// Adds an entry for a key sub-table `p` does not hold; a plain table that reaches
    /// [`PARTITION_AT`] keys splits here.
    #[inline]
    fn insert_new<S: BuildHasher>(&mut self, hasher: &S, p: usize, hash: u64, entry: (K, C)) {
        let e = self.tables[p].insert_unique(hash, entry, |e| hasher.hash_one(&e.0));
        self.estimator.update(e.get());
        let (entry, index) = (e.get() as *const (K, C) as usize, e.bucket_index());
        let buckets = self.tables[p].num_buckets();
        self.anchors[p] = Anchor::at::<(K, C)>(entry, index, buckets);
        self.keys += 1;
        if self.mask == 0 && self.keys >= PARTITION_AT {
            self.partition(hasher);
        }
    }

    /// Splits the plain table into [`FANOUT`] sub-tables.
    #[cold]
    fn partition<S: BuildHasher>(&mut self, hasher: &S) {
        let mask = FANOUT - 1;
        let per_part = self.keys / FANOUT * 2;
        let mut tables: Vec<HashTable<(K, C)>> = (0..FANOUT)
            .map(|_| HashTable::with_capacity(per_part))
            .collect();
        for (k, c) in std::mem::take(&mut self.tables[0]) {
            let hash = hasher.hash_one(&k);
            tables[part(hash, mask)].insert_unique(hash, (k, c), |e| hasher.hash_one(&e.0));
        }
        self.anchors = tables.iter().map(Anchor::of).collect();
        self.tables = tables;
        self.mask = mask;
        let wanted = self.bucket_capacity();
        self.buckets = (0..FANOUT).map(|_| Vec::with_capacity(wanted)).collect();
    }

    /// Empties the tables (settled first by the caller), keeping their number.
    pub(crate) fn take_entries(
        &mut self,
    ) -> std::iter::Flatten<std::vec::IntoIter<HashTable<(K, C)>>> {
        debug_assert_eq!(self.staged, 0, "settle before taking the entries");
        self.keys = 0;
        let tables: Vec<HashTable<(K, C)>> =
            (0..self.tables.len()).map(|_| HashTable::new()).collect();
        self.anchors = vec![Anchor::default(); tables.len()];
        std::mem::replace(&mut self.tables, tables)
            .into_iter()
            .flatten()
    }

    /// Frees the staging buckets' allocations (nothing may be staged).
    pub(crate) fn release_staging(&mut self) {
        debug_assert_eq!(self.staged, 0, "settle before releasing staging");
        for b in &mut self.buckets {
            *b = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spill::test_data::{records, Collect};
    use foldhash::fast::FixedState;
    use std::collections::HashMap;

    /// Sums floats left to right: a different grouping would change low bits.
    struct SumF;
    impl Aggregate<u64, f64, f64> for SumF {
        fn create(&self, _: &u64, v: f64) -> f64 {
            v
        }
        fn merge_value(&self, c: &mut f64, v: f64) {
            *c += v;
        }
        fn merge_combiners(&self, c: &mut f64, o: f64) {
            *c += o;
        }
    }

    #[test]
    fn a_partitioned_table_folds_every_key_in_insert_order() {
        let hasher = FixedState::default();
        let keys = PARTITION_AT * 3;
        let recs = records(keys * 6, keys, 7);
        let mut table: AggTable<u64, u32, Vec<u32>> = AggTable::new();
        let mut expected: HashMap<u64, Vec<u32>> = HashMap::new();
        let mut max_staged = 0;
        for (i, (k, _)) in recs.iter().enumerate() {
            let seq = i as u32;
            let hash = hasher.hash_one(k);
            // All three ways in: a value, a combiner of two, and a borrowed key.
            match i % 997 {
                3 | 400 => {
                    table.upsert(
                        &Collect,
                        &hasher,
                        hash,
                        *k,
                        Pending::Combiner(vec![seq, seq]),
                    );
                    expected.entry(*k).or_default().extend([seq, seq]);
                }
                5 => {
                    // Rare: each one drains its key's bucket early.
                    table.upsert_ref(&Collect, &hasher, hash, k, seq, |k| *k);
                    expected.entry(*k).or_default().push(seq);
                }
                _ => {
                    table.upsert(&Collect, &hasher, hash, *k, Pending::Value(seq));
                    expected.entry(*k).or_default().push(seq);
                }
            }
            max_staged = max_staged.max(table.staged());
        }
        assert_eq!(table.mask, FANOUT - 1, "the table split into sub-tables");
        assert!(
            max_staged >= STAGE_MIN / 2,
            "records were staged: {max_staged}"
        );
        table.settle(&Collect, &hasher);
        assert_eq!(table.keys(), expected.len());
        let mut got: HashMap<u64, Vec<u32>> = HashMap::new();
        for (k, c) in table.take_entries() {
            assert!(got.insert(k, c).is_none(), "key {k} held twice");
        }
        assert_eq!(got, expected);
        assert_eq!(table.keys(), 0);
    }

    #[test]
    fn float_sums_are_bit_identical_to_a_left_fold_in_record_order() {
        let hasher = FixedState::default();
        let keys = PARTITION_AT * 2;
        let recs = records(keys * 5, keys, 11);
        let mut table: AggTable<u64, f64, f64> = AggTable::new();
        let mut expected: HashMap<u64, f64> = HashMap::new();
        for (i, (k, v)) in recs.iter().enumerate() {
            let x = (v.len() as f64) / 3.0 + (i % 97) as f64 * 1e-7;
            table.upsert(&SumF, &hasher, hasher.hash_one(k), *k, Pending::Value(x));
            expected.entry(*k).and_modify(|c| *c += x).or_insert(x);
        }
        table.settle(&SumF, &hasher);
        let got: HashMap<u64, u64> = table
            .take_entries()
            .map(|(k, c)| (k, c.to_bits()))
            .collect();
        let want: HashMap<u64, u64> = expected
            .into_iter()
            .map(|(k, c)| (k, c.to_bits()))
            .collect();
        assert_eq!(got, want);
    }

    /// Every table's anchor puts each entry where hashbrown really keeps it, through
    /// growth, the split into sub-tables and a spill's emptying (a hashbrown that moved
    /// its layout would make the prefetches useless; this says so).
    #[test]
    fn anchors_locate_every_entry_where_hashbrown_keeps_it() {
        fn check(table: &AggTable<u64, u32, Vec<u32>>) -> usize {
            let size = std::mem::size_of::<(u64, Vec<u32>)>();
            let mut checked = 0;
            for (t, a) in table.tables.iter().zip(&table.anchors) {
                if t.is_empty() {
                    continue;
                }
                assert_eq!(a.mask + 1, t.num_buckets());
                for i in t.iter_buckets() {
                    let e = t.get_bucket(i).expect("a full bucket") as *const _ as usize;
                    assert_eq!(a.ctrl - (i + 1) * size, e, "bucket {i}");
                    checked += 1;
                }
            }
            checked
        }
        let hasher = FixedState::default();
        let mut table: AggTable<u64, u32, Vec<u32>> = AggTable::new();
        let mut k = 0u64;
        for until in [
            1,
            3,
            100,
            5000,
            PARTITION_AT - 1,
            PARTITION_AT,
            3 * PARTITION_AT,
        ] {
            while (k as usize) < until {
                table.upsert_ref(&Collect, &hasher, hasher.hash_one(k), &k, 1, |k| *k);
                k += 1;
            }
            assert_eq!(check(&table), until);
        }
        assert_eq!(table.mask, FANOUT - 1);
        table.take_entries().for_each(drop);
        assert!(table.anchors.iter().all(|a| a.ctrl == 0));
        for k in 0..1000u64 {
            table.upsert_ref(&Collect, &hasher, hasher.hash_one(k), &k, 1, |k| *k);
        }
        assert_eq!(check(&table), 1000);
    }

    #[test]
    fn staged_records_are_charged_and_released() {
        let hasher = FixedState::default();
        let mut table: AggTable<u64, u32, Vec<u32>> = AggTable::new();
        for k in 0..PARTITION_AT as u64 {
            table.upsert(&Collect, &hasher, hasher.hash_one(k), k, Pending::Value(1));
        }
        assert_eq!(table.mask, FANOUT - 1);
        // The buckets are sized for a full batch as the table splits, and charged from then.
        let slot = std::mem::size_of::<Staged<u64, u32, Vec<u32>>>() as u64;
        let slots = |t: &AggTable<u64, u32, Vec<u32>>| -> u64 {
            t.buckets.iter().map(|b| b.capacity() as u64).sum()
        };
        assert!(slots(&table) >= STAGE_MIN as u64, "{}", slots(&table));
        for i in 0..10_000u64 {
            let k = i % 1000;
            table.upsert(&Collect, &hasher, hasher.hash_one(k), k, Pending::Value(2));
        }
        assert_eq!(table.staged(), 10_000);
        let staged = table.estimated_bytes();
        table.settle(&Collect, &hasher);
        assert_eq!(table.staged(), 0);
        assert!(slots(&table) >= STAGE_MIN as u64, "kept for the next batch");
        table.release_staging();
        assert_eq!(slots(&table), 0);
        let released = table.estimated_bytes();
        assert!(
            staged >= released + STAGE_MIN as u64 * slot,
            "staging slots were charged and are no longer: {staged} -> {released}"
        );
    }
}
