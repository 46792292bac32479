//! `Rdd<T>`: a typed handle on a node of the lineage graph, and the operator families
//! that extend it (one file per family).
//!
//! Every operator takes closures that capture nothing (checked at compile time) and
//! records a lineage node naming its monomorphised compute function by offset, so that
//! any process running this binary can execute it. Nothing runs until an action.

mod actions;
mod aggregate;
mod checkpoint;
mod cogroup;
#[cfg(feature = "csv")]
mod csv;
mod group_by;
mod join;
mod name;
mod narrow;
mod object_file;
mod ordered_by;
mod pair;
mod pair_values;
#[cfg(feature = "parquet")]
mod parquet;
mod partition_actions;
pub(crate) mod partition_op;
mod partitioning;
mod pipe;
mod position;
mod sample_exact;
mod sampling;
mod set_ops;
mod sort;
pub(crate) mod source;
mod stats;
mod zip;
mod zip_partitions;

use std::marker::PhantomData;
use std::panic::Location;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use ember_proto::StorageLevel as ProtoLevel;

use crate::context::Context;
use crate::data::Data;
use crate::plan::op::OpRef;
use crate::plan::{LineageDep, LineageNode, ShuffleSpec};
use crate::task::{ComputeFn, ShuffleWriteFn};

pub use actions::SaveOptions;
pub use aggregate::flat::Emit;
pub use cogroup::{Groups, Groups3, Groups4};
pub use join::OuterPair;
pub use partition_op::Records;
pub use pipe::{PipeOptions, INHERITED_ENV as INHERITED_PIPE_ENV};
pub use position::LinePosition;
pub use stats::StatCounter;

pub(crate) use checkpoint::make_private_dir;
pub(crate) use name::op_name;

/// A resilient distributed dataset of `T` records: partitioned, immutable, and
/// recomputable from its lineage.
///
/// Made by a [`Context`] (`parallelize`, `range`, `text_file`, `read_parquet`, ...).
/// Transformations (`map`, `filter`, `reduce_by_key`, `join`, ...) return a new RDD and
/// run nothing; an action (`collect`, `count`, `save_as_text_file`, ...) runs a job:
/// the lineage is cut into stages at shuffles, with one task per partition. Pair
/// operators are methods of `Rdd<(K, V)>`; closures capture nothing (outer values go
/// through [`capture!`](crate::capture!), see the crate docs).
///
/// ```
/// let ctx = ember::Context::local(2)?;
/// let lines = ctx.parallelize(vec!["a b a".to_string(), "b a c".to_string()], 2);
///
/// // Narrow transformations pipeline within a stage; reduce_by_key shuffles.
/// let counts = lines
///     .flat_map(|l: String| l.split(' ').map(str::to_string).collect::<Vec<_>>())
///     .map(|w: String| (w, 1u32))
///     .reduce_by_key(|a: u32, b: u32| a + b);
/// let mut got = counts.collect()?;
/// got.sort();
/// assert_eq!(got, vec![("a".into(), 3), ("b".into(), 2), ("c".into(), 1)]);
///
/// // A join of two pair RDDs (each pair operator is a method of Rdd<(K, V)>).
/// let vowels = ctx.parallelize(vec![("a".to_string(), true), ("c".to_string(), false)], 1);
/// let mut joined = counts.join(&vowels).collect()?;
/// joined.sort();
/// assert_eq!(joined, vec![("a".into(), (3, true)), ("c".into(), (1, false))]);
///
/// // Outer values in a closure: name them in capture!.
/// let min = 2u32;
/// let frequent = counts.filter(ember::capture!(min => |(_, n): &(String, u32)| *n >= min));
/// assert_eq!(frequent.count()?, 2);
/// # Ok::<(), ember::EmberError>(())
/// ```
pub struct Rdd<T> {
    pub(crate) ctx: Context,
    pub(crate) node: Arc<LineageNode>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Rdd<T> {
    fn clone(&self) -> Self {
        Rdd {
            ctx: self.ctx.clone(),
            node: self.node.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Rdd<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rdd")
            .field("id", &self.node.id)
            .field("name", &self.node.name)
            .field("partitions", &self.node.num_partitions)
            .finish()
    }
}

/// Where a persisted RDD keeps its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageLevel {
    /// Deserialised records in executor memory.
    Memory,
    /// Compressed serialised records in the executor's work dir.
    Disk,
}

impl<T: Data> Rdd<T> {
    pub(crate) fn from_node(ctx: Context, node: Arc<LineageNode>) -> Self {
        Rdd {
            ctx,
            node,
            _t: PhantomData,
        }
    }

