//! A stage's plan as the tasks of that stage share it: decoded once per process,
//! indexed once (nodes by id, shuffle dependencies by shuffle id), and held behind an
//! `Arc` by every task that runs it, so a task costs no copy of the plan however big
//! its nodes' payloads are (a `parallelize` node carries every partition's records).
//!
//! Invariant: a `StagePlan` is never changed after it is built; whether its binary is
//! this process's is checked by each task ([`crate::task::TaskContext::new`]) before
//! anything is resolved from an offset.

use std::collections::HashMap;

use ember_proto::{dependency, Plan, RddNode, ShuffleDependency};

/// One stage's plan, indexed.
pub(crate) struct StagePlan {
    /// The plan without its nodes (they are in `nodes`, in plan order).
    plan: Plan,
    nodes: Vec<RddNode>,
    node_index: HashMap<u32, usize>,
    /// Shuffle id -> (index of the node reading it, index of that dependency).
    shuffles: HashMap<u32, (usize, usize)>,
    /// Broadcast values shipped with the plan (local mode); a worker keeps its
    /// broadcasts in its environment instead.
    broadcasts: ember_scheduler::Broadcasts,
}

impl StagePlan {
    pub(crate) fn new(mut plan: Plan, broadcasts: ember_scheduler::Broadcasts) -> Self {
        let nodes = std::mem::take(&mut plan.nodes);
        let mut node_index = HashMap::with_capacity(nodes.len());
        let mut shuffles = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            node_index.insert(n.id, i);
            for (j, d) in n.deps.iter().enumerate() {
                if let Some(dependency::Kind::Shuffle(s)) = &d.kind {
                    shuffles.insert(s.shuffle_id, (i, j));
                }
            }
        }
        StagePlan {
            plan,
            nodes,
            node_index,
            shuffles,
            broadcasts,
        }
    }

    /// The plan's own fields; its nodes are [`StagePlan::nodes`].
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The nodes, parents before children.
    pub(crate) fn nodes(&self) -> &[RddNode] {
        &self.nodes
    }

    pub(crate) fn node(&self, id: u32) -> Option<&RddNode> {
        self.node_index.get(&id).map(|&i| &self.nodes[i])
    }

    pub(crate) fn shuffle_dependency(&self, shuffle_id: u32) -> Option<&ShuffleDependency> {
        let &(i, j) = self.shuffles.get(&shuffle_id)?;
        match &self.nodes[i].deps[j].kind {
            Some(dependency::Kind::Shuffle(s)) => Some(s),
            _ => None,
        }
    }

    /// The node that reads shuffle `shuffle_id`.
    pub(crate) fn shuffle_reader(&self, shuffle_id: u32) -> Option<u32> {
        self.shuffles
            .get(&shuffle_id)
            .map(|&(i, _)| self.nodes[i].id)
    }

    pub(crate) fn broadcast_bytes(&self, id: u64) -> Option<&[u8]> {
        self.broadcasts.get(&id).map(|b| b.as_ref())
    }
}
