//! Spark's rules for barrier stages, checked on a plan before it is submitted: a
//! barrier stage runs every one of its partitions at once as one gang, so nothing in it
//! may change the partition count (`coalesce` without shuffle), read several RDDs'
//! partitions together (`zip_partitions`, `union`), or run only some partitions
//! (`take`, `first`, a partial job).
//!
//! Invariants: a stage is barrier when some node of its narrow chain (the nodes its
//! final node reaches through narrow dependencies) is barrier, as Spark's `isBarrier`
//! and the scheduler's `stage_is_barrier`; a plan that breaks a rule is refused with an
//! error naming the operator and its call site, before any task runs.

use std::collections::{HashMap, HashSet};

use ember_proto::{dependency, RddNode};

/// Checks every barrier stage of the plan whose nodes are `nodes`, final node `root`,
/// run over `partitions` (all when empty).
pub(super) fn check(nodes: &[RddNode], root: u32, partitions: &[u32]) -> Result<(), String> {
    let by_id: HashMap<u32, &RddNode> = nodes.iter().map(|n| (n.id, n)).collect();
    let mut ends = vec![root];
    for n in nodes {
        for d in &n.deps {
            if let Some(dependency::Kind::Shuffle(s)) = &d.kind {
                ends.push(s.parent);
            }
        }
    }
    let mut seen_ends = HashSet::new();
    for end in ends {
        if !seen_ends.insert(end) {
            continue;
        }
        let Some(end_node) = by_id.get(&end) else {
            continue;
        };
        let chain = narrow_chain(&by_id, end);
        let Some(barrier) = chain.iter().find(|n| n.barrier) else {
            continue;
        };
        for n in &chain {
            // The operator where the count changes is the one to name (a coalesce).
            let changed = n.deps.iter().find_map(|d| match &d.kind {
                Some(dependency::Kind::Narrow(nd)) => by_id
                    .get(&nd.parent)
                    .filter(|p| p.num_partitions != n.num_partitions),
                _ => None,
            });
            if let Some(parent) = changed {
                return Err(format!(
                    "{} turns {} partitions into {} in a barrier stage ({}): a barrier \
                     stage runs all its partitions at once and cannot change their number \
                     (repartition, which shuffles, can)",
                    n.name, parent.num_partitions, n.num_partitions, barrier.name
                ));
            }
            let narrow = n
                .deps
                .iter()
                .filter(|d| matches!(d.kind, Some(dependency::Kind::Narrow(_))))
                .count();
            if narrow > 1 {
                return Err(format!(
                    "{} combines the partitions of {narrow} RDDs in a barrier stage ({}), \
                     which barrier execution does not support",
                    n.name, barrier.name
                ));
            }
        }
        if end == root && !partitions.is_empty() {
            let distinct: HashSet<u32> = partitions.iter().copied().collect();
            if distinct.len() as u32 != end_node.num_partitions {
                return Err(format!(
                    "an action over {} of the {} partitions of a barrier RDD ({}): a \
                     barrier stage runs all its partitions or none (take, first and \
                     lookup are not supported; collect, or map_partitions then a full \
                     action, are)",
                    distinct.len(),
                    end_node.num_partitions,
                    barrier.name
                ));
            }
        }
    }
    Ok(())
}

/// The nodes `end` reaches through narrow dependencies, itself included.
fn narrow_chain<'a>(by_id: &HashMap<u32, &'a RddNode>, end: u32) -> Vec<&'a RddNode> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![end];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(n) = by_id.get(&id) else {
            continue;
        };
        out.push(*n);
        for d in &n.deps {
            if let Some(dependency::Kind::Narrow(nd)) = &d.kind {
                stack.push(nd.parent);
            }
        }
    }
    out
}
