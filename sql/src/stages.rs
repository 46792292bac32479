//! Cutting a DataFusion physical plan into ember stages at its exchanges.
//!
//! An exchange is where a partition of an operator needs rows from more than one
//! partition of its input: a hash or round-robin `RepartitionExec`, and a gather over
//! several partitions (`CoalescePartitionsExec`, `SortPreservingMergeExec`). Each becomes
//! a stage boundary: the subtree below it is a stage of its own (recursively cut), whose
//! tasks run its partitions and route each output batch to the consumer's tasks (hash:
//! DataFusion's own `BatchPartitioner` over the repartition's expressions, so rows land
//! in the partition DataFusion expects; round robin: by the batch's position in its
//! partition, so a rerun routes every row the same way; a gather: every batch to every
//! consumer task, tagged with its source partition). In the consumer the exchange is
//! replaced by a [`StageInputExec`] leaf (a gather keeps its coalesce or merge above the
//! leaf, which merges the source partitions again inside the task).
//!
//! A join that collects its left side (`CollectLeft` hash joins, nested-loop and cross
//! joins) and emits unmatched left rows (left, full, left semi/anti/mark) cannot run its
//! probe side's partitions in separate tasks: DataFusion tracks unmatched left rows per
//! plan instance, and each ember task runs its own instance. A hash join of that kind
//! becomes a partitioned one, both sides hash-repartitioned on their join keys (so each
//! task owns its left rows, and the probe side stays parallel); a nested-loop join gets
//! its probe side gathered into one task.
//!
//! Invariant: every stage's fragment runs its partitions independently (no operator in
//! it needs another partition's rows), so a lost partition is recomputed alone; stage ids
//! are children before parents, the last stage is the query's result.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    replace_children_if_necessary, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};

use crate::error::{Result, SqlError};
use crate::input_exec::{InputMode, StageInputExec};
use crate::rdd_table::RddScanExec;
use crate::subquery::Scope;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::union::UnionExec;

/// How a stage's output batches go to its consumer's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The query's result: collected.
    Result,
    /// By the stage plan's root `RepartitionExec` (hash or round robin) into `n`
    /// partitions, partition `k` to the consumer's task `offset + k`; the root itself
    /// is not executed, its input is.
    Repartition { n: usize, offset: usize },
    /// Every batch to each of the consumer's `n` tasks, tagged with its source partition.
    All { n: usize },
    /// Partition `k` to the consumer's task `offset + k` (a registered RDD's partitions).
    Partition { offset: usize },
}

/// What a stage's tasks run.
#[derive(Debug, Clone)]
pub enum Source {
    /// A DataFusion plan fragment.
    Fragment,
    /// A registered RDD (its id in the [`crate::SqlContext`]), projected to these
    /// columns if given.
    Rdd {
        id: u32,
        projection: Option<Vec<usize>>,
    },
}

/// One stage: the fragment its tasks run and where its output goes.
#[derive(Debug)]
pub struct Stage {
    pub source: Source,
    /// The fragment. With [`Route::Repartition`] its root is the repartition, whose
    /// input each task executes.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Its tasks (partitions of what is executed).
    pub partitions: usize,
    /// The stages its [`StageInputExec`] leaves read, by input number.
    pub inputs: Vec<usize>,
    pub route: Route,
}

/// The stages of `plan`, children before parents; the last one is the result.
/// Scalar subqueries must be resolved first ([`crate::subquery::resolve`]).
pub fn cut(plan: Arc<dyn ExecutionPlan>) -> Result<Vec<Stage>> {
    let mut c = Cutter {
        stages: Vec::new(),
        scopes: Vec::new(),
    };
    c.stage(plan, None)?;
    Ok(c.stages)
}

struct Cutter {
    stages: Vec<Stage>,
    /// The resolved scalar subqueries above the part of the plan being cut: every
    /// fragment cut below them is evaluated with their values.
    scopes: Vec<Scope>,
}

/// What sits between a stage and its consumer.
enum Exchange {
    /// This repartition node (its input is the stage's subtree) into `n` partitions,
    /// landing at the consumer's tasks from `offset` on.
    Repartition {
        node: Arc<dyn ExecutionPlan>,
        n: usize,
        offset: usize,
    },
    All,
}

