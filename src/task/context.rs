//! The state of one running task: its decoded plan, shuffle inputs, metrics,
//! accumulator updates and cached blocks, and the typed entry point
//! [`TaskContext::compute`] through which operators pull their parents' partitions.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{
    dependency, AccumulatorUpdate, CachedBlock, MapLocation, MapStatus, Plan, RddNode,
    ShuffleDependency, TaskDescription, TaskMetrics,
};

use super::accumulators::{TaskAccumulator, TaskAccumulators};
use super::stage_plan::StagePlan;
use crate::data::Data;
use crate::data::BATCH;
use crate::env::ExecutorEnv;
use crate::error::{EmberError, Result};
use crate::plan::op::{op_kind, BinaryChecked, OpRef};
use crate::spill::SpillMetrics;

/// A partition flowing through a pipeline: batches of records.
pub(crate) type Batches<T> = Box<dyn Iterator<Item = Result<Vec<T>>>>;
/// A type-erased `Batches<T>`, as returned by compute functions.
pub(crate) type Erased = Box<dyn Any>;

op_kind!(
    /// Computes one partition of a node.
    ComputeFn = fn(&Rc<TaskContext>, &RddNode, u32) -> Result<Erased>
);
op_kind!(
    /// Writes one map partition of a shuffle.
    ShuffleWriteFn = fn(&Rc<TaskContext>, &ShuffleDependency, u32) -> Result<MapStatus>
);
op_kind!(
    /// Runs an action on one partition of the final node: (node id, partition, payload).
    ResultFn = fn(&Rc<TaskContext>, u32, u32, &[u8]) -> Result<Vec<u8>>
);

/// One running task.
pub(crate) struct TaskContext {
    pub env: Arc<ExecutorEnv>,
    /// The stage's plan, shared with the stage's other tasks in this process.
    stage: Arc<StagePlan>,
    shuffle_inputs: HashMap<u32, Vec<MapLocation>>,
    pub stage_id: u32,
    pub partition: u32,
    pub attempt: u32,
    pub task_id: u64,
    pub shuffle_id: Option<u32>,
    metrics: RefCell<TaskMetrics>,
    accumulators: RefCell<TaskAccumulators>,
    cached: RefCell<Vec<CachedBlock>>,
    /// `capture!` values of the plan, and the node being computed.
    pub(crate) captures: super::captures::Captures,
    /// The plan was built by this binary: its offsets resolve here.
    checked: BinaryChecked,
    /// A barrier stage's task: its membership of the gang (joined before the context
    /// was made, see `run_task`).
    pub(crate) barrier: Option<Rc<super::barrier::TaskBarrier>>,
}

impl TaskContext {
    /// A task of `stage` (whose plan `desc` names; `desc.plan`, if any, is ignored).
    pub(crate) fn new(
        env: Arc<ExecutorEnv>,
        desc: TaskDescription,
        stage: Arc<StagePlan>,
        barrier: Option<Rc<super::barrier::TaskBarrier>>,
    ) -> Result<Self> {
        let plan = stage.plan();
        if plan.binary_hash != env.binary_id {
            return Err(EmberError::Plan(format!(
                "plan was built by binary {} but this worker runs {}; refusing to run it",
                plan.binary_hash, env.binary_id
            )));
        }
        // SAFETY: the plan's binary hash equals this process's binary id (checked just
        // above), and plans are made only by `plan::build`, whose offsets come from
        // `OpRef::to_offset` of their fields' types: the one place this is argued.
        let checked = unsafe { BinaryChecked::vouch() };
        let captures =
            super::captures::Captures::of(stage.nodes(), &plan.result_captures, checked)?;
        let shuffle_inputs = desc
            .shuffle_inputs
            .into_iter()
            .map(|s| Ok((s.shuffle_id, s.map_locations()?)))
            .collect::<std::result::Result<_, ember_proto::InvalidShuffleInput>>()
            .map_err(|e| EmberError::Plan(format!("task description: {e}")))?;
        Ok(TaskContext {
            env,
            stage,
            shuffle_inputs,
            stage_id: desc.stage_id,
            partition: desc.partition,
            attempt: desc.attempt,
            task_id: desc.task_id,
            shuffle_id: desc.shuffle_id,
            metrics: RefCell::new(TaskMetrics::default()),
            accumulators: RefCell::new(TaskAccumulators::default()),
            cached: RefCell::new(Vec::new()),
            captures,
            checked,
            barrier,
        })
    }

