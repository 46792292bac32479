//! The DAG and task scheduler: one event loop that owns all scheduling state.
//!
//! Jobs arrive as plans. The scheduler cuts each into a result stage and the
//! shuffle-map stages it needs (see [`crate::dag`]), runs parent stages first and only
//! for map partitions whose output is missing (stages whose shuffle output still exists
//! from an earlier job are skipped), and launches one task per missing partition on a
//! free executor slot, preferring executors that cache the task's input.
//!
//! Invariants:
//! - Nothing a plan or a task status says can make the loop panic: plans are bounded
//!   and checked before anything is allocated, statuses are checked before they
//!   count, and state lookups tolerate stale ids. Should the loop panic anyway, every
//!   job fails with the reason and the owner's panic handler runs (see
//!   [`SchedulerHandle::start_with_panic_handler`]).
//! - Only task ids in `running` are live; a status for any other id (an attempt the
//!   scheduler already gave up on) is ignored, so no partition counts twice.
//! - A job's result for a partition is delivered once, from its first successful attempt.
//! - Shuffle-map stages are shared by all jobs and keyed by shuffle id; their outputs
//!   live in the [`MapOutputTracker`] until an executor holding them is lost, a
//!   reducer reports them unreadable, or the client releases the shuffle
//!   ([`SchedulerEvent::RemoveShuffles`]).
//! - A released shuffle is forgotten, and its files deleted through
//!   [`TaskLauncher::remove_shuffles`], only once no live job uses its stage; until
//!   then it waits in `released`. Files a late attempt writes for a shuffle already
//!   forgotten are deleted when its status arrives.

use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ember_proto::Plan;
use tracing::error;

use crate::events::{
    Broadcasts, JobEvent, JobEventSender, JobFailure, SchedulerEvent, TaskLauncher,
};
use crate::listener::{now_ms, ListenerEvent, Listeners};
use crate::map_output::MapOutputTracker;
pub use config::SchedulerConfig;
use stage::{Stage, StageKind, StageState};

mod barrier; // barrier stages: gang launch, rendezvous, Spark's failure rule
mod cancel; // job groups, cancellation and how cancelled tasks stop
mod completion; // task statuses taken in, successful attempts
mod config; // the scheduler's settings
mod decommission; // executors leaving gracefully: drain, then move their map outputs
mod dispatch; // placing queued tasks on free slots
mod failure; // failed attempts, fetch failures, lost executors
mod fair; // which queued stage the next free slot goes to (pools, quotas)
mod idle; // giving memory back once no job is left
mod job_end; // stages and jobs finishing or failing
mod queue; // queued tasks, one queue per stage
mod recovery; // executors joining, and the map outputs they report holding
mod release; // released shuffles and ended sessions' ids forgotten
mod speculation; // second copies of slow tasks
mod stage; // a stage and its lifecycle state
mod stages; // plans into stages and queued tasks

/// Called once, with the reason, if the scheduler thread panics.
pub type PanicHandler = Box<dyn FnOnce(String) + Send>;

/// Debug builds only: a job whose plan description equals this variable's value makes
/// the scheduler thread panic (for tests of what follows a scheduler panic).
pub const TEST_PANIC_ENV: &str = "EMBER_DRIVER_TEST_PANIC";

/// A handle to the running scheduler loop.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: Sender<SchedulerEvent>,
    listeners: Listeners,
    /// Tasks waiting for a free slot (after the loop's last step).
    queued: Arc<std::sync::atomic::AtomicUsize>,
    /// Entries the per-task and per-job maps have room for (after the loop's last step).
    task_capacity: Arc<std::sync::atomic::AtomicUsize>,
    /// Set (to the reason) once the scheduler thread has panicked.
    failed: Arc<OnceLock<String>>,
}

impl SchedulerHandle {
    /// Starts the event loop on its own thread.
    pub fn start(config: SchedulerConfig, launcher: Box<dyn TaskLauncher>) -> Self {
        Self::start_with_panic_handler(config, launcher, Box::new(|_| {}))
    }

