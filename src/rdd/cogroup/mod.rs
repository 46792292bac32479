//! The cogroup family: `cogroup` / `cogroup_into` here, on Spark's `CoGroupedRDD` for
//! two sides, and the multi-way `cogroup3` / `cogroup4` (`tagged.rs`, by tagging each
//! side's values); the joins (`join.rs`) and set operators are built on them.
//!
//! `CoGroupedRDD`: per key, the values of each side, in the partitions of a target
//! [`Partitioner`]. Each side is read narrowly when it is
//! partitioned by the target already and through its own shuffle routed by the target
//! otherwise, so co-partitioned inputs (say, two `partition_by(n)` or `reduce_by_key`
//! outputs with the same `n`) are joined without moving a record.
//!
//! Invariants: every record of either side lands in the group of its key exactly once;
//! the result is partitioned by the target; a side read narrowly gives the same groups
//! its shuffle would have (partition `p` of a side partitioned by the target holds
//! exactly the keys the target sends to `p`).

mod hash_join;
mod tagged;

pub use tagged::{Groups3, Groups4};

use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{dependency, RddNode};
use serde::{Deserialize, Serialize};

use super::partitioning::{default_partitioner, plain_write};
use super::Rdd;
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};
use crate::plan::LineageDep;
use crate::shuffle::{read_dependency_blocks, Partitioner};
use crate::spill::aggregate::{Aggregate, ExternalAggregator};
use crate::task::{into_batches, record_spills};
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

/// The values of one key on each side of a cogroup.
pub type Groups<V, W> = (Vec<V>, Vec<W>);

/// A value from the left or the right side.
#[derive(Clone, Serialize, Deserialize)]
enum Side<V, W> {
    Left(V),
    Right(W),
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// How the cogroup reads this side: narrowly if partitioned by `target`, else
    /// through a new shuffle routed by it.
    fn side_dependency(&self, op: &str, target: &Partitioner) -> LineageDep {
        if self.node.partitioner.as_ref() == Some(target) {
            return LineageDep::Narrow {
                parent: self.node.clone(),
                one_to_one: true,
            };
        }
        let (write, payload) = plain_write::<K, V>(op, target);
        let n = target.num_partitions() as u32;
        LineageDep::Shuffle(Arc::new(self.shuffle_spec(n, write, payload)))
    }

    /// For each key of either RDD, its values on each side, partitioned by `target`.
    pub(crate) fn cogroup_to<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        target: Partitioner,
        at: &Location<'_>,
    ) -> Rdd<(K, Groups<V, W>)> {
        let n = target.num_partitions() as u32;
        let compute: ComputeFn = cogroup_compute::<K, V, W>;
        let deps = vec![
            self.side_dependency("cogroup", &target),
            other.side_dependency("cogroup", &target),
        ];
        let rdd: Rdd<(K, Groups<V, W>)> = self
            .ctx
            .new_rdd("cogroup", at, n, deps, compute, Vec::new())
            .with_partitioner(Some(target));
        if n == 0 && self.node.num_partitions + other.node.num_partitions > 0 {
            return rdd.invalid("cannot cogroup into 0 partitions");
        }
        rdd
    }
}

/// Appends values to their side's list.
struct CoGroup;
impl<K, V: Send + 'static, W: Send + 'static> Aggregate<K, Side<V, W>, Groups<V, W>> for CoGroup {
    #[inline]
    fn create(&self, _: &K, v: Side<V, W>) -> Groups<V, W> {
        let mut g = (Vec::new(), Vec::new());
        <CoGroup as Aggregate<K, _, _>>::merge_value(self, &mut g, v);
        g
    }
    #[inline]
    fn merge_value(&self, g: &mut Groups<V, W>, v: Side<V, W>) {
        match v {
            Side::Left(v) => g.0.push(v),
            Side::Right(w) => g.1.push(w),
        }
    }
    #[inline]
    fn merge_combiners(&self, g: &mut Groups<V, W>, other: Groups<V, W>) {
        g.0.extend(other.0);
        g.1.extend(other.1);
    }
}

/// The records of partition `part` of side `i` of a cogroup node.
fn side_records<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    i: usize,
    part: u32,
) -> Result<Box<dyn Iterator<Item = Result<T>>>> {
    match node.deps.get(i).and_then(|d| d.kind.as_ref()) {
        Some(dependency::Kind::Narrow(nd)) => {
            let batches = tc.compute::<T>(nd.parent, part)?;
            Ok(Box::new(batches.flat_map(
                |b| -> Box<dyn Iterator<Item = Result<T>>> {
                    match b {
                        Ok(v) => Box::new(v.into_iter().map(Ok)),
                        Err(e) => Box::new(std::iter::once(Err(e))),
                    }
                },
            )))
        }
        Some(dependency::Kind::Shuffle(sd)) => Ok(Box::new(
            read_dependency_blocks::<T>(tc, sd, part)?.map(|r| r.map(|(_, t)| t)),
        )),
        None => Err(EmberError::Plan(format!(
            "cogroup node {} has no side {i}",
            node.id
        ))),
    }
}

fn cogroup_compute<K: Key, V: Data, W: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut agg: ExternalAggregator<K, Side<V, W>, Groups<V, W>, CoGroup> =
        ExternalAggregator::new(CoGroup, tc.reservation("cogroup"), tc.env.spill_dir());
    for r in side_records::<(K, V)>(tc, node, 0, part)? {
        let (k, v) = r?;
        agg.insert(k, Side::Left(v))?;
    }
    for r in side_records::<(K, W)>(tc, node, 1, part)? {
        let (k, w) = r?;
        agg.insert(k, Side::Right(w))?;
    }
    record_spills(tc, agg.metrics());
    let out: Batches<(K, Groups<V, W>)> = into_batches(agg.into_iter()?);
    Ok(Box::new(out))
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// For each key in either RDD, all its values on each side, partitioned by Spark's
    /// default partitioner of the two (a side already partitioned by it is not
    /// shuffled).
    #[track_caller]
    pub fn cogroup<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, Groups<V, W>)> {
        let target = default_partitioner::<K>(&self.ctx, &[&self.node, &other.node]);
        self.cogroup_to(other, target, Location::caller())
    }

    /// [`cogroup`](Self::cogroup) into `partitions` hash partitions.
    #[track_caller]
    pub fn cogroup_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, Groups<V, W>)> {
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        self.cogroup_to(other, Partitioner::hash::<K>(n), Location::caller())
    }
}
