//! The inner join's reduce side as a shuffled hash join: one side of the partition (the
//! build side) is read into a hash table, the other (the probe side) streams past it, and
//! each probe record leaves with every build value of its key. The probe side is never
//! grouped, so a key with millions of records on it (a skewed join's hot key) costs no
//! memory; only the build side is held.
//!
//! The build side is the right one (Spark's default), or the left one when both sides are
//! shuffled and the map statuses say its blocks for this partition are smaller.
//!
//! Invariants:
//! - The pairs are exactly those of a join through `cogroup` (every key's groups
//!   expanded, as the outer joins in `join.rs` are): for every key in both sides, every
//!   (left value, right value) pair, each once; only their order differs (probe order,
//!   then the build values of a key in read order). `tests/hash_join.rs` checks them
//!   against a reference; `tests/pair_joins_sorts.rs` against nested loops.
//! - The build table's memory is charged to the task's pool as it grows (a sampled
//!   per-record estimate, `spill::size`, with each entry's inline size counted twice for
//!   the table's empty slots and the moment it doubles). When the pool says no, the
//!   partition falls back to the external cogroup (which spills): the records already in
//!   the table move into it, the rest of both sides follow, so no record is lost or read
//!   twice. The table keeps its charge until it has moved over, so the cogroup spills
//!   small runs meanwhile: a slow path, never one over the limit.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::panic::Location;
use std::rc::Rc;

use ember_proto::{dependency, RddNode};
use foldhash::fast::FixedState;
use hashbrown::HashTable;

use super::{side_records, CoGroup, Groups, Side};
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};
use crate::memory::Reservation;
use crate::rdd::Rdd;
use crate::shuffle::Partitioner;
use crate::spill::aggregate::ExternalAggregator;
use crate::spill::anchor::Anchor;
use crate::spill::size::SizeEstimator;
use crate::task::{into_batches, record_spills, Batches, ComputeFn, Erased, TaskContext};

/// Bytes the build table's reservation grows by at least, so the pool is asked rarely.
const GROW_BYTES: u64 = 1 << 20;
/// End of a key's chain of build values.
const END: u32 = u32::MAX;

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// The inner join with `other` in the partitions of `target` (each side shuffled by
    /// it unless already partitioned so), computed as a shuffled hash join.
    pub(crate) fn hash_join_to<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        target: Partitioner,
        at: &Location<'_>,
    ) -> Rdd<(K, (V, W))> {
        let n = target.num_partitions() as u32;
        let compute: ComputeFn = hash_join_compute::<K, V, W>;
        let deps = vec![
            self.side_dependency("join", &target),
            other.side_dependency("join", &target),
        ];
        let rdd: Rdd<(K, (V, W))> = self
            .ctx
            .new_rdd("join", at, n, deps, compute, Vec::new())
            .with_partitioner(Some(target));
        if n == 0 && self.node.num_partitions + other.node.num_partitions > 0 {
            return rdd.invalid("cannot join into 0 partitions");
        }
        rdd
    }
}

/// The compressed bytes of partition `part` of side `i`, if that side is a shuffle (a
/// side read narrowly has no such figure).
fn side_bytes(tc: &Rc<TaskContext>, node: &RddNode, i: usize, part: u32) -> Option<u64> {
    let Some(dependency::Kind::Shuffle(sd)) = node.deps.get(i).and_then(|d| d.kind.as_ref()) else {
        return None;
    };
    let mut total = 0u64;
    for loc in tc.map_locations(sd.shuffle_id) {
        let size = part
            .checked_sub(loc.first_reduce)
            .and_then(|i| loc.block_sizes.get(i as usize).copied());
        total = total.saturating_add(size?);
    }
    Some(total)
}

fn hash_join_compute<K: Key, V: Data, W: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let build_left = matches!(
        (side_bytes(tc, node, 0, part), side_bytes(tc, node, 1, part)),
        (Some(l), Some(r)) if l < r
    );
    let out: Batches<(K, (V, W))> = if build_left {
        let sides = Sides {
            build: Side::Left,
            probe: Side::Right,
            pair: |k, v, w| (k, (v, w)),
        };
        hash_join(tc, (node, part, 0), sides)?
    } else {
        let sides = Sides {
            build: Side::Right,
            probe: Side::Left,
            pair: |k, w, v| (k, (v, w)),
        };
        hash_join(tc, (node, part, 1), sides)?
    };
    Ok(Box::new(out))
}

