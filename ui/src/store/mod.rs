//! The status store: jobs, stages, tasks and executors of one application, built by
//! applying [`AppEvent`]s in order (live from the listener bus, or replayed from an
//! event log), as Spark's `AppStatusStore`. What pages read of it is `queries`'s.
//!
//! Invariants: applying the same events gives the same store, live or replayed; counts
//! (tasks done, failed, metrics) cover every task even when old task entries were let
//! go; memory is bounded: at most [`MAX_JOBS`] jobs (the oldest finished ones go first,
//! with the stages no kept job uses), [`MAX_TASKS_PER_STAGE`] task entries per stage and
//! [`MAX_TASKS`] over all stages (the oldest stage's oldest entries go first).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use crate::event::{AppEvent, Metrics, OperatorRef, StageRef};

pub mod environment;
pub mod quantiles;
mod queries;
pub mod storage;
mod tasks;

pub use tasks::{BarrierInfo, TaskInfo};

/// Jobs kept (Spark's `spark.ui.retainedJobs` default).
pub const MAX_JOBS: usize = 1000;
/// Task entries kept per stage (older ones go; their counts stay).
pub const MAX_TASKS_PER_STAGE: usize = 10_000;
/// Task entries kept over all stages (Spark's `spark.ui.retainedTasks` number): 251
/// jobs of 10,000 kept entries each held 2.5 million, gigabytes after the jobs ended.
pub const MAX_TASKS: usize = 100_000;
/// Stages whose recovered outputs the store keeps before their job is listed.
pub const MAX_EARLY_RECOVERED: usize = 10_000;

/// Where a job, stage or task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    /// The scheduler's id (unique on the driver; the UI's addresses use it).
    pub job_id: u64,
    /// The application (client session) it belongs to; empty in local mode.
    pub application: String,
    /// Its number within the application, as the client's console names it.
    pub number: u64,
    /// The action and its call site, e.g. `collect at src/main.rs:12`.
    pub description: String,
    pub status: Status,
    pub submitted_ms: u64,
    pub completed_ms: Option<u64>,
    /// Its stages, parents before children (the result stage last).
    pub stage_ids: Vec<u32>,
    /// Stages whose output an earlier job had written.
    pub skipped_stage_ids: Vec<u32>,
    pub failure: Option<String>,
    /// The scheduling pool of its session it ran in, and its job group ("": none).
    pub pool: String,
    pub job_group: String,
    /// How its pool shares slots, as the scheduler said (empty in older logs).
    pub pool_share: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageInfo {
    /// The scheduler's id (unique on the driver; the UI's addresses use it).
    pub stage_id: u32,
    /// Its number within its application, as the client's console names it.
    pub number: u32,
    pub name: String,
    pub num_tasks: u32,
    pub parents: Vec<u32>,
    pub shuffle_id: Option<u32>,
    /// The RDD operators it runs, parents first, and how many more there are.
    pub operators: Vec<OperatorRef>,
    pub more_operators: u32,
    pub status: Status,
    /// Attempts started (0: never ran).
    pub attempts: u32,
    pub submitted_ms: Option<u64>,
    pub completed_ms: Option<u64>,
    pub tasks_running: u32,
    pub tasks_succeeded: u32,
    pub tasks_failed: u32,
    /// Sum over successful task attempts.
    pub metrics: Metrics,
    pub failure: Option<String>,
    /// Map outputs recovered from executors' reports after a driver restart.
    pub recovered_outputs: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecutorInfo {
    pub executor_id: String,
    pub slots: u32,
    pub host: String,
    pub memory_limit_bytes: u64,
    /// As its last heartbeat said (what its running tasks reserve).
    pub memory_used_bytes: u64,
    pub added_ms: u64,
    pub lost_ms: Option<u64>,
    pub lost_reason: Option<String>,
    pub tasks_running: u32,
    pub tasks_succeeded: u32,
    pub tasks_failed: u32,
    pub shuffle_bytes_written: u64,
    pub shuffle_bytes_read: u64,
}

/// Task run times for `/metrics` (a Prometheus histogram; buckets 1 ms to ~4 min).
#[derive(Clone)]
pub struct TaskSeconds(pub prometheus_client::metrics::histogram::Histogram);

impl Default for TaskSeconds {
    fn default() -> Self {
        TaskSeconds(prometheus_client::metrics::histogram::Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 4.0, 10),
        ))
    }
}