    /// Unique id of this RDD within its context.
    pub fn id(&self) -> u32 {
        self.node.id
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> usize {
        self.node.num_partitions as usize
    }

    /// The context this RDD belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The operator and call site that made this RDD, e.g. `map at src/main.rs:12`, or
    /// the name given with [`Rdd::named`].
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// This RDD under the name `name` (Spark's `setName`): what the web UI's DAG and
    /// stage names, the console and the event log show instead of the operator and call
    /// site (at most 256 characters; a longer name is cut, ending with `…`). Another
    /// handle sharing this RDD keeps its name: the renamed RDD is then a pass-through
    /// step of its own.
    pub fn named(mut self, name: &str) -> Rdd<T> {
        let name = self::name::bounded(name, self::name::NAME_CHARS).into_owned();
        if let Some(node) = Arc::get_mut(&mut self.node) {
            node.name = name;
            return self;
        }
        let mut step = self.map_partitions(|records: crate::Records<T>| records);
        if let Some(node) = Arc::get_mut(&mut step.node) {
            node.name = name;
        }
        step
    }

    /// A partition-wise step over this RDD alone that keeps each record in its
    /// partition (`filter`, `sample`, an aggregation or sort within partitions): one
    /// partition per parent partition, and the parent's partitioner kept.
    pub(crate) fn within_partitions<U: Data>(
        &self,
        op: &str,
        at: &Location<'_>,
        compute: ComputeFn,
        payload: Vec<u8>,
    ) -> Rdd<U> {
        self.narrow_child(
            op,
            at,
            vec![self.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            payload,
        )
        .with_partitioner(self.node.partitioner.clone())
    }

    /// Creates a child node with narrow dependencies on `parents`; `one_to_one` when
    /// its partition p reads exactly partition p of its parent (map-like operators).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn narrow_child<U: Data>(
        &self,
        op: &str,
        at: &Location<'_>,
        parents: Vec<Arc<LineageNode>>,
        one_to_one: bool,
        num_partitions: u32,
        compute: ComputeFn,
        payload: Vec<u8>,
    ) -> Rdd<U> {
        let deps = parents
            .into_iter()
            .map(|parent| LineageDep::Narrow { parent, one_to_one })
            .collect();
        self.ctx
            .new_rdd(op, at, num_partitions, deps, compute, payload)
    }

    /// Creates a node that reads a new shuffle of this RDD.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn shuffle_child<U: Data>(
        &self,
        op: &str,
        at: &Location<'_>,
        num_partitions: u32,
        write: ShuffleWriteFn,
        write_payload: Vec<u8>,
        read: ComputeFn,
        read_payload: Vec<u8>,
    ) -> Rdd<U> {
        let spec = self.shuffle_spec(num_partitions, write, write_payload);
        let deps = vec![LineageDep::Shuffle(Arc::new(spec))];
        let rdd: Rdd<U> = self
            .ctx
            .new_rdd(op, at, num_partitions, deps, read, read_payload);
        let parent = self.node.num_partitions;
        if num_partitions == 0 && parent > 0 {
            return rdd.invalid(format!(
                "cannot shuffle {parent} partitions into 0 partitions"
            ));
        }
        rdd
    }

