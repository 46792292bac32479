//! ember's driver: the DAG scheduler that turns a plan into stages and tasks, the task
//! scheduler that places tasks on executor slots, and the map-output tracker.
//!
//! The driver never runs user code. A [`Plan`](ember_proto::Plan) is data: the driver
//! reads only the shape of the lineage (node ids, partition counts, dependencies) and
//! hands tasks to a [`TaskLauncher`] (in-process threads in local mode, gRPC executors
//! in cluster mode). Everything runs on one event loop ([`SchedulerHandle`]), so the
//! scheduler state has a single owner and no locks.
//!
//! [`server`] is the driver daemon (`ember-driver`) around that loop: executor
//! registry, binary store, client sessions and job streaming over gRPC.

pub mod dag;
pub mod events;
pub mod limits;
pub mod map_output;
pub mod scheduler;
pub mod server;
pub mod wire;

pub use events::{JobEvent, JobFailure, SchedulerEvent, StageInfo, TaskLauncher};
pub use limits::PlanLimits;
pub use scheduler::{SchedulerConfig, SchedulerHandle};