impl std::fmt::Debug for TaskSeconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskSeconds")
    }
}

/// One application's status.
#[derive(Debug, Default)]
pub struct AppStatus {
    pub name: String,
    pub started_ms: u64,
    /// Task attempts ended, over the application's life (kept when entries go).
    pub tasks_succeeded_total: u64,
    pub tasks_failed_total: u64,
    pub task_seconds: TaskSeconds,
    jobs: BTreeMap<u64, JobInfo>,
    stages: BTreeMap<u32, StageInfo>,
    tasks: BTreeMap<u32, VecDeque<TaskInfo>>,
    /// Entries in `tasks`, over all stages (at most [`MAX_TASKS`]).
    task_entries: usize,
    executors: BTreeMap<String, ExecutorInfo>,
    /// Host and memory of executors the scheduler has not added yet (the driver's
    /// resources line comes on another channel and may be first).
    early_resources: BTreeMap<String, (String, u64, u64)>,
    /// Recovered outputs of stages no job listed yet (the scheduler recovers them as
    /// it creates the stage, before the job's `job_submitted`), at most
    /// [`MAX_EARLY_RECOVERED`].
    early_recovered: BTreeMap<u32, u32>,
    /// Cached RDDs (the Storage page).
    pub storage: storage::Storage,
    /// Configuration sections (the Environment page).
    pub environment: environment::Environment,
}

