//! Bounds on the counts and sizes a plan carries, checked before the scheduler
//! allocates anything for it.
//!
//! A plan is data from a client: its partition counts, node count and requested
//! partitions decide how much the scheduler allocates (one queued task, one pending
//! entry and one map-output entry per partition). [`check_plan`] refuses a plan that
//! exceeds a [`PlanLimits`] bound, naming the bound, its flag and the offending value,
//! using no memory proportional to those values.
//!
//! Invariant: a plan accepted by [`check_plan`] has at most `max_plan_nodes` nodes, at
//! most twice as many dependencies, no node with more than `max_partitions_per_node`
//! partitions, at most `max_tasks_per_job` tasks over all of its stages, a description
//! of at most `max_description_bytes` and node names and call sites of at most
//! `max_node_name_bytes` each.

use std::collections::{HashMap, HashSet};

use ember_proto::{dependency::Kind, Plan};

/// Bounds on what one plan may ask of the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLimits {
    /// Partitions of any one node (`--max-partitions-per-node`).
    pub max_partitions_per_node: u32,
    /// Nodes of one plan (`--max-plan-nodes`); dependencies may be twice as many.
    pub max_plan_nodes: u32,
    /// Tasks of one job over all its stages, counting every map stage once in full
    /// (`--max-tasks-per-job`).
    pub max_tasks_per_job: u64,
    /// Total bytes of one job's results (`--max-result-bytes`, Spark's
    /// `spark.driver.maxResultSize`); the job fails once its results exceed it.
    pub max_result_bytes: u64,
    /// Bytes of a plan's description (`--max-description-bytes`).
    pub max_description_bytes: u32,
    /// Bytes of each node's name and each captured closure's call site
    /// (`--max-node-name-bytes`).
    pub max_node_name_bytes: u32,
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_partitions_per_node: 100_000,
            max_plan_nodes: 10_000,
            max_tasks_per_job: 1_000_000,
            max_result_bytes: 1 << 30,
            max_description_bytes: 64 << 10,
            max_node_name_bytes: 4 << 10,
        }
    }
}

/// A plan over one of the [`PlanLimits`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {value}, over the limit of {limit} ({flag})")]
pub struct LimitExceeded {
    /// What was counted, e.g. "the number of partitions of node 7 (map at x)".
    pub what: String,
    pub value: u64,
    pub limit: u64,
    /// The driver flag that sets the limit.
    pub flag: &'static str,
}

/// Longest prefix of a client-chosen name quoted in an error.
const NAME_PREFIX_CHARS: usize = 60;

/// `name` cut to a bounded prefix for error messages.
pub fn bounded(name: &str) -> String {
    match name.char_indices().nth(NAME_PREFIX_CHARS) {
        Some((i, _)) => format!("{}...", &name[..i]),
        None => name.to_string(),
    }
}

/// Bytes of a client-chosen name or message quoted in a log line ([`for_log`]).
pub const MAX_LOGGED_BYTES: usize = 256;

/// `text` with its control characters escaped (`\n`, `\u{1b}`: it cannot forge a log
/// line or a terminal escape) and cut to `max` bytes of the original at a character
/// boundary, the cut marked `… (N bytes more; WHAT are cut at MAX bytes)`.
pub fn escaped_prefix(text: &str, max: usize, what: &str) -> String {
    let end = text.floor_char_boundary(max);
    let mut out = String::with_capacity(end + 48);
    for c in text[..end].chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if end < text.len() {
        let more = text.len() - end;
        out.push_str(&format!(
            "… ({more} bytes more; {what} are cut at {max} bytes)"
        ));
    }
    out
}

/// A client-chosen name (stage name, description, call site) or a task's failure
/// message as a log line quotes it: escaped and at most [`MAX_LOGGED_BYTES`].
pub fn for_log(text: &str) -> String {
    escaped_prefix(text, MAX_LOGGED_BYTES, "logged names")
}

/// Checks `plan` against `limits`; the error names the first bound it exceeds.
pub fn check_plan(plan: &Plan, limits: &PlanLimits) -> Result<(), LimitExceeded> {
    check_plan_tasks(plan, limits).map(|_| ())
}

