//! Running one task from its serialised description.
//!
//! A task computes one partition of its stage's final RDD by pulling batches through
//! the pipeline of narrow operators (each resolved from its offset, see
//! [`crate::plan::op`]) and ends in a shuffle write (shuffle-map task) or in the
//! plan's result function (result task). Local mode and cluster workers both enter
//! here with the same bytes, so there is one execution path.
//!
//! Invariants:
//! - Nothing is resolved from an offset unless the plan's binary id equals this
//!   process's ([`ExecutorEnv::binary_id`]): `TaskContext::new` checks it and holds the
//!   [`BinaryChecked`](crate::plan::op::BinaryChecked) every resolution takes.
//! - A panic in user code is caught here and becomes a failed task status carrying the
//!   panic message and location; it never takes the executor down.

mod accumulators;
mod attempt;
mod barrier;
mod captures;
mod context;
mod panic;
mod read_through;
mod stage_plan;

pub(crate) use accumulators::TaskAccumulator;
pub(crate) use barrier::TaskBarrier;
pub(crate) use captures::{RebuildFn, Rebuilt};
pub(crate) use context::{
    captured, into_batches, record_spills, Batches, ComputeFn, Erased, ResultFn, ShuffleWriteFn,
    TaskContext,
};
pub(crate) use stage_plan::StagePlan;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use ember_proto::{
    task_failure, task_status, task_success, FetchFailure, TaskDescription, TaskFailure,
    TaskStatus, TaskSuccess,
};
use prost::Message;

use crate::env::ExecutorEnv;
use crate::error::EmberError;
use crate::plan::op::OpRef;

/// A task's status, and what must live until it is sent: a barrier task's connections
/// to its peers, so that a rank failing on its own reports before its peers see it
/// gone and report failures of their own (the scheduler names the first).
pub(crate) struct Finished {
    pub status: TaskStatus,
    pub linger: Option<Rc<TaskBarrier>>,
}

impl From<TaskStatus> for Finished {
    fn from(status: TaskStatus) -> Self {
        Finished {
            status,
            linger: None,
        }
    }
}

/// Decodes and runs one task of `stage` (or of the plan the description carries, if
/// any); always returns a status, never panics.
pub(crate) fn run_encoded_task(
    env: &std::sync::Arc<ExecutorEnv>,
    bytes: &[u8],
    stage: Option<&Arc<StagePlan>>,
) -> Finished {
    let desc = match TaskDescription::decode(bytes) {
        Ok(desc) => desc,
        // No task id can be read: report under an id no task has, so the failure is
        // not pinned on a live task.
        Err(e) => {
            return failed(env, u64::MAX, format!("undecodable task description: {e}")).into()
        }
    };
    match own_plan(desc, stage) {
        Ok((desc, stage)) => run_task(env, desc, stage),
        Err((task_id, msg)) => failed(env, task_id, msg).into(),
    }
}

/// The stage plan `desc` runs: the one it carries, else `shared` (the plan its
/// `plan_id` names); `Err((task id, why))` when it has neither.
pub(crate) fn own_plan(
    mut desc: TaskDescription,
    shared: Option<&Arc<StagePlan>>,
) -> std::result::Result<(TaskDescription, Arc<StagePlan>), (u64, String)> {
    if let Some(plan) = desc.plan.take() {
        let broadcasts = std::mem::take(&mut desc.broadcasts)
            .into_iter()
            .map(|(id, v)| (id, bytes::Bytes::from(v)))
            .collect();
        let broadcasts = Arc::new(broadcasts);
        return Ok((desc, Arc::new(StagePlan::new(plan, broadcasts))));
    }
    match shared {
        Some(stage) => Ok((desc, stage.clone())),
        None => Err((
            desc.task_id,
            format!(
                "task {} names stage plan {}, which this worker was not sent",
                desc.task_id, desc.plan_id
            ),
        )),
    }
}

/// A failed status for `task_id` saying `msg`.
pub(crate) fn failed(env: &ExecutorEnv, task_id: u64, msg: String) -> TaskStatus {
    TaskStatus {
        task_id,
        executor_id: env.executor_id.clone(),
        metrics: None,
        barrier: None,
        outcome: Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::UserError(msg)),
        })),
    }
}