/// How the build (`B`) and probe (`P`) sides map onto the join's left (`V`) and right
/// (`W`).
struct Sides<K, V, W, B, P> {
    build: fn(B) -> Side<V, W>,
    probe: fn(P) -> Side<V, W>,
    /// A key with its build and probe values as an output record.
    pair: Pair<K, V, W, B, P>,
}

/// Makes an output record of a key, its build value and its probe value.
type Pair<K, V, W, B, P> = fn(K, B, P) -> (K, (V, W));

/// A key's first build value is kept in its entry, further ones in a chain through
/// `more` (first and last index), so a key's values keep their read order, a lookup of
/// a key with one value touches one cache line, and no key costs an allocation.
struct Table<K, B> {
    hasher: FixedState,
    entries: HashTable<Entry<K, B>>,
    /// A value and the index of the next value of its key (`END` for the last).
    more: Vec<(B, u32)>,
}

/// A key, its first build value, and the first and last of its further values in
/// `Table::more` (`END` if none).
type Entry<K, B> = (K, B, u32, u32);

impl<K: Key, B> Table<K, B> {
    fn new() -> Self {
        Table {
            hasher: FixedState::default(),
            entries: HashTable::new(),
            more: Vec::new(),
        }
    }

    /// Build values held.
    fn len(&self) -> usize {
        self.entries.len() + self.more.len()
    }

    fn insert(&mut self, k: K, b: B) {
        let hash = self.hasher.hash_one(&k);
        let hasher = &self.hasher;
        match self
            .entries
            .entry(hash, |e| e.0 == k, |e| hasher.hash_one(&e.0))
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                let i = self.more.len() as u32;
                self.more.push((b, END));
                let (_, _, first, last) = e.get_mut();
                if *first == END {
                    *first = i;
                } else {
                    self.more[*last as usize].1 = i;
                }
                *last = i;
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((k, b, END, END));
            }
        }
    }

    /// Hands every (key, value) to `f`, each key's values in read order.
    fn drain(self, mut f: impl FnMut(K, B) -> Result<()>) -> Result<()> {
        let mut more: Vec<(Option<B>, u32)> =
            self.more.into_iter().map(|(b, n)| (Some(b), n)).collect();
        for (k, b, first, _) in self.entries {
            f(k.clone(), b)?;
            let mut i = first;
            while let Some((b, next)) = more.get_mut(i as usize) {
                if let Some(b) = b.take() {
                    f(k.clone(), b)?;
                }
                i = *next;
            }
        }
        Ok(())
    }
}

/// Reads side `b` of partition `part` of `node` into a table, then streams the other
/// side past it; falls back to the external cogroup if the table outgrows what the pool
/// grants.
fn hash_join<K: Key, V: Data, W: Data, B: Data, P: Data>(
    tc: &Rc<TaskContext>,
    (node, part, b): (&RddNode, u32, usize),
    sides: Sides<K, V, W, B, P>,
) -> Result<Batches<(K, (V, W))>> {
    let mut build = side_records::<(K, B)>(tc, node, b, part)?;
    let probe = || side_records::<(K, P)>(tc, node, 1 - b, part);
    let mut table = Table::new();
    let mut reservation = tc.reservation("join");
    let mut estimate = SizeEstimator::new::<(K, B)>(std::mem::size_of::<Entry<K, B>>() + 24);
    while let Some(r) = build.next() {
        let (k, b) = r?;
        estimate.update(&(&k, &b));
        let need = estimate.estimate(table.len() as u64 + 1);
        let short = need.saturating_sub(reservation.size());
        // In steps of GROW_BYTES while the pool has them, else exactly what is needed.
        let grown = short == 0
            || reservation.try_grow(short.max(GROW_BYTES)).is_ok()
            || reservation.try_grow(short).is_ok();
        if !grown || table.more.len() as u32 == END - 1 {
            table.insert(k, b);
            return fall_back(tc, (table, reservation), build, probe()?, sides);
        }
        table.insert(k, b);
    }
    let probe = Probe {
        anchor: Anchor::of(&table.entries),
        table,
        probe: probe()?,
        ahead: VecDeque::with_capacity(LOOKAHEAD),
        failed: None,
        exhausted: false,
        pending: None,
        pair: sides.pair,
        _reservation: reservation,
    };
    Ok(into_batches(probe))
}

/// A side's records.
type Records<K, T> = Box<dyn Iterator<Item = Result<(K, T)>>>;

