//! The map and reduce halves of every shuffle, as monomorphised functions a plan names
//! by offset: plain hash/range partitioning, hash aggregation (map-side combine and
//! reduce-side merge, spilling through [`crate::spill::aggregate`]), and sorted reads
//! (spilling through [`crate::spill::sort`]).
//!
//! Invariants: every record written by a map task reaches exactly one reducer (the one
//! its partitioner names); a reducer reads every map partition's block or fails with a
//! typed fetch failure naming the missing one.

use std::hash::Hash;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{MapStatus, RddNode, ShuffleDependency};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::ops::State;
use crate::closure::conjure;
use crate::data::decode;
use crate::data::{Data, Key, BATCH};
use crate::error::Result;
use crate::shuffle::read_blocks;
use crate::shuffle::{hash_partition, RangePartitioner, ShuffleWriter};
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
use crate::spill::sort::ExternalSorter;
use crate::spill::SpillMetrics;
use crate::task::{Batches, Erased, TaskContext};

/// How keys are routed to reduce partitions.
pub(crate) trait Partitioning<K>: Sized + 'static {
    fn load(payload: &[u8], num_reduce: u32) -> Result<Self>;
    fn partition(&self, key: &K) -> u32;
}

/// Hash partitioning with a fixed seed (the same in every process).
pub(crate) struct HashPartitioning(u32);
impl<K: Hash> Partitioning<K> for HashPartitioning {
    fn load(_: &[u8], n: u32) -> Result<Self> {
        Ok(HashPartitioning(n))
    }
    #[inline]
    fn partition(&self, key: &K) -> u32 {
        hash_partition(key, self.0)
    }
}

impl<K: Ord + DeserializeOwned + 'static> Partitioning<K> for RangePartitioner<K> {
    fn load(payload: &[u8], _: u32) -> Result<Self> {
        decode("range partitioner", payload)
    }
    #[inline]
    fn partition(&self, key: &K) -> u32 {
        RangePartitioner::partition(self, key)
    }
}

/// Payload of a shuffle's write function.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct WritePayload {
    pub partitioner: Vec<u8>,
    pub state: Vec<u8>,
}

/// The combine functions of a key-wise aggregation, as a zero-sized type.
pub(crate) trait AggFns: 'static {
    type S: State + Send + Sync;
    type V: Data;
    type C: Data;
    /// `create` is the identity and `merge_value` is `merge_combiners`: a value is a
    /// combiner of its own, so the map side may stop combining (see `pass_through`).
    const PASS_THROUGH: bool = false;
    fn create(s: &Self::S, v: Self::V) -> Self::C;
    fn merge_value(s: &Self::S, c: Self::C, v: Self::V) -> Self::C;
    fn merge_combiners(s: &Self::S, a: Self::C, b: Self::C) -> Self::C;
}

/// [`AggFns`] from three user closures.
#[allow(clippy::type_complexity)]
pub(crate) struct FnAgg<S, V, C, Fc, Fm, Fmc>(PhantomData<fn(S, V, C, Fc, Fm, Fmc)>);
impl<S, V, C, Fc, Fm, Fmc> AggFns for FnAgg<S, V, C, Fc, Fm, Fmc>
where
    S: State + Send + Sync,
    V: Data,
    C: Data,
    Fc: Fn(&S, V) -> C + 'static,
    Fm: Fn(&S, C, V) -> C + 'static,
    Fmc: Fn(&S, C, C) -> C + 'static,
{
    type S = S;
    type V = V;
    type C = C;
    #[inline]
    fn create(s: &S, v: V) -> C {
        conjure::<Fc>()(s, v)
    }
    #[inline]
    fn merge_value(s: &S, c: C, v: V) -> C {
        conjure::<Fm>()(s, c, v)
    }
    #[inline]
    fn merge_combiners(s: &S, a: C, b: C) -> C {
        conjure::<Fmc>()(s, a, b)
    }
}

/// The map-side combine table of an aggregation.
pub(crate) type MapCombiner<K, G> =
    ExternalAggregator<K, <G as AggFns>::V, Option<<G as AggFns>::C>, Adapter<G>>;

/// Adapts [`AggFns`] to the spillable aggregator. Combiners are held as `Option<C>` so
/// the by-value user functions can be applied in place; a panic in one leaves `None`
/// behind, never a moved-from value.
pub(crate) struct Adapter<G: AggFns>(pub(crate) Arc<G::S>);
impl<K, G: AggFns> Aggregate<K, G::V, Option<G::C>> for Adapter<G> {
    #[inline]
    fn create(&self, _: &K, v: G::V) -> Option<G::C> {
        Some(G::create(&self.0, v))
    }
    #[inline]
    fn merge_value(&self, c: &mut Option<G::C>, v: G::V) {
        let old = c.take().expect("combiner present");
        *c = Some(G::merge_value(&self.0, old, v));
    }
    #[inline]
    fn merge_combiners(&self, c: &mut Option<G::C>, other: Option<G::C>) {
        let old = c.take().expect("combiner present");
        *c = Some(match other {
            Some(o) => G::merge_combiners(&self.0, old, o),
            None => old,
        });
    }
}