/// Runs a decoded task of `stage` (a barrier task joins its gang first).
pub(crate) fn run_task(
    env: &Arc<ExecutorEnv>,
    mut desc: TaskDescription,
    stage: Arc<StagePlan>,
) -> Finished {
    let start = Instant::now();
    let task_id = desc.task_id;
    panic::install_hook();
    let gang = match desc.barrier.take() {
        Some(b) => {
            let joined = match panic::catch(|| TaskBarrier::join(env, task_id, &b)) {
                Ok(Ok(gang)) => Ok(Rc::new(gang)),
                Ok(Err(e)) => Err(failure_of(e)),
                Err(panic) => Err(failure_of(EmberError::Plan(format!(
                    "barrier task {task_id} panicked joining its gang: {panic}"
                )))),
            };
            match joined {
                Ok(gang) => Some(gang),
                Err(failure) => {
                    env.killed.remove(&task_id);
                    let status = TaskStatus {
                        task_id,
                        executor_id: env.executor_id.clone(),
                        metrics: None,
                        outcome: Some(task_status::Outcome::Failure(failure)),
                        barrier: None,
                    };
                    return status.into();
                }
            }
        }
        None => None,
    };
    let outcome = panic::catch(|| run_inner(env, desc, stage, gang.clone()));
    env.killed.remove(&task_id);
    let (outcome, mut metrics) = match outcome {
        Ok((Ok(success), metrics)) => (task_status::Outcome::Success(success), metrics),
        Ok((Err(e), metrics)) => (task_status::Outcome::Failure(failure_of(e)), metrics),
        Err(panic_message) => (
            task_status::Outcome::Failure(TaskFailure {
                reason: Some(task_failure::Reason::UserError(panic_message)),
            }),
            Default::default(),
        ),
    };
    metrics.run_time_micros = start.elapsed().as_micros() as u64;
    Finished {
        status: TaskStatus {
            task_id,
            executor_id: env.executor_id.clone(),
            metrics: Some(metrics),
            outcome: Some(outcome),
            barrier: gang.as_ref().map(|g| g.report()),
        },
        linger: gang,
    }
}

fn failure_of(e: EmberError) -> TaskFailure {
    let reason = match e {
        EmberError::FetchFailed {
            executor_id,
            shuffle_id,
            map_partition,
            reduce_partition,
            message,
            from_storage,
        } => task_failure::Reason::FetchFailed(FetchFailure {
            executor_id,
            shuffle_id,
            map_partition,
            reduce_partition,
            message,
            from_storage,
        }),
        EmberError::Cancelled(m) => task_failure::Reason::Killed(m),
        other => task_failure::Reason::UserError(other.to_string()),
    };
    TaskFailure {
        reason: Some(reason),
    }
}

type Inner = (crate::error::Result<TaskSuccess>, ember_proto::TaskMetrics);

fn run_inner(
    env: &Arc<ExecutorEnv>,
    desc: TaskDescription,
    stage: Arc<StagePlan>,
    gang: Option<Rc<TaskBarrier>>,
) -> Inner {
    let tc = match TaskContext::new(env.clone(), desc, stage, gang) {
        Ok(tc) => Rc::new(tc),
        Err(e) => return (Err(e), Default::default()),
    };
    let _current = context::CurrentTask::enter(&tc);
    let result = execute(&tc);
    let metrics = tc.metrics();
    let result = result.and_then(|output| {
        Ok(TaskSuccess {
            output: Some(output),
            accumulators: tc.take_accumulator_updates()?,
            cached: tc.take_cached_blocks(),
        })
    });
    (result, metrics)
}

fn execute(tc: &Rc<TaskContext>) -> crate::error::Result<task_success::Output> {
    match tc.shuffle_id {
        Some(sid) => {
            let dep = tc.shuffle_dependency(sid)?.clone();
            let write = ShuffleWriteFn::from_offset(dep.write_fn, tc.binary_checked());
            // The write runs the reading operator's closures (its map-side combine).
            let previous = tc
                .shuffle_reader(sid)
                .map(|reader| tc.captures.enter(reader));
            let status = write(tc, &dep, tc.partition);
            if let Some(p) = previous {
                tc.captures.leave(p);
            }
            let status = status?;
            Ok(task_success::Output::MapStatus(status))
        }
        None => {
            let plan = tc.plan();
            let node = tc.node(plan.final_rdd)?;
            let result = ResultFn::from_offset(plan.result_fn, tc.binary_checked());
            let bytes = result(tc, node.id, tc.partition, &plan.result_payload)?;
            Ok(task_success::Output::Result(bytes))
        }
    }
}

/// Runs `f` with the task running on this thread, if any.
pub(crate) fn context_current<R>(f: impl FnOnce(Option<&Rc<TaskContext>>) -> R) -> R {
    context::CurrentTask::with(f)
}
