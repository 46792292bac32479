//! Operators that pair records of two RDDs partition by partition or all with all, and
//! unique ids: `zip` (Spark's: both sides need the same partition count and the same
//! number of records in each partition), `cartesian` (every pair, `n1 * n2` partitions;
//! partition `p` pairs left partition `p / n2` with right partition `p % n2`), and
//! `zip_with_unique_id` (the `j`-th record of partition `k` of `n` gets `j * n + k`, no
//! job needed).
//!
//! Invariants: all three are narrow (no shuffle); a `zip` whose sides differ in a
//! partition's record count fails that partition's task with an error naming it, never
//! truncates.

use std::panic::Location;
use std::rc::Rc;

use ember_proto::RddNode;

use super::partition_op::Records;
use super::Rdd;
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::task::into_batches;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

impl<T: Data> Rdd<T> {
    /// Pairs the `i`-th record of each partition with the `i`-th record of the same
    /// partition of `other`. Both need the same partition count (else an invalid-argument
    /// error at the first action) and the same record count per partition (else the
    /// partition's task fails, naming it).
    #[track_caller]
    pub fn zip<U: Data>(&self, other: &Rdd<U>) -> Rdd<(T, U)> {
        let (n, m) = (self.num_partitions(), other.num_partitions());
        let compute: ComputeFn = zip_compute::<T, U>;
        let rdd = self.narrow_child(
            "zip",
            Location::caller(),
            vec![self.node.clone(), other.node.clone()],
            true,
            n as u32,
            compute,
            Vec::new(),
        );
        if n != m {
            return rdd.invalid(format!(
                "can only zip RDDs with the same number of partitions ({n} and {m})"
            ));
        }
        rdd
    }

    /// Every pair of a record of this RDD and a record of `other`, in
    /// `self.num_partitions() * other.num_partitions()` partitions.
    #[track_caller]
    pub fn cartesian<U: Data>(&self, other: &Rdd<U>) -> Rdd<(T, U)> {
        let (n1, n2) = (self.node.num_partitions, other.node.num_partitions);
        let compute: ComputeFn = cartesian_compute::<T, U>;
        let rdd = self.narrow_child(
            "cartesian",
            Location::caller(),
            vec![self.node.clone(), other.node.clone()],
            false,
            n1.saturating_mul(n2),
            compute,
            encode("cartesian", &n2),
        );
        if u64::from(n1) * u64::from(n2) > u64::from(u32::MAX) {
            return rdd.invalid(format!("{n1} x {n2} partitions do not fit in u32"));
        }
        rdd
    }

    /// Each record with a unique id: the `j`-th record of partition `k` of `n` gets
    /// `j * n + k` (Spark's `zipWithUniqueId`: ids have gaps, no job is run).
    #[track_caller]
    pub fn zip_with_unique_id(&self) -> Rdd<(T, u64)> {
        let n = u64::from(self.node.num_partitions);
        self.map_partitions_with_index_with(n, |n: &u64, k: u32, it: Records<T>| {
            let (n, k) = (*n, u64::from(k));
            it.enumerate().map(move |(j, x)| (x, j as u64 * n + k))
        })
    }
}

fn zip_compute<T: Data, U: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut left = records(tc.compute::<T>(TaskContext::dep_parent(node, 0)?, part)?);
    let mut right = records(tc.compute::<U>(TaskContext::dep_parent(node, 1)?, part)?);
    let uneven = move |longer: &str| {
        EmberError::InvalidArgument(format!(
            "can only zip RDDs with the same number of records in each partition: partition \
             {part} has more records on the {longer} side"
        ))
    };
    let pairs = std::iter::from_fn(move || match (left.next(), right.next()) {
        (None, None) => None,
        (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e)),
        (Some(Ok(a)), Some(Ok(b))) => Some(Ok((a, b))),
        (Some(Ok(_)), None) => Some(Err(uneven("left"))),
        (None, Some(Ok(_))) => Some(Err(uneven("right"))),
    });
    Ok(Box::new(into_batches(stop_after_error(pairs))))
}

fn cartesian_compute<T: Data, U: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let n2: u32 = decode("cartesian", &node.payload)?;
    if n2 == 0 {
        return Err(EmberError::Plan(
            "cartesian with an empty right side has no partitions".into(),
        ));
    }
    let left = records(tc.compute::<T>(TaskContext::dep_parent(node, 0)?, part / n2)?);
    // The right partition is held in memory and paired with each left record (Spark
    // recomputes it per left record instead).
    let right: Vec<U> = records(tc.compute::<U>(TaskContext::dep_parent(node, 1)?, part % n2)?)
        .collect::<Result<_>>()?;
    let right = Rc::new(right);
    let pairs = left.flat_map(move |x| -> Box<dyn Iterator<Item = Result<(T, U)>>> {
        match x {
            Ok(a) => {
                let right = right.clone();
                Box::new((0..right.len()).map(move |i| Ok((a.clone(), right[i].clone()))))
            }
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    });
    Ok(Box::new(into_batches(stop_after_error(pairs))))
}

/// The records of a partition's batches, one by one.
fn records<T: 'static>(batches: Batches<T>) -> impl Iterator<Item = Result<T>> {
    batches.flat_map(|b| -> Box<dyn Iterator<Item = Result<T>>> {
        match b {
            Ok(v) => Box::new(v.into_iter().map(Ok)),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    })
}

/// Ends the stream after its first error.
fn stop_after_error<T>(it: impl Iterator<Item = Result<T>>) -> impl Iterator<Item = Result<T>> {
    let mut failed = false;
    it.map_while(move |r| {
        if failed {
            return None;
        }
        failed = r.is_err();
        Some(r)
    })
}
