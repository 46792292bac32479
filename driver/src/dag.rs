//! Cutting a plan into stages: the read-only view of a plan's lineage that the
//! scheduler needs (which shuffles a stage reads, which stage writes a shuffle).
//!
//! A stage is a maximal chain of narrow dependencies ending in a shuffle write
//! (a shuffle-map stage, identified by its shuffle id) or in the plan's final RDD
//! (the result stage). Walking a stage's lineage stops at shuffle dependencies, which
//! become its parent stages, and at RDDs whose partitions are all cached, which need
//! no parent at all.

use std::collections::{HashMap, HashSet};

use ember_proto::{dependency::Kind, Plan, RddNode, ShuffleDependency};

/// Index of a plan's nodes and shuffle dependencies.
#[derive(Debug)]
pub struct PlanIndex {
    nodes: HashMap<u32, RddNode>,
    shuffles: HashMap<u32, ShuffleDependency>,
}

impl PlanIndex {
    /// Indexes `plan`; fails if a dependency names a node the plan lacks.
    pub fn new(plan: &Plan) -> Result<Self, String> {
        let mut nodes = HashMap::new();
        let mut shuffles = HashMap::new();
        for n in &plan.nodes {
            for d in &n.deps {
                match &d.kind {
                    Some(Kind::Narrow(nd)) if !nodes.contains_key(&nd.parent) => {
                        return Err(format!(
                            "node {} depends on unknown node {}",
                            n.id, nd.parent
                        ))
                    }
                    Some(Kind::Shuffle(sd)) => {
                        if !nodes.contains_key(&sd.parent) {
                            return Err(format!(
                                "shuffle {} reads unknown node {}",
                                sd.shuffle_id, sd.parent
                            ));
                        }
                        shuffles.insert(sd.shuffle_id, sd.clone());
                    }
                    None => return Err(format!("node {} has an empty dependency", n.id)),
                    _ => {}
                }
            }
            let mut shallow = n.clone();
            shallow.payload = Vec::new();
            nodes.insert(n.id, shallow);
        }
        if !nodes.contains_key(&plan.final_rdd) {
            return Err(format!("final node {} is not in the plan", plan.final_rdd));
        }
        Ok(PlanIndex { nodes, shuffles })
    }

    /// The node with this id.
    pub fn node(&self, id: u32) -> Option<&RddNode> {
        self.nodes.get(&id)
    }

    /// The shuffle dependency with this id.
    pub fn shuffle(&self, shuffle_id: u32) -> Option<&ShuffleDependency> {
        self.shuffles.get(&shuffle_id)
    }

    /// The shuffles read by the stage ending at `rdd_id`: the shuffle dependencies
    /// reachable through narrow dependencies, not looking behind RDDs for which
    /// `fully_cached` is true.
    pub fn parent_shuffles(
        &self,
        rdd_id: u32,
        fully_cached: &dyn Fn(&RddNode) -> bool,
    ) -> Vec<u32> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![rdd_id];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(node) = self.nodes.get(&id) else {
                continue;
            };
            if fully_cached(node) {
                continue;
            }
            for d in &node.deps {
                match &d.kind {
                    Some(Kind::Narrow(nd)) => stack.push(nd.parent),
                    Some(Kind::Shuffle(sd)) => out.push(sd.shuffle_id),
                    None => {}
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every shuffle read anywhere in the stage ending at `rdd_id`, ignoring caches
    /// (a task may need them if a cached block turns out to be gone).
    pub fn all_stage_shuffles(&self, rdd_id: u32) -> Vec<u32> {
        self.parent_shuffles(rdd_id, &|_| false)
    }

    /// Nodes of the stage ending at `rdd_id` that are persisted (for cache locality).
    pub fn persisted_nodes(&self, rdd_id: u32) -> Vec<&RddNode> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![rdd_id];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(node) = self.nodes.get(&id) else {
                continue;
            };
            if node.storage != 0 {
                out.push(node);
            }
            for d in &node.deps {
                if let Some(Kind::Narrow(nd)) = &d.kind {
                    stack.push(nd.parent)
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_proto::{Dependency, NarrowDependency};

    fn node(id: u32, deps: Vec<Dependency>) -> RddNode {
        RddNode {
            id,
            num_partitions: 2,
            deps,
            name: format!("n{id}"),
            ..Default::default()
        }
    }
    fn narrow(p: u32) -> Dependency {
        Dependency {
            kind: Some(Kind::Narrow(NarrowDependency { parent: p })),
        }
    }
    fn shuffle(s: u32, p: u32) -> Dependency {
        Dependency {
            kind: Some(Kind::Shuffle(ShuffleDependency {
                shuffle_id: s,
                parent: p,
                num_reduce_partitions: 2,
                ..Default::default()
            })),
        }
    }

    #[test]
    fn stages_are_cut_at_shuffles_and_cached_rdds() {
        // 0 -> 1 =s0=> 2 -> 3 ; 0 =s1=> 4 ; 3 + 4 (narrow) -> 5
        let plan = Plan {
            nodes: vec![
                node(0, vec![]),
                node(1, vec![narrow(0)]),
                node(2, vec![shuffle(0, 1)]),
                node(3, vec![narrow(2)]),
                node(4, vec![shuffle(1, 0)]),
                node(5, vec![narrow(3), narrow(4)]),
            ],
            final_rdd: 5,
            ..Default::default()
        };
        let idx = PlanIndex::new(&plan).unwrap();
        assert_eq!(idx.parent_shuffles(5, &|_| false), vec![0, 1]);
        assert_eq!(idx.parent_shuffles(1, &|_| false), Vec::<u32>::new());
        assert_eq!(idx.parent_shuffles(5, &|n| n.id == 3), vec![1]);
        assert_eq!(idx.shuffle(1).unwrap().parent, 0);
    }

    #[test]
    fn unknown_parent_is_an_error() {
        let plan = Plan {
            nodes: vec![node(1, vec![narrow(0)])],
            final_rdd: 1,
            ..Default::default()
        };
        let err = PlanIndex::new(&plan).unwrap_err();
        assert!(err.contains("unknown node 0"), "{err}");
    }
}
