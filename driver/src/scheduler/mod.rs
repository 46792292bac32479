//! The DAG and task scheduler: one event loop that owns all scheduling state.
//!
//! Jobs arrive as plans. The scheduler cuts each into a result stage and the
//! shuffle-map stages it needs (see [`crate::dag`]), runs parent stages first and only
//! for map partitions whose output is missing (stages whose shuffle output still exists
//! from an earlier job are skipped), and launches one task per missing partition on a
//! free executor slot, preferring executors that cache the task's input.
//!
//! Invariants:
//! - Only task ids in `running` are live; a status for any other id (an attempt the
//!   scheduler already gave up on) is ignored, so no partition counts twice.
//! - A job's result for a partition is delivered once, from its first successful attempt.
//! - Shuffle-map stages are shared by all jobs and keyed by shuffle id; their outputs
//!   live in the [`MapOutputTracker`] until an executor holding them is lost or a
//!   reducer reports them unreadable.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ember_proto::Plan;
use tracing::{debug, info};

use crate::dag::PlanIndex;
use crate::events::{JobEvent, JobFailure, SchedulerEvent, StageInfo, TaskLauncher};
use crate::map_output::MapOutputTracker;

mod completion;
mod dispatch;
mod speculation;

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Attempts per task before its job fails (Spark's `spark.task.maxFailures`).
    pub max_task_attempts: u32,
    /// Consecutive failed attempts of a stage (fetch failures) before its job fails.
    pub max_stage_attempts: u32,
    /// Failed tasks of one stage on one executor after which that executor gets no
    /// more tasks of the stage (Spark's `excludeOnFailure.stage.maxFailedTasksPerExecutor`).
    pub max_failures_per_executor_per_stage: u32,
    /// Launch a second copy of a task far slower than its stage's median
    /// (Spark's `spark.speculation`); off by default.
    pub speculation: bool,
    /// A task is "far slower" when it has run this many times the median duration of
    /// the stage's finished tasks...
    pub speculation_multiplier: f64,
    /// ...once this fraction of the stage's tasks has finished...
    pub speculation_quantile: f64,
    /// ...and for at least this long.
    pub speculation_min: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_task_attempts: 4,
            max_stage_attempts: 4,
            max_failures_per_executor_per_stage: 2,
            speculation: false,
            speculation_multiplier: 1.5,
            speculation_quantile: 0.75,
            speculation_min: Duration::from_millis(100),
        }
    }
}

/// A handle to the running scheduler loop.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: Sender<SchedulerEvent>,
}

