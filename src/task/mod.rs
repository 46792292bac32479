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
//!   process's ([`ExecutorEnv::binary_id`]).
//! - A panic in user code is caught here and becomes a failed task status carrying the
//!   panic message and location; it never takes the executor down.

mod accumulators;
mod captures;
mod context;
mod panic;
mod read_through;

pub(crate) use accumulators::TaskAccumulator;
pub(crate) use context::{
    captured, Batches, ComputeFn, Erased, ResultFn, ShuffleWriteFn, TaskContext,
};

use std::rc::Rc;
use std::time::Instant;

use ember_proto::{
    task_failure, task_status, task_success, FetchFailure, TaskDescription, TaskFailure,
    TaskStatus, TaskSuccess,
};
use prost::Message;

use crate::env::ExecutorEnv;
use crate::error::EmberError;

/// Decodes and runs one task; always returns a status, never panics.
pub(crate) fn run_encoded_task(env: &std::sync::Arc<ExecutorEnv>, bytes: &[u8]) -> TaskStatus {
    match TaskDescription::decode(bytes) {
        Ok(desc) => run_task(env, desc),
        // No task id can be read: report under an id no task has, so the failure is
        // not pinned on a live task.
        Err(e) => TaskStatus {
            task_id: u64::MAX,
            executor_id: env.executor_id.clone(),
            metrics: None,
            outcome: Some(task_status::Outcome::Failure(TaskFailure {
                reason: Some(task_failure::Reason::UserError(format!(
                    "undecodable task description: {e}"
                ))),
            })),
        },
    }
}

/// Runs a decoded task.
pub(crate) fn run_task(env: &std::sync::Arc<ExecutorEnv>, desc: TaskDescription) -> TaskStatus {
    let start = Instant::now();
    let task_id = desc.task_id;
    panic::install_hook();
    let outcome = panic::catch(|| run_inner(env, desc));
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
    TaskStatus {
        task_id,
        executor_id: env.executor_id.clone(),
        metrics: Some(metrics),
        outcome: Some(outcome),
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
        } => task_failure::Reason::FetchFailed(FetchFailure {
            executor_id,
            shuffle_id,
            map_partition,
            reduce_partition,
            message,
        }),
        EmberError::Cancelled(m) => task_failure::Reason::Killed(m),
        other => task_failure::Reason::UserError(other.to_string()),
    };
    TaskFailure {
        reason: Some(reason),
    }
}

type Inner = (crate::error::Result<TaskSuccess>, ember_proto::TaskMetrics);

fn run_inner(env: &std::sync::Arc<ExecutorEnv>, desc: TaskDescription) -> Inner {
    let tc = match TaskContext::new(env.clone(), desc) {
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
            // SAFETY: the binary id was checked in `TaskContext::new`.
            let write: ShuffleWriteFn =
                unsafe { crate::plan::op::OpRef::from_offset(dep.write_fn) };
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
            // SAFETY: as above.
            let result: ResultFn = unsafe { crate::plan::op::OpRef::from_offset(plan.result_fn) };
            let bytes = result(tc, node.id, tc.partition, &plan.result_payload)?;
            Ok(task_success::Output::Result(bytes))
        }
    }
}

/// Runs `f` with the task running on this thread, if any.
pub(crate) fn context_current<R>(f: impl FnOnce(Option<&Rc<TaskContext>>) -> R) -> R {
    context::CurrentTask::with(f)
}
