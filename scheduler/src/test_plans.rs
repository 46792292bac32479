//! Plan builders shared by the scheduler crate's unit tests.

use ember_proto::{dependency::Kind, Dependency, RddNode, ShuffleDependency};

/// Node `id` of `parts` partitions with `deps`, named `n{id}`.
pub(crate) fn node(id: u32, parts: u32, deps: Vec<Dependency>) -> RddNode {
    RddNode {
        id,
        num_partitions: parts,
        deps,
        name: format!("n{id}"),
        ..Default::default()
    }
}

/// Shuffle `sid` of node `parent` into `reduce` partitions.
pub(crate) fn shuffle(sid: u32, parent: u32, reduce: u32) -> Dependency {
    Dependency {
        kind: Some(Kind::Shuffle(ShuffleDependency {
            shuffle_id: sid,
            parent,
            num_reduce_partitions: reduce,
            ..Default::default()
        })),
    }
}