pub(crate) fn record_spills(tc: &Rc<TaskContext>, m: SpillMetrics) {
    tc.with_metrics(|t| {
        t.bytes_spilled += m.bytes_spilled;
        t.spill_count += m.spill_count;
    });
}

/// Writes records into the map output, spilling its buffers when memory is refused.
pub(crate) struct MapSide<T: Serialize> {
    writer: ShuffleWriter<T>,
    reservation: crate::memory::Reservation,
    since_check: usize,
}

impl<T: Serialize> MapSide<T> {
    pub(crate) fn new(tc: &Rc<TaskContext>, dep: &ShuffleDependency, map: u32) -> Self {
        MapSide {
            writer: ShuffleWriter::new(
                tc.env.shuffle_dir(),
                dep.shuffle_id,
                map,
                dep.num_reduce_partitions,
            ),
            reservation: tc.reservation("shuffle writer"),
            since_check: 0,
        }
    }

    #[inline]
    pub(crate) fn write(&mut self, reduce: u32, rec: &T) -> Result<()> {
        self.writer.write(reduce, rec)?;
        self.since_check += 1;
        if self.since_check >= 1024 {
            self.since_check = 0;
            let buffered = self.writer.buffered_bytes();
            if buffered > self.reservation.size() && self.reservation.resize(buffered).is_err() {
                self.writer.spill_buffers()?;
                self.reservation.free();
            }
        }
        Ok(())
    }

    pub(crate) fn finish(
        self,
        tc: &Rc<TaskContext>,
        dep: &ShuffleDependency,
        map: u32,
    ) -> Result<MapStatus> {
        let spilled = self.writer.spilled_bytes();
        let out = self.writer.finish()?;
        tc.with_metrics(|m| {
            m.shuffle_bytes_written += out.bytes_written;
            m.shuffle_records_written += out.records_written;
            m.records_out += out.records_written;
            if spilled > 0 {
                m.bytes_spilled += spilled;
                m.spill_count += 1;
            }
        });
        Ok(MapStatus {
            shuffle_id: dep.shuffle_id,
            map_partition: map,
            block_sizes: out.block_sizes,
        })
    }
}

/// Map side without combining: route each `(K, V)` to its reducer.
pub(crate) fn write_plain<K: Data, V: Data, P: Partitioning<K>>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus> {
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let partitioner = P::load(&payload.partitioner, dep.num_reduce_partitions)?;
    let mut out = MapSide::<(K, V)>::new(tc, dep, map);
    for batch in tc.compute::<(K, V)>(dep.parent, map)? {
        for rec in batch? {
            out.write(partitioner.partition(&rec.0), &rec)?;
        }
    }
    out.finish(tc, dep, map)
}

/// Records the map-side combine sees before deciding whether combining pays.
pub(crate) const COMBINE_PROBE_RECORDS: u64 = 100_000;
/// Above this ratio of distinct keys to records in the probe, combining is skipped.
const COMBINE_SKIP_RATIO: f64 = 0.75;

/// Map side with combining: aggregate `(K, V)` into `(K, C)` per key, then route.
///
/// Adaptive, as Trino and DuckDB do for partial aggregation, but only for a
/// [`AggFns::PASS_THROUGH`] aggregation: if the first [`COMBINE_PROBE_RECORDS`]
/// records are nearly all distinct keys, the hash table would only cost memory and cache
/// misses, so it is written out and the rest of the partition goes straight to the
/// shuffle; the reducers ([`super::pass_through::read_grouped`]) merge in an order that
/// gives exactly the answer of combining everything here. Any other aggregation
/// (`fold_by_key`'s zero, `combine_by_key`'s `create`) always combines: its `create`
/// runs once per key of this partition.
pub(crate) fn write_combined<K: Key, G: AggFns>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus> {
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &payload.state)?);
    let mut agg: Option<MapCombiner<K, G>> = Some(ExternalAggregator::new(
        Adapter::<G>(state.clone()),
        tc.reservation("map-side combine"),
        tc.env.spill_dir(),
    ));
    let mut out = MapSide::<(K, G::C)>::new(tc, dep, map);
    let n = dep.num_reduce_partitions;
    let mut inserted = 0u64;
    let mut decided = !G::PASS_THROUGH;
    for batch in tc.compute::<(K, G::V)>(dep.parent, map)? {
        let batch = batch?;
        let Some(table) = agg.as_mut() else {
            for (k, v) in batch {
                let r = hash_partition(&k, n);
                out.write(r, &(k, G::create(&state, v)))?;
            }
            continue;
        };
        inserted += batch.len() as u64;
        for (k, v) in batch {
            table.insert(k, v)?;
        }
        if !decided && inserted >= COMBINE_PROBE_RECORDS {
            decided = true;
            if combine_probe_says_skip(table, inserted, map) {
                drain_combined(tc, agg.take().expect("table present"), &mut out, n)?;
            }
        }
    }
    if let Some(table) = agg {
        drain_combined(tc, table, &mut out, n)?;
    }
    out.finish(tc, dep, map)
}