/// [`check_plan`], returning the number of tasks of the job (every map stage counted in
/// full) when the plan is within the limits.
pub fn check_plan_tasks(plan: &Plan, limits: &PlanLimits) -> Result<u64, LimitExceeded> {
    let exceeded = |what: String, value: u64, limit: u64, flag| LimitExceeded {
        what,
        value,
        limit,
        flag,
    };
    check_name_sizes(plan, limits)?;
    let max_nodes = u64::from(limits.max_plan_nodes);
    if plan.nodes.len() as u64 > max_nodes {
        return Err(exceeded(
            "the number of nodes in the plan".into(),
            plan.nodes.len() as u64,
            max_nodes,
            "--max-plan-nodes",
        ));
    }
    let deps: u64 = plan.nodes.iter().map(|n| n.deps.len() as u64).sum();
    if deps > 2 * max_nodes {
        return Err(exceeded(
            "the number of dependencies in the plan".into(),
            deps,
            2 * max_nodes,
            "--max-plan-nodes (twice its value)",
        ));
    }
    let captures: u64 = plan
        .nodes
        .iter()
        .map(|n| n.captures.len() as u64)
        .sum::<u64>()
        + plan.result_captures.len() as u64;
    if captures > 2 * max_nodes {
        return Err(exceeded(
            "the number of captured closures in the plan".into(),
            captures,
            2 * max_nodes,
            "--max-plan-nodes (twice its value)",
        ));
    }
    let max_parts = limits.max_partitions_per_node;
    if let Some(n) = plan.nodes.iter().find(|n| n.num_partitions > max_parts) {
        return Err(exceeded(
            format!(
                "the number of partitions of node {} ({})",
                n.id,
                bounded(&n.name)
            ),
            u64::from(n.num_partitions),
            u64::from(max_parts),
            "--max-partitions-per-node",
        ));
    }
    if plan.partitions.len() as u64 > u64::from(max_parts) {
        return Err(exceeded(
            "the number of partitions the job requests".into(),
            plan.partitions.len() as u64,
            u64::from(max_parts),
            "--max-partitions-per-node",
        ));
    }
    // Tasks: the result stage's partitions plus every map stage (the node a shuffle
    // reads from) in full, each shuffle once. Bounded by the node count checked above.
    let partitions: HashMap<u32, u32> = plan
        .nodes
        .iter()
        .map(|n| (n.id, n.num_partitions))
        .collect();
    let result_tasks = if plan.partitions.is_empty() {
        partitions.get(&plan.final_rdd).copied().unwrap_or(0)
    } else {
        plan.partitions.len() as u32
    };
    let mut tasks = u64::from(result_tasks);
    let mut shuffles = HashSet::new();
    for dep in plan.nodes.iter().flat_map(|n| &n.deps) {
        if let Some(Kind::Shuffle(s)) = &dep.kind {
            if shuffles.insert(s.shuffle_id) {
                tasks += u64::from(partitions.get(&s.parent).copied().unwrap_or(0));
            }
        }
    }
    if tasks > limits.max_tasks_per_job {
        return Err(exceeded(
            "the number of tasks of the job".into(),
            tasks,
            limits.max_tasks_per_job,
            "--max-tasks-per-job",
        ));
    }
    Ok(tasks)
}

