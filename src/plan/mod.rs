//! Lineage and plans: the in-memory lineage graph that `Rdd<T>` handles point into,
//! and its translation into the serialisable [`Plan`](ember_proto::Plan) an action
//! submits.
//!
//! Invariants:
//! - Node and shuffle ids are unique within a [`Context`](crate::Context) and stable for
//!   its lifetime, so a later job can find shuffle outputs and cached blocks of an
//!   earlier one.
//! - A plan lists every node reachable from its final node exactly once, parents first.
//! - No plan is built over a node marked invalid: the action fails with its reason.
//! - Dropping a lineage is iterative (see `Drop for LineageNode`): a chain of any
//!   depth is freed without recursion; dropping a shuffle's last spec tells the
//!   context's cleaner that no live RDD reaches that shuffle.

mod barrier;
pub(crate) mod op;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use ember_proto::{dependency, Dependency, NarrowDependency, Plan, RddNode, ShuffleDependency};

/// A node of the lineage graph.
pub(crate) struct LineageNode {
    pub id: u32,
    pub num_partitions: u32,
    pub deps: Vec<LineageDep>,
    pub compute_fn: i64,
    pub payload: Vec<u8>,
    pub name: String,
    /// A [`ember_proto::StorageLevel`] value; changed by persist/unpersist.
    pub storage: AtomicI32,
    /// Why this node cannot run (an invalid argument at definition): every action over
    /// it fails with this reason before anything is submitted. Defining an RDD never
    /// panics; this is how a bad definition reaches the user.
    pub invalid: Option<String>,
    /// How its records are spread over partitions by key, if known (hash or range
    /// shuffles, a user partitioner, and the operators that keep their parent's).
    /// Only the defining process needs it: plans carry the write functions instead.
    pub partitioner: Option<crate::shuffle::Partitioner>,
    /// A local checkpoint: no lineage behind its cached blocks (see `rdd/checkpoint.rs`).
    pub pinned: bool,
    /// Values of the `capture!` closures of the operator that made it.
    pub captures: Vec<ember_proto::Capture>,
    /// Made by a barrier RDD's operator: its stage is a barrier stage.
    pub barrier: bool,
}

/// How a node reads its parent.
pub(crate) enum LineageDep {
    /// Partition-local: the child's task computes the parent's partitions itself.
    /// `one_to_one`: child partition p reads exactly parent partition p.
    Narrow {
        parent: Arc<LineageNode>,
        one_to_one: bool,
    },
    /// Across a shuffle: the parent's output is written by a map stage.
    Shuffle(Arc<ShuffleSpec>),
}

/// The map side of a shuffle.
pub(crate) struct ShuffleSpec {
    pub shuffle_id: u32,
    pub parent: Arc<LineageNode>,
    pub num_reduce_partitions: u32,
    pub write_fn: i64,
    pub write_payload: Vec<u8>,
    /// Tells the context's cleaner when the last `Arc` of this spec is dropped (by
    /// its own `Drop`; nothing reads it).
    pub _release: ShuffleRelease,
}

/// Held by a [`ShuffleSpec`]: what it wraps is dropped with the spec's last `Arc`. The
/// context's cleaner wraps a notice of the shuffle id, so the plan knows nothing of who
/// listens.
pub(crate) struct ShuffleRelease {
    _on_drop: Box<dyn Send + Sync>,
}

impl ShuffleRelease {
    pub(crate) fn new(on_drop: impl Send + Sync + 'static) -> Self {
        ShuffleRelease {
            _on_drop: Box::new(on_drop),
        }
    }
}

impl Drop for LineageNode {
    /// Frees the parents this node held the last reference to without recursing, so
    /// that dropping a lineage thousands of nodes deep cannot overflow the stack.
    fn drop(&mut self) {
        let mut deps = std::mem::take(&mut self.deps);
        while let Some(dep) = deps.pop() {
            let parent = match dep {
                LineageDep::Narrow { parent, .. } => parent,
                // The spec's release (and its other fields) drop here.
                LineageDep::Shuffle(spec) => match Arc::into_inner(spec) {
                    Some(ShuffleSpec { parent, .. }) => parent,
                    None => continue,
                },
            };
            if let Some(mut node) = Arc::into_inner(parent) {
                deps.append(&mut node.deps);
                // `node` drops here with no deps left: no recursion.
            }
        }
    }
}

impl LineageNode {
    fn to_proto(&self) -> RddNode {
        RddNode {
            id: self.id,
            num_partitions: self.num_partitions,
            deps: self
                .deps
                .iter()
                .map(|d| Dependency {
                    kind: Some(match d {
                        LineageDep::Narrow { parent, one_to_one } => {
                            dependency::Kind::Narrow(NarrowDependency {
                                parent: parent.id,
                                one_to_one: *one_to_one,
                            })
                        }
                        LineageDep::Shuffle(s) => dependency::Kind::Shuffle(ShuffleDependency {
                            replicas: Default::default(),
                            shuffle_id: s.shuffle_id,
                            parent: s.parent.id,
                            num_reduce_partitions: s.num_reduce_partitions,
                            write_fn: s.write_fn,
                            write_payload: s.write_payload.clone(),
                            // Set per job from the context's durability (`job.rs`).
                            stored_dir: String::new(),
                        }),
                    }),
                })
                .collect(),
            compute_fn: self.compute_fn,
            payload: self.payload.clone(),
            name: self.name.clone(),
            storage: self.storage.load(Ordering::Relaxed),
            pinned: self.pinned,
            captures: self.captures.clone(),
            barrier: self.barrier,
        }
    }

    fn parents(&self) -> impl Iterator<Item = &Arc<LineageNode>> {
        self.deps.iter().map(|d| match d {
            LineageDep::Narrow { parent, .. } => parent,
            LineageDep::Shuffle(s) => &s.parent,
        })
    }
}

/// Builds the plan for running `result_fn` over `partitions` of `root`.
pub(crate) fn build_plan(
    root: &Arc<LineageNode>,
    result_fn: i64,
    result_payload: Vec<u8>,
    partitions: Vec<u32>,
    description: String,
    binary_hash: String,
) -> crate::error::Result<Plan> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    // Iterative post-order DFS: parents before children.
    let mut stack: Vec<(Arc<LineageNode>, bool)> = vec![(root.clone(), false)];
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            order.push(node.to_proto());
            continue;
        }
        if !seen.insert(node.id) {
            continue;
        }
        if let Some(why) = &node.invalid {
            return Err(crate::error::EmberError::InvalidArgument(why.clone()));
        }
        stack.push((node.clone(), true));
        for p in node.parents() {
            if !seen.contains(&p.id) {
                stack.push((p.clone(), false));
            }
        }
    }
    barrier::check(&order, root.id, &partitions)
        .map_err(crate::error::EmberError::InvalidArgument)?;
    Ok(Plan {
        properties: Default::default(),
        nodes: order,
        final_rdd: root.id,
        result_fn,
        result_payload,
        partitions,
        description,
        binary_hash,
        sample_sources: false,
        // Set by the driver.
        shuffle_key: String::new(),
        // Set by the driver; local mode is one application.
        application: String::new(),
        result_captures: crate::capture::in_scope()
            .map_err(crate::error::EmberError::InvalidArgument)?,
    })
}

/// The captures of the operator calls in progress on this thread, for a node made now,
/// and why the node cannot run if they are unusable.
pub(crate) fn node_captures() -> (Vec<ember_proto::Capture>, Option<String>) {
    match crate::capture::in_scope() {
        Ok(c) => (c, None),
        Err(why) => (Vec::new(), Some(why)),
    }
}