/// Writes every combiner of a map-side table to its reducer.
pub(crate) fn drain_combined<
    K: Key,
    V: Serialize + 'static,
    C: Data,
    A: Aggregate<K, V, Option<C>>,
>(
    tc: &Rc<TaskContext>,
    table: ExternalAggregator<K, V, Option<C>, A>,
    out: &mut MapSide<(K, C)>,
    n: u32,
) -> Result<()> {
    record_spills(tc, table.metrics());
    for rec in table.into_iter()? {
        let (k, c) = rec?;
        let c = c.expect("combiner present");
        let r = hash_partition(&k, n);
        out.write(r, &(k, c))?;
    }
    Ok(())
}

/// True when the map-side combine holds nearly one key per record after `inserted`
/// records (and has not spilled): combining the rest would not shrink the data.
pub(crate) fn combine_probe_says_skip<K, V, C, A>(
    agg: &mut ExternalAggregator<K, V, C, A>,
    inserted: u64,
    map: u32,
) -> bool
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + 'static,
    V: Serialize + 'static,
    C: Serialize + DeserializeOwned + Send + 'static,
    A: Aggregate<K, V, C>,
{
    let ratio = agg.in_memory_len() as f64 / inserted as f64;
    let skip = agg.metrics().spill_count == 0 && ratio > COMBINE_SKIP_RATIO;
    if skip {
        tracing::debug!(
            map,
            ratio,
            "map-side combine does not reduce the data; skipping it"
        );
    }
    skip
}

pub(crate) fn into_batches<T: 'static>(
    it: impl Iterator<Item = Result<T>> + 'static,
) -> Batches<T> {
    let mut it = it;
    Box::new(std::iter::from_fn(move || {
        let mut batch = Vec::with_capacity(BATCH);
        for r in it.by_ref() {
            match r {
                Ok(x) => {
                    batch.push(x);
                    if batch.len() == BATCH {
                        break;
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
        (!batch.is_empty()).then_some(Ok(batch))
    }))
}

/// Reduce side without aggregation: the records as they come.
pub(crate) fn read_plain<K: Data, V: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let out: Batches<(K, V)> = into_batches(read_blocks::<(K, V)>(tc, node, part)?);
    Ok(Box::new(out))
}

/// Reduce side of an aggregation: merge combiners (`MAP_SIDE`) or values per key.
pub(crate) fn read_combined<K: Key, G: AggFns, const MAP_SIDE: bool>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    if MAP_SIDE && G::PASS_THROUGH {
        return super::pass_through::read_grouped::<K, G>(tc, node, part);
    }
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &node.payload)?);
    let mut agg: ExternalAggregator<K, G::V, Option<G::C>, Adapter<G>> = ExternalAggregator::new(
        Adapter::<G>(state),
        tc.reservation("reduce-side aggregation"),
        tc.env.spill_dir(),
    );
    if MAP_SIDE {
        for r in read_blocks::<(K, G::C)>(tc, node, part)? {
            let (k, c) = r?;
            agg.insert_combiner(k, Some(c))?;
        }
    } else {
        for r in read_blocks::<(K, G::V)>(tc, node, part)? {
            let (k, v) = r?;
            agg.insert(k, v)?;
        }
    }
    aggregated(tc, agg)
}

/// The records of a finished aggregation, as a compute function returns them.
pub(crate) fn aggregated<K: Key, G: AggFns>(
    tc: &Rc<TaskContext>,
    agg: ExternalAggregator<K, G::V, Option<G::C>, Adapter<G>>,
) -> Result<Erased> {
    record_spills(tc, agg.metrics());
    let out: Batches<(K, G::C)> = into_batches(
        agg.into_iter()?
            .map(|r| r.map(|(k, c)| (k, c.expect("combiner present")))),
    );
    Ok(Box::new(out))
}

/// Reduce side of a sort: every record of the partition in key order, spilling runs.
pub(crate) fn read_sorted<K: Data + Ord, V: Data, const DESC: bool>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut sorter: ExternalSorter<K, V> =
        ExternalSorter::new(tc.reservation("sort"), tc.env.spill_dir(), DESC);
    for r in read_blocks::<(K, V)>(tc, node, part)? {
        let (k, v) = r?;
        sorter.insert(k, v)?;
    }
    record_spills(tc, sorter.metrics());
    let out: Batches<(K, V)> = into_batches(sorter.into_sorted_iter()?);
    Ok(Box::new(out))
}
