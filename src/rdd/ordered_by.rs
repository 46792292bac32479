//! Order actions by a key function (Spark's `top(n)(ordering)`,
//! `takeOrdered(n)(ordering)`, `max()(ordering)`, `min()(ordering)` with an ordering
//! `Ordering.by(key_fn)`): `top_by`, `take_ordered_by`, `max_by`, `min_by`.
//!
//! Invariants: each task keeps at most about `2n + 1024` records (with their keys) at a
//! time and returns its best `n`; the driver merges the partitions' lists in partition
//! order. Sorting is stable, so among records with equal keys the one earlier in
//! partition order (then record order) comes first: `max_by`/`min_by` return the first
//! of several equal extremes. `max_by`/`min_by` of an empty RDD are the empty-RDD error,
//! as `max`/`min` are.

use std::marker::PhantomData;
use std::rc::Rc;

use super::actions::ResultOp;
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::task::{Batches, TaskContext};

/// The best `n` of one partition by key, ascending (or descending with `DESC`).
struct TakeOrderedBy<T, K, F, const DESC: bool>(PhantomData<fn(T, F) -> K>);
impl<T: Data, K: Ord + 'static, F: Fn(&T) -> K + 'static, const DESC: bool> ResultOp
    for TakeOrderedBy<T, K, F, DESC>
{
    type In = T;
    type Out = Vec<T>;
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Vec<T>> {
        let n: u64 = decode("take_ordered_by", payload)?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let f = conjure::<F>();
        let mut best: Vec<(K, T)> = Vec::new();
        for b in input {
            best.extend(b?.into_iter().map(|x| (f(&x), x)));
            if best.len() > n.saturating_mul(2).saturating_add(1024) {
                keep_best::<K, T, DESC>(&mut best, n);
            }
        }
        keep_best::<K, T, DESC>(&mut best, n);
        Ok(best.into_iter().map(|(_, x)| x).collect())
    }
}

/// Stable sort by key (descending with `DESC`), then the first `n`.
fn keep_best<K: Ord, T, const DESC: bool>(v: &mut Vec<(K, T)>, n: usize) {
    if DESC {
        v.sort_by(|a, b| b.0.cmp(&a.0));
    } else {
        v.sort_by(|a, b| a.0.cmp(&b.0));
    }
    v.truncate(n);
}

impl<T: Data> Rdd<T> {
    fn ordered_by<K: Ord + 'static, F: Fn(&T) -> K + 'static, const DESC: bool>(
        &self,
        n: usize,
        f: F,
        action: &str,
    ) -> Result<Vec<T>> {
        let parts = self.run_action::<TakeOrderedBy<T, K, F, DESC>>(
            encode(action, &(n as u64)),
            None,
            action,
        )?;
        let mut all: Vec<(K, T)> = parts.into_iter().flatten().map(|x| (f(&x), x)).collect();
        keep_best::<K, T, DESC>(&mut all, n);
        Ok(all.into_iter().map(|(_, x)| x).collect())
    }

    /// The `n` records with the smallest keys `f(record)`, ascending by key (Spark's
    /// `takeOrdered(n)(Ordering.by(f))`); ties in partition order.
    #[track_caller]
    pub fn take_ordered_by<K: Ord + 'static, F: Fn(&T) -> K + 'static>(
        &self,
        n: usize,
        f: F,
    ) -> Result<Vec<T>> {
        let _capture_f = assert_stateless(&f);
        self.ordered_by::<K, F, false>(n, f, "take_ordered_by")
    }

    /// The `n` records with the largest keys `f(record)`, descending by key (Spark's
    /// `top(n)(Ordering.by(f))`); ties in partition order.
    #[track_caller]
    pub fn top_by<K: Ord + 'static, F: Fn(&T) -> K + 'static>(
        &self,
        n: usize,
        f: F,
    ) -> Result<Vec<T>> {
        let _capture_f = assert_stateless(&f);
        self.ordered_by::<K, F, true>(n, f, "top_by")
    }

    /// The record with the largest key `f(record)` (the first in partition order among
    /// equal ones); the empty-RDD error for none, as [`max`](Self::max).
    #[track_caller]
    pub fn max_by<K: Ord + 'static, F: Fn(&T) -> K + 'static>(&self, f: F) -> Result<T> {
        let _capture_f = assert_stateless(&f);
        self.ordered_by::<K, F, true>(1, f, "max_by")?
            .into_iter()
            .next()
            .ok_or(EmberError::EmptyRdd("max_by"))
    }

    /// The record with the smallest key `f(record)` (the first in partition order among
    /// equal ones); the empty-RDD error for none, as [`min`](Self::min).
    #[track_caller]
    pub fn min_by<K: Ord + 'static, F: Fn(&T) -> K + 'static>(&self, f: F) -> Result<T> {
        let _capture_f = assert_stateless(&f);
        self.ordered_by::<K, F, false>(1, f, "min_by")?
            .into_iter()
            .next()
            .ok_or(EmberError::EmptyRdd("min_by"))
    }
}