impl AppStatus {
    pub fn new(name: &str, started_ms: u64) -> Self {
        AppStatus {
            name: name.to_string(),
            started_ms,
            ..Default::default()
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, e: &AppEvent) {
        match e {
            AppEvent::AppStarted { name, time_ms } => {
                self.name = name.clone();
                self.started_ms = *time_ms;
            }
            AppEvent::JobSubmitted {
                job_id,
                application,
                number,
                description,
                stages,
                pool,
                job_group,
                pool_share,
                time_ms,
            } => {
                self.job_submitted(
                    (*job_id, application, number.unwrap_or(*job_id)),
                    description,
                    stages,
                    *time_ms,
                );
                if let Some(j) = self.jobs.get_mut(job_id) {
                    j.pool = if pool.is_empty() {
                        "default".into()
                    } else {
                        pool.clone()
                    };
                    j.job_group = job_group.clone();
                    j.pool_share = pool_share.clone();
                }
            }
            AppEvent::StageSkipped { job_id, stage_id } => {
                if let Some(j) = self.jobs.get_mut(job_id) {
                    if !j.skipped_stage_ids.contains(stage_id) {
                        j.skipped_stage_ids.push(*stage_id);
                    }
                }
                if let Some(s) = self.stages.get_mut(stage_id) {
                    if s.attempts == 0 {
                        s.status = Status::Skipped;
                    }
                }
            }
            AppEvent::OutputsRecovered {
                stage_id, outputs, ..
            } => match self.stages.get_mut(stage_id) {
                Some(s) => s.recovered_outputs += outputs,
                None => {
                    if self.early_recovered.len() >= MAX_EARLY_RECOVERED {
                        self.early_recovered.pop_first();
                    }
                    *self.early_recovered.entry(*stage_id).or_insert(0) += outputs;
                }
            },
            AppEvent::StageSubmitted {
                stage_id,
                attempt,
                time_ms,
                ..
            } => {
                if let Some(s) = self.stages.get_mut(stage_id) {
                    s.status = Status::Running;
                    s.attempts = s.attempts.max(*attempt);
                    s.submitted_ms.get_or_insert(*time_ms);
                    s.completed_ms = None;
                }
            }
            AppEvent::StageCompleted { stage_id, time_ms } => {
                if let Some(s) = self.stages.get_mut(stage_id) {
                    s.status = Status::Succeeded;
                    s.completed_ms = Some(*time_ms);
                }
            }
            AppEvent::StageFailed {
                stage_id,
                reason,
                time_ms,
            } => {
                if let Some(s) = self.stages.get_mut(stage_id) {
                    s.status = Status::Failed;
                    s.completed_ms = Some(*time_ms);
                    s.failure = Some(reason.clone());
                }
            }
            AppEvent::TaskStarted {
                task_id,
                stage_id,
                stage_attempt,
                partition,
                attempt,
                executor_id,
                speculative,
                time_ms,
            } => {
                if let Some(s) = self.stages.get_mut(stage_id) {
                    s.tasks_running += 1;
                }
                if let Some(x) = self.executors.get_mut(executor_id) {
                    x.tasks_running += 1;
                }
                let list = self.tasks.entry(*stage_id).or_default();
                if list.len() >= MAX_TASKS_PER_STAGE {
                    list.pop_front();
                } else {
                    self.task_entries += 1;
                }
                list.push_back(TaskInfo {
                    task_id: *task_id,
                    stage_id: *stage_id,
                    stage_attempt: *stage_attempt,
                    partition: *partition,
                    attempt: *attempt,
                    executor_id: executor_id.clone(),
                    speculative: *speculative,
                    status: Status::Running,
                    launched_ms: *time_ms,
                    finished_ms: None,
                    metrics: Metrics::default(),
                    error: None,
                    barrier: None,
                });
                self.let_old_tasks_go();
            }
            AppEvent::TaskEnded {
                task_id,
                stage_id,
                executor_id,
                metrics,
                succeeded,
                failure,
                time_ms,
                ..
            } => self.task_ended(
                *task_id,
                *stage_id,
                executor_id,
                metrics,
                *succeeded,
                failure,
                *time_ms,
            ),
            AppEvent::TaskSupersteps {
                task_id,
                stage_id,
                supersteps,
                dropped,
                resumed_after,
                ..
            } => self.task_supersteps(*task_id, *stage_id, supersteps, *dropped, *resumed_after),
            AppEvent::JobEnded {
                job_id,
                succeeded,
                failure,
                time_ms,
            } => {
                if let Some(j) = self.jobs.get_mut(job_id) {
                    j.status = if *succeeded {
                        Status::Succeeded
                    } else {
                        Status::Failed
                    };
                    j.completed_ms = Some(*time_ms);
                    j.failure = failure.clone();
                }
                self.let_old_jobs_go();
            }
            AppEvent::ExecutorAdded {
                executor_id,
                slots,
                time_ms,
            } => {
                let early = self.early_resources.remove(executor_id);
                let x = self.executor_entry(executor_id);
                x.slots = *slots;
                x.added_ms = *time_ms;
                x.lost_ms = None;
                x.lost_reason = None;
                if let Some((host, limit, used)) = early {
                    x.host = host;
                    x.memory_limit_bytes = limit;
                    x.memory_used_bytes = used;
                }
            }
            AppEvent::ExecutorResources {
                executor_id,
                host,
                memory_limit_bytes,
                memory_used_bytes,
                ..
            } => match self.executors.get_mut(executor_id) {
                Some(x) => {
                    x.host = host.clone();
                    x.memory_limit_bytes = *memory_limit_bytes;
                    x.memory_used_bytes = *memory_used_bytes;
                }
                None => {
                    // Bounded: an executor id the scheduler never adds stays one entry.
                    if self.early_resources.len() < 10_000 {
                        self.early_resources.insert(
                            executor_id.clone(),
                            (host.clone(), *memory_limit_bytes, *memory_used_bytes),
                        );
                    }
                }
            },
            AppEvent::ExecutorLost {
                executor_id,
                reason,
                outputs_from_storage,
                outputs_from_replicas,
                time_ms,
            } => {
                if let Some(x) = self.executors.get_mut(executor_id) {
                    x.lost_ms = Some(*time_ms);
                    let mut why = reason.clone();
                    // Moved by a decommission, or pushed as `replicated:N` copies.
                    let how = match reason.as_str() {
                        "decommissioned" => "moved to other executors",
                        _ => "served by replicas",
                    };
                    if *outputs_from_replicas > 0 {
                        why += &format!("; {outputs_from_replicas} map output(s) {how}");
                    }
                    if *outputs_from_storage > 0 {
                        why += &format!("; {outputs_from_storage} map output(s) read from storage");
                    }
                    x.lost_reason = Some(why);
                    x.tasks_running = 0;
                }
                self.storage.executor_lost(executor_id);
            }
            AppEvent::BlockCached { .. } | AppEvent::BlocksRemoved { .. } => self.storage.apply(e),
            AppEvent::Environment {
                application,
                section,
                entries,
                ..
            } => self.environment.set(application, section, entries),
        }
    }

    fn executor_entry(&mut self, id: &str) -> &mut ExecutorInfo {
        self.executors
            .entry(id.to_string())
            .or_insert_with(|| ExecutorInfo {
                executor_id: id.to_string(),
                slots: 0,
                host: String::new(),
                memory_limit_bytes: 0,
                memory_used_bytes: 0,
                added_ms: 0,
                lost_ms: None,
                lost_reason: None,
                tasks_running: 0,
                tasks_succeeded: 0,
                tasks_failed: 0,
                shuffle_bytes_written: 0,
                shuffle_bytes_read: 0,
            })
    }

    /// `job`: its id, application and number there.
    fn job_submitted(
        &mut self,
        (job_id, application, number): (u64, &str, u64),
        description: &str,
        stages: &[StageRef],
        at: u64,
    ) {
        for s in stages {
            self.stages.entry(s.stage_id).or_insert_with(|| StageInfo {
                stage_id: s.stage_id,
                number: s.number.unwrap_or(s.stage_id),
                name: s.name.clone(),
                num_tasks: s.num_tasks,
                parents: s.parents.clone(),
                shuffle_id: s.shuffle_id,
                operators: s.operators.clone(),
                more_operators: s.more_operators,
                status: Status::Pending,
                attempts: 0,
                submitted_ms: None,
                completed_ms: None,
                tasks_running: 0,
                tasks_succeeded: 0,
                tasks_failed: 0,
                metrics: Metrics::default(),
                failure: None,
                recovered_outputs: self.early_recovered.remove(&s.stage_id).unwrap_or(0),
            });
        }
        self.jobs.insert(
            job_id,
            JobInfo {
                job_id,
                application: application.to_string(),
                number,
                description: description.to_string(),
                status: Status::Running,
                submitted_ms: at,
                completed_ms: None,
                stage_ids: stages.iter().map(|s| s.stage_id).collect(),
                skipped_stage_ids: Vec::new(),
                failure: None,
                pool: "default".into(),
                job_group: String::new(),
                pool_share: String::new(),
            },
        );
    }

    /// Keeps at most [`MAX_JOBS`] jobs: finished ones go, oldest first, with the stages
    /// (and their tasks) no kept job lists.
    fn let_old_jobs_go(&mut self) {
        while self.jobs.len() > MAX_JOBS {
            let Some(old) = self
                .jobs
                .values()
                .find(|j| j.status != Status::Running)
                .map(|j| j.job_id)
            else {
                return;
            };
            self.jobs.remove(&old);
            let kept: BTreeSet<u32> = self
                .jobs
                .values()
                .flat_map(|j| j.stage_ids.iter().copied())
                .collect();
            self.stages.retain(|id, _| kept.contains(id));
            self.tasks.retain(|id, _| kept.contains(id));
            self.task_entries = self.tasks.values().map(VecDeque::len).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(task_id: u64, stage_id: u32) -> AppEvent {
        AppEvent::TaskStarted {
            task_id,
            stage_id,
            stage_attempt: 0,
            partition: task_id as u32,
            attempt: 0,
            executor_id: "e1".into(),
            speculative: false,
            time_ms: 0,
        }
    }

    #[test]
    fn task_entries_are_bounded_over_all_stages_oldest_stage_first() {
        let mut s = AppStatus::default();
        let per_stage = MAX_TASKS_PER_STAGE as u64;
        let stages = (MAX_TASKS / MAX_TASKS_PER_STAGE) as u32 + 2;
        let mut id = 0;
        for stage in 0..stages {
            for _ in 0..per_stage {
                s.apply(&started(id, stage));
                id += 1;
            }
        }
        let kept: usize = s.tasks.values().map(VecDeque::len).sum();
        assert_eq!(kept, MAX_TASKS);
        // The two oldest stages' entries went; the newest are all there.
        assert!(!s.tasks.contains_key(&0) && !s.tasks.contains_key(&1));
        let newest = s.tasks.get(&(stages - 1)).expect("newest stage");
        assert_eq!(newest.len(), MAX_TASKS_PER_STAGE);
        assert_eq!(newest.back().map(|t| t.task_id), Some(id - 1));
    }
}