    /// Starts the event loop on its own thread; if it panics, every job it knows (and
    /// every job submitted later) fails with the reason, and `on_panic` is called with
    /// it (the driver daemon exits then: its state can no longer be trusted).
    pub fn start_with_panic_handler(
        config: SchedulerConfig,
        launcher: Box<dyn TaskLauncher>,
        on_panic: PanicHandler,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let failed = Arc::new(OnceLock::new());
        let failed_in_thread = failed.clone();
        let listeners = Listeners::default();
        let listeners_in_thread = listeners.clone();
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let queued_in_thread = queued.clone();
        let task_capacity = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let task_capacity_in_thread = task_capacity.clone();
        std::thread::Builder::new()
            .name("ember-scheduler".into())
            .spawn(move || {
                let mut scheduler = Scheduler::new(config, launcher, listeners_in_thread);
                scheduler.queued = queued_in_thread;
                scheduler.task_capacity = task_capacity_in_thread;
                let outcome = catch_unwind(AssertUnwindSafe(|| scheduler.run(&rx)));
                let Err(payload) = outcome else {
                    return;
                };
                let reason = format!(
                    "the scheduler thread panicked: {}",
                    panic_message(payload.as_ref())
                );
                error!("{reason}");
                let _ = failed_in_thread.set(reason.clone());
                // Best effort: the state may be inconsistent after the panic.
                let _ = catch_unwind(AssertUnwindSafe(|| scheduler.fail_all(&reason)));
                for ev in rx.try_iter() {
                    if let SchedulerEvent::SubmitJob { events, .. } = ev {
                        fail_at_once(&events, &reason);
                    }
                }
                on_panic(reason);
            })
            .expect("spawn scheduler thread");
        SchedulerHandle {
            tx,
            listeners,
            queued,
            task_capacity,
            failed,
        }
    }

