//! The REST API's answers (`/api/v1/...`, JSON): the same data the pages show, with
//! Spark's nouns (jobs, stages, tasks, executors; applications in the history server).

use serde::Serialize;

use crate::store::storage::RddStorageInfo;
use crate::store::{AppStatus, ExecutorInfo, JobInfo, StageInfo, TaskInfo};

/// What a route asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Query {
    Jobs,
    Job(u64),
    JobStages(u64),
    Stage(u32),
    StageTasks(u32),
    /// Summary quantiles of a stage's task metrics.
    StageSummary(u32),
    Executors,
    /// Cached RDDs, and one of them.
    Storage,
    StorageRdd(u32),
    Environment,
}

/// A JSON answer, or `None` when the job or stage is unknown.
pub(crate) fn answer(app: &AppStatus, q: Query) -> Option<String> {
    fn json<T: Serialize + ?Sized>(v: &T) -> Option<String> {
        serde_json::to_string(v).ok()
    }
    match q {
        Query::Jobs => json::<[JobInfo]>(&app.jobs()),
        Query::Job(id) => app.job(id).and_then(json),
        Query::JobStages(id) => app.job_stages(id).as_deref().and_then(json::<[StageInfo]>),
        Query::Stage(id) => app.stage(id).and_then(json),
        Query::StageTasks(id) => app.stage_tasks(id).as_deref().and_then(json::<[TaskInfo]>),
        Query::StageSummary(id) => app.task_summary(id).as_ref().and_then(json),
        Query::Executors => json::<[ExecutorInfo]>(&app.executors()),
        Query::Storage => json::<[RddStorageInfo]>(&app.storage.rdds()),
        Query::StorageRdd(id) => app.storage.rdd(id).as_ref().and_then(json),
        Query::Environment => json(&serde_json::json!({
            "sections": app.environment.sections()
        })),
    }
}

/// An application in the history server's list.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AppSummary {
    pub id: String,
    pub name: String,
    pub started_ms: u64,
    pub jobs: usize,
}
