//! Cutting a plan into stages: the read-only view of a plan's lineage that the
//! scheduler needs (which shuffles a stage reads, which stage writes a shuffle).
//!
//! A stage is a maximal chain of narrow dependencies ending in a shuffle write
//! (a shuffle-map stage, identified by its shuffle id) or in the plan's final RDD
//! (the result stage). Walking a stage's lineage stops at shuffle dependencies, which
//! become its parent stages, and at RDDs whose partitions are all cached, which need
//! no parent at all.

use std::collections::{HashMap, HashSet};

use ember_proto::{dependency::Kind, Dependency, Plan, RddNode, ShuffleDependency};

/// Index of a plan's nodes and shuffle dependencies.
#[derive(Debug)]
pub struct PlanIndex {
    nodes: HashMap<u32, RddNode>,
    shuffles: HashMap<u32, ShuffleDependency>,
    /// Where each node sits in the plan's list (parents first).
    position: HashMap<u32, usize>,
    /// The node that reads each shuffle.
    readers: HashMap<u32, u32>,
}

impl PlanIndex {
    /// Indexes `plan`; fails (naming the node or shuffle) if a dependency names a node
    /// the plan lacks or that comes later, a node id repeats, or a shuffle's reduce side
    /// does not match the node that reads it. A node may have no partitions (an RDD
    /// over an empty input): its stage has no tasks. Sizes are bounded beforehand by
    /// [`crate::limits::check_plan`].
    pub fn new(plan: &Plan) -> Result<Self, String> {
        let mut nodes: HashMap<u32, RddNode> = HashMap::new();
        let mut shuffles: HashMap<u32, ShuffleDependency> = HashMap::new();
        let mut position = HashMap::with_capacity(plan.nodes.len());
        let mut readers = HashMap::new();
        for (pos, n) in plan.nodes.iter().enumerate() {
            position.insert(n.id, pos);
            if nodes.contains_key(&n.id) {
                return Err(format!("node {} appears twice in the plan", n.id));
            }
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
                        if sd.num_reduce_partitions != n.num_partitions {
                            return Err(format!(
                                "shuffle {} has {} reduce partitions but node {} reading it has {}",
                                sd.shuffle_id, sd.num_reduce_partitions, n.id, n.num_partitions
                            ));
                        }
                        if let Some(other) = shuffles.get(&sd.shuffle_id) {
                            if other.parent != sd.parent {
                                return Err(format!(
                                    "shuffle {} is written by two nodes ({} and {})",
                                    sd.shuffle_id, other.parent, sd.parent
                                ));
                            }
                        }
                        shuffles.insert(sd.shuffle_id, sd.clone());
                        readers.insert(sd.shuffle_id, n.id);
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
        Ok(PlanIndex {
            nodes,
            shuffles,
            position,
            readers,
        })
    }

    /// The node with this id.
    pub fn node(&self, id: u32) -> Option<&RddNode> {
        self.nodes.get(&id)
    }

    /// Every shuffle dependency of the plan.
    pub fn shuffles(&self) -> impl Iterator<Item = &ShuffleDependency> {
        self.shuffles.values()
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
        self.walk_stage(rdd_id, |node| {
            if fully_cached(node) {
                return false;
            }
            out.extend(node.deps.iter().filter_map(|d| match &d.kind {
                Some(Kind::Shuffle(sd)) => Some(sd.shuffle_id),
                _ => None,
            }));
            true
        });
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Calls `visit` once on each node of the stage ending at `rdd_id` (those reachable
    /// through narrow dependencies); it returns whether to look behind the node.
    fn walk_stage<'a>(&'a self, rdd_id: u32, mut visit: impl FnMut(&'a RddNode) -> bool) {
        let mut seen = HashSet::new();
        let mut stack = vec![rdd_id];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(node) = self.nodes.get(&id) else {
                continue;
            };
            if !visit(node) {
                continue;
            }
            for d in &node.deps {
                if let Some(Kind::Narrow(nd)) = &d.kind {
                    stack.push(nd.parent);
                }
            }
        }
    }

    /// Every shuffle read anywhere in the stage ending at `rdd_id`, ignoring caches
    /// (a task may need them if a cached block turns out to be gone).
    pub fn all_stage_shuffles(&self, rdd_id: u32) -> Vec<u32> {
        self.parent_shuffles(rdd_id, &|_| false)
    }

    /// The shuffles partition `partition` of the stage ending at `rdd_id` reads, each
    /// with the one reduce partition it reads when every narrow dependency on the way
    /// is one-to-one (`None`: it may read any, or different ones along different paths).
    pub fn stage_shuffle_reads(&self, rdd_id: u32, partition: u32) -> Vec<(u32, Option<u32>)> {
        let mut reads: Vec<(u32, Option<u32>)> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![(rdd_id, Some(partition))];
        while let Some((id, part)) = stack.pop() {
            if !seen.insert((id, part)) {
                continue;
            }
            let Some(node) = self.nodes.get(&id) else {
                continue;
            };
            for d in &node.deps {
                match &d.kind {
                    Some(Kind::Narrow(nd)) => {
                        stack.push((nd.parent, part.filter(|_| nd.one_to_one)));
                    }
                    Some(Kind::Shuffle(sd)) => {
                        match reads.iter_mut().find(|(sid, _)| *sid == sd.shuffle_id) {
                            Some((_, r)) if *r != part => *r = None,
                            Some(_) => {}
                            None => reads.push((sd.shuffle_id, part)),
                        }
                    }
                    None => {}
                }
            }
        }
        reads.sort_unstable_by_key(|(sid, _)| *sid);
        reads
    }

    /// The part of `plan` (the plan this index was built from) that a task of the stage
    /// ending at `rdd_id` needs, so that a task's size does not grow with the whole
    /// lineage behind it: every node of the stage in full (cached ones too: a lost block
    /// is recomputed from them), and, as stubs without dependencies or payload, the
    /// parents of the shuffles it reads (a reader needs their partition counts) and, for
    /// a shuffle-map stage writing `writes`, the node reading that shuffle with only that
    /// dependency (the task runs its write function). Nodes keep the plan's order.
    pub fn stage_plan(&self, plan: &Plan, rdd_id: u32, writes: Option<u32>) -> Plan {
        let mut full: HashSet<u32> = HashSet::new();
        self.walk_stage(rdd_id, |node| {
            full.insert(node.id);
            true
        });
        let mut stubs: HashMap<u32, Vec<Dependency>> = HashMap::new();
        for id in &full {
            for d in self.nodes.get(id).map_or(&[][..], |n| &n.deps[..]) {
                if let Some(Kind::Shuffle(sd)) = &d.kind {
                    if !full.contains(&sd.parent) {
                        stubs.entry(sd.parent).or_default();
                    }
                }
            }
        }
        if let Some(sid) = writes {
            if let (Some(dep), Some(&reader)) = (self.shuffles.get(&sid), self.readers.get(&sid)) {
                if !full.contains(&reader) {
                    stubs.entry(reader).or_default().push(Dependency {
                        kind: Some(Kind::Shuffle(dep.clone())),
                    });
                }
            }
        }
        let mut positions: Vec<usize> = full
            .iter()
            .chain(stubs.keys())
            .filter_map(|id| self.position.get(id).copied())
            .collect();
        positions.sort_unstable();
        positions.dedup();
        let nodes = positions
            .into_iter()
            .filter_map(|pos| plan.nodes.get(pos))
            .map(|n| match stubs.remove(&n.id) {
                Some(deps) => RddNode {
                    id: n.id,
                    num_partitions: n.num_partitions,
                    deps,
                    compute_fn: 0,
                    payload: Vec::new(),
                    name: n.name.clone(),
                    storage: 0,
                    pinned: false,
                    barrier: false,
                    // A reader's write side may run the operator's captured closures.
                    captures: n.captures.clone(),
                },
                None => n.clone(),
            })
            .collect();
        Plan {
            properties: Default::default(),
            nodes,
            final_rdd: plan.final_rdd,
            result_fn: plan.result_fn,
            result_payload: plan.result_payload.clone(),
            partitions: plan.partitions.clone(),
            description: plan.description.clone(),
            binary_hash: plan.binary_hash.clone(),
            sample_sources: plan.sample_sources,
            shuffle_key: plan.shuffle_key.clone(),
            result_captures: plan.result_captures.clone(),
            // Only the scheduler numbers by it; a task has no use for it.
            application: String::new(),
        }
    }

    /// The nodes of the stage ending at `rdd_id`, in the plan's order (parents first).
    pub fn stage_nodes(&self, rdd_id: u32) -> Vec<&RddNode> {
        let mut out = Vec::new();
        self.walk_stage(rdd_id, |node| {
            out.push(node);
            true
        });
        out.sort_by_key(|n| self.position.get(&n.id).copied().unwrap_or(usize::MAX));
        out
    }

    /// Whether the stage ending at `rdd_id` is a barrier stage: some node it computes
    /// (reachable through narrow dependencies) was made by a barrier RDD's operator, as
    /// Spark's `RDD.isBarrier` looks through narrow dependencies only.
    pub fn stage_is_barrier(&self, rdd_id: u32) -> bool {
        let mut barrier = false;
        self.walk_stage(rdd_id, |node| {
            barrier |= node.barrier;
            !barrier
        });
        barrier
    }

    /// Nodes of the stage ending at `rdd_id` that are persisted (for cache locality).
    pub fn persisted_nodes(&self, rdd_id: u32) -> Vec<&RddNode> {
        let mut out = Vec::new();
        self.walk_stage(rdd_id, |node| {
            if node.storage != 0 {
                out.push(node);
            }
            true
        });
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
            kind: Some(Kind::Narrow(NarrowDependency {
                parent: p,
                one_to_one: false,
            })),
        }
    }
    fn one_to_one(p: u32) -> Dependency {
        Dependency {
            kind: Some(Kind::Narrow(NarrowDependency {
                parent: p,
                one_to_one: true,
            })),
        }
    }

    #[test]
    fn a_partition_reads_one_reduce_partition_only_through_one_to_one_steps() {
        // 0 =s7=> 1 -(1:1)-> 2 -(any)-> 3 ; 4 = 1:1 of 1 and 2 ; 5 = 1:1 of 1, any of 3 ;
        // 0 =s8=> 6 ; 7 = 1:1 of 2 and 6
        let plan = Plan {
            nodes: vec![
                node(0, vec![]),
                node(1, vec![shuffle(7, 0)]),
                node(2, vec![one_to_one(1)]),
                node(3, vec![narrow(2)]),
                node(4, vec![one_to_one(1), one_to_one(2)]),
                node(5, vec![one_to_one(1), narrow(3)]),
                node(6, vec![shuffle(8, 0)]),
                node(7, vec![one_to_one(2), one_to_one(6)]),
            ],
            final_rdd: 7,
            ..Default::default()
        };
        let idx = PlanIndex::new(&plan).unwrap();
        assert_eq!(idx.stage_shuffle_reads(1, 1), vec![(7, Some(1))]);
        assert_eq!(idx.stage_shuffle_reads(2, 0), vec![(7, Some(0))]);
        assert_eq!(
            idx.stage_shuffle_reads(3, 1),
            vec![(7, None)],
            "not one-to-one"
        );
        assert_eq!(
            idx.stage_shuffle_reads(4, 1),
            vec![(7, Some(1))],
            "both paths agree"
        );
        assert_eq!(
            idx.stage_shuffle_reads(5, 1),
            vec![(7, None)],
            "one path may read any"
        );
        assert_eq!(
            idx.stage_shuffle_reads(7, 1),
            vec![(7, Some(1)), (8, Some(1))]
        );
        assert_eq!(
            idx.stage_shuffle_reads(0, 0),
            vec![],
            "a source reads no shuffle"
        );
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
    fn a_stage_plan_holds_the_stage_and_stubs_of_its_neighbours_only() {
        // 0 -> 1 =s0=> 2 -> 3 =s1=> 4 -> 5 (final); the stage of 3 writes s1, reads s0.
        let mut three = node(3, vec![narrow(2)]);
        three.payload = vec![3; 8];
        let mut one = node(1, vec![narrow(0)]);
        one.payload = vec![1; 8];
        let plan = Plan {
            nodes: vec![
                node(0, vec![]),
                one,
                node(2, vec![shuffle(0, 1)]),
                three,
                node(4, vec![shuffle(1, 3)]),
                node(5, vec![narrow(4)]),
            ],
            final_rdd: 5,
            result_fn: 77,
            ..Default::default()
        };
        let idx = PlanIndex::new(&plan).unwrap();
        let sp = idx.stage_plan(&plan, 3, Some(1));
        let ids: Vec<u32> = sp.nodes.iter().map(|n| n.id).collect();
        assert_eq!(
            ids,
            vec![1, 2, 3, 4],
            "stub of 1, stage 2..3, stub reader 4"
        );
        let by = |id| sp.nodes.iter().find(|n| n.id == id).unwrap();
        assert!(by(1).deps.is_empty() && by(1).payload.is_empty(), "a stub");
        assert_eq!(by(1).num_partitions, 2, "a reader needs the map count");
        assert_eq!(by(2).deps, plan.nodes[2].deps, "stage nodes in full");
        assert_eq!(by(3).payload, vec![3; 8]);
        assert_eq!(by(4).deps, plan.nodes[4].deps, "the shuffle it writes");
        assert_eq!((sp.final_rdd, sp.result_fn), (5, 77));
        // The result stage: 4 and 5 in full, 3 as a stub; nothing behind it.
        let rp = idx.stage_plan(&plan, 5, None);
        let ids: Vec<u32> = rp.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, vec![3, 4, 5]);
        assert!(rp.nodes[0].payload.is_empty() && rp.nodes[0].deps.is_empty());
        // A source stage writing s0: 0 and 1 in full, 2 as the stub reader.
        let m = idx.stage_plan(&plan, 1, Some(0));
        let ids: Vec<u32> = m.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(m.nodes[1].payload, vec![1; 8]);
    }

    #[test]
    fn a_stage_is_barrier_when_a_node_of_its_narrow_chain_is() {
        // 0 -> 1 (barrier) =s0=> 2 -> 3 ; the stage of 3 reads the barrier one's output.
        let mut one = node(1, vec![narrow(0)]);
        one.barrier = true;
        let plan = Plan {
            nodes: vec![
                node(0, vec![]),
                one,
                node(2, vec![shuffle(0, 1)]),
                node(3, vec![narrow(2)]),
            ],
            final_rdd: 3,
            ..Default::default()
        };
        let idx = PlanIndex::new(&plan).unwrap();
        assert!(idx.stage_is_barrier(1), "the barrier node's own stage");
        assert!(!idx.stage_is_barrier(0), "its parent's chain has none");
        assert!(!idx.stage_is_barrier(3), "a shuffle ends the barrier");
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

    #[test]
    fn malformed_plans_are_refused_with_the_reason() {
        let plan = |nodes: Vec<RddNode>, final_rdd| Plan {
            nodes,
            final_rdd,
            ..Default::default()
        };
        let err = |p: Plan| PlanIndex::new(&p).unwrap_err();
        // A later node as parent (a cycle cannot be written any other way).
        assert!(err(plan(
            vec![node(0, vec![narrow(1)]), node(1, vec![narrow(0)])],
            1
        ))
        .contains("unknown node 1"));
        assert!(err(plan(vec![node(0, vec![]), node(0, vec![])], 0)).contains("appears twice"));
        let mut empty = node(0, vec![]);
        empty.num_partitions = 0;
        assert!(
            PlanIndex::new(&plan(vec![empty], 0)).is_ok(),
            "no partitions is fine"
        );
        let mut reader = node(1, vec![shuffle(0, 0)]);
        reader.num_partitions = 3;
        assert!(err(plan(vec![node(0, vec![]), reader], 1)).contains("2 reduce partitions"));
        let twice = plan(
            vec![
                node(0, vec![]),
                node(1, vec![]),
                node(2, vec![shuffle(7, 0)]),
                node(3, vec![shuffle(7, 1)]),
            ],
            3,
        );
        assert!(err(twice).contains("written by two nodes"));
        assert!(err(plan(vec![node(0, vec![])], 9)).contains("final node 9"));
        let mut no_dep = node(1, vec![]);
        no_dep.deps.push(Dependency { kind: None });
        assert!(err(plan(vec![node(0, vec![]), no_dep], 1)).contains("empty dependency"));
    }
}