impl SchedulerHandle {
    /// Starts the event loop on its own thread.
    pub fn start(config: SchedulerConfig, launcher: Box<dyn TaskLauncher>) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("ember-scheduler".into())
            .spawn(move || Scheduler::new(config, launcher).run(rx))
            .expect("spawn scheduler thread");
        SchedulerHandle { tx }
    }

    /// Sends an event to the loop (ignored once it has stopped).
    pub fn send(&self, event: SchedulerEvent) {
        let _ = self.tx.send(event);
    }

    /// A sender for task statuses and executor events.
    pub fn sender(&self) -> Sender<SchedulerEvent> {
        self.tx.clone()
    }

    /// Submits a plan; the job's events arrive on the returned receiver.
    pub fn submit(&self, plan: Plan, broadcasts: HashMap<u64, Vec<u8>>) -> Receiver<JobEvent> {
        let (etx, erx) = crossbeam_channel::unbounded();
        self.send(SchedulerEvent::SubmitJob {
            plan: Box::new(plan),
            broadcasts,
            events: etx,
        });
        erx
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StageKind {
    ShuffleMap(u32),
    Result(u64),
}

struct Stage {
    id: u32,
    kind: StageKind,
    rdd_id: u32,
    num_partitions: u32,
    name: String,
    /// The plan tasks of this stage are built from (latest job that needed it).
    plan: Arc<Plan>,
    index: Arc<PlanIndex>,
    broadcasts: Arc<HashMap<u64, Vec<u8>>>,
    attempt: u32,
    failed_attempts: u32,
    /// The attempt whose fetch failure was last counted in `failed_attempts`.
    last_failed_attempt: Option<u32>,
    /// Partitions of the current attempt not yet finished.
    pending: HashSet<u32>,
    running: bool,
    /// Failed attempts per partition (user errors).
    task_failures: HashMap<u32, u32>,
    /// Failed tasks per executor, and the executors that get no more of its tasks.
    executor_failures: HashMap<String, u32>,
    excluded: HashSet<String>,
    /// Run times of the current attempt's finished tasks (for speculation).
    durations: Vec<Duration>,
    /// Partitions of the current attempt that already have a speculative copy.
    speculated: HashSet<u32>,
}

struct Job {
    id: u64,
    events: Sender<JobEvent>,
    result_stage: u32,
    partitions: Vec<u32>,
    done: HashSet<u32>,
    /// (stage, partition) pairs whose accumulator updates were counted.
    counted: HashSet<(u32, u32)>,
    /// Stages this job waits on or runs.
    stages: HashSet<u32>,
    waiting: HashSet<u32>,
    reported_skipped: HashSet<u32>,
}

struct TaskRun {
    stage_id: u32,
    stage_attempt: u32,
    partition: u32,
    attempt: u32,
    executor_id: String,
    excluded: Vec<String>,
    started: Instant,
}

struct Pending {
    stage_id: u32,
    stage_attempt: u32,
    partition: u32,
    attempt: u32,
    preferred: Vec<String>,
    excluded: Vec<String>,
    /// A speculative copy: runs only on an executor not excluded, never forced.
    speculative: bool,
}

struct Executor {
    slots: u32,
    free: u32,
    shuffle_address: String,
}

struct Scheduler {
    config: SchedulerConfig,
    launcher: Box<dyn TaskLauncher>,
    next_job: u64,
    next_stage: u32,
    next_task: u64,
    stages: HashMap<u32, Stage>,
    shuffle_stage: HashMap<u32, u32>,
    jobs: HashMap<u64, Job>,
    tracker: MapOutputTracker,
    /// (rdd, partition) -> executors holding the cached block.
    cache: HashMap<(u32, u32), Vec<String>>,
    running: HashMap<u64, TaskRun>,
    /// Attempts given up on (job ended) that still hold a slot: task id -> executor.
    abandoned: HashMap<u64, String>,
    queue: VecDeque<Pending>,
    executors: HashMap<String, Executor>,
}

impl Scheduler {
    fn new(config: SchedulerConfig, launcher: Box<dyn TaskLauncher>) -> Self {
        Scheduler {
            config,
            launcher,
            next_job: 0,
            next_stage: 0,
            next_task: 0,
            stages: HashMap::new(),
            shuffle_stage: HashMap::new(),
            jobs: HashMap::new(),
            tracker: MapOutputTracker::default(),
            cache: HashMap::new(),
            running: HashMap::new(),
            abandoned: HashMap::new(),
            queue: VecDeque::new(),
            executors: HashMap::new(),
        }
    }

    fn run(mut self, rx: Receiver<SchedulerEvent>) {
        // With speculation on, the loop also wakes up to look for slow tasks.
        let tick = Duration::from_millis(100);
        loop {
            let ev = if self.config.speculation {
                match rx.recv_timeout(tick) {
                    Ok(ev) => Some(ev),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(ev) => Some(ev),
                    Err(_) => break,
                }
            };
            match ev {
                Some(SchedulerEvent::Shutdown) => break,
                Some(other) => self.handle(other),
                None => {}
            }
            if self.config.speculation {
                self.speculate();
            }
            self.dispatch();
        }
        for (job_id, job) in self.jobs.drain() {
            let _ = job.events.send(JobEvent::JobFailed {
                job_id,
                failure: JobFailure::Cancelled("scheduler shut down".into()),
            });
        }
    }

    fn handle(&mut self, ev: SchedulerEvent) {
        match ev {
            SchedulerEvent::SubmitJob {
                plan,
                broadcasts,
                events,
            } => self.submit_job(*plan, broadcasts, events),
            SchedulerEvent::CancelJob { job_id, reason } => {
                self.fail_job(job_id, JobFailure::Cancelled(reason))
            }
            SchedulerEvent::TaskFinished(status) => self.task_finished(*status),
            SchedulerEvent::ExecutorAdded {
                executor_id,
                slots,
                shuffle_address,
            } => {
                debug!(executor = %executor_id, slots, "executor added");
                self.executors.insert(
                    executor_id,
                    Executor {
                        slots,
                        free: slots,
                        shuffle_address,
                    },
                );
            }
            SchedulerEvent::ExecutorLost {
                executor_id,
                reason,
            } => self.executor_lost(&executor_id, &reason),
            SchedulerEvent::Unpersist { rdd_id } => self.cache.retain(|(r, _), _| *r != rdd_id),
            SchedulerEvent::ForgetIds { id_lo, id_hi } => self.forget_ids(id_lo, id_hi),
            SchedulerEvent::Shutdown => {}
        }
    }

    /// Drops shuffle stages (and their map outputs) and cached blocks whose ids fall in
    /// `[lo, hi)`, keeping any stage a live job still uses.
    fn forget_ids(&mut self, lo: u32, hi: u32) {
        let in_range = |id: u32| id >= lo && id < hi;
        let busy: HashSet<u32> = self
            .jobs
            .values()
            .flat_map(|j| j.stages.iter().copied())
            .collect();
        let doomed: Vec<(u32, u32)> = self
            .shuffle_stage
            .iter()
            .filter(|(sid, stage)| in_range(**sid) && !busy.contains(stage))
            .map(|(s, st)| (*s, *st))
            .collect();
        for (shuffle_id, stage_id) in doomed {
            self.shuffle_stage.remove(&shuffle_id);
            self.stages.remove(&stage_id);
            self.tracker.remove_shuffle(shuffle_id);
        }
        self.cache.retain(|(rdd, _), _| !in_range(*rdd));
        debug!(lo, hi, "forgot ids of an ended session");
    }

    fn fully_cached(&self, rdd_id: u32, num_partitions: u32) -> bool {
        (0..num_partitions).all(|p| self.cache.get(&(rdd_id, p)).is_some_and(|e| !e.is_empty()))
    }

    fn submit_job(
        &mut self,
        plan: Plan,
        broadcasts: HashMap<u64, Vec<u8>>,
        events: Sender<JobEvent>,
    ) {
        let job_id = self.next_job;
        self.next_job += 1;
        let index = match PlanIndex::new(&plan) {
            Ok(i) => Arc::new(i),
            Err(e) => {
                let _ = events.send(JobEvent::JobFailed {
                    job_id,
                    failure: JobFailure::InvalidPlan(e),
                });
                return;
            }
        };
        let final_node = index.node(plan.final_rdd).expect("checked by PlanIndex");
        let partitions: Vec<u32> = if plan.partitions.is_empty() {
            (0..final_node.num_partitions).collect()
        } else {
            let mut p = plan.partitions.clone();
            p.sort_unstable();
            p.dedup();
            if let Some(bad) = p.iter().find(|&&x| x >= final_node.num_partitions) {
                let _ = events.send(JobEvent::JobFailed {
                    job_id,
                    failure: JobFailure::InvalidPlan(format!(
                        "partition {bad} requested, but node {} has {} partitions",
                        final_node.id, final_node.num_partitions
                    )),
                });
                return;
            }
            p
        };
        let plan = Arc::new(plan);
        let broadcasts = Arc::new(broadcasts);
        let result_stage = self.new_stage(
            StageKind::Result(job_id),
            final_node.id,
            final_node.num_partitions,
            final_node.name.clone(),
            &plan,
            &index,
            &broadcasts,
        );
        // Make sure every shuffle stage of the plan exists and uses this plan.
        let mut job = Job {
            id: job_id,
            events,
            result_stage,
            partitions: partitions.clone(),
            done: HashSet::new(),
            counted: HashSet::new(),
            stages: HashSet::new(),
            waiting: HashSet::new(),
            reported_skipped: HashSet::new(),
        };
        let num_stages =
            1 + self.collect_shuffle_stages(&plan, &index, &broadcasts, plan.final_rdd, &mut job);
        let _ = job.events.send(JobEvent::Started { job_id, num_stages });
        debug!(
            job = job_id,
            stages = num_stages,
            "job submitted: {}",
            plan.description
        );
        if partitions.is_empty() {
            let _ = job.events.send(JobEvent::JobSucceeded { job_id });
            self.stages.remove(&result_stage);
            return;
        }
        job.stages.insert(result_stage);
        // Stages whose shuffle output already exists (from an earlier job) are skipped.
        let mut skipped: Vec<u32> = job
            .stages
            .iter()
            .copied()
            .filter(|s| self.stage_available(*s))
            .collect();
        skipped.sort_unstable();
        for s in skipped {
            job.reported_skipped.insert(s);
            let _ = job
                .events
                .send(JobEvent::StageSkipped(stage_info(&self.stages[&s], 0)));
        }
        self.jobs.insert(job_id, job);
        self.submit_stage(job_id, result_stage);
    }

    /// Creates (or refreshes) the shuffle-map stages behind `rdd_id`; returns how many.
    fn collect_shuffle_stages(
        &mut self,
        plan: &Arc<Plan>,
        index: &Arc<PlanIndex>,
        broadcasts: &Arc<HashMap<u64, Vec<u8>>>,
        rdd_id: u32,
        job: &mut Job,
    ) -> u32 {
        let mut count = 0;
        for sid in index.all_stage_shuffles(rdd_id) {
            let dep = index.shuffle(sid).expect("indexed").clone();
            let parent = index.node(dep.parent).expect("indexed").clone();
            let stage_id = match self.shuffle_stage.get(&sid) {
                Some(&s) => {
                    let st = self.stages.get_mut(&s).expect("stage of shuffle");
                    if !st.running {
                        st.plan = plan.clone();
                        st.index = index.clone();
                        st.broadcasts = broadcasts.clone();
                    }
                    s
                }
                None => {
                    let name = format!("{} (shuffle {sid})", parent.name);
                    let s = self.new_stage(
                        StageKind::ShuffleMap(sid),
                        parent.id,
                        parent.num_partitions,
                        name,
                        plan,
                        index,
                        broadcasts,
                    );
                    self.shuffle_stage.insert(sid, s);
                    self.tracker.register_shuffle(sid, parent.num_partitions);
                    s
                }
            };
            if job.stages.insert(stage_id) {
                count += 1 + self.collect_shuffle_stages(plan, index, broadcasts, parent.id, job);
            }
        }
        count
    }

    #[allow(clippy::too_many_arguments)]
    fn new_stage(
        &mut self,
        kind: StageKind,
        rdd_id: u32,
        num_partitions: u32,
        name: String,
        plan: &Arc<Plan>,
        index: &Arc<PlanIndex>,
        broadcasts: &Arc<HashMap<u64, Vec<u8>>>,
    ) -> u32 {
        let id = self.next_stage;
        self.next_stage += 1;
        self.stages.insert(
            id,
            Stage {
                id,
                kind,
                rdd_id,
                num_partitions,
                name,
                plan: plan.clone(),
                index: index.clone(),
                broadcasts: broadcasts.clone(),
                attempt: 0,
                failed_attempts: 0,
                last_failed_attempt: None,
                pending: HashSet::new(),
                running: false,
                task_failures: HashMap::new(),
                executor_failures: HashMap::new(),
                excluded: HashSet::new(),
                durations: Vec::new(),
                speculated: HashSet::new(),
            },
        );
        id
    }

    /// Shuffle stages that `stage_id` reads and whose output is incomplete.
    fn missing_parents(&self, stage_id: u32) -> Vec<u32> {
        let st = &self.stages[&stage_id];
        let cached =
            |n: &ember_proto::RddNode| n.storage != 0 && self.fully_cached(n.id, n.num_partitions);
        st.index
            .parent_shuffles(st.rdd_id, &cached)
            .into_iter()
            .filter(|sid| !self.tracker.is_available(*sid))
            .filter_map(|sid| self.shuffle_stage.get(&sid).copied())
            .collect()
    }

    fn stage_available(&self, stage_id: u32) -> bool {
        match self.stages[&stage_id].kind {
            StageKind::ShuffleMap(sid) => self.tracker.is_available(sid),
            StageKind::Result(_) => false,
        }
    }

    fn submit_stage(&mut self, job_id: u64, stage_id: u32) {
        if !self.jobs.contains_key(&job_id) {
            return;
        }
        if self.stage_available(stage_id) {
            let job = self.jobs.get_mut(&job_id).expect("job");
            if job.reported_skipped.insert(stage_id) {
                let st = &self.stages[&stage_id];
                let _ = job.events.send(JobEvent::StageSkipped(stage_info(st, 0)));
            }
            return;
        }
        if self.stages[&stage_id].running {
            self.jobs
                .get_mut(&job_id)
                .expect("job")
                .waiting
                .insert(stage_id);
            return;
        }
        let missing = self.missing_parents(stage_id);
        if missing.is_empty() {
            self.submit_tasks(job_id, stage_id);
        } else {
            self.jobs
                .get_mut(&job_id)
                .expect("job")
                .waiting
                .insert(stage_id);
            for parent in missing {
                self.submit_stage(job_id, parent);
            }
        }
    }

    fn submit_tasks(&mut self, job_id: u64, stage_id: u32) {
        let partitions: Vec<u32> = match self.stages[&stage_id].kind {
            StageKind::ShuffleMap(sid) => self.tracker.missing(sid),
            StageKind::Result(_) => {
                let job = &self.jobs[&job_id];
                job.partitions
                    .iter()
                    .copied()
                    .filter(|p| !job.done.contains(p))
                    .collect()
            }
        };
        let preferred: Vec<Vec<String>> = {
            let st = &self.stages[&stage_id];
            let persisted: Vec<u32> = st
                .index
                .persisted_nodes(st.rdd_id)
                .iter()
                .map(|n| n.id)
                .collect();
            partitions
                .iter()
                .map(|p| {
                    persisted
                        .iter()
                        .filter_map(|r| self.cache.get(&(*r, *p)))
                        .flatten()
                        .cloned()
                        .collect()
                })
                .collect()
        };
        let st = self.stages.get_mut(&stage_id).expect("stage");
        st.attempt += 1;
        st.running = true;
        st.pending = partitions.iter().copied().collect();
        st.durations.clear();
        st.speculated.clear();
        let info = stage_info(st, partitions.len() as u32);
        if partitions.len() as u32 == st.num_partitions {
            info!(
                stage = stage_id,
                attempt = st.attempt,
                "submitting stage {}: all {} partitions",
                st.name,
                partitions.len()
            );
        } else {
            info!(
                stage = stage_id,
                attempt = st.attempt,
                "submitting stage {}: {} of {} partitions {:?}",
                st.name,
                partitions.len(),
                st.num_partitions,
                partitions
            );
        }
        for (partition, preferred) in partitions.into_iter().zip(preferred) {
            self.queue.push_back(Pending {
                stage_id,
                stage_attempt: st.attempt,
                partition,
                attempt: 0,
                preferred,
                excluded: Vec::new(),
                speculative: false,
            });
        }
        let job = self.jobs.get_mut(&job_id).expect("job");
        job.waiting.remove(&stage_id);
        let _ = job.events.send(JobEvent::StageSubmitted(info.clone()));
        // Other jobs waiting on the same shuffle stage see it submitted too.
        for (jid, other) in &mut self.jobs {
            if *jid != job_id && other.waiting.contains(&stage_id) {
                let _ = other.events.send(JobEvent::StageSubmitted(info.clone()));
            }
        }
    }
}

fn stage_info(st: &Stage, tasks_to_run: u32) -> StageInfo {
    StageInfo {
        stage_id: st.id,
        name: st.name.clone(),
        num_tasks: st.num_partitions,
        tasks_to_run,
        attempt: st.attempt,
    }
}

#[cfg(test)]
mod tests;
