//! Multi-way cogroups beyond the 3-way one in `join.rs`: `cogroup4` (Spark's
//! `cogroup(other1, other2, other3)`).
//!
//! Invariants: like `cogroup3`, every side's values are tagged with their side, the
//! tagged RDDs unioned and grouped by key into Spark's default partitioner of the
//! sides (no shuffle when all are partitioned by it already); each key of any side appears once, with every
//! value of each side (in no defined order) and empty vectors for sides lacking it.

use std::panic::Location;

use serde::{Deserialize, Serialize};

use super::pair::rename;
use super::partitioning::default_partitioner;
use super::Rdd;
use crate::data::{Data, Key};

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
