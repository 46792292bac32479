//! The map side of a key-wise aggregation: combine a map task's `(K, V)` records into
//! one combiner per key (spilling through [`crate::spill::aggregate`]) and route the
//! combiners by hash; for a pass-through aggregation, stop combining when the probe shows
//! it would not shrink the data.
//!
//! Invariant: a non-pass-through aggregation always combines, so its `create` runs once
//! per key of a map partition; a pass-through one writes its whole table before the
//! first record it passes through (see `pass_through.rs` for why the answer is
//! unchanged).

use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{MapStatus, ShuffleDependency};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::fns::{with_held, Adapter, AggFns, Held, MapCombiner};
use crate::data::{decode, Data, Key};
use crate::error::Result;
use crate::shuffle::hash_partition;
use crate::shuffle::write::{MapSide, WritePayload};
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
use crate::task::{record_spills, TaskContext};

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
    with_held!(G, write_combined_held::<K, G>(tc, dep, map))
}

/// [`write_combined`] with combiners held as `H`.
fn write_combined_held<K: Key, G: AggFns, H: Held<G::C>>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus> {
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &payload.state)?);
    let mut agg: Option<MapCombiner<K, G, H>> = Some(ExternalAggregator::new(
        Adapter::<G, H>::new(state.clone()),
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
    H: Held<C>,
    A: Aggregate<K, V, H>,
>(
    tc: &Rc<TaskContext>,
    table: ExternalAggregator<K, V, H, A>,
    out: &mut MapSide<(K, C)>,
    n: u32,
) -> Result<()> {
    record_spills(tc, table.metrics());
    for rec in table.into_iter()? {
        let (k, c) = rec?;
        let c = c.release();
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
