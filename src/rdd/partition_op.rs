//! The generic per-partition operators behind every narrow transformation.
//!
//! Each operator is a zero-sized type implementing [`PartitionOp`]; its compute
//! function [`narrow_compute`] is monomorphised per operator type, and that instance's
//! offset is what a plan stores. Operators work on whole batches, so the per-record
//! work is a tight loop over a `Vec` with the user's closure inlined, and there is one
//! dynamic call per batch, not per record.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

use ember_proto::RddNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::closure::conjure;
use crate::data::decode;
use crate::data::{Data, BATCH};
use crate::error::{EmberError, Result};
use crate::task::{Batches, Erased, TaskContext};

/// Operator state shipped with the plan (serialised once per task, decoded once per task).
pub trait State: Serialize + DeserializeOwned + 'static {}
impl<S: Serialize + DeserializeOwned + 'static> State for S {}

/// A transformation of one partition's batches into another's.
pub(crate) trait PartitionOp: 'static {
    type In: Data;
    type Out: Data;
    fn apply(
        tc: &Rc<TaskContext>,
        payload: &[u8],
        part: u32,
        input: Batches<Self::In>,
    ) -> Result<Batches<Self::Out>>;
}

/// Compute function of a narrow node with one parent and operator `O`.
pub(crate) fn narrow_compute<O: PartitionOp>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let parent = TaskContext::dep_parent(node, 0)?;
    let input = tc.compute::<O::In>(parent, part)?;
    Ok(Box::new(O::apply(tc, &node.payload, part, input)?))
}

/// `map_with`: one output per input.
pub(crate) struct MapOp<S, T, U, F>(PhantomData<fn(S, T, F) -> U>);
impl<S: State, T: Data, U: Data, F: Fn(&S, T) -> U + 'static> PartitionOp for MapOp<S, T, U, F> {
    type In = T;
    type Out = U;
    fn apply(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Batches<U>> {
        let s: S = decode("map state", payload)?;
        let f = conjure::<F>();
        Ok(Box::new(input.map(move |b| {
            b.map(|v| v.into_iter().map(|x| f(&s, x)).collect())
        })))
    }
}

/// `filter_with`: keeps records the predicate accepts.
pub(crate) struct FilterOp<S, T, F>(PhantomData<fn(S, T, F)>);
impl<S: State, T: Data, F: Fn(&S, &T) -> bool + 'static> PartitionOp for FilterOp<S, T, F> {
    type In = T;
    type Out = T;
    fn apply(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Batches<T>> {
        let s: S = decode("filter state", payload)?;
        let f = conjure::<F>();
        Ok(Box::new(input.filter_map(move |b| match b {
            Ok(mut v) => {
                v.retain(|x| f(&s, x));
                (!v.is_empty()).then_some(Ok(v))
            }
            Err(e) => Some(Err(e)),
        })))
    }
}

/// `flat_map_with`: zero or more outputs per input.
#[allow(clippy::type_complexity)]
pub(crate) struct FlatMapOp<S, T, U, I, F>(PhantomData<fn(S, T, I, F) -> U>);
impl<
        S: State,
        T: Data,
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(&S, T) -> I + 'static,
    > PartitionOp for FlatMapOp<S, T, U, I, F>
{
    type In = T;
    type Out = U;
    fn apply(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Batches<U>> {
        let s: S = decode("flat_map state", payload)?;
        let f = conjure::<F>();
        Ok(Box::new(input.filter_map(move |b| match b {
            Ok(v) => {
                let mut out = Vec::with_capacity(v.len());
                for x in v {
                    out.extend(f(&s, x));
                }
                (!out.is_empty()).then_some(Ok(out))
            }
            Err(e) => Some(Err(e)),
        })))
    }
}

/// `map_partitions_with_index_with`: a function of the whole partition's records.
#[allow(clippy::type_complexity)]
pub(crate) struct MapPartitionsOp<S, T, U, I, F>(PhantomData<fn(S, T, I, F) -> U>);
impl<S, T, U, I, F> PartitionOp for MapPartitionsOp<S, T, U, I, F>
where
    S: State,
    T: Data,
    U: Data,
    I: IntoIterator<Item = U> + 'static,
    F: Fn(&S, u32, Records<T>) -> I + 'static,
{
    type In = T;
    type Out = U;
    fn apply(
        _: &Rc<TaskContext>,
        payload: &[u8],
        part: u32,
        input: Batches<T>,
    ) -> Result<Batches<U>> {
        let s: S = decode("map_partitions state", payload)?;
        let f = conjure::<F>();
        let error = Rc::new(RefCell::new(None));
        let records = Records {
            batches: input,
            current: Vec::new().into_iter(),
            error: error.clone(),
        };
        let out = f(&s, part, records).into_iter();
        Ok(rebatch(out, error))
    }
}

/// The records of a partition as a plain iterator, handed to `map_partitions`
/// functions. An input error ends the iteration and fails the task afterwards.
pub struct Records<T> {
    batches: Batches<T>,
    current: std::vec::IntoIter<T>,
    error: Rc<RefCell<Option<EmberError>>>,
}

impl<T> Records<T> {
    /// The records of `batches`; an input error ends the iteration and is stashed in
    /// `error` (for [`rebatch`] or the caller to surface).
    pub(crate) fn new(batches: Batches<T>, error: Rc<RefCell<Option<EmberError>>>) -> Self {
        Records {
            batches,
            current: Vec::new().into_iter(),
            error,
        }
    }
}

impl<T> Iterator for Records<T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(x) = self.current.next() {
                return Some(x);
            }
            match self.batches.next()? {
                Ok(b) => self.current = b.into_iter(),
                Err(e) => {
                    *self.error.borrow_mut() = Some(e);
                    return None;
                }
            }
        }
    }
}

/// Turns a record iterator back into batches, surfacing a stashed input error last.
pub(crate) fn rebatch<U: 'static>(
    mut out: impl Iterator<Item = U> + 'static,
    error: Rc<RefCell<Option<EmberError>>>,
) -> Batches<U> {
    let mut done = false;
    Box::new(std::iter::from_fn(move || {
        if done {
            return None;
        }
        let batch: Vec<U> = out.by_ref().take(BATCH).collect();
        if batch.len() < BATCH {
            done = true;
            if let Some(e) = error.borrow_mut().take() {
                return Some(Err(e));
            }
            if batch.is_empty() {
                return None;
            }
        }
        Some(Ok(batch))
    }))
}

/// Splits a vector into batches of at most [`BATCH`] records.
pub(crate) fn batches_of<T: 'static>(v: Vec<T>) -> Batches<T> {
    if v.len() <= BATCH {
        return Box::new((!v.is_empty()).then_some(Ok(v)).into_iter());
    }
    let mut it = v.into_iter();
    Box::new(std::iter::from_fn(move || {
        let b: Vec<T> = it.by_ref().take(BATCH).collect();
        (!b.is_empty()).then_some(Ok(b))
    }))
}