/// The join of a partition whose build side did not fit: `table` (the build records read
/// so far) and the rest of both sides go through the external cogroup, which spills.
fn fall_back<K: Key, V: Data, W: Data, B: Data, P: Data>(
    tc: &Rc<TaskContext>,
    (table, reservation): (Table<K, B>, Reservation),
    build: Records<K, B>,
    probe: Records<K, P>,
    sides: Sides<K, V, W, B, P>,
) -> Result<Batches<(K, (V, W))>> {
    tracing::debug!(
        records = table.len(),
        "the join's build side outgrew its memory; joining through the external cogroup"
    );
    let mut agg: ExternalAggregator<K, Side<V, W>, Groups<V, W>, CoGroup> =
        ExternalAggregator::new(CoGroup, tc.reservation("join"), tc.env.spill_dir());
    table.drain(|k, b| agg.insert(k, (sides.build)(b)))?;
    drop(reservation);
    for r in build {
        let (k, b) = r?;
        agg.insert(k, (sides.build)(b))?;
    }
    for r in probe {
        let (k, p) = r?;
        agg.insert(k, (sides.probe)(p))?;
    }
    record_spills(tc, agg.metrics());
    let pairs = agg.into_iter()?.flat_map(|r| match r {
        Ok((k, (vs, ws))) => {
            let mut out = Vec::with_capacity(vs.len() * ws.len());
            for v in &vs {
                for w in &ws {
                    out.push(Ok((k.clone(), (v.clone(), w.clone()))));
                }
            }
            out
        }
        Err(e) => vec![Err(e)],
    });
    Ok(into_batches(pairs))
}

/// Probe records read ahead, their entries' cache lines asked for before they are
/// looked up (a table larger than the cache misses on nearly every probe otherwise).
const LOOKAHEAD: usize = 16;

/// The probe side streaming past the build table: each probe record with each build
/// value of its key, in probe order.
struct Probe<K, V, W, B, P> {
    table: Table<K, B>,
    anchor: Anchor,
    probe: Records<K, P>,
    /// Probe records read ahead, with their hashes.
    ahead: VecDeque<(u64, K, P)>,
    /// The probe side's error, yielded once the records before it are.
    failed: Option<EmberError>,
    /// The probe side ended (or failed): it is not read again.
    exhausted: bool,
    /// A probe record whose further matches are being emitted, and the index in
    /// `table.more` of the next.
    pending: Option<(K, P, u32)>,
    pair: Pair<K, V, W, B, P>,
    /// Holds the table's memory until the probe is done.
    _reservation: Reservation,
}

impl<K: Key, V, W, B: Clone, P> Probe<K, V, W, B, P> {
    /// Reads up to [`LOOKAHEAD`] probe records, prefetching their entries.
    fn read_ahead(&mut self) {
        while self.ahead.len() < LOOKAHEAD && !self.exhausted {
            match self.probe.next() {
                None => self.exhausted = true,
                Some(Err(e)) => {
                    self.failed = Some(e);
                    self.exhausted = true;
                }
                Some(Ok((k, p))) => {
                    let hash = self.table.hasher.hash_one(&k);
                    self.anchor.prefetch::<Entry<K, B>>(hash);
                    self.ahead.push_back((hash, k, p));
                }
            }
        }
    }
}

impl<K: Key, V, W, B, P: Clone> Probe<K, V, W, B, P> {
    /// The pair of probe record (`k`, `p`) with build value `b`; `next` (the index in
    /// `table.more` of the key's next build value, `END` if none) is left pending, the
    /// key and probe value moved rather than cloned into the last pair.
    fn emit(&mut self, k: K, p: P, b: B, next: u32) -> (K, (V, W)) {
        if next == END {
            return (self.pair)(k, b, p);
        }
        let out = (self.pair)(k.clone(), b, p.clone());
        self.pending = Some((k, p, next));
        out
    }
}

impl<K: Key, V, W, B: Clone, P: Clone> Iterator for Probe<K, V, W, B, P> {
    type Item = Result<(K, (V, W))>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((k, p, i)) = self.pending.take() {
                let Some((b, next)) = self.table.more.get(i as usize) else {
                    continue;
                };
                let (b, next) = (b.clone(), *next);
                return Some(Ok(self.emit(k, p, b, next)));
            }
            if self.ahead.is_empty() {
                self.read_ahead();
            }
            let Some((hash, k, p)) = self.ahead.pop_front() else {
                return self.failed.take().map(Err);
            };
            if let Some((_, b, first, _)) = self.table.entries.find(hash, |e| e.0 == k) {
                let (b, first) = (b.clone(), *first);
                return Some(Ok(self.emit(k, p, b, first)));
            }
        }
    }
}
