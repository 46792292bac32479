//! What the web UI and REST API read of the status store: jobs, stages, a stage's
//! tasks, executors, and the part of the store one application may see.
//!
//! Invariants: nothing here changes the store; a scoped store holds only the
//! application's jobs, the stages they list and those stages' tasks (no executors, no
//! driver totals), so a client's view shows nothing of another application.

use std::collections::{BTreeMap, BTreeSet};

use super::{AppStatus, ExecutorInfo, JobInfo, StageInfo, Status, TaskInfo};

impl AppStatus {
    /// The part of the store application `application` may see: its jobs, the stages
    /// they list and those stages' tasks; no executors, no totals of the driver.
    pub fn scoped(&self, application: &str) -> AppStatus {
        let jobs: BTreeMap<u64, JobInfo> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.application == application)
            .map(|(id, j)| (*id, j.clone()))
            .collect();
        let stage_ids: BTreeSet<u32> = jobs
            .values()
            .flat_map(|j| j.stage_ids.iter().copied())
            .collect();
        let pick = |id: &u32| stage_ids.contains(id);
        AppStatus {
            name: application.to_string(),
            started_ms: self.started_ms,
            stages: (self.stages.iter())
                .filter(|(id, _)| pick(id))
                .map(|(id, s)| (*id, s.clone()))
                .collect(),
            tasks: (self.tasks.iter())
                .filter(|(id, _)| pick(id))
                .map(|(id, t)| (*id, t.clone()))
                .collect(),
            jobs,
            storage: self.storage.scoped(application),
            environment: self.environment.scoped(application),
            ..Default::default()
        }
    }

    /// `self` with `from`'s executors (which a scoped store has none of).
    pub(crate) fn with_executors_of(mut self, from: &AppStatus) -> AppStatus {
        self.executors = from.executors.clone();
        self
    }

    /// Jobs, newest first.
    pub fn jobs(&self) -> Vec<JobInfo> {
        self.jobs.values().rev().cloned().collect()
    }

    /// Jobs, oldest first, without copying them.
    pub(crate) fn jobs_iter(&self) -> impl Iterator<Item = &JobInfo> {
        self.jobs.values()
    }

    pub fn job(&self, job_id: u64) -> Option<&JobInfo> {
        self.jobs.get(&job_id)
    }

    /// A job's stages, as the job lists them, with their status in it (skipped where
    /// an earlier job had written their output).
    pub fn job_stages(&self, job_id: u64) -> Option<Vec<StageInfo>> {
        let job = self.jobs.get(&job_id)?;
        Some(
            job.stage_ids
                .iter()
                .filter_map(|id| self.stages.get(id))
                .map(|s| {
                    let mut s = s.clone();
                    if job.skipped_stage_ids.contains(&s.stage_id) {
                        s.status = Status::Skipped;
                    }
                    s
                })
                .collect(),
        )
    }

    pub fn stage(&self, stage_id: u32) -> Option<&StageInfo> {
        self.stages.get(&stage_id)
    }

    /// The jobs that list this stage.
    pub fn stage_jobs(&self, stage_id: u32) -> Vec<&JobInfo> {
        self.jobs
            .values()
            .filter(|j| j.stage_ids.contains(&stage_id))
            .collect()
    }

    /// The task attempts of a stage kept, in launch order.
    pub fn stage_tasks(&self, stage_id: u32) -> Option<Vec<TaskInfo>> {
        self.stages.get(&stage_id)?;
        Some(
            self.tasks
                .get(&stage_id)
                .map(|l| l.iter().cloned().collect())
                .unwrap_or_default(),
        )
    }

    /// Executors, live and lost, by id.
    pub fn executors(&self) -> Vec<ExecutorInfo> {
        self.executors.values().cloned().collect()
    }

    /// Whether any job is running (pages refresh themselves then).
    pub fn busy(&self) -> bool {
        self.jobs.values().any(|j| j.status == Status::Running)
    }
}
