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
//! * Every hash handed in is `hasher.hash_one(key)` (the caller's promise): so a staged
//!   record may leave its hash behind and have it recomputed on apply
//!   ([`rehashed_on_apply`] keys), or keep it in the bucket's `hashes` at the same index.
//! * Staged records are charged like entries: their slots at `size_of` (plus a stored
//!   hash) plus their sampled heap bytes. At most `max(STAGE_MIN, STAGE_PER_KEY * keys)`
//!   records wait, so staging stays a small multiple of the table it feeds.
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

/// A staged record: the key and what to fold into it. Its hash waits beside it in the
/// bucket's `hashes` unless [`rehashed_on_apply`] says the key's hash is recomputed.
type Staged<K, V, C> = (K, Pending<V, C>);

/// True for keys whose hash is recomputed when their staged records are applied instead
/// of staged with them: plain values of at most 8 bytes (integers and the like), which
/// hash without reading memory elsewhere. Why: kvsum's reduce side stages 50 M records,
/// and its profile has the staging store and the apply at a third of the job; a `u64`
/// key's record is 32 bytes instead of 40 without its hash.
const fn rehashed_on_apply<K>() -> bool {
    std::mem::size_of::<K>() <= 8 && !std::mem::needs_drop::<K>()
}

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
    /// Per sub-table, the hashes of its bucket's records, in the same order; empty
    /// (never filled) for keys [`rehashed_on_apply`].
    hashes: Vec<Vec<u64>>,
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
            hashes: Vec::new(),
            staged: 0,
            keys: 0,
            // One control byte per slot.
            estimator: SizeEstimator::new::<(K, C)>(1),
            staged_estimator: SizeEstimator::new::<Staged<K, V, C>>(if rehashed_on_apply::<K>() {
                0
            } else {
                std::mem::size_of::<u64>()
            }),
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
        let p = part(hash, self.mask);
        let bucket = &mut self.buckets[p];
        bucket.push((k, op));
        // Sampled where it lies in the bucket, not built on the stack for the sampler
        // and copied from there: kvsum's profile had a third of
        // `ExternalAggregator::insert` on reading that stack copy back (in wider loads
        // than it was written with); without it `insert` fell from 16 % to 13 % of
        // the job, its samples now on the bucket's own store.
        self.staged_estimator
            .update(bucket.last().expect("a record was just pushed"));
        prefetch_ahead(bucket);
        if !rehashed_on_apply::<K>() {
            self.hashes[p].push(hash);
        }
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
        let mut hashes = std::mem::take(&mut self.hashes[p]);
        self.staged -= bucket.len();
        if bucket.len() >= self.tables[p].len() / WARM_BELOW {
            warm(&self.tables[p]);
        }
        for (i, (k, op)) in bucket.drain(..).enumerate() {
            let hash = if rehashed_on_apply::<K>() {
                hasher.hash_one(&k)
            } else {
                hashes[i]
            };
            self.apply(agg, hasher, p, hash, k, op);
        }
        hashes.clear();
        // Keep the allocations for the next batch (they are charged as staging slots).
        self.buckets[p] = bucket;
        self.hashes[p] = hashes;
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
        let hashes = if rehashed_on_apply::<K>() { 0 } else { wanted };
        self.hashes = (0..FANOUT).map(|_| Vec::with_capacity(hashes)).collect();
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
        for h in &mut self.hashes {
            *h = Vec::new();
        }
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