impl Cutter {
    /// Makes `top` (with everything below it, cut further at exchanges) a stage; its id.
    fn stage(&mut self, top: Arc<dyn ExecutionPlan>, exchange: Option<Exchange>) -> Result<usize> {
        let mut inputs = Vec::new();
        let mut body = self.rewrite(top, &mut inputs, 0)?;
        for scope in self.scopes.iter().rev() {
            body = scope.wrap(body);
        }
        let partitions = body.output_partitioning().partition_count();
        let (plan, route) = match exchange {
            None => (body, Route::Result),
            Some(Exchange::Repartition { node, n, offset }) => (
                replace_children_if_necessary(node, vec![body])?,
                Route::Repartition { n, offset },
            ),
            // The consumer's task count is filled in once the consumer is cut.
            Some(Exchange::All) => (body, Route::All { n: 0 }),
        };
        let id = self.stages.len();
        self.stages.push(Stage {
            source: Source::Fragment,
            plan,
            partitions: partitions.max(1),
            inputs: inputs.clone(),
            route,
        });
        for child in inputs {
            if let Route::All { n } = &mut self.stages[child].route {
                *n = partitions.max(1);
            }
        }
        Ok(id)
    }

    /// `node` with its exchanges replaced by stage inputs (whose stages are cut and
    /// numbered into `inputs`). `offset`: the stage task that runs `node`'s partition 0
    /// (a union's later inputs are its later partitions).
    fn rewrite(
        &mut self,
        node: Arc<dyn ExecutionPlan>,
        inputs: &mut Vec<usize>,
        offset: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(scan) = node.downcast_ref::<RddScanExec>() {
            let id = self.stages.len();
            self.stages.push(Stage {
                source: Source::Rdd {
                    id: scan.id,
                    projection: scan.projection.clone(),
                },
                plan: node.clone(),
                partitions: scan.partitions.max(1),
                inputs: Vec::new(),
                route: Route::Partition { offset },
            });
            let schema = scan.schema.clone();
            return Ok(self.input(inputs, id, InputMode::Hash, scan.partitions, schema));
        }
        if let Some(s) = node.downcast_ref::<ScalarSubqueryExec>() {
            let scope = Scope::of(s);
            self.scopes.push(scope.clone());
            let inner = self.rewrite(s.input().clone(), inputs, offset);
            self.scopes.pop();
            return Ok(scope.wrap(inner?));
        }
        if let Some(r) = node.downcast_ref::<RepartitionExec>() {
            if r.preserve_order() {
                return Err(SqlError::Unsupported(
                    "an order-preserving repartition (set datafusion.optimizer.prefer_existing_sort to false)".into(),
                ));
            }
            if let Some(n) = exchange_width(r) {
                let schema = r.input().schema();
                let child = self.stage(
                    r.input().clone(),
                    Some(Exchange::Repartition {
                        node: node.clone(),
                        n,
                        offset,
                    }),
                )?;
                return Ok(self.input(inputs, child, InputMode::Hash, n, schema));
            }
            return Err(SqlError::Unsupported(format!(
                "a repartition by {:?}",
                r.partitioning()
            )));
        }
        if let Some(below) = gathered(&node) {
            let leaf = self.broadcast_input(inputs, below)?;
            return Ok(replace_children_if_necessary(node, vec![leaf])?);
        }
        let node = gather_probe_side(node)?;
        let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
        if children.is_empty() {
            return Ok(node);
        }
        if collects_left(&node)
            && reads_other_stages(&children[0])
            && gathered(&children[0]).is_none()
        {
            // Every task executes the collected side's one partition: it must receive
            // all of it, not only the task at its partition's place.
            let leaf = self.broadcast_input(inputs, children[0].clone())?;
            let right = self.rewrite(children[1].clone(), inputs, offset)?;
            return Ok(replace_children_if_necessary(node, vec![leaf, right])?);
        }
        // A union's inputs follow each other in its partitions; every other operator
        // runs partition `i` of each input in its own partition `i`.
        let union = node.is::<UnionExec>();
        let mut rewritten = Vec::with_capacity(children.len());
        let mut at = offset;
        for c in children {
            let c = self.rewrite(c, inputs, at)?;
            // What the child has once cut (a gathered probe side has one partition).
            if union {
                at += c.output_partitioning().partition_count();
            }
            rewritten.push(c);
        }
        Ok(replace_children_if_necessary(node, rewritten)?)
    }

