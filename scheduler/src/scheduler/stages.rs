//! Turning a submitted plan into stages and queued tasks: the result stage and the
//! shuffle-map stages it needs (shared with other jobs by shuffle id), parents first and
//! only for missing map outputs, with preferred executors from the cache.
//!
//! Invariants: a stage attempt queues exactly its missing partitions; a stage whose
//! shuffle output is complete is reported skipped, not run; a waiting stage is
//! submitted once its parents' outputs are all available.

use std::collections::HashSet;
use std::sync::Arc;

use ember_proto::Plan;
use tracing::{debug, info, warn};

use super::{Job, Pending, Scheduler, Stage, StageKind, StageState};
use crate::dag::PlanIndex;
use crate::events::{Broadcasts, JobEvent, JobEventSender, JobFailure, StageInfo};
use crate::limits::{check_plan, for_log};
use crate::listener::{now_ms, ListenerEvent, StageDesc, StageOperator, MAX_STAGE_OPERATORS};

impl Scheduler {
    pub(super) fn fully_cached(&self, rdd_id: u32, num_partitions: u32) -> bool {
        (0..num_partitions).all(|p| self.cache.get(&(rdd_id, p)).is_some_and(|e| !e.is_empty()))
    }

    pub(super) fn submit_job(
        &mut self,
        plan: Plan,
        broadcasts: Broadcasts,
        events: JobEventSender,
    ) {
        #[cfg(debug_assertions)]
        if std::env::var(super::TEST_PANIC_ENV).is_ok_and(|d| d == plan.description) {
            panic!(
                "test hook: the plan's description matches {}",
                super::TEST_PANIC_ENV
            );
        }
        let job_id = self.next_job;
        self.next_job += 1;
        self.idle_released = false;
        let number = {
            let app = self.apps.entry(plan.application.clone()).or_default();
            app.jobs += 1;
            app.jobs - 1
        };
        let refuse = |reason: String| {
            let _ = events.send(JobEvent::JobFailed {
                job_id,
                failure: JobFailure::InvalidPlan(reason),
            });
        };
        // Sizes first: nothing below allocates more than the limits allow.
        if let Err(e) = check_plan(&plan, &self.config.limits) {
            return refuse(e.to_string());
        }
        let index = match PlanIndex::new(&plan).and_then(|i| {
            self.check_known_shuffles(&i)?;
            Ok(i)
        }) {
            Ok(i) => Arc::new(i),
            Err(e) => return refuse(e),
        };
        let Some(final_node) = index.node(plan.final_rdd) else {
            return refuse(format!("final node {} is not in the plan", plan.final_rdd));
        };
        let partitions: Vec<u32> = if plan.partitions.is_empty() {
            (0..final_node.num_partitions).collect()
        } else {
            let mut p = plan.partitions.clone();
            p.sort_unstable();
            p.dedup();
            if let Some(bad) = p.iter().find(|&&x| x >= final_node.num_partitions) {
                return refuse(format!(
                    "partition {bad} requested, but node {} has {} partitions",
                    final_node.id, final_node.num_partitions
                ));
            }
            p
        };
        let (num, rdd) = (final_node.num_partitions, final_node.id);
        if let Some(why) = super::barrier::partial_barrier_job(&index, rdd, partitions.len(), num) {
            return refuse(why);
        }
        let plan = Arc::new(plan);
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
            application: Arc::from(plan.application.as_str()),
            properties: plan.properties.clone().unwrap_or_default(),
            events,
            result_stage,
            partitions: partitions.clone(),
            done: HashSet::new(),
            result_bytes: 0,
            counted: HashSet::new(),
            stages: HashSet::new(),
            waiting: HashSet::new(),
            reported_skipped: HashSet::new(),
        };
        let num_stages =
            1 + self.collect_shuffle_stages(&plan, &index, &broadcasts, plan.final_rdd, &mut job);
        let result_number = self.next_stage_number(&plan.application);
        if let Some(st) = self.stages.get_mut(&result_stage) {
            st.number = result_number;
        }
        let _ = job.events.send(JobEvent::Started {
            job_id,
            number,
            num_stages,
        });
        self.listeners.emit(|| {
            let mut ids: Vec<u32> = job.stages.iter().copied().collect();
            ids.sort_unstable();
            ids.push(result_stage);
            ListenerEvent::JobSubmitted {
                job_id,
                application: plan.application.clone(),
                number,
                description: plan.description.clone(),
                stages: ids.iter().filter_map(|s| self.stage_desc(*s)).collect(),
                pool: crate::pools::PoolKey::new("", &job.properties.pool)
                    .pool
                    .to_string(),
                job_group: job.properties.job_group.clone(),
                pool_share: self.pool_share(&job.properties.pool),
                time_ms: now_ms(),
            }
        });
        debug!(
            job = number,
            job_id,
            stages = num_stages,
            "job submitted: {}",
            plan.description
        );
        if partitions.is_empty() {
            // A result stage of no partitions (an RDD over an empty input): nothing to
            // run, not even its parents.
            let _ = job.events.send(JobEvent::JobSucceeded { job_id });
            self.listeners.emit(|| ListenerEvent::JobEnded {
                job_id,
                succeeded: true,
                failure: None,
                time_ms: now_ms(),
            });
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
            if let Some(st) = self.stages.get(&s) {
                let _ = job.events.send(JobEvent::StageSkipped(stage_info(st, 0)));
                self.listeners.emit(|| ListenerEvent::StageSkipped {
                    job_id,
                    stage_id: s,
                });
            }
        }
        self.jobs.insert(job_id, job);
        self.submit_stage(job_id, result_stage);
    }

    /// Creates (or refreshes) the shuffle-map stages behind `rdd_id`; returns how many.
    fn collect_shuffle_stages(
        &mut self,
        plan: &Arc<Plan>,
        index: &Arc<PlanIndex>,
        broadcasts: &Broadcasts,
        rdd_id: u32,
        job: &mut Job,
    ) -> u32 {
        let mut count = 0;
        // A work list of stage roots, not recursion: lineages run thousands of stages deep.
        let mut roots = vec![rdd_id];
        while let Some(rdd_id) = roots.pop() {
            for sid in index.all_stage_shuffles(rdd_id) {
                // PlanIndex checked that every shuffle and its parent exist.
                let Some(dep) = index.shuffle(sid) else {
                    continue;
                };
                let Some(parent) = index.node(dep.parent).cloned() else {
                    continue;
                };
                let known = self.shuffle_stage.get(&sid).copied();
                let stage_id = match known.and_then(|s| self.stages.get_mut(&s)) {
                    Some(st) => {
                        if !st.is_running() {
                            st.replan(plan.clone(), index.clone(), broadcasts.clone());
                        }
                        st.id
                    }
                    None => {
                        // Named as Spark names a map stage: the operator and call site of
                        // its last RDD (the shuffle's id is internal).
                        let name = parent.name.clone();
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
                        // Outputs executors reported holding (a driver restart).
                        self.adopt_held(sid);
                        // A stage of no partitions has all its outputs from the start.
                        self.refresh_map_stage(sid);
                        s
                    }
                };
                if job.stages.insert(stage_id) {
                    count += 1;
                    roots.push(parent.id);
                }
            }
        }
        count
    }

    /// A shuffle id the scheduler already knows (from an earlier job) must still be
    /// written by the same node with the same partitions: its map outputs are reused.
    fn check_known_shuffles(&self, index: &PlanIndex) -> Result<(), String> {
        for dep in index.shuffles() {
            let Some(st) = self
                .shuffle_stage
                .get(&dep.shuffle_id)
                .and_then(|s| self.stages.get(s))
            else {
                continue;
            };
            let parts = index.node(dep.parent).map_or(0, |n| n.num_partitions);
            if st.rdd_id != dep.parent || st.num_partitions != parts {
                return Err(format!(
                    "shuffle {} was written by node {} with {} partitions in an earlier job, \
                     but this plan writes it from node {} with {parts}",
                    dep.shuffle_id, st.rdd_id, st.num_partitions, dep.parent
                ));
            }
        }
        Ok(())
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
        broadcasts: &Broadcasts,
    ) -> u32 {
        let id = self.next_stage;
        self.next_stage += 1;
        let mut stage = Stage::new(
            id,
            kind,
            rdd_id,
            num_partitions,
            name,
            plan.clone(),
            index.clone(),
            broadcasts.clone(),
        );
        if let StageKind::ShuffleMap(_) = kind {
            stage.number = self.next_stage_number(&plan.application);
        } // A result stage is numbered after its parents, as Spark numbers them.
        self.stages.insert(id, stage);
        id
    }

    /// The next stage number of `application`.
    fn next_stage_number(&mut self, application: &str) -> u32 {
        let app = match self.apps.get_mut(application) {
            Some(app) => app,
            None => self.apps.entry(application.to_string()).or_default(),
        };
        app.stages += 1;
        app.stages - 1
    }

    /// Shuffle stages that `stage_id` reads and whose output is incomplete.
    fn missing_parents(&self, stage_id: u32) -> Vec<u32> {
        let Some(st) = self.stages.get(&stage_id) else {
            return Vec::new();
        };
        let cached =
            |n: &ember_proto::RddNode| n.storage != 0 && self.fully_cached(n.id, n.num_partitions);
        st.index
            .parent_shuffles(st.rdd_id, &cached)
            .into_iter()
            .filter(|sid| !self.tracker.is_available(*sid))
            .filter_map(|sid| self.shuffle_stage.get(&sid).copied())
            .collect()
    }

    /// A shuffle-map stage whose every output exists (always true for a stage of no
    /// partitions: its reducers read nothing).
    fn stage_available(&self, stage_id: u32) -> bool {
        let Some(st) = self.stages.get(&stage_id) else {
            return false;
        };
        match st.kind {
            StageKind::ShuffleMap(sid) => {
                debug_assert_eq!(
                    st.is_available(),
                    self.tracker.is_available(sid),
                    "stage {stage_id} is {:?} but the tracker disagrees",
                    st.state
                );
                st.is_available()
            }
            StageKind::Result(_) => false,
        }
    }

    /// Brings a shuffle-map stage's state in line with the tracker after outputs were
    /// registered or removed: `Available` when every output exists, `Waiting` once one
    /// is lost. A running attempt finishes through its pending set instead.
    pub(super) fn refresh_map_stage(&mut self, shuffle_id: u32) {
        let available = self.tracker.is_available(shuffle_id);
        let Some(st) = self
            .shuffle_stage
            .get(&shuffle_id)
            .and_then(|s| self.stages.get_mut(s))
        else {
            return;
        };
        match (&st.state, available) {
            (StageState::Available, false) => st.state = StageState::Waiting,
            (StageState::Waiting | StageState::Failed, true) => st.state = StageState::Available,
            _ => {}
        }
    }

    /// Runs `stage_id` if its inputs are complete, else marks it waiting and submits
    /// its missing parents the same way (depth first, parents in shuffle-id order). A
    /// work list, not recursion: a lineage thousands of stages deep must not exhaust
    /// the scheduler thread's stack.
    pub(super) fn submit_stage(&mut self, job_id: u64, stage_id: u32) {
        let mut todo = vec![stage_id];
        while let Some(stage_id) = todo.pop() {
            let missing = self.submit_one(job_id, stage_id);
            todo.extend(missing.into_iter().rev());
        }
    }

    /// One step of [`submit_stage`](Self::submit_stage): the parents still to submit.
    fn submit_one(&mut self, job_id: u64, stage_id: u32) -> Vec<u32> {
        let Some(st) = self.stages.get(&stage_id) else {
            warn!(job = job_id, stage_id, "cannot submit an unknown stage");
            return Vec::new();
        };
        let running = st.is_running();
        let available = self.stage_available(stage_id);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Vec::new();
        };
        if available {
            if job.reported_skipped.insert(stage_id) {
                let _ = job.events.send(JobEvent::StageSkipped(stage_info(st, 0)));
                self.listeners
                    .emit(|| ListenerEvent::StageSkipped { job_id, stage_id });
            }
            return Vec::new();
        }
        if running {
            job.waiting.insert(stage_id);
            return Vec::new();
        }
        let missing = self.missing_parents(stage_id);
        if missing.is_empty() {
            self.submit_tasks(job_id, stage_id);
        } else if let Some(job) = self.jobs.get_mut(&job_id) {
            job.waiting.insert(stage_id);
        }
        missing
    }

    pub(super) fn submit_tasks(&mut self, job_id: u64, stage_id: u32) {
        // A barrier map stage reruns every partition (a no-op for other stages).
        self.reset_barrier_outputs(stage_id);
        let (Some(st), Some(job)) = (self.stages.get(&stage_id), self.jobs.get(&job_id)) else {
            warn!(
                job_id,
                stage_id, "cannot submit tasks of an unknown stage or job"
            );
            return;
        };
        // It queues in the pool of the earliest job that needs it (Spark's
        // `activeJobForStage`), in that job's place in FIFO order.
        let owner = self
            .jobs
            .values()
            .filter(|j| j.id == job_id || j.stages.contains(&stage_id))
            .min_by_key(|j| j.id)
            .unwrap_or(job);
        let (pool, priority) = (
            crate::pools::PoolKey::new(&owner.application, &owner.properties.pool),
            owner.id,
        );
        let partitions: Vec<u32> = match st.kind {
            StageKind::ShuffleMap(sid) => {
                // Known since the stage was created; registering again is a no-op.
                self.tracker.register_shuffle(sid, st.num_partitions);
                self.tracker.missing(sid)
            }
            StageKind::Result(_) => job
                .partitions
                .iter()
                .copied()
                .filter(|p| !job.done.contains(p))
                .collect(),
        };
        // A stage over a local checkpoint runs its tasks only where their blocks are.
        let pinned = st.index.persisted_nodes(st.rdd_id).iter().any(|n| n.pinned);
        let preferred: Vec<Vec<String>> = {
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
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        let attempt = st.start_attempt(partitions.iter().copied());
        st.pool = pool;
        st.priority = priority;
        let info = stage_info(st, partitions.len() as u32);
        // The shuffle a map stage writes (its name no longer carries it).
        let shuffle = match st.kind {
            StageKind::ShuffleMap(sid) => Some(sid),
            StageKind::Result(_) => None,
        };
        if partitions.len() as u32 == st.num_partitions {
            info!(
                stage = st.number,
                stage_id,
                shuffle,
                attempt,
                "submitting stage {}: all {} partitions",
                for_log(&st.name),
                partitions.len()
            );
        } else {
            info!(
                stage = st.number,
                stage_id,
                shuffle,
                attempt,
                "submitting stage {}: {} of {} partitions {:?}",
                for_log(&st.name),
                partitions.len(),
                st.num_partitions,
                partitions
            );
        }
        let (kind, barrier) = (st.kind, st.barrier);
        let no_tasks = partitions.is_empty();
        if barrier && !no_tasks {
            // All at once, once enough slots are free (`barrier/`), never queued.
            self.start_gang(stage_id, attempt, preferred);
        } else {
            for (partition, preferred) in partitions.into_iter().zip(preferred) {
                self.queue.push_back(Pending {
                    stage_id,
                    stage_attempt: attempt,
                    partition,
                    attempt: 0,
                    pinned: pinned && !preferred.is_empty(),
                    preferred,
                    excluded: Vec::new(),
                    speculative: false,
                });
            }
        }
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.waiting.remove(&stage_id);
            let _ = job.events.send(JobEvent::StageSubmitted(info.clone()));
            self.listeners.emit(|| ListenerEvent::StageSubmitted {
                stage_id,
                attempt,
                tasks: info.tasks_to_run,
                time_ms: now_ms(),
            });
        }
        // Other jobs waiting on the same shuffle stage see it submitted too.
        for (jid, other) in &mut self.jobs {
            if *jid != job_id && other.waiting.contains(&stage_id) {
                let _ = other.events.send(JobEvent::StageSubmitted(info.clone()));
            }
        }
        if no_tasks {
            // Nothing to run: the stage is done as soon as it starts.
            match kind {
                StageKind::ShuffleMap(sid) => self.map_stage_finished(stage_id, sid),
                StageKind::Result(job_id) => self.result_stage_finished(job_id, stage_id),
            }
        }
    }
}