    /// A new shuffle of this RDD into `num_partitions` reduce partitions.
    pub(crate) fn shuffle_spec(
        &self,
        num_partitions: u32,
        write: ShuffleWriteFn,
        write_payload: Vec<u8>,
    ) -> ShuffleSpec {
        let shuffle_id = self.ctx.next_shuffle_id();
        ShuffleSpec {
            shuffle_id,
            parent: self.node.clone(),
            num_reduce_partitions: num_partitions,
            write_fn: write.to_offset(),
            write_payload,
            _release: self.ctx.inner.cleaner.release_on_drop(shuffle_id),
        }
    }

    /// Marks this freshly made RDD as unable to run: every action over it (or over
    /// anything derived from it) fails with [`EmberError::InvalidArgument`] naming the
    /// operator, its call site and `why`. Defining an RDD never panics.
    ///
    /// [`EmberError::InvalidArgument`]: crate::EmberError::InvalidArgument
    pub(crate) fn invalid(mut self, why: impl std::fmt::Display) -> Self {
        let reason = format!("{}: {why}", self.node.name);
        match Arc::get_mut(&mut self.node) {
            Some(node) => node.invalid = Some(reason),
            None => {
                let old = &self.node;
                let node = LineageNode {
                    id: self.ctx.next_rdd_id(),
                    num_partitions: old.num_partitions,
                    deps: vec![LineageDep::Narrow {
                        parent: old.clone(),
                        one_to_one: true,
                    }],
                    compute_fn: old.compute_fn,
                    payload: Vec::new(),
                    name: old.name.clone(),
                    storage: AtomicI32::new(ProtoLevel::StorageNone as i32),
                    invalid: Some(reason),
                    partitioner: old.partitioner.clone(),
                    pinned: false,
                    captures: old.captures.clone(),
                    barrier: old.barrier,
                };
                self.node = Arc::new(node);
            }
        }
        self
    }

    /// Keeps computed partitions in executor memory after the first action.
    pub fn cache(&self) -> Self {
        self.persist(StorageLevel::Memory)
    }

    /// Keeps computed partitions at `level` after the first action that computes them.
    pub fn persist(&self, level: StorageLevel) -> Self {
        let l = match level {
            StorageLevel::Memory => ProtoLevel::StorageMemory,
            StorageLevel::Disk => ProtoLevel::StorageDisk,
        };
        self.node.storage.store(l as i32, Ordering::Relaxed);
        self.ctx.inner.cleaner.track_persisted(&self.node);
        self.clone()
    }

    /// Drops cached partitions and stops caching.
    pub fn unpersist(&self) -> Self {
        self.node
            .storage
            .store(ProtoLevel::StorageNone as i32, Ordering::Relaxed);
        self.ctx.unpersist(self.node.id);
        self.clone()
    }
}

impl Context {
    /// A new RDD on a fresh lineage node: `deps`, run by `compute` over `payload`, named
    /// `op at FILE:LINE`, carrying the `capture!` values of the operator call running now
    /// (or marked invalid if they cannot run); no partitioner, not persisted. Every
    /// source, narrow, shuffle and cogroup node is made here.
    pub(crate) fn new_rdd<U: Data>(
        &self,
        op: &str,
        at: &Location<'_>,
        num_partitions: u32,
        deps: Vec<LineageDep>,
        compute: ComputeFn,
        payload: Vec<u8>,
    ) -> Rdd<U> {
        let (captures, scope_invalid) = crate::plan::node_captures();
        let node = LineageNode {
            id: self.next_rdd_id(),
            num_partitions,
            deps,
            compute_fn: compute.to_offset(),
            payload,
            name: op_name(op, at),
            storage: AtomicI32::new(ProtoLevel::StorageNone as i32),
            invalid: scope_invalid,
            partitioner: None,
            pinned: false,
            captures,
            barrier: false,
        };
        Rdd::from_node(self.clone(), Arc::new(node))
    }
}
