//! [`BarrierContext`]: what a barrier task's function gets: its rank, the world size,
//! and MPI's collectives with its peers, typed over serde values and numeric slices.
//!
//! Invariants: every rank must make the same collective calls in the same order with
//! matching arguments (the transport checks, and a mismatch fails the stage); a value
//! collective encodes with the job's record encoding (postcard), and a reduction
//! combines in rank order (`f(lower ranks, higher ranks)`), so with a deterministic `f`
//! every rank gets the same value in every run; slice reductions are bit-identical on
//! every rank, run and placement (a fixed order and constant algorithm switch points:
//! see `ember_collective`). Any failure (a peer lost, a kill) is an `Err` that fails the
//! task, and the scheduler reruns the whole stage.

use std::rc::Rc;

use ember_collective::{BoxError, Element, ReduceOp};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::task::{TaskBarrier, TaskContext};

/// A barrier task's view of its gang (Spark's `BarrierTaskContext`), handed to the
/// function of [`RddBarrier::map_partitions`](crate::RddBarrier::map_partitions).
/// Cheap to clone; not `Send` (it belongs to its task's thread).
#[derive(Clone)]
pub struct BarrierContext {
    tc: Rc<TaskContext>,
    /// This stage's superstep checkpoints, if the context has a checkpoint directory.
    checkpoints: Option<std::path::PathBuf>,
}

impl BarrierContext {
    /// The context of the barrier task running `tc`.
    pub(crate) fn of(
        tc: &Rc<TaskContext>,
        checkpoints: Option<std::path::PathBuf>,
    ) -> Result<BarrierContext> {
        if tc.barrier.is_none() {
            return Err(EmberError::Plan(
                "a barrier operator ran in a task that is not of a barrier stage".into(),
            ));
        }
        Ok(BarrierContext {
            tc: tc.clone(),
            checkpoints,
        })
    }

    pub(super) fn checkpoint_dir(&self) -> Option<std::path::PathBuf> {
        self.checkpoints.clone()
    }

    pub(super) fn gang(&self) -> &TaskBarrier {
        // `of` checked it is there, and a task's barrier never goes away.
        self.tc.barrier.as_deref().expect("a barrier task's gang")
    }

    /// This task's rank: its partition index, `0..world()`.
    pub fn rank(&self) -> usize {
        self.gang().rank as usize
    }

    /// The number of tasks in the stage (its partition count).
    pub fn world(&self) -> usize {
        self.gang().world as usize
    }

    /// The stage attempt this task runs in (1 for the first; a failed attempt is rerun
    /// whole, as a new one).
    pub fn stage_attempt(&self) -> u32 {
        self.gang().stage_attempt
    }

    /// Returns once every rank has called it (Spark's `BarrierTaskContext.barrier`).
    pub fn barrier(&self) -> Result<()> {
        self.gang().call("barrier", |c| c.barrier())
    }

    /// Every rank gets the root's value: the root passes `Some(value)`, the others
    /// `None` (a value passed elsewhere is ignored).
    pub fn broadcast<T: Serialize + DeserializeOwned>(
        &self,
        root: usize,
        value: Option<T>,
    ) -> Result<T> {
        if root == self.rank() && value.is_none() {
            return Err(EmberError::InvalidArgument(format!(
                "broadcast: rank {root} is the root and passed no value"
            )));
        }
        let bytes = if root == self.rank() {
            value.map(|v| encode("broadcast value", &v))
        } else {
            None
        };
        let out = self
            .gang()
            .call("broadcast", |c| c.broadcast(root, bytes))?;
        decode("broadcast value", &out)
    }

    /// The root gets `f` folded over every rank's value in rank order (`Some`), the
    /// others `None`. `f(lower ranks' part, higher ranks' part)` must be associative.
    pub fn reduce<T, F>(&self, root: usize, value: T, f: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T,
    {
        let bytes = encode("reduce value", &value);
        let out = self
            .gang()
            .call("reduce", |c| c.reduce(root, bytes, combine_with(&f)))?;
        out.map(|b| decode("reduce value", &b)).transpose()
    }

    /// Every rank gets `f` folded over every rank's value in rank order (as
    /// [`BarrierContext::reduce`]).
    pub fn all_reduce<T, F>(&self, value: T, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T,
    {
        let bytes = encode("all_reduce value", &value);
        let out = self
            .gang()
            .call("all_reduce", |c| c.all_reduce(bytes, combine_with(&f)))?;
        decode("all_reduce value", &out)
    }

    /// Reduces `data` element-wise over every rank, in place (every rank passes the
    /// same length and gets the same bits): recursive doubling for small slices, the
    /// ring (reduce-scatter then all-gather) from 64 KiB.
    pub fn all_reduce_slice<E: Element>(&self, data: &mut [E], op: ReduceOp) -> Result<()> {
        self.gang()
            .call("all_reduce_slice", |c| c.all_reduce_slice(data, op))
    }

    /// Reduces `data` element-wise over every rank and returns this rank's block of the
    /// result under MPI's block distribution (the first `len % world` ranks get one
    /// more element).
    pub fn reduce_scatter<E: Element>(&self, data: &[E], op: ReduceOp) -> Result<Vec<E>> {
        self.gang()
            .call("reduce_scatter", |c| c.reduce_scatter_slice(data, op))
    }

    /// Every rank gets every rank's value, in rank order.
    pub fn all_gather<T: Serialize + DeserializeOwned>(&self, value: T) -> Result<Vec<T>> {
        let bytes = encode("all_gather value", &value);
        let out = self.gang().call("all_gather", |c| c.all_gather(bytes))?;
        out.iter().map(|b| decode("all_gather value", b)).collect()
    }

    /// Every rank gets the concatenation of every rank's slice, in rank order (every
    /// rank passes the same length).
    pub fn all_gather_slice<E: Element>(&self, data: &[E]) -> Result<Vec<E>> {
        self.gang()
            .call("all_gather_slice", |c| c.all_gather_slice(data))
    }

    /// `values[j]` goes to rank `j`; the result's `[j]` is what rank `j` sent here.
    /// `values.len()` must be the world size.
    pub fn all_to_all<T: Serialize + DeserializeOwned>(&self, values: Vec<T>) -> Result<Vec<T>> {
        if values.len() != self.world() {
            return Err(EmberError::InvalidArgument(format!(
                "all_to_all: {} values in a world of {}",
                values.len(),
                self.world()
            )));
        }
        let bytes = values
            .iter()
            .map(|v| encode("all_to_all value", v))
            .collect();
        let out = self.gang().call("all_to_all", |c| c.all_to_all(bytes))?;
        out.iter().map(|b| decode("all_to_all value", b)).collect()
    }
}

/// `f` over encoded values, as the transport's byte reductions take it.
fn combine_with<T, F>(f: &F) -> impl FnMut(Vec<u8>, Vec<u8>) -> Result<Vec<u8>, BoxError> + '_
where
    T: Serialize + DeserializeOwned,
    F: Fn(T, T) -> T,
{
    move |a, b| {
        let a: T = decode("reduced value", &a).map_err(|e| Box::new(e) as BoxError)?;
        let b: T = decode("reduced value", &b).map_err(|e| Box::new(e) as BoxError)?;
        Ok(encode("reduced value", &f(a, b)))
    }
}