/// The description, node names and call sites of `plan` within their byte bounds
/// (checked first: they are what the driver keeps, logs and shows of a plan).
fn check_name_sizes(plan: &Plan, limits: &PlanLimits) -> Result<(), LimitExceeded> {
    let max_desc = u64::from(limits.max_description_bytes);
    if plan.description.len() as u64 > max_desc {
        return Err(LimitExceeded {
            what: format!(
                "the byte length of the job's description ({})",
                bounded(&plan.description)
            ),
            value: plan.description.len() as u64,
            limit: max_desc,
            flag: "--max-description-bytes",
        });
    }
    if let Some(props) = &plan.properties {
        let fixed = ember_proto::limits::MAX_JOB_PROPERTY_BYTES as u64;
        let checks = [
            (
                "pool name",
                &props.pool,
                fixed,
                "the fixed job-property limit",
            ),
            (
                "job group",
                &props.job_group,
                fixed,
                "the fixed job-property limit",
            ),
            (
                "job group description",
                &props.job_group_description,
                max_desc,
                "--max-description-bytes",
            ),
        ];
        for (what, value, limit, flag) in checks {
            if value.len() as u64 > limit {
                return Err(LimitExceeded {
                    what: format!("the byte length of the job's {what} ({})", bounded(value)),
                    value: value.len() as u64,
                    limit,
                    flag,
                });
            }
        }
    }
    let max_name = u64::from(limits.max_node_name_bytes);
    for node in &plan.nodes {
        if node.name.len() as u64 > max_name {
            return Err(LimitExceeded {
                what: format!(
                    "the byte length of the name of node {} ({})",
                    node.id,
                    bounded(&node.name)
                ),
                value: node.name.len() as u64,
                limit: max_name,
                flag: "--max-node-name-bytes",
            });
        }
    }
    let origins = plan.nodes.iter().flat_map(|n| &n.captures);
    if let Some(c) = origins
        .chain(&plan.result_captures)
        .find(|c| c.origin.len() as u64 > max_name)
    {
        return Err(LimitExceeded {
            what: format!(
                "the byte length of a captured closure's call site ({})",
                bounded(&c.origin)
            ),
            value: c.origin.len() as u64,
            limit: max_name,
            flag: "--max-node-name-bytes",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_plans::{node, shuffle};
    use ember_proto::RddNode;

    #[test]
    fn each_limit_is_named_with_its_value() {
        let limits = PlanLimits {
            max_partitions_per_node: 10,
            max_plan_nodes: 3,
            max_tasks_per_job: 15,
            ..PlanLimits::default()
        };
        let plan = |nodes: Vec<RddNode>| Plan {
            final_rdd: nodes.last().map_or(0, |n| n.id),
            nodes,
            ..Default::default()
        };
        let ok = plan(vec![
            node(0, 5, vec![]),
            node(1, 10, vec![shuffle(0, 0, 10)]),
        ]);
        assert_eq!(check_plan(&ok, &limits), Ok(()));
        let zero = plan(vec![node(0, 0, vec![])]);
        assert_eq!(check_plan(&zero, &limits), Ok(()));

        let huge = plan(vec![node(0, u32::MAX, vec![])]);
        assert_eq!(
            check_plan(&huge, &limits).unwrap_err().to_string(),
            "the number of partitions of node 0 (n0) is 4294967295, over the limit of 10 (--max-partitions-per-node)"
        );
        let many = plan((0..4).map(|i| node(i, 1, vec![])).collect());
        assert_eq!(
            check_plan(&many, &limits).unwrap_err().to_string(),
            "the number of nodes in the plan is 4, over the limit of 3 (--max-plan-nodes)"
        );
        let tasks = plan(vec![node(0, 9, vec![]), node(1, 7, vec![shuffle(0, 0, 7)])]);
        assert_eq!(
            check_plan(&tasks, &limits).unwrap_err().to_string(),
            "the number of tasks of the job is 16, over the limit of 15 (--max-tasks-per-job)"
        );
        let mut requested = plan(vec![node(0, 5, vec![])]);
        requested.partitions = vec![0; 11];
        assert!(check_plan(&requested, &limits)
            .unwrap_err()
            .to_string()
            .contains("requests is 11"));
        let deps = plan(vec![node(0, 1, (0..7).map(|s| shuffle(s, 0, 1)).collect())]);
        assert!(check_plan(&deps, &limits)
            .unwrap_err()
            .to_string()
            .starts_with("the number of dependencies in the plan is 7"));
    }

    #[test]
    fn descriptions_names_and_call_sites_are_bounded_in_bytes() {
        let limits = PlanLimits {
            max_description_bytes: 8,
            max_node_name_bytes: 4,
            ..PlanLimits::default()
        };
        let mut p = Plan {
            nodes: vec![node(0, 1, vec![])],
            description: "12345678".into(),
            ..Default::default()
        };
        p.nodes[0].name = "abcd".into();
        assert_eq!(check_plan(&p, &limits), Ok(()));
        p.description = "123456789".into();
        assert_eq!(
            check_plan(&p, &limits).unwrap_err().to_string(),
            "the byte length of the job's description (123456789) is 9, over the limit of 8 (--max-description-bytes)"
        );
        p.description.clear();
        p.nodes[0].name = "abcde".into();
        assert_eq!(
            check_plan(&p, &limits).unwrap_err().to_string(),
            "the byte length of the name of node 0 (abcde) is 5, over the limit of 4 (--max-node-name-bytes)"
        );
        p.nodes[0].name.clear();
        p.result_captures = vec![ember_proto::Capture {
            origin: "a.rs:10".into(),
            ..Default::default()
        }];
        assert_eq!(
            check_plan(&p, &limits).unwrap_err().flag,
            "--max-node-name-bytes"
        );
    }

    #[test]
    fn long_names_are_cut() {
        let long = "x".repeat(1000);
        let cut = bounded(&long);
        assert_eq!(cut.len(), NAME_PREFIX_CHARS + 3);
        assert_eq!(bounded("short"), "short");
    }
}
