//! Partitioners as RDDs carry them, and the shuffles they save: Spark's
//! `Partitioner.defaultPartitioner`, `partitionBy` with any partitioner, key-wise
//! aggregation without a shuffle on data already partitioned the way it asks for,
//! `PartitionerAwareUnionRDD`, `distinct` within each partition of partitioned data, and
//! `lookup` of one partition.
//!
//! Invariants:
//! - An RDD has a partitioner only if every record with key `k` is in partition
//!   `partitioner.partition_of(k)`: set by the shuffles that route by it (hash, range,
//!   user) and kept only by operators that neither change keys nor move records between
//!   partitions (`map_values`, `flat_map_values`, `filter`, `sample`, narrow
//!   aggregations, joins and cogroups, a union of co-partitioned RDDs).
//! - A shortcut taken because partitioners are equal gives exactly the records the
//!   shuffle would: when the partitioner already matches, the shuffle would send each map
//!   partition's records to the reducer of the same number, in the same order.

use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{MapStatus, RddNode, ShuffleDependency};
use serde::{Deserialize, Serialize};

use super::Rdd;
use crate::context::Context;
use crate::data::{decode, encode};
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};
use crate::plan::LineageNode;
use crate::shuffle::partitioner::loader_from_offset;
use crate::shuffle::read_plain;
use crate::shuffle::write::{HashPartitioning, MapSide, WritePayload};
use crate::shuffle::{KeyPartitioner, Partitioner};
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
use crate::task::{into_batches, record_spills};
use crate::task::{Batches, ComputeFn, Erased, ShuffleWriteFn, TaskContext};

impl<T: Data> Rdd<T> {
    /// How this RDD's records are spread over its partitions by key, if known.
    pub fn partitioner(&self) -> Option<Partitioner> {
        self.node.partitioner.clone()
    }

    /// Sets the partitioner of a node made just now (no other handle on it yet).
    pub(crate) fn with_partitioner(mut self, p: Option<Partitioner>) -> Self {
        if let Some(node) = Arc::get_mut(&mut self.node) {
            node.partitioner = p;
        }
        self
    }
}

