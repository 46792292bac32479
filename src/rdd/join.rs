//! Joins of pair RDDs, all built on `cogroup`: both sides are tagged, unioned and
//! grouped by key through one shuffle, then each key's groups are expanded (inner,
//! left/right/full outer join, subtract_by_key).

use std::panic::Location;

use serde::{Deserialize, Serialize};

use super::Rdd;
use crate::data::{Data, Key};

/// The values of one key on each side of a cogroup.
pub type Groups<V, W> = (Vec<V>, Vec<W>);
/// A full outer join's pair: either side may be missing.
pub type OuterPair<V, W> = (Option<V>, Option<W>);

/// The values of one key in each of three RDDs.
pub type Groups3<V, W, X> = (Vec<V>, Vec<W>, Vec<X>);

/// A value from one of the three sides of a 3-way cogroup.
#[derive(Clone, Serialize, Deserialize)]
enum Side3<V, W, X> {
    A(V),
    B(W),
    C(X),
}

/// A value from the left or the right side of a cogroup.
#[derive(Clone, Serialize, Deserialize)]
enum Side<V, W> {
    Left(V),
    Right(W),
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// For each key in either RDD, all its values on each side.
    #[track_caller]
    pub fn cogroup<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, Groups<V, W>)> {
        self.cogroup_into(other, self.num_partitions().max(other.num_partitions()))
    }

    /// [`cogroup`](Self::cogroup) into `partitions` partitions.
    #[track_caller]
    pub fn cogroup_into<W: Data>(
        &self,
        other: &Rdd<(K, W)>,
        partitions: usize,
    ) -> Rdd<(K, Groups<V, W>)> {
        let at = Location::caller();
        let left = self.map_values(Side::<V, W>::Left);
        let right = other.map_values(Side::<V, W>::Right);
        let mut grouped = left.union(&right).group_by_key_into(partitions);
        if let Some(node) = std::sync::Arc::get_mut(&mut grouped.node) {
            node.name = super::op_name("cogroup", at);
        }
        grouped.map_values(|sides: Vec<Side<V, W>>| {
            let mut vs = Vec::new();
            let mut ws = Vec::new();
            for s in sides {
                match s {
                    Side::Left(v) => vs.push(v),
                    Side::Right(w) => ws.push(w),
                }
            }
            (vs, ws)
        })
    }

    /// For each key in any of the three RDDs, all its values in each (Spark's
    /// `cogroup(other1, other2)`), in as many partitions as the largest of them.
    #[track_caller]
    pub fn cogroup3<W: Data, X: Data>(
        &self,
        b: &Rdd<(K, W)>,
        c: &Rdd<(K, X)>,
    ) -> Rdd<(K, Groups3<V, W, X>)> {
        let at = Location::caller();
        let partitions = self
            .num_partitions()
            .max(b.num_partitions())
            .max(c.num_partitions());
        let sa = self.map_values(Side3::<V, W, X>::A);
        let sb = b.map_values(Side3::<V, W, X>::B);
        let sc = c.map_values(Side3::<V, W, X>::C);
        let mut grouped = sa.union(&sb).union(&sc).group_by_key_into(partitions);
        if let Some(node) = std::sync::Arc::get_mut(&mut grouped.node) {
            node.name = super::op_name("cogroup", at);
        }
        grouped.map_values(|sides: Vec<Side3<V, W, X>>| {
            let (mut vs, mut ws, mut xs) = (Vec::new(), Vec::new(), Vec::new());
            for s in sides {
                match s {
                    Side3::A(v) => vs.push(v),
                    Side3::B(w) => ws.push(w),
                    Side3::C(x) => xs.push(x),
                }
            }
            (vs, ws, xs)
        })
    }

    /// Pairs of values for keys present in both RDDs.
    #[track_caller]
    pub fn join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (V, W))> {
        self.join_into(other, self.num_partitions().max(other.num_partitions()))
    }

    /// [`join`](Self::join) into `partitions` partitions (Spark's `join(other, n)`).
    #[track_caller]
    pub fn join_into<W: Data>(&self, other: &Rdd<(K, W)>, partitions: usize) -> Rdd<(K, (V, W))> {
        self.cogroup_into(other, partitions)
            .flat_map(|(k, (vs, ws)): (K, (Vec<V>, Vec<W>))| {
                let mut out = Vec::with_capacity(vs.len() * ws.len());
                for v in &vs {
                    for w in &ws {
                        out.push((k.clone(), (v.clone(), w.clone())));
                    }
                }
                out
            })
    }

    /// Every left record, with each matching right value or `None`.
    #[track_caller]
    pub fn left_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (V, Option<W>))> {
        self.cogroup(other)
            .flat_map(|(k, (vs, ws)): (K, (Vec<V>, Vec<W>))| {
                let mut out = Vec::new();
                for v in &vs {
                    if ws.is_empty() {
                        out.push((k.clone(), (v.clone(), None)));
                    }
                    for w in &ws {
                        out.push((k.clone(), (v.clone(), Some(w.clone()))));
                    }
                }
                out
            })
    }

    /// Every right record, with each matching left value or `None`.
    #[track_caller]
    pub fn right_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, (Option<V>, W))> {
        self.cogroup(other)
            .flat_map(|(k, (vs, ws)): (K, (Vec<V>, Vec<W>))| {
                let mut out = Vec::new();
                for w in &ws {
                    if vs.is_empty() {
                        out.push((k.clone(), (None, w.clone())));
                    }
                    for v in &vs {
                        out.push((k.clone(), (Some(v.clone()), w.clone())));
                    }
                }
                out
            })
    }

    /// Every key of either side, with all value pairs, `None` where a side lacks it.
    #[track_caller]
    pub fn full_outer_join<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, OuterPair<V, W>)> {
        self.cogroup(other)
            .flat_map(|(k, (vs, ws)): (K, (Vec<V>, Vec<W>))| {
                let mut out = Vec::new();
                match (vs.is_empty(), ws.is_empty()) {
                    (true, _) => out.extend(ws.into_iter().map(|w| (k.clone(), (None, Some(w))))),
                    (false, true) => {
                        out.extend(vs.into_iter().map(|v| (k.clone(), (Some(v), None))))
                    }
                    (false, false) => {
                        for v in &vs {
                            for w in &ws {
                                out.push((k.clone(), (Some(v.clone()), Some(w.clone()))));
                            }
                        }
                    }
                }
                out
            })
    }

    /// The records whose key does not occur in `other`.
    #[track_caller]
    pub fn subtract_by_key<W: Data>(&self, other: &Rdd<(K, W)>) -> Rdd<(K, V)> {
        self.cogroup(other)
            .flat_map(|(k, (vs, ws)): (K, (Vec<V>, Vec<W>))| {
                if ws.is_empty() {
                    vs.into_iter().map(|v| (k.clone(), v)).collect()
                } else {
                    Vec::new()
                }
            })
    }
}
