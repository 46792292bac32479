//! Barrier execution (Spark's `rdd.barrier().mapPartitions`, grown to MPI's
//! collectives): [`Rdd::barrier`] gives an [`RddBarrier`], whose `map_partitions` makes a
//! node whose stage runs all its tasks at once (gang scheduled, one slot each); each
//! task's function gets a [`BarrierContext`] to talk to the others directly.
//!
//! How it runs: the plan marks the node barrier (`RddNode.barrier`); the scheduler
//! launches the stage's tasks together with a per-attempt key; each task joins its gang
//! before any operator runs (`task/barrier.rs`: its address to the driver, everyone's
//! back, an authenticated mesh); a failure of any rank ends the others and the stage
//! reruns whole. The plan is checked first (`plan/barrier.rs`): nothing in a barrier
//! stage may change the partition count or combine RDDs, and no action may run only
//! some of its partitions.

mod checkpoint;
mod context;

pub use context::BarrierContext;
pub use ember_collective::{Element, ReduceOp};

use std::cell::RefCell;
use std::marker::PhantomData;
use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use crate::closure::{assert_stateless, conjure};
use crate::data::{decode, encode, Data};
use crate::error::Result;
use crate::rdd::partition_op::{narrow_compute, rebatch, PartitionOp, Records, State};
use crate::rdd::Rdd;
use crate::task::{Batches, ComputeFn, TaskContext};

/// An RDD whose next `map_partitions` runs as a barrier stage (Spark's `RDDBarrier`).
pub struct RddBarrier<T> {
    rdd: Rdd<T>,
}

impl<T: Data> Rdd<T> {
    /// Marks the next stage a barrier stage: its tasks all run at once and may call
    /// collectives on each other (Spark's `RDD.barrier()`).
    pub fn barrier(&self) -> RddBarrier<T> {
        RddBarrier { rdd: self.clone() }
    }
}

impl<T: Data> RddBarrier<T> {
    /// Runs `f(context, records)` on every partition, all partitions at once; the
    /// records `f` returns are the new RDD's partition (an `Err` fails the task, and
    /// the stage reruns).
    #[track_caller]
    pub fn map_partitions<U, I, F>(&self, f: F) -> Rdd<U>
    where
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(BarrierContext, Records<T>) -> Result<I> + 'static,
    {
        let _capture_f = assert_stateless(&f);
        self.map_partitions_with((), move |_: &(), b, r| conjure::<F>()(b, r))
    }

    /// [`RddBarrier::map_partitions`] with `state`, shipped with the plan.
    #[track_caller]
    pub fn map_partitions_with<S, U, I, F>(&self, state: S, f: F) -> Rdd<U>
    where
        S: State,
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(&S, BarrierContext, Records<T>) -> Result<I> + 'static,
    {
        let _capture_f = assert_stateless(&f);
        let compute: ComputeFn = narrow_compute::<BarrierMapPartitionsOp<S, T, U, I, F>>;
        let rdd = &self.rdd;
        let checkpoints = Checkpoints {
            root: rdd
                .ctx
                .checkpoint_root_if_any()
                .map(|p| p.to_string_lossy().into_owned()),
            token: rand::random(),
        };
        let mut child: Rdd<U> = rdd.narrow_child(
            "barrier map_partitions",
            Location::caller(),
            vec![rdd.node.clone()],
            true,
            rdd.node.num_partitions,
            compute,
            encode("barrier map_partitions", &(state, checkpoints)),
        );
        if let Some(node) = Arc::get_mut(&mut child.node) {
            node.barrier = true;
        }
        child
    }
}

/// Where a barrier node's superstep checkpoints go: the context's checkpoint directory
/// when it has one, and a token naming this node there.
#[derive(serde::Serialize, serde::Deserialize)]
struct Checkpoints {
    root: Option<String>,
    token: u64,
}

/// The operator of a barrier `map_partitions`.
#[allow(clippy::type_complexity)]
pub(crate) struct BarrierMapPartitionsOp<S, T, U, I, F>(PhantomData<fn(S, T, I, F) -> U>);

impl<S, T, U, I, F> PartitionOp for BarrierMapPartitionsOp<S, T, U, I, F>
where
    S: State,
    T: Data,
    U: Data,
    I: IntoIterator<Item = U> + 'static,
    F: Fn(&S, BarrierContext, Records<T>) -> Result<I> + 'static,
{
    type In = T;
    type Out = U;
    fn apply(
        tc: &Rc<TaskContext>,
        payload: &[u8],
        _part: u32,
        input: Batches<T>,
    ) -> Result<Batches<U>> {
        let (s, checkpoints): (S, Checkpoints) = decode("barrier map_partitions state", payload)?;
        let f = conjure::<F>();
        let dir = checkpoints.root.map(|root| {
            std::path::Path::new(&root).join(format!(
                "barrier-{:016x}-s{}",
                checkpoints.token, tc.stage_id
            ))
        });
        let context = BarrierContext::of(tc, dir)?;
        let error = Rc::new(RefCell::new(None));
        let records = Records::new(input, error.clone());
        let out = f(&s, context, records)?.into_iter();
        Ok(rebatch(out, error))
    }
}