/// Spark's `Partitioner.defaultPartitioner` for an operator over `nodes`: the partitioner
/// of the parent with the most partitions among those that have one, if it is eligible
/// (within 10x of the largest parent's partition count) or at least as large as the
/// default count; else hash partitioning into the default count, which is the
/// configured `default_parallelism` if set, else the largest parent's count.
pub(crate) fn default_partitioner<K: std::hash::Hash + 'static>(
    ctx: &Context,
    nodes: &[&LineageNode],
) -> Partitioner {
    let max_parts = nodes.iter().map(|n| n.num_partitions).max().unwrap_or(0);
    let default = ctx
        .configured_shuffle_partitions()
        .map_or(max_parts, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let best = nodes
        .iter()
        .filter(|n| {
            n.partitioner
                .as_ref()
                .is_some_and(|p| p.num_partitions() > 0 && p.routes::<K>())
        })
        .max_by_key(|n| n.num_partitions);
    if let Some(p) = best.and_then(|n| n.partitioner.as_ref()) {
        let own = p.num_partitions() as f64;
        let eligible = (f64::from(max_parts)).log10() - own.log10() < 1.0;
        if eligible || default as usize <= p.num_partitions() {
            return p.clone();
        }
    }
    Partitioner::hash::<K>(default)
}

/// Payload of a shuffle routed by a [`Partitioner`] other than plain hashing.
#[derive(Serialize, Deserialize)]
pub(crate) struct Routed {
    /// Offset of the partitioner's router loader for the key type.
    pub router: i64,
    pub identity: Vec<u8>,
}

impl Routed {
    pub(crate) fn of(p: &Partitioner) -> Self {
        Routed {
            router: p.router_offset(),
            identity: p.identity().to_vec(),
        }
    }
}

/// Map side routed by any partitioner: each `(K, V)` to the partition it names.
pub(crate) fn write_routed<K: Data, V: Data>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus> {
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let routed: Routed = decode("partitioner", &payload.partitioner)?;
    // SAFETY: the offset was taken from a `Partitioner` routing keys of type `K` (checked
    // with `Partitioner::routes::<K>()` before the shuffle was defined).
    let load = unsafe { loader_from_offset::<K>(routed.router, tc.binary_checked()) };
    let route = load(&routed.identity)?;
    let n = dep.num_reduce_partitions;
    let mut out = MapSide::<(K, V)>::new(tc, dep, map);
    for batch in tc.compute::<(K, V)>(dep.parent, map)? {
        for rec in batch? {
            let r = route(&rec.0);
            if r >= n {
                return Err(EmberError::InvalidArgument(format!(
                    "the partitioner of shuffle {} put a key in partition {r}, \
                     but it has {n} partitions",
                    dep.shuffle_id
                )));
            }
            out.write(r, &rec)?;
        }
    }
    out.finish(tc, dep, map)
}

/// The map side of a shuffle that moves `(K, V)` records as they are to the partitions
/// `p` names, and its payload: the static hash path for hash partitioning, the routed
/// one for any other.
pub(crate) fn plain_write<K: Data + std::hash::Hash, V: Data>(
    op: &str,
    p: &Partitioner,
) -> (ShuffleWriteFn, Vec<u8>) {
    let (write, partitioner): (ShuffleWriteFn, Vec<u8>) =
        if *p.kind() == crate::shuffle::PartitionerKind::Hash {
            (
                crate::shuffle::write::write_plain::<K, V, HashPartitioning>,
                Vec::new(),
            )
        } else {
            (write_routed::<K, V>, encode(op, &Routed::of(p)))
        };
    let payload = WritePayload {
        partitioner,
        state: Vec::new(),
    };
    (write, encode(op, &payload))
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// Redistributes the records by a user partitioner (Spark's
    /// `partitionBy(partitioner)`); this RDD itself if it is partitioned so already.
    #[track_caller]
    pub fn partition_by_with<P: KeyPartitioner<K>>(&self, partitioner: P) -> Rdd<(K, V)> {
        let at = Location::caller();
        let p = Partitioner::custom::<K, P>(&partitioner);
        if partitioner.num_partitions() == 0 {
            return self
                .route_to("partition_by", at, &p)
                .invalid("the partitioner has 0 partitions");
        }
        self.partition_by_partitioner("partition_by", at, &p)
    }

    /// This RDD if it is partitioned by `p` already, else a shuffle routed by `p`.
    pub(crate) fn partition_by_partitioner(
        &self,
        op: &str,
        at: &'static Location<'static>,
        p: &Partitioner,
    ) -> Rdd<(K, V)> {
        if self.node.partitioner.as_ref() == Some(p) {
            return self.clone();
        }
        self.route_to(op, at, p)
    }

    /// A shuffle of this RDD routed by `p` (hash partitioning takes the static path).
    pub(crate) fn route_to(
        &self,
        op: &str,
        at: &'static Location<'static>,
        p: &Partitioner,
    ) -> Rdd<(K, V)> {
        let n = p.num_partitions() as u32;
        let (write, payload) = plain_write::<K, V>(op, p);
        let read: ComputeFn = read_plain::<K, V>;
        self.shuffle_child(op, at, n, write, payload, read, Vec::new())
            .with_partitioner(Some(p.clone()))
    }

    /// Spark's `lookup`: with a known partitioner only the partition that can hold
    /// `key` is computed (one task); otherwise every partition is searched. A partitioner
    /// that puts `key` outside `0..num_partitions` is an [`EmberError::InvalidArgument`]
    /// naming the partition index and count (Spark's invalid partition index), not an
    /// empty answer.
    #[track_caller]
    pub fn lookup(&self, key: K) -> Result<Vec<V>> {
        let mut part = None;
        if let Some(p) = &self.node.partitioner {
            if let Some(route) = p.router::<K>() {
                let index = route?(&key);
                if index >= self.node.num_partitions {
                    return Err(EmberError::InvalidArgument(format!(
                        "lookup: the {:?} partitioner puts the key in partition {index}, but the RDD has {} partitions",
                        p.kind(),
                        self.node.num_partitions
                    )));
                }
                part = Some(index);
            }
        }
        let filtered = self
            .filter_with(key, |k: &K, (x, _): &(K, V)| x == k)
            .values();
        match part {
            Some(part) => Ok(filtered
                .run_partitions(&[part])?
                .into_iter()
                .flatten()
                .collect()),
            None => filtered.collect(),
        }
    }
}

impl<T: Data> Rdd<T> {
    /// Spark's `PartitionerAwareUnionRDD`: RDDs with the same partitioner are unioned
    /// partition by partition (partition `p` holds partition `p` of each), keeping the
    /// partitioner and its partition count.
    pub(crate) fn union_co_partitioned(&self, other: &Rdd<T>, at: &Location<'_>) -> Rdd<T> {
        let compute: ComputeFn = co_partitioned_union::<T>;
        self.narrow_child(
            "union",
            at,
            vec![self.node.clone(), other.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            Vec::new(),
        )
        .with_partitioner(self.node.partitioner.clone())
    }
}

fn co_partitioned_union<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut sides = Vec::with_capacity(node.deps.len());
    for i in 0..node.deps.len() {
        sides.push(tc.compute::<T>(TaskContext::dep_parent(node, i)?, part)?);
    }
    let out: Batches<T> = Box::new(sides.into_iter().flatten());
    Ok(Box::new(out))
}

impl<T: Key> Rdd<T> {
    /// Spark's `distinct` on an RDD that has a partitioner, into as many partitions as it
    /// has: equal records share a key, so they are already in one partition; duplicates
    /// are removed within each partition (spilling as an aggregation does) and the
    /// partitioner is kept. No shuffle.
    pub(crate) fn distinct_in_place(&self, at: &Location<'_>) -> Rdd<T> {
        let compute: ComputeFn = distinct_in_partition::<T>;
        self.within_partitions("distinct", at, compute, Vec::new())
    }
}

/// The aggregation of `distinct`: a record is its own key, with nothing to combine.
struct FirstOfEach;
impl<T> Aggregate<T, (), ()> for FirstOfEach {
    fn create(&self, _: &T, _: ()) {}
    fn merge_value(&self, _: &mut (), _: ()) {}
    fn merge_combiners(&self, _: &mut (), _: ()) {}
}

/// One partition's records, each once.
fn distinct_in_partition<T: Key>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let parent = TaskContext::dep_parent(node, 0)?;
    let mut seen: ExternalAggregator<T, (), (), FirstOfEach> =
        ExternalAggregator::new(FirstOfEach, tc.reservation("distinct"), tc.env.spill_dir());
    for batch in tc.compute::<T>(parent, part)? {
        for x in batch? {
            seen.insert(x, ())?;
        }
    }
    record_spills(tc, seen.metrics());
    let out: Batches<T> = into_batches(seen.into_iter()?.map(|r| r.map(|(x, ())| x)));
    Ok(Box::new(out))
}