    /// Tasks waiting for a free slot, as of the loop's last step (for metrics).
    pub fn queued_tasks(&self) -> usize {
        self.queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entries the scheduler's per-task and per-job maps (running and queued tasks,
    /// their copies, jobs) have room for, as of the loop's last step: back near zero
    /// once no job is left, however many tasks the jobs had.
    pub fn task_capacity(&self) -> usize {
        self.task_capacity
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every [`ListenerEvent`] from now on (for the UI, the event log, metrics).
    pub fn listen(&self) -> Receiver<ListenerEvent> {
        self.listeners.subscribe()
    }

    /// Why the scheduler thread stopped, if it panicked.
    pub fn failure(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
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
        let broadcasts = broadcasts
            .into_iter()
            .map(|(id, v)| (id, bytes::Bytes::from(v)))
            .collect();
        self.submit_to(plan, Arc::new(broadcasts), etx.into());
        erx
    }

    /// Submits a plan whose broadcasts are shared with other jobs (not copied); the
    /// job's events go to `events`.
    pub fn submit_to(&self, plan: Plan, broadcasts: Broadcasts, events: JobEventSender) {
        if let Some(reason) = self.failed.get() {
            fail_at_once(&events, reason);
            return;
        }
        self.send(SchedulerEvent::SubmitJob {
            plan: Box::new(plan),
            broadcasts,
            events,
        });
    }
}

struct Job {
    id: u64,
    /// Its session's application (`Plan.application`; empty in local mode).
    application: Arc<str>,
    /// Its pool and job group (`Plan.properties`).
    properties: ember_proto::JobProperties,
    events: JobEventSender,
    result_stage: u32,
    partitions: Vec<u32>,
    done: HashSet<u32>,
    /// Bytes of the results delivered so far (bounded by `max_result_bytes`).
    result_bytes: u64,
    /// (stage, partition) pairs whose accumulator updates were counted.
    counted: HashSet<(u32, u32)>,
    /// Stages this job waits on or runs.
    stages: HashSet<u32>,
    waiting: HashSet<u32>,
    reported_skipped: HashSet<u32>,
}

struct TaskRun {
    task_id: u64,
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
    /// Runs only on a `preferred` executor while one of them is alive (a local
    /// checkpoint's blocks exist nowhere else).
    pinned: bool,
    excluded: Vec<String>,
    /// A speculative copy: runs only on an executor not excluded, never forced.
    speculative: bool,
}

/// A persisted RDD as its cached blocks' events name it.
#[derive(Clone)]
struct CachedRdd {
    application: String,
    name: String,
    num_partitions: u32,
    storage: i32,
}

impl CachedRdd {
    /// The listeners' event for its `partition` cached on `executor_id` (taking
    /// `memory_bytes` and `disk_bytes` there), moved from `moved_from` or computed there
    /// (empty).
    fn block_cached(
        &self,
        rdd_id: u32,
        partition: u32,
        executor_id: String,
        (memory_bytes, disk_bytes): (u64, u64),
        moved_from: String,
    ) -> ListenerEvent {
        ListenerEvent::BlockCached {
            application: self.application.clone(),
            rdd_id,
            rdd_name: self.name.clone(),
            num_partitions: self.num_partitions,
            storage: self.storage,
            partition,
            executor_id,
            memory_bytes,
            disk_bytes,
            moved_from,
            time_ms: now_ms(),
        }
    }
}

struct Executor {
    slots: u32,
    /// Tasks launched there and not finished (at most `slots` x the pipeline depth).
    in_flight: u32,
    /// Its key in `Scheduler::room` (`in_flight / slots + 1`), 0 when not filed there.
    level: u32,
    shuffle_address: String,
    host: String,
}

/// The next job and stage numbers of one application (`Plan.application`).
#[derive(Default)]
struct AppNumbers {
    jobs: u64,
    stages: u32,
}

struct Scheduler {
    config: SchedulerConfig,
    launcher: Box<dyn TaskLauncher>,
    next_job: u64,
    next_stage: u32,
    /// Per-application numbering of jobs and stages, until the application ends.
    apps: HashMap<String, AppNumbers>,
    next_task: u64,
    stages: HashMap<u32, Stage>,
    shuffle_stage: HashMap<u32, u32>,
    jobs: HashMap<u64, Job>,
    tracker: MapOutputTracker,
    /// Reported outputs of shuffles no stage knows yet (a driver restarted).
    held: recovery::Held,
    /// (rdd, partition) -> executors holding the cached block.
    cache: HashMap<(u32, u32), Vec<String>>,
    /// A queued task waited for a slot where its input is cached (delay scheduling) in
    /// the last dispatch: the loop wakes up again to look, as with speculation.
    locality_waiting: bool,
    /// What the listeners are told of a cached RDD, from the plan that first cached
    /// one of its blocks (while `cache` holds any).
    cached_rdds: HashMap<u32, CachedRdd>,
    running: HashMap<u64, TaskRun>,
    /// Running attempts per (stage, partition), as in `running`: a finished task
    /// looks for other copies to kill only where there are some.
    copies: HashMap<(u32, u32), u32>,
    /// Attempts given up on (job ended) that still hold a slot: task id -> executor.
    abandoned: HashMap<u64, String>,
    /// Attempts whose slot their executor gave back early (`SlotReleased`: a map
    /// task's output being pushed to replicas), by task id: their status frees nothing.
    slots_given_back: HashMap<u64, String>,
    queue: queue::TaskQueues,
    /// Barrier stages whose running attempt waits for enough free slots to launch all
    /// its tasks at once (oldest first; see `barrier/launch.rs`).
    gangs: VecDeque<u32>,
    /// Sessions (applications) with a barrier stage waiting for room under
    /// `max_cores_per_session`: their ordinary tasks wait too (`fair.rs`).
    held_for_gangs: HashSet<Arc<str>>,
    executors: HashMap<String, Executor>,
    /// Every executor with slots, by the lowest pipeline level it has room at, then
    /// id: dispatch reads the executors with room without scanning them all.
    room: std::collections::BTreeSet<(u32, String)>,
    /// Shuffles the client released that a live job still uses.
    released: HashSet<u32>,
    listeners: Listeners,
    /// `queue.len()` for the handle (see `SchedulerHandle::queued_tasks`).
    queued: Arc<std::sync::atomic::AtomicUsize>,
    /// For the handle (see `SchedulerHandle::task_capacity`).
    task_capacity: Arc<std::sync::atomic::AtomicUsize>,
    /// The maps were shrunk since the last job ended (reset by a submission).
    idle_released: bool,
}

impl Scheduler {
    fn new(config: SchedulerConfig, launcher: Box<dyn TaskLauncher>, listeners: Listeners) -> Self {
        Scheduler {
            listeners,
            queued: Arc::default(),
            task_capacity: Arc::default(),
            idle_released: true,
            config,
            launcher,
            next_job: 0,
            next_stage: 0,
            apps: HashMap::new(),
            next_task: 0,
            stages: HashMap::new(),
            shuffle_stage: HashMap::new(),
            jobs: HashMap::new(),
            tracker: MapOutputTracker::default(),
            held: Default::default(),
            cache: HashMap::new(),
            cached_rdds: HashMap::new(),
            locality_waiting: false,
            running: HashMap::new(),
            copies: HashMap::new(),
            abandoned: HashMap::new(),
            slots_given_back: HashMap::new(),
            queue: Default::default(),
            gangs: VecDeque::new(),
            held_for_gangs: HashSet::new(),
            executors: HashMap::new(),
            room: Default::default(),
            released: HashSet::new(),
        }
    }

    fn run(&mut self, rx: &Receiver<SchedulerEvent>) {
        // Events taken in per pass at most, so a flood of statuses still gets its
        // tasks launched (and speculation checked) regularly.
        const DRAIN_PER_PASS: usize = 1024;
        // With speculation on, or a task waiting for a slot where its input is cached,
        // the loop also wakes up to look again.
        let tick = Duration::from_millis(100);
        loop {
            let ev = if self.config.speculation || self.locality_waiting {
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
            // Take in what else has arrived before placing tasks, so one pass launches
            // the tasks of many statuses (and the launcher can batch them).
            let mut shutdown = false;
            for _ in 0..DRAIN_PER_PASS {
                match rx.try_recv() {
                    Ok(SchedulerEvent::Shutdown) => {
                        shutdown = true;
                        break;
                    }
                    Ok(other) => self.handle(other),
                    Err(_) => break,
                }
            }
            if !self.released.is_empty() {
                self.remove_released();
            }
            if self.config.speculation {
                self.speculate();
            }
            self.dispatch();
            // Counted before the launches go out: whoever sees a launch sees the count.
            let queued = self.queue.len() + self.waiting_gang_tasks();
            self.queued
                .store(queued, std::sync::atomic::Ordering::Relaxed);
            self.release_if_idle();
            self.task_capacity.store(
                self.held_task_capacity(),
                std::sync::atomic::Ordering::Relaxed,
            );
            self.launcher.flush();
            if shutdown {
                break;
            }
        }
        self.fail_all("scheduler shut down");
    }

    /// Takes task `task_id` out of `running`, keeping `copies` in step.
    fn take_running(&mut self, task_id: u64) -> Option<TaskRun> {
        let run = self.running.remove(&task_id)?;
        let key = (run.stage_id, run.partition);
        if let Some(n) = self.copies.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.copies.remove(&key);
            }
        }
        Some(run)
    }

    /// Files `id` in `room` again after its in-flight count changed.
    fn refile(&mut self, id: &str) {
        let Some(e) = self.executors.get_mut(id) else {
            return;
        };
        let level = e.in_flight.checked_div(e.slots).map_or(0, |l| l + 1);
        if level != e.level {
            if e.level != 0 {
                self.room.remove(&(e.level, id.to_string()));
            }
            if level != 0 {
                self.room.insert((level, id.to_string()));
            }
            e.level = level;
        }
    }

    /// Fails every job (the loop is ending).
    fn fail_all(&mut self, reason: &str) {
        for (job_id, job) in self.jobs.drain() {
            let _ = job.events.send(JobEvent::JobFailed {
                job_id,
                failure: JobFailure::Cancelled(reason.to_string()),
            });
            self.listeners.emit(|| ListenerEvent::JobEnded {
                job_id,
                succeeded: false,
                failure: Some(reason.to_string()),
                time_ms: now_ms(),
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
            SchedulerEvent::CancelJob { job_id, reason } => self.cancel_job(job_id, reason),
            SchedulerEvent::CancelJobGroup { application, group } => {
                self.cancel_job_group(&application, group.as_deref())
            }
            SchedulerEvent::CancelStage {
                stage_id,
                application,
                reason,
            } => self.cancel_stage(stage_id, application.as_deref(), &reason),
            SchedulerEvent::TaskFinished(status) => self.task_finished(*status),
            SchedulerEvent::BarrierAddress {
                task_id,
                executor_id,
                address,
            } => self.barrier_address(task_id, &executor_id, address),
            SchedulerEvent::ExecutorAdded {
                executor_id,
                slots,
                shuffle_address,
                host,
            } => self.executor_added(executor_id, slots, shuffle_address, host),
            SchedulerEvent::ExecutorRejoined {
                executor_id,
                slots,
                shuffle_address,
                host,
                held,
            } => {
                self.executor_added(executor_id.clone(), slots, shuffle_address, host);
                self.outputs_held(&executor_id, held);
            }
            SchedulerEvent::ExecutorDecommissioning {
                executor_id,
                drained,
            } => self.executor_decommissioning(&executor_id, drained),
            SchedulerEvent::OutputsMigrated {
                executor_id,
                outputs,
                blocks,
            } => {
                self.outputs_migrated(&executor_id, outputs);
                self.blocks_migrated(&executor_id, blocks);
            }
            SchedulerEvent::SlotReleased {
                task_id,
                executor_id,
            } => self.slot_released(task_id, executor_id),
            SchedulerEvent::ExecutorLost {
                executor_id,
                reason,
            } => self.executor_lost(&executor_id, &reason),
            SchedulerEvent::Unpersist { rdd_id } => {
                self.cache.retain(|(r, _), _| *r != rdd_id);
                self.cached_rdds.remove(&rdd_id);
                self.listeners.emit(|| ListenerEvent::BlocksRemoved {
                    rdd_lo: rdd_id,
                    rdd_hi: rdd_id.saturating_add(1),
                    time_ms: now_ms(),
                });
            }
            SchedulerEvent::ForgetIds { id_lo, id_hi } => self.forget_ids(id_lo, id_hi),
            SchedulerEvent::ApplicationEnded { application } => {
                self.apps.remove(&application);
            }
            SchedulerEvent::RemoveShuffles { shuffle_ids } => {
                self.held.forget(|s| shuffle_ids.contains(&s));
                self.released.extend(shuffle_ids);
            }
            SchedulerEvent::Shutdown => {}
        }
    }
}

/// Fails a job the scheduler will never see.
fn fail_at_once(events: &JobEventSender, reason: &str) {
    let _ = events.send(JobEvent::JobFailed {
        job_id: u64::MAX,
        failure: JobFailure::Cancelled(reason.to_string()),
    });
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests;
