//! ember's scheduler: the DAG scheduler that turns a plan into stages and tasks, the task
//! scheduler that places tasks on executor cores, and the map-output tracker. Local mode
//! runs it in the job's process; the driver daemon (`ember-driver`) runs it for a
//! cluster. It has no network code and links no server.
//!
//! The driver never runs user code. A [`Plan`](ember_proto::Plan) is data: the driver
//! reads only the shape of the lineage (node ids, partition counts, dependencies) and
//! hands tasks to a [`TaskLauncher`] (in-process threads in local mode, gRPC executors
//! in cluster mode). Everything runs on one event loop ([`SchedulerHandle`]), so the
//! scheduler state has a single owner and no locks.
//!
//! The driver daemon (crate `ember-driver`) wraps that loop in its gRPC server:
//! executor registry, binary store, client sessions and job streaming.

pub mod block_sizes;
pub mod dag;
pub mod events;
pub mod limits;
pub mod listener;
pub mod map_output;
pub mod pools;
pub mod scheduler;
pub mod wire;

#[cfg(test)]
mod test_plans;

pub use events::{
    Broadcasts, JobEvent, JobEventSender, JobFailure, SchedulerEvent, StageInfo, StageShared,
    TaskLauncher,
};
pub use limits::PlanLimits;
pub use listener::{ListenerEvent, StageDesc, StageOperator, MAX_STAGE_OPERATORS};
pub use scheduler::{SchedulerConfig, SchedulerHandle};