impl Scheduler {
    /// A stage as the listeners' DAG shows it.
    fn stage_desc(&self, stage_id: u32) -> Option<StageDesc> {
        let st = self.stages.get(&stage_id)?;
        let mut parents: Vec<u32> = st
            .reads
            .iter()
            .filter_map(|sid| self.shuffle_stage.get(sid).copied())
            .collect();
        parents.sort_unstable();
        let nodes = st.index.stage_nodes(st.rdd_id);
        let more_operators = nodes.len().saturating_sub(MAX_STAGE_OPERATORS) as u32;
        let operators = (nodes.iter().take(MAX_STAGE_OPERATORS))
            .map(|n| StageOperator {
                rdd_id: n.id,
                name: n.name.clone(),
                cached: n.storage != 0,
            })
            .collect();
        Some(StageDesc {
            stage_id,
            number: st.number,
            name: st.name.clone(),
            num_tasks: st.num_partitions,
            parents,
            shuffle_id: match st.kind {
                StageKind::ShuffleMap(sid) => Some(sid),
                StageKind::Result(_) => None,
            },
            operators,
            more_operators,
        })
    }
}

fn stage_info(st: &Stage, tasks_to_run: u32) -> StageInfo {
    StageInfo {
        stage_id: st.number,
        name: st.name.clone(),
        num_tasks: st.num_partitions,
        tasks_to_run,
        attempt: st.attempts,
    }
}
