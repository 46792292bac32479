//! Narrow transformations: each output partition depends on a bounded set of input
//! partitions, so they pipeline within one stage (map, filter, flat_map,
//! map_partitions, key_by, union, coalesce, sample, zip_with_index).

use std::panic::Location;
use std::rc::Rc;

use ember_proto::RddNode;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::partition_op::{
    narrow_compute, FilterOp, FlatMapOp, MapOp, MapPartitionsOp, Records, State,
};
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::Result;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

impl<T: Data> Rdd<T> {
    /// Applies `f` to every record.
    #[track_caller]
    pub fn map<U: Data, F: Fn(T) -> U + 'static>(&self, f: F) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        self.map_with((), move |_: &(), x: T| conjure::<F>()(x))
    }

    /// Applies `f(&state, record)` to every record; `state` is shipped with the plan.
    #[track_caller]
    pub fn map_with<S: State, U: Data, F: Fn(&S, T) -> U + 'static>(
        &self,
        state: S,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        let compute: ComputeFn = narrow_compute::<MapOp<S, T, U, F>>;
        self.narrow_child(
            "map",
            Location::caller(),
            vec![self.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            encode("map", &state),
        )
    }

    /// Keeps the records for which `f` is true.
    #[track_caller]
    pub fn filter<F: Fn(&T) -> bool + 'static>(&self, f: F) -> Rdd<T> {
        let _capture_f = assert_stateless(&f);
        self.filter_with((), move |_: &(), x: &T| conjure::<F>()(x))
    }

    /// Keeps the records for which `f(&state, record)` is true.
    #[track_caller]
    pub fn filter_with<S: State, F: Fn(&S, &T) -> bool + 'static>(&self, state: S, f: F) -> Rdd<T> {
        let _capture_f = assert_stateless(&f);
        let compute: ComputeFn = narrow_compute::<FilterOp<S, T, F>>;
        self.within_partitions(
            "filter",
            Location::caller(),
            compute,
            encode("filter", &state),
        )
    }

    /// Maps every record to zero or more records.
    #[track_caller]
    pub fn flat_map<U: Data, I: IntoIterator<Item = U> + 'static, F: Fn(T) -> I + 'static>(
        &self,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        self.flat_map_with((), move |_: &(), x: T| conjure::<F>()(x))
    }

    /// Maps every record to zero or more records with `f(&state, record)`.
    #[track_caller]
    pub fn flat_map_with<
        S: State,
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(&S, T) -> I + 'static,
    >(
        &self,
        state: S,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        let compute: ComputeFn = narrow_compute::<FlatMapOp<S, T, U, I, F>>;
        self.narrow_child(
            "flat_map",
            Location::caller(),
            vec![self.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            encode("flat_map", &state),
        )
    }

    /// Transforms each partition's records as a whole.
    #[track_caller]
    pub fn map_partitions<
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(Records<T>) -> I + 'static,
    >(
        &self,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        self.map_partitions_with_index_with((), move |_: &(), _: u32, it: Records<T>| {
            conjure::<F>()(it)
        })
    }

    /// Transforms each partition's records, knowing the partition index.
    #[track_caller]
    pub fn map_partitions_with_index<
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(u32, Records<T>) -> I + 'static,
    >(
        &self,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        self.map_partitions_with_index_with((), move |_: &(), i: u32, it: Records<T>| {
            conjure::<F>()(i, it)
        })
    }

    /// Transforms each partition's records with `f(&state, partition, records)`.
    #[track_caller]
    pub fn map_partitions_with_index_with<
        S: State,
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(&S, u32, Records<T>) -> I + 'static,
    >(
        &self,
        state: S,
        f: F,
    ) -> Rdd<U> {
        let _capture_f = assert_stateless(&f);
        let compute: ComputeFn = narrow_compute::<MapPartitionsOp<S, T, U, I, F>>;
        self.narrow_child(
            "map_partitions",
            Location::caller(),
            vec![self.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            encode("map_partitions", &state),
        )
    }

    /// Pairs every record with the key `f` computes for it.
    #[track_caller]
    pub fn key_by<K: Data, F: Fn(&T) -> K + 'static>(&self, f: F) -> Rdd<(K, T)> {
        let _capture_f = assert_stateless(&f);
        self.map_with((), move |_: &(), x: T| (conjure::<F>()(&x), x))
    }

    /// Each partition's records as one vector.
    #[track_caller]
    pub fn glom(&self) -> Rdd<Vec<T>> {
        self.map_partitions(|it: Records<T>| std::iter::once(it.collect::<Vec<T>>()))
    }

    /// The records of both RDDs (duplicates kept); partitions are concatenated, unless
    /// both have the same partitioner: then partition `p` holds partition `p` of each and
    /// the partitioner is kept (Spark's `PartitionerAwareUnionRDD`).
    #[track_caller]
    pub fn union(&self, other: &Rdd<T>) -> Rdd<T> {
        if self.node.partitioner.is_some() && self.node.partitioner == other.node.partitioner {
            return self.union_co_partitioned(other, Location::caller());
        }
        let counts = vec![self.node.num_partitions, other.node.num_partitions];
        let compute: ComputeFn = union_compute::<T>;
        self.narrow_child(
            "union",
            Location::caller(),
            vec![self.node.clone(), other.node.clone()],
            false,
            counts.iter().sum(),
            compute,
            encode("union", &counts),
        )
    }

    /// Fewer partitions without a shuffle: each output partition reads a contiguous
    /// range of input partitions. (`repartition` shuffles instead.)
    #[track_caller]
    pub fn coalesce(&self, num_partitions: usize) -> Rdd<T> {
        let parent = self.node.num_partitions as usize;
        let n = num_partitions.min(parent);
        let groups: Vec<Vec<u32>> = (0..n)
            .map(|i| ((i * parent / n) as u32..((i + 1) * parent / n) as u32).collect())
            .collect();
        let compute: ComputeFn = coalesce_compute::<T>;
        let rdd = self.narrow_child(
            "coalesce",
            Location::caller(),
            vec![self.node.clone()],
            false,
            n as u32,
            compute,
            encode("coalesce", &groups),
        );
        if num_partitions == 0 {
            return rdd.invalid("number of partitions must be positive, got 0");
        }
        rdd
    }

    /// A random sample: each record kept with probability `fraction` (or, with
    /// replacement, repeated a Poisson(`fraction`) number of times). The same seed gives
    /// the same sample.
    #[track_caller]
    pub fn sample(&self, with_replacement: bool, fraction: f64, seed: u64) -> Rdd<T> {
        let compute: ComputeFn = sample_compute::<T>;
        let spec = SampleSpec {
            with_replacement,
            fraction,
            seed,
        };
        let rdd = self.within_partitions(
            "sample",
            Location::caller(),
            compute,
            encode("sample", &spec),
        );
        if !(fraction >= 0.0 && fraction.is_finite()) {
            return rdd.invalid(format!(
                "sample fraction must be a finite number >= 0, got {fraction}"
            ));
        }
        if !with_replacement && fraction > 1.0 {
            return rdd.invalid(format!(
                "sample fraction without replacement must be <= 1, got {fraction}"
            ));
        }
        rdd
    }

    /// Pairs each record with its position in the RDD (partition order, then record
    /// order). Runs a job to count the records of each partition first, as Spark does.
    #[track_caller]
    pub fn zip_with_index(&self) -> Rdd<(T, u64)> {
        let at = Location::caller();
        let counts = self
            .map_partitions(|it: Records<T>| std::iter::once(it.count() as u64))
            .collect();
        let failed = counts.as_ref().err().map(|e| e.to_string());
        let mut offsets = Vec::new();
        let mut acc = 0u64;
        for c in counts.unwrap_or_default() {
            offsets.push(acc);
            acc += c;
        }
        let mut rdd = self.map_partitions_with_index_with(
            offsets,
            |offs: &Vec<u64>, part: u32, it: Records<T>| {
                let start = offs.get(part as usize).copied().unwrap_or(0);
                it.zip(start..)
            },
        );
        if let Some(node) = std::sync::Arc::get_mut(&mut rdd.node) {
            node.name = super::op_name("zip_with_index", at);
        }
        match failed {
            Some(e) => rdd.invalid(format!(
                "counting the records of each partition failed: {e}"
            )),
            None => rdd,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SampleSpec {
    with_replacement: bool,
    fraction: f64,
    seed: u64,
}

fn union_compute<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let counts: Vec<u32> = decode("union", &node.payload)?;
    let mut p = part;
    for (i, c) in counts.iter().enumerate() {
        if p < *c {
            let parent = TaskContext::dep_parent(node, i)?;
            return Ok(Box::new(tc.compute::<T>(parent, p)?));
        }
        p -= c;
    }
    Err(crate::error::EmberError::Plan(format!(
        "union has no partition {part}"
    )))
}

fn coalesce_compute<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let groups: Vec<Vec<u32>> = decode("coalesce", &node.payload)?;
    let parent = TaskContext::dep_parent(node, 0)?;
    let tc = tc.clone();
    let parts = groups.get(part as usize).cloned().unwrap_or_default();
    let mut it = parts.into_iter();
    let mut current: Option<Batches<T>> = None;
    let out: Batches<T> = Box::new(std::iter::from_fn(move || loop {
        if let Some(c) = current.as_mut() {
            if let Some(b) = c.next() {
                return Some(b);
            }
        }
        let p = it.next()?;
        match tc.compute::<T>(parent, p) {
            Ok(b) => current = Some(b),
            Err(e) => return Some(Err(e)),
        }
    }));
    Ok(Box::new(out))
}

fn sample_compute<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let spec: SampleSpec = decode("sample", &node.payload)?;
    let parent = TaskContext::dep_parent(node, 0)?;
    let input = tc.compute::<T>(parent, part)?;
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(
        spec.seed ^ (u64::from(part).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    );
    let out: Batches<T> = Box::new(input.map(move |b| {
        b.map(|v| {
            let mut out = Vec::with_capacity(v.len());
            for x in v {
                if spec.with_replacement {
                    let k = poisson(&mut rng, spec.fraction);
                    for _ in 0..k {
                        out.push(x.clone());
                    }
                } else if rng.gen::<f64>() < spec.fraction {
                    out.push(x);
                }
            }
            out
        })
    }));
    Ok(Box::new(out))
}

/// Knuth's Poisson sampler (fractions used for sampling are small).
pub(super) fn poisson(rng: &mut impl Rng, lambda: f64) -> u32 {
    let l = (-lambda).exp();
    let mut k = 0;
    let mut p = 1.0;
    loop {
        p *= rng.gen::<f64>();
        if p <= l {
            return k;
        }
        k += 1;
    }
}

impl crate::Context {
    /// The records of all `rdds`, their partitions concatenated in order (Spark's
    /// `SparkContext.union`); no RDDs give an RDD of no partitions.
    #[track_caller]
    pub fn union<T: Data>(&self, rdds: &[Rdd<T>]) -> Rdd<T> {
        let at = Location::caller();
        let Some((first, rest)) = rdds.split_first() else {
            return self.empty();
        };
        let mut rdd = rest.iter().fold(first.clone(), |acc, r| acc.union(r));
        // Named after the user's call, not this fold.
        super::pair::rename(&mut rdd, "union", at);
        rdd
    }
}
