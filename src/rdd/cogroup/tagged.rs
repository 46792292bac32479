//! Multi-way cogroups: `cogroup3` and `cogroup4` (Spark's `cogroup(other1, other2)` and
//! `cogroup(other1, other2, other3)`).
//!
//! Invariants: every side's values are tagged with their side, the
//! tagged RDDs unioned and grouped by key into Spark's default partitioner of the
//! sides (no shuffle when all are partitioned by it already); each key of any side appears once, with every
//! value of each side (in no defined order) and empty vectors for sides lacking it.

use std::panic::Location;

use serde::{Deserialize, Serialize};

use crate::data::{Data, Key};
use crate::rdd::pair::rename;
use crate::rdd::partitioning::default_partitioner;
use crate::rdd::Rdd;

/// The values of one key in each of three RDDs.
pub type Groups3<V, W, X> = (Vec<V>, Vec<W>, Vec<X>);

/// A value from one of the three sides of a 3-way cogroup.
#[derive(Clone, Serialize, Deserialize)]
enum Side3<V, W, X> {
    A(V),
    B(W),
    C(X),
}

/// The values of one key in each of four RDDs.
pub type Groups4<V, W, X, Y> = (Vec<V>, Vec<W>, Vec<X>, Vec<Y>);

/// A value from one of the four sides of a 4-way cogroup.
#[derive(Clone, Serialize, Deserialize)]
enum Side4<V, W, X, Y> {
    A(V),
    B(W),
    C(X),
    D(Y),
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// For each key in any of the three RDDs, all its values in each (Spark's
    /// `cogroup(other1, other2)`), partitioned by Spark's default partitioner of the
    /// three.
    #[track_caller]
    pub fn cogroup3<W: Data, X: Data>(
        &self,
        b: &Rdd<(K, W)>,
        c: &Rdd<(K, X)>,
    ) -> Rdd<(K, Groups3<V, W, X>)> {
        let at = Location::caller();
        let target = default_partitioner::<K>(&self.ctx, &[&self.node, &b.node, &c.node]);
        let sa = self.map_values(Side3::<V, W, X>::A);
        let sb = b.map_values(Side3::<V, W, X>::B);
        let sc = c.map_values(Side3::<V, W, X>::C);
        let mut grouped = sa.union(&sb).union(&sc).group_values(at, target);
        if let Some(node) = std::sync::Arc::get_mut(&mut grouped.node) {
            node.name = crate::rdd::op_name("cogroup", at);
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

    /// For each key in any of the four RDDs, all its values in each (Spark's
    /// `cogroup(other1, other2, other3)`), partitioned by Spark's default partitioner of
    /// the four (co-partitioned sides are unioned partition by partition and grouped
    /// without a shuffle).
    #[track_caller]
    pub fn cogroup4<W: Data, X: Data, Y: Data>(
        &self,
        b: &Rdd<(K, W)>,
        c: &Rdd<(K, X)>,
        d: &Rdd<(K, Y)>,
    ) -> Rdd<(K, Groups4<V, W, X, Y>)> {
        let at = Location::caller();
        let target = default_partitioner::<K>(&self.ctx, &[&self.node, &b.node, &c.node, &d.node]);
        let sa = self.map_values(Side4::<V, W, X, Y>::A);
        let sb = b.map_values(Side4::<V, W, X, Y>::B);
        let sc = c.map_values(Side4::<V, W, X, Y>::C);
        let sd = d.map_values(Side4::<V, W, X, Y>::D);
        let mut grouped = sa.union(&sb).union(&sc).union(&sd).group_values(at, target);
        rename(&mut grouped, "cogroup", at);
        grouped.map_values(|sides: Vec<Side4<V, W, X, Y>>| {
            let mut g: Groups4<V, W, X, Y> = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for s in sides {
                match s {
                    Side4::A(v) => g.0.push(v),
                    Side4::B(w) => g.1.push(w),
                    Side4::C(x) => g.2.push(x),
                    Side4::D(y) => g.3.push(y),
                }
            }
            g
        })
    }
}
