//! The REST API's answers (`/api/v1/...`, JSON): the same data the pages show, with
//! Spark's nouns (jobs, stages, tasks, executors; applications in the history server).

use serde::Serialize;

use crate::store::{AppStatus, ExecutorInfo, JobInfo, StageInfo, TaskInfo};

/// What a route asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Query {
    Jobs,
    Job(u64),
    JobStages(u64),
    Stage(u32),
    StageTasks(u32),
    Executors,
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
        Query::Executors => json::<[ExecutorInfo]>(&app.executors()),
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