    /// The plan (its nodes are held separately, see [`TaskContext::node`]).
    /// The proof that this task's plan resolves in this process (see `plan::op`).
    pub(crate) fn binary_checked(&self) -> BinaryChecked {
        self.checked
    }

    pub(crate) fn plan(&self) -> &Plan {
        self.stage.plan()
    }

    pub(crate) fn node(&self, id: u32) -> Result<&RddNode> {
        self.stage
            .node(id)
            .ok_or_else(|| EmberError::Plan(format!("node {id} is not in the plan")))
    }

    pub(crate) fn shuffle_dependency(&self, shuffle_id: u32) -> Result<&ShuffleDependency> {
        self.stage
            .shuffle_dependency(shuffle_id)
            .ok_or_else(|| EmberError::Plan(format!("shuffle {shuffle_id} is not in the plan")))
    }

    /// Known map outputs of a shuffle this task reads.
    pub(crate) fn map_locations(&self, shuffle_id: u32) -> &[MapLocation] {
        self.shuffle_inputs
            .get(&shuffle_id)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Serialized broadcast value shipped with the stage's plan (local mode).
    pub(crate) fn broadcast_bytes(&self, id: u64) -> Option<&[u8]> {
        self.stage.broadcast_bytes(id)
    }

    /// The parent node id of a node's `i`-th dependency.
    pub(crate) fn dep_parent(node: &RddNode, i: usize) -> Result<u32> {
        match node.deps.get(i).and_then(|d| d.kind.as_ref()) {
            Some(dependency::Kind::Narrow(n)) => Ok(n.parent),
            Some(dependency::Kind::Shuffle(s)) => Ok(s.parent),
            None => Err(EmberError::Plan(format!(
                "node {} has no dependency {i}",
                node.id
            ))),
        }
    }

    /// Runs the node's compute function, ignoring any cache.
    pub(crate) fn compute_uncached<T: Data>(
        self: &Rc<Self>,
        node: &RddNode,
        part: u32,
    ) -> Result<Batches<T>> {
        let f = ComputeFn::from_offset(node.compute_fn, self.checked);
        let previous = self.captures.enter(node.id);
        let erased = f(self, node, part);
        self.captures.leave(previous);
        let erased = erased?;
        let batches = erased.downcast::<Batches<T>>().map(|b| *b).map_err(|_| {
            EmberError::Plan(format!(
                "node {} ({}) does not produce records of type {}",
                node.id,
                node.name,
                std::any::type_name::<T>()
            ))
        })?;
        // With `capture!` closures about, each batch is pulled "in" this node.
        let batches = if self.captures.is_empty() {
            batches
        } else {
            let tc = self.clone();
            let id = node.id;
            let mut inner = batches;
            Box::new(std::iter::from_fn(move || {
                let previous = tc.captures.enter(id);
                let next = inner.next();
                tc.captures.leave(previous);
                next
            }))
        };
        // Every pipeline starts at a source or a shuffle read: check for a kill there,
        // once per batch.
        let head = !node
            .deps
            .iter()
            .any(|d| matches!(d.kind, Some(dependency::Kind::Narrow(_))));
        if !head {
            return Ok(batches);
        }
        let tc = self.clone();
        Ok(Box::new(batches.map(move |b| tc.check_killed().and(b))))
    }

    /// The node that reads shuffle `shuffle_id` in this task's plan.
    pub(crate) fn shuffle_reader(&self, shuffle_id: u32) -> Option<u32> {
        self.stage.shuffle_reader(shuffle_id)
    }

    /// Whether this task may read only part of its text input: a result task of a
    /// sampling job (see `Plan::sample_sources`).
    pub(crate) fn sampling(&self) -> bool {
        self.shuffle_id.is_none() && self.plan().sample_sources
    }

    /// `Err(Cancelled)` once the executor was asked to kill this task.
    pub(crate) fn check_killed(&self) -> Result<()> {
        if self.env.killed.contains(&self.task_id) {
            return Err(EmberError::Cancelled(format!(
                "task {} was killed",
                self.task_id
            )));
        }
        Ok(())
    }

    /// Reports a block stored: `(memory, disk)` bytes it takes.
    pub(crate) fn note_cached(&self, rdd_id: u32, partition: u32, (memory, disk): (u64, u64)) {
        self.cached.borrow_mut().push(CachedBlock {
            rdd_id,
            partition,
            memory_bytes: memory,
            disk_bytes: disk,
        });
    }

    pub(crate) fn take_cached_blocks(&self) -> Vec<CachedBlock> {
        std::mem::take(&mut self.cached.borrow_mut())
    }

    /// Updates the task's metrics.
    pub(crate) fn with_metrics(&self, f: impl FnOnce(&mut TaskMetrics)) {
        f(&mut self.metrics.borrow_mut())
    }

    pub(crate) fn metrics(&self) -> TaskMetrics {
        *self.metrics.borrow()
    }

    /// Adds to this task's partial value of accumulator `id`, created by `new` on
    /// first use.
    pub(crate) fn accumulate(
        &self,
        id: u64,
        name: &str,
        v: Box<dyn Any>,
        new: impl FnOnce() -> Box<dyn TaskAccumulator>,
    ) {
        self.accumulators.borrow_mut().add(id, name, v, new);
    }

    /// The task's encoded accumulator updates; an update that could not be merged or
    /// encoded is an error (the task fails rather than undercount).
    pub(crate) fn take_accumulator_updates(&self) -> Result<Vec<AccumulatorUpdate>> {
        self.accumulators.borrow_mut().take_updates()
    }

    /// A fresh memory reservation from the executor's pool.
    pub(crate) fn reservation(&self, consumer: &str) -> crate::memory::Reservation {
        self.env.memory.reservation(consumer)
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<TaskContext>>> = const { RefCell::new(None) };
}

/// Marks the task running on this thread (for broadcasts and accumulators used inside
/// user closures); cleared on drop.
pub(crate) struct CurrentTask(());

impl CurrentTask {
    pub(crate) fn enter(tc: &Rc<TaskContext>) -> CurrentTask {
        CURRENT.with(|c| *c.borrow_mut() = Some(tc.clone()));
        CurrentTask(())
    }

    /// Runs `f` with the task running on this thread, if any.
    pub(crate) fn with<R>(f: impl FnOnce(Option<&Rc<TaskContext>>) -> R) -> R {
        let tc = CURRENT.with(|c| c.borrow().clone());
        f(tc.as_ref())
    }
}

impl Drop for CurrentTask {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// The `capture!` values of call site `K` for the node the task on this thread is
/// computing; `None` when no task runs on this thread.
pub(crate) fn captured<K: 'static, B: 'static>() -> Option<std::result::Result<&'static B, String>>
{
    CurrentTask::with(|tc| {
        let tc = tc?;
        Some(tc.captures.get::<K, B>().map(|b| {
            let b: *const B = b;
            // SAFETY: the value lives in the task's context, which `CURRENT` keeps alive
            // until the task ends; the reference is used only by the closure call
            // asking for it (its result is an owned record), which returns before then.
            unsafe { &*b }
        }))
    })
}

/// Batches an iterator of records for the pipeline ([`crate::data::BATCH`] a batch),
/// ending at the first error.
pub(crate) fn into_batches<T: 'static>(
    it: impl Iterator<Item = Result<T>> + 'static,
) -> Batches<T> {
    let mut it = it;
    Box::new(std::iter::from_fn(move || {
        let mut batch = Vec::with_capacity(BATCH);
        for r in it.by_ref() {
            match r {
                Ok(x) => {
                    batch.push(x);
                    if batch.len() == BATCH {
                        break;
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
        (!batch.is_empty()).then_some(Ok(batch))
    }))
}

/// Adds a spilling structure's spills to the task's metrics.
pub(crate) fn record_spills(tc: &Rc<TaskContext>, m: SpillMetrics) {
    tc.with_metrics(|t| {
        t.bytes_spilled += m.bytes_spilled;
        t.spill_count += m.spill_count;
    });
}
