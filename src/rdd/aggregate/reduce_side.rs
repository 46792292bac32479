//! The reduce side of a key-wise aggregation: merge the combiners (or fold the values)
//! of every map output per key, spilling through [`crate::spill::aggregate`]; a
//! pass-through aggregation's combiners go through `pass_through::read_grouped`, which
//! keeps the answer that of a map side that combined everything.
//!
//! Invariant: the blocks are read in map order (`shuffle::read_blocks`), so a key's
//! combiners merge in the same order in every run, local or cluster.

use std::rc::Rc;
use std::sync::Arc;

use ember_proto::RddNode;

use super::fns::{with_held, Adapter, AggFns, Held};
use crate::data::{decode, Key};
use crate::error::Result;
use crate::shuffle::read_blocks;
use crate::spill::aggregate::ExternalAggregator;
use crate::task::{into_batches, record_spills, Batches, Erased, TaskContext};

/// Reduce side of an aggregation: merge combiners (`MAP_SIDE`) or values per key.
pub(crate) fn read_combined<K: Key, G: AggFns, const MAP_SIDE: bool>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    if MAP_SIDE && G::PASS_THROUGH {
        return super::pass_through::read_grouped::<K, G>(tc, node, part);
    }
    with_held!(G, read_combined_held::<K, G, MAP_SIDE>(tc, node, part))
}

/// [`read_combined`] with combiners held as `H`.
fn read_combined_held<K: Key, G: AggFns, const MAP_SIDE: bool, H: Held<G::C>>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &node.payload)?);
    let mut agg: ExternalAggregator<K, G::V, H, Adapter<G, H>> = ExternalAggregator::new(
        Adapter::<G, H>::new(state),
        tc.reservation("reduce-side aggregation"),
        tc.env.spill_dir(),
    );
    if MAP_SIDE {
        for r in read_blocks::<(K, G::C)>(tc, node, part)? {
            let (k, c) = r?;
            agg.insert_combiner(k, H::hold(c))?;
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
pub(crate) fn aggregated<K: Key, G: AggFns, H: Held<G::C>>(
    tc: &Rc<TaskContext>,
    agg: ExternalAggregator<K, G::V, H, Adapter<G, H>>,
) -> Result<Erased> {
    record_spills(tc, agg.metrics());
    let out: Batches<(K, G::C)> =
        into_batches(agg.into_iter()?.map(|r| r.map(|(k, c)| (k, c.release()))));
    Ok(Box::new(out))
}
