//! The key-wise aggregation family (`combine_by_key` and everything built on it:
//! `reduce_by_key`, `fold_by_key`, `aggregate_by_key`, `group_by_key`, and
//! `flat_map_reduce_by_key`), in one folder as DataFusion keeps its `aggregates/`:
//! - `fns.rs`: what an aggregation computes ([`AggFns`], from user closures by
//!   [`FnAgg`]) and its adapter to the spilling map;
//! - this file: the shuffle every aggregation defines (`Rdd::aggregate_shuffle`) and
//!   the in-place aggregation of data already partitioned the way it asks for;
//! - `by_key.rs`: the public operators;
//! - `map_side.rs` / `reduce_side.rs`: the two halves of the shuffle, as the
//!   monomorphised functions a plan names; `pass_through.rs`: the adaptive map-side
//!   combine and the reduce-side order that keeps its answer exact; `flat.rs`:
//!   `flat_map_reduce_by_key`'s borrowed-key map side.
//!
//! Aggregations combine map-side where that shrinks data (everything but
//! `group_by_key`, as in Spark) and spill on both sides when memory runs short.
//!
//! Invariant: whatever path runs (map-side combine or not, pass-through or not, in place
//! or shuffled, spilled or not), a key's combiner is the fold of its values that the
//! plain path gives: the reduce side merges map outputs in map order.

mod by_key;
pub(crate) mod flat;
mod fns;
mod map_side;
pub(crate) mod pass_through;
mod reduce_side;

use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::RddNode;

pub(crate) use fns::{with_held, Adapter, AggFns, Bare, FnAgg, Held, MapCombiner};
pub(crate) use map_side::{
    combine_probe_says_skip, drain_combined, write_combined, COMBINE_PROBE_RECORDS,
};
pub(crate) use reduce_side::{aggregated, read_combined};

use super::partitioning::{write_routed, Routed};
use super::Rdd;
use crate::data::{decode, encode, Data, Key};
use crate::error::Result;
use crate::shuffle::write::{write_plain, HashPartitioning, WritePayload};
use crate::shuffle::{Partitioner, PartitionerKind};
use crate::spill::aggregate::ExternalAggregator;
use crate::task::{ComputeFn, Erased, ShuffleWriteFn, TaskContext};

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// The shuffle behind every key-wise aggregation, into `target`; no shuffle at all
    /// when this RDD is partitioned by `target` already (the aggregation runs within
    /// each partition, as Spark's `combineByKey` does then).
    fn aggregate_shuffle<G: AggFns<V = V>, const MAP_SIDE: bool>(
        &self,
        op: &str,
        at: &'static Location<'static>,
        state: G::S,
        target: Partitioner,
    ) -> Rdd<(K, G::C)> {
        if self.node.partitioner.as_ref() == Some(&target) {
            return self.aggregate_in_place::<G>(op, at, &state);
        }
        let n = target.num_partitions() as u32;
        let hash = *target.kind() == PartitionerKind::Hash;
        let (write, read, partitioner): (ShuffleWriteFn, ComputeFn, Vec<u8>) =
            match (hash, MAP_SIDE) {
                (true, true) => (
                    write_combined::<K, G>,
                    read_combined::<K, G, true>,
                    Vec::new(),
                ),
                (true, false) => (
                    write_plain::<K, V, HashPartitioning>,
                    read_combined::<K, G, false>,
                    Vec::new(),
                ),
                // Another partitioner (from a parent): values are routed as they are and
                // combined on the reduce side only.
                (false, _) => (
                    write_routed::<K, V>,
                    read_combined::<K, G, false>,
                    encode(op, &Routed::of(&target)),
                ),
            };
        let state_bytes = encode(op, &state);
        let payload = WritePayload {
            partitioner,
            state: state_bytes.clone(),
        };
        self.shuffle_child(op, at, n, write, encode(op, &payload), read, state_bytes)
            .with_partitioner(Some(target))
    }

    /// A key-wise aggregation within each partition, for data already partitioned by
    /// the target partitioner (Spark's `combineByKey` when `self.partitioner ==
    /// Some(partitioner)`): no shuffle, and the partitioner is kept.
    pub(crate) fn aggregate_in_place<G: AggFns<V = V>>(
        &self,
        op: &str,
        at: &'static Location<'static>,
        state: &G::S,
    ) -> Rdd<(K, G::C)> {
        let compute: ComputeFn = combine_in_partition::<K, G>;
        self.within_partitions(op, at, compute, encode(op, state))
    }
}

/// Folds one partition's values per key (the narrow aggregation).
pub(crate) fn combine_in_partition<K: Key, G: AggFns>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    with_held!(G, combine_in_partition_held::<K, G>(tc, node, part))
}

/// [`combine_in_partition`] with combiners held as `H`.
fn combine_in_partition_held<K: Key, G: AggFns, H: Held<G::C>>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let state: Arc<G::S> = Arc::new(decode("aggregator state", &node.payload)?);
    let parent = TaskContext::dep_parent(node, 0)?;
    let mut agg: ExternalAggregator<K, G::V, H, Adapter<G, H>> = ExternalAggregator::new(
        Adapter::<G, H>::new(state),
        tc.reservation("aggregation"),
        tc.env.spill_dir(),
    );
    for batch in tc.compute::<(K, G::V)>(parent, part)? {
        for (k, v) in batch? {
            agg.insert(k, v)?;
        }
    }
    aggregated(tc, agg)
}
