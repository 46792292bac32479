//! Joins of pair RDDs. The inner join is a shuffled hash join (`cogroup/hash_join.rs`:
//! the sides shuffled as a cogroup shuffles them, one side held in a hash table, the
//! other streamed past it); the outer joins and `subtract_by_key` are built on `cogroup`
//! (`cogroup/`: each side shuffled unless already partitioned by the target), each key's
//! groups expanded with `flat_map_values`. Every result keeps the target partitioner as
//! in Spark.

use std::panic::Location;

use super::cogroup::Groups;
use super::partitioning::default_partitioner;
use super::Rdd;
use crate::data::{Data, Key};
use crate::shuffle::Partitioner;

/// A full outer join's pair: either side may be missing.
pub type OuterPair<V, W> = (Option<V>, Option<W>);

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// Pairs of values for keys present in both RDDs.
    #[track_caller]
    pub fn join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (V, W))> {
        let target = default_partitioner::<K>(&self.ctx, &[&self.node, &other.node]);
        self.hash_join_to(other, target, Location::caller())
    }

    /// [`join`](Self::join) into `partitions` partitions (Spark's `join(other, n)`).
    #[track_caller]
    pub fn join_into<W: Data>(&self, other: &Rdd<(K, W)>, partitions: usize) -> Rdd<(K, (V, W))> {
        let n = u32::try_from(partitions).unwrap_or(u32::MAX);
        self.hash_join_to(other, Partitioner::hash::<K>(n), Location::caller())
    }

    /// Every left record, with each matching right value or `None`; partitioned by
    /// Spark's default partitioner of the two sides.
    #[track_caller]
    pub fn left_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (V, Option<W>))> {
        left_pairs(self.cogroup(other))
    }

    /// [`left_outer_join`](Self::left_outer_join) into `partitions` hash partitions
    /// (Spark's `leftOuterJoin(other, numPartitions)`).
    #[track_caller]
    pub fn left_outer_join_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, (V, Option<W>))> {
        left_pairs(self.cogroup_into(other, partitions))
    }

    /// Every right record, with each matching left value or `None`; partitioned by
    /// Spark's default partitioner of the two sides.
    #[track_caller]
    pub fn right_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (Option<V>, W))> {
        right_pairs(self.cogroup(other))
    }

    /// [`right_outer_join`](Self::right_outer_join) into `partitions` hash partitions
    /// (Spark's `rightOuterJoin(other, numPartitions)`).
    #[track_caller]
    pub fn right_outer_join_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, (Option<V>, W))> {
        right_pairs(self.cogroup_into(other, partitions))
    }

    /// Every key of either side, with all value pairs, `None` where a side lacks it;
    /// partitioned by Spark's default partitioner of the two sides.
    #[track_caller]
    pub fn full_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, OuterPair<V, W>)> {
        full_pairs(self.cogroup(other))
    }

    /// [`full_outer_join`](Self::full_outer_join) into `partitions` hash partitions
    /// (Spark's `fullOuterJoin(other, numPartitions)`).
    #[track_caller]
    pub fn full_outer_join_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, OuterPair<V, W>)> {
        full_pairs(self.cogroup_into(other, partitions))
    }

    /// The records whose key does not occur in `other`, in this RDD's partitions (its
    /// partitioner if it has one, else hash partitioning into as many partitions as it
    /// has: Spark's `subtractByKey`).
    #[track_caller]
    pub fn subtract_by_key<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, V)> {
        let target = self
            .node
            .partitioner
            .clone()
            .filter(|p| p.routes::<K>())
            .unwrap_or_else(|| Partitioner::hash::<K>(self.node.num_partitions));
        unmatched(self.cogroup_to(other, target, Location::caller()))
    }

    /// [`subtract_by_key`](Self::subtract_by_key) into `partitions` hash partitions
    /// (Spark's `subtractByKey(other, numPartitions)`).
    #[track_caller]
    pub fn subtract_by_key_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, V)> {
        unmatched(self.cogroup_into(other, partitions))
    }
}

/// The left values of the keys `other` lacks (subtract_by_key of a cogroup).
#[track_caller]
fn unmatched<K: Key, V: Data, W: Data>(groups: Rdd<(K, Groups<V, W>)>) -> Rdd<(K, V)> {
    groups.flat_map_values(|(vs, ws): (Vec<V>, Vec<W>)| if ws.is_empty() { vs } else { Vec::new() })
}

/// Each left value with each right one or `None` (the left outer join of a cogroup).
#[track_caller]
fn left_pairs<K: Key, V: Data, W: Data>(
    groups: Rdd<(K, Groups<V, W>)>,
) -> Rdd<(K, (V, Option<W>))> {
    groups.flat_map_values(|(vs, ws): (Vec<V>, Vec<W>)| {
        let mut out = Vec::new();
        for v in &vs {
            if ws.is_empty() {
                out.push((v.clone(), None));
            }
            for w in &ws {
                out.push((v.clone(), Some(w.clone())));
            }
        }
        out
    })
}

/// Each right value with each left one or `None` (the right outer join of a cogroup).
#[track_caller]
fn right_pairs<K: Key, V: Data, W: Data>(
    groups: Rdd<(K, Groups<V, W>)>,
) -> Rdd<(K, (Option<V>, W))> {
    groups.flat_map_values(|(vs, ws): (Vec<V>, Vec<W>)| {
        let mut out = Vec::new();
        for w in &ws {
            if vs.is_empty() {
                out.push((None, w.clone()));
            }
            for v in &vs {
                out.push((Some(v.clone()), w.clone()));
            }
        }
        out
    })
}

/// Every pair of a key's values, `None` for a missing side (the full outer join).
#[track_caller]
fn full_pairs<K: Key, V: Data, W: Data>(
    groups: Rdd<(K, Groups<V, W>)>,
) -> Rdd<(K, OuterPair<V, W>)> {
    groups.flat_map_values(|(vs, ws): (Vec<V>, Vec<W>)| {
        let mut out = Vec::new();
        match (vs.is_empty(), ws.is_empty()) {
            (true, _) => out.extend(ws.into_iter().map(|w| (None, Some(w)))),
            (false, true) => out.extend(vs.into_iter().map(|v| (Some(v), None))),
            (false, false) => {
                for v in &vs {
                    for w in &ws {
                        out.push((Some(v.clone()), Some(w.clone())));
                    }
                }
            }
        }
        out
    })
}
