//! `zip_partitions` (Spark's `zipPartitions`): a function of partition `p` of two RDDs
//! at once, `f(records of self, records of other)`, for every `p`.
//!
//! Invariants: narrow (no shuffle), one output partition per input partition; both
//! RDDs need the same partition count (else an invalid-argument error at the first
//! action), but not the same record counts (unlike `zip`). An input error on either
//! side ends that side's iteration and fails the task after `f`'s output.

use std::cell::RefCell;
use std::panic::Location;
use std::rc::Rc;

use ember_proto::RddNode;

use super::partition_op::{rebatch, Records, State};
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::Result;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

impl<T: Data> Rdd<T> {
    /// Partition `p` of the result is `f(records of partition p of self, records of
    /// partition p of other)`. Both RDDs need the same number of partitions (else an
    /// invalid-argument error at the first action); their partitions may hold different
    /// numbers of records.
    #[track_caller]
    pub fn zip_partitions<
        U: Data,
        V: Data,
        I: IntoIterator<Item = V> + 'static,
        F: Fn(Records<T>, Records<U>) -> I + 'static,
    >(
        &self,
        other: &Rdd<U>,
        f: F,
    ) -> Rdd<V> {
        let _capture_f = assert_stateless(&f);
        self.zip_partitions_with(other, (), move |_: &(), a: Records<T>, b: Records<U>| {
            conjure::<F>()(a, b)
        })
    }

    /// [`zip_partitions`](Self::zip_partitions) with `f(&state, left, right)`; `state`
    /// is shipped with the plan.
    #[track_caller]
    pub fn zip_partitions_with<
        S: State,
        U: Data,
        V: Data,
        I: IntoIterator<Item = V> + 'static,
        F: Fn(&S, Records<T>, Records<U>) -> I + 'static,
    >(
        &self,
        other: &Rdd<U>,
        state: S,
        f: F,
    ) -> Rdd<V> {
        let _capture_f = assert_stateless(&f);
        let (n, m) = (self.num_partitions(), other.num_partitions());
        let compute: ComputeFn = zip_partitions_compute::<S, T, U, V, I, F>;
        let rdd = self.narrow_child(
            "zip_partitions",
            Location::caller(),
            vec![self.node.clone(), other.node.clone()],
            true,
            n as u32,
            compute,
            encode("zip_partitions", &state),
        );
        if n != m {
            return rdd.invalid(format!(
                "can only zip RDDs with the same number of partitions ({n} and {m})"
            ));
        }
        rdd
    }
}

fn zip_partitions_compute<S, T, U, V, I, F>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased>
where
    S: State,
    T: Data,
    U: Data,
    V: Data,
    I: IntoIterator<Item = V> + 'static,
    F: Fn(&S, Records<T>, Records<U>) -> I + 'static,
{
    let state: S = decode("zip_partitions state", &node.payload)?;
    let left = tc.compute::<T>(TaskContext::dep_parent(node, 0)?, part)?;
    let right = tc.compute::<U>(TaskContext::dep_parent(node, 1)?, part)?;
    let error = Rc::new(RefCell::new(None));
    let out = conjure::<F>()(
        &state,
        Records::new(left, error.clone()),
        Records::new(right, error.clone()),
    )
    .into_iter();
    let batches: Batches<V> = rebatch(out, error);
    Ok(Box::new(batches))
}