    /// `below` cut into a stage whose every batch goes to every task of this one; the
    /// input leaf reading it.
    fn broadcast_input(
        &mut self,
        inputs: &mut Vec<usize>,
        below: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let m = below.output_partitioning().partition_count();
        let schema = below.schema();
        let child = self.stage(below, Some(Exchange::All))?;
        Ok(self.input(inputs, child, InputMode::All, m, schema))
    }

    fn input(
        &mut self,
        inputs: &mut Vec<usize>,
        child: usize,
        mode: InputMode,
        partitions: usize,
        schema: datafusion::arrow::datatypes::SchemaRef,
    ) -> Arc<dyn ExecutionPlan> {
        let j = inputs.len() as u32;
        inputs.push(child);
        Arc::new(StageInputExec::new(j, mode, partitions, schema))
    }
}

/// Whether `node` executes its left child's one partition in every partition of its
/// own (hash joins in `CollectLeft` mode, nested-loop and cross joins).
fn collects_left(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<HashJoinExec>()
        .is_some_and(|j| *j.partition_mode() == PartitionMode::CollectLeft)
        || node.is::<NestedLoopJoinExec>()
        || node.is::<CrossJoinExec>()
}

/// The input of `plan` if it gathers several partitions (a coalesce or a
/// sort-preserving merge over more than one: cut into an input every task receives
/// whole).
fn gathered(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let below = plan
        .downcast_ref::<CoalescePartitionsExec>()
        .map(|c| c.input().clone())
        .or_else(|| {
            plan.downcast_ref::<SortPreservingMergeExec>()
                .map(|m| m.input().clone())
        })?;
    (below.output_partitioning().partition_count() > 1).then_some(below)
}

/// The partitions a repartition this crate cuts at makes (hash or round robin), or
/// `None` for any other partitioning.
fn exchange_width(r: &RepartitionExec) -> Option<usize> {
    match r.partitioning() {
        Partitioning::Hash(_, n) | Partitioning::RoundRobinBatch(n) => Some(*n),
        _ => None,
    }
}

/// Whether `plan` reads another stage's output (an exchange or a registered RDD in it).
fn reads_other_stages(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let here = plan.is::<RddScanExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<SortPreservingMergeExec>()
        || plan
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| exchange_width(r).is_some());
    here || plan.children().into_iter().any(reads_other_stages)
}

/// A join that collects its left side and emits unmatched left rows, made runnable in
/// ember's tasks (see the module docs): a hash join partitioned on its keys, another
/// join with its probe (right) side gathered into one partition; any other node as it is.
fn gather_probe_side(node: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let emits_left = |t: &JoinType| {
        matches!(
            t,
            JoinType::Left
                | JoinType::Full
                | JoinType::LeftSemi
                | JoinType::LeftAnti
                | JoinType::LeftMark
        )
    };
    // A cross join emits no unmatched rows: each task's share of the right side pairs
    // with all of the left.
    let join_type = node
        .downcast_ref::<HashJoinExec>()
        .map(|j| *j.join_type())
        .or_else(|| {
            node.downcast_ref::<NestedLoopJoinExec>()
                .map(|j| *j.join_type())
        });
    if !collects_left(&node) || !join_type.is_some_and(|t| emits_left(&t)) {
        return Ok(node);
    }
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let n = children
        .get(1)
        .map_or(1, |r| r.output_partitioning().partition_count());
    if children.len() != 2 || n <= 1 {
        return Ok(node);
    }
    if let Some(j) = node
        .downcast_ref::<HashJoinExec>()
        .filter(|j| !j.on().is_empty())
    {
        let side =
            |keys: Vec<_>, child: &Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
                let r = RepartitionExec::try_new(child.clone(), Partitioning::Hash(keys, n))?;
                Ok(Arc::new(r))
            };
        let left = side(
            j.on().iter().map(|(l, _)| l.clone()).collect(),
            &children[0],
        )?;
        let right = side(
            j.on().iter().map(|(_, r)| r.clone()).collect(),
            &children[1],
        )?;
        return Ok(j
            .builder()
            .with_partition_mode(PartitionMode::Partitioned)
            .with_new_children(vec![left, right])?
            .recompute_properties()
            .reset_state()
            .build_exec()?);
    }
    let right: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(children[1].clone()));
    Ok(replace_children_if_necessary(
        node,
        vec![children[0].clone(), right],
    )?)
}
