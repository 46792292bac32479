//! Scheduler tests with a fake launcher: the test plays the executors, answering each
//! launched task with a status, and checks what the scheduler launches and reports.

use std::collections::HashMap;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use ember_proto::{
    dependency::Kind, task_failure, task_status, task_success, Dependency, FetchFailure, MapStatus,
    Plan, RddNode, ShuffleDependency, TaskDescription, TaskFailure, TaskStatus, TaskSuccess,
};

use crate::{
    JobEvent, JobFailure, SchedulerConfig, SchedulerEvent, SchedulerHandle, StageShared,
    TaskLauncher,
};

mod barrier;
mod decommission;
mod descriptions;
mod empty;
mod fair;
mod idle;
mod lifecycle;
mod listener;
mod locality;
mod numbering;
mod panics;
mod pipelining;
mod recovery;
mod rejoin;
mod release;
mod replicated;
mod stored;

struct FakeLauncher(
    Sender<(String, TaskDescription)>,
    Sender<u64>,
    Sender<Vec<u32>>,
    Sender<(String, Vec<ember_proto::MigratedOutput>)>,
    Sender<(String, Vec<ember_proto::MigratedBlock>)>,
);
impl TaskLauncher for FakeLauncher {
    fn launch(&mut self, executor_id: &str, task: TaskDescription, stage: &StageShared) {
        let _ = self.0.send((executor_id.to_string(), stage.describe(task)));
    }
    fn kill(&mut self, _: &str, task_id: u64) {
        let _ = self.1.send(task_id);
    }
    /// Recorded among the kills with [`INTERRUPTED`] set.
    fn interrupt(&mut self, _: &str, task_id: u64) {
        let _ = self.1.send(task_id | INTERRUPTED);
    }
    fn remove_shuffles(&mut self, shuffle_ids: &[u32]) {
        let _ = self.2.send(shuffle_ids.to_vec());
    }
    fn migrate_outputs(
        &mut self,
        executor_id: &str,
        outputs: Vec<ember_proto::MigratedOutput>,
        blocks: Vec<ember_proto::MigratedBlock>,
    ) {
        let _ = self.3.send((executor_id.to_string(), outputs));
        let _ = self.4.send((executor_id.to_string(), blocks));
    }
}

struct Harness {
    sched: SchedulerHandle,
    launched: Receiver<(String, TaskDescription)>,
    killed: Receiver<u64>,
    /// What the scheduler asked the launcher to delete, call by call.
    removed: Receiver<Vec<u32>>,
    /// The migration plans of decommissioning executors, call by call.
    migrations: Receiver<(String, Vec<ember_proto::MigratedOutput>)>,
    /// The cached blocks of those plans, call by call.
    block_migrations: Receiver<(String, Vec<ember_proto::MigratedBlock>)>,
}

const WAIT: Duration = Duration::from_secs(5);

/// Marks an interrupting kill in `Harness::killed`.
const INTERRUPTED: u64 = 1 << 63;

impl Harness {
    fn new(executors: &[(&str, u32)], config: SchedulerConfig) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (ktx, krx) = crossbeam_channel::unbounded();
        let (rtx, rrx) = crossbeam_channel::unbounded();
        let (mtx, mrx) = crossbeam_channel::unbounded();
        let (btx, brx) = crossbeam_channel::unbounded();
        let launcher = FakeLauncher(tx, ktx, rtx, mtx, btx);
        let sched = SchedulerHandle::start(config, Box::new(launcher));
        for (id, slots) in executors {
            sched.send(SchedulerEvent::ExecutorAdded {
                executor_id: id.to_string(),
                slots: *slots,
                shuffle_address: String::new(),
                host: String::new(),
            });
        }
        Harness {
            sched,
            launched: rx,
            killed: krx,
            removed: rrx,
            migrations: mrx,
            block_migrations: brx,
        }
    }

    fn next_task(&self) -> (String, TaskDescription) {
        self.launched.recv_timeout(WAIT).expect("a task launch")
    }

    fn no_more_tasks(&self) {
        assert!(
            self.launched
                .recv_timeout(Duration::from_millis(100))
                .is_err(),
            "no further launch expected"
        );
    }

    fn reply(&self, exec: &str, task: &TaskDescription, outcome: task_status::Outcome) {
        self.sched.send(finished(exec, task, outcome));
    }

    fn succeed(&self, exec: &str, task: &TaskDescription) {
        self.succeed_stored(exec, task, false)
    }

    /// [`succeed`](Self::succeed); a map task's status says whether its output is also
    /// stored (`storage:` durability).
    fn succeed_stored(&self, exec: &str, task: &TaskDescription, stored: bool) {
        let output = match task.shuffle_id {
            Some(sid) => task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored,
                shuffle_id: sid,
                map_partition: task.partition,
                block_sizes: vec![1; reducers(task, sid) as usize],
            }),
            None => task_success::Output::Result(vec![task.partition as u8]),
        };
        self.reply(
            exec,
            task,
            task_status::Outcome::Success(TaskSuccess {
                output: Some(output),
                ..Default::default()
            }),
        );
    }

    fn fail(&self, exec: &str, task: &TaskDescription, reason: task_failure::Reason) {
        self.reply(
            exec,
            task,
            task_status::Outcome::Failure(TaskFailure {
                reason: Some(reason),
            }),
        );
    }
}

/// The reduce partitions of shuffle `sid` in the task's plan.
fn reducers(task: &TaskDescription, sid: u32) -> u32 {
    let plan = task.plan.as_ref().expect("a plan");
    plan.nodes
        .iter()
        .flat_map(|n| &n.deps)
        .find_map(|d| match &d.kind {
            Some(Kind::Shuffle(s)) if s.shuffle_id == sid => Some(s.num_reduce_partitions),
            _ => None,
        })
        .expect("the task's shuffle is in its plan")
}

/// source(2 partitions) --shuffle 0--> final(2 partitions)
fn two_stage_plan() -> Plan {
    Plan {
        nodes: vec![
            RddNode {
                id: 0,
                num_partitions: 2,
                name: "source".into(),
                ..Default::default()
            },
            RddNode {
                id: 1,
                num_partitions: 2,
                name: "reduce".into(),
                deps: vec![Dependency {
                    kind: Some(Kind::Shuffle(ShuffleDependency {
                        shuffle_id: 0,
                        parent: 0,
                        num_reduce_partitions: 2,
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            },
        ],
        final_rdd: 1,
        ..Default::default()
    }
}

fn drain_until_end(
    events: &Receiver<JobEvent>,
) -> (HashMap<u32, Vec<u8>>, Result<(), JobFailure>, u32) {
    let mut results = HashMap::new();
    let mut skipped = 0;
    loop {
        match events.recv_timeout(WAIT).expect("job event") {
            JobEvent::TaskResult { partition, result } => {
                assert!(
                    results.insert(partition, result).is_none(),
                    "partition delivered twice"
                );
            }
            JobEvent::StageSkipped(_) => skipped += 1,
            JobEvent::JobSucceeded { .. } => return (results, Ok(()), skipped),
            JobEvent::JobFailed { failure, .. } => return (results, Err(failure), skipped),
            _ => {}
        }
    }
}

#[test]
fn runs_map_stage_then_result_stage_and_skips_it_next_time() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, Some(0), "map tasks first");
        h.succeed(&ex, &t);
    }
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, None);
        assert_eq!(
            t.shuffle_inputs[0].num_maps(),
            2,
            "reducers see both map outputs"
        );
        h.succeed(&ex, &t);
    }
    let (results, outcome, skipped) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(results.len(), 2);
    assert_eq!(skipped, 0);

    // Same lineage again: the shuffle output exists, only the result stage runs.
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, None, "map stage must be skipped");
        h.succeed(&ex, &t);
    }
    let (_, outcome, skipped) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(skipped, 1);
}

#[test]
fn fetch_failure_reruns_only_the_lost_map_output() {
    let h = Harness::new(&[("e1", 1), ("e2", 1)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let mut map_exec = HashMap::new();
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        map_exec.insert(t.partition, ex.clone());
        h.succeed(&ex, &t);
    }
    let (ex_a, ta) = h.next_task();
    let (ex_b, tb) = h.next_task();
    // Reducer a finishes; reducer b cannot read map 1.
    h.succeed(&ex_a, &ta);
    h.fail(
        &ex_b,
        &tb,
        task_failure::Reason::FetchFailed(FetchFailure {
            from_storage: false,
            executor_id: map_exec[&1].clone(),
            shuffle_id: 0,
            map_partition: 1,
            reduce_partition: tb.partition,
            message: "gone".into(),
        }),
    );
    let (ex, t) = h.next_task();
    assert_eq!(
        (t.shuffle_id, t.partition),
        (Some(0), 1),
        "only map 1 reruns"
    );
    h.succeed(&ex, &t);
    let (ex, t) = h.next_task();
    assert_eq!(
        (t.shuffle_id, t.partition),
        (None, tb.partition),
        "only the failed reducer reruns"
    );
    h.succeed(&ex, &t);
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    h.no_more_tasks();
}

#[test]
fn task_failing_every_attempt_fails_the_job_with_its_message() {
    let h = Harness::new(
        &[("e1", 1), ("e2", 1)],
        SchedulerConfig {
            max_task_attempts: 3,
            ..Default::default()
        },
    );
    let plan = Plan {
        nodes: vec![RddNode {
            id: 0,
            num_partitions: 1,
            name: "source".into(),
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    };
    let events = h.sched.submit(plan, HashMap::new());
    let mut execs = Vec::new();
    for attempt in 0..3 {
        let (ex, t) = h.next_task();
        assert_eq!(t.attempt, attempt);
        execs.push(ex.clone());
        h.fail(
            &ex,
            &t,
            task_failure::Reason::UserError(format!("boom {attempt}")),
        );
    }
    assert_ne!(
        execs[0], execs[1],
        "a retry goes to another executor when there is one"
    );
    let (_, outcome, _) = drain_until_end(&events);
    match outcome {
        Err(JobFailure::TaskFailed {
            message, partition, ..
        }) => {
            assert_eq!(message, "boom 2");
            assert_eq!(partition, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn stale_status_is_ignored_and_lost_executor_outputs_rerun() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, m0) = h.next_task();
    let (_, m1) = h.next_task();
    h.succeed(&ex, &m0);
    // e1 dies while m1 runs; a new executor joins.
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e1".into(),
        reason: "killed".into(),
    });
    h.sched.send(SchedulerEvent::ExecutorAdded {
        executor_id: "e2".into(),
        slots: 2,
        shuffle_address: String::new(),
        host: String::new(),
    });
    // The late status of the lost attempt must not count.
    h.succeed("e1", &m1);
    let mut seen = Vec::new();
    loop {
        let (ex, t) = h.next_task();
        assert_eq!(ex, "e2");
        seen.push((t.shuffle_id, t.partition));
        h.succeed(&ex, &t);
        if t.shuffle_id.is_none() && seen.iter().filter(|s| s.0.is_none()).count() == 2 {
            break;
        }
    }
    let maps: Vec<u32> = seen.iter().filter(|s| s.0.is_some()).map(|s| s.1).collect();
    let mut sorted = maps.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![0, 1],
        "both map outputs recomputed on e2: {seen:?}"
    );
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(results.len(), 2);
}

/// source(2) --shuffle 0--> final(4 partitions)
fn four_reducer_plan() -> Plan {
    let mut plan = two_stage_plan();
    plan.nodes[1].num_partitions = 4;
    if let Some(Kind::Shuffle(s)) = plan.nodes[1].deps[0].kind.as_mut() {
        s.num_reduce_partitions = 4;
    }
    plan
}

#[test]
fn one_lost_map_output_reported_by_every_reducer_counts_as_one_stage_failure() {
    // Four reducers all report the same unreadable map output: that is one failed
    // attempt of the stage, not four (the limit is 2 here), and the job recovers.
    let h = Harness::new(
        &[("e1", 4)],
        SchedulerConfig {
            max_stage_attempts: 2,
            ..Default::default()
        },
    );
    let events = h.sched.submit(four_reducer_plan(), HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let reducers: Vec<(String, TaskDescription)> = (0..4).map(|_| h.next_task()).collect();
    for (ex, t) in &reducers {
        h.fail(
            ex,
            t,
            task_failure::Reason::FetchFailed(FetchFailure {
                from_storage: false,
                executor_id: "e1".into(),
                shuffle_id: 0,
                map_partition: 1,
                reduce_partition: t.partition,
                message: "checksum mismatch".into(),
            }),
        );
    }
    // e1 is presumed to have lost every output it holds (as Spark presumes): both maps
    // rerun, once each.
    let mut rerun = Vec::new();
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, Some(0), "map tasks rerun first");
        rerun.push(t.partition);
        h.succeed(&ex, &t);
    }
    rerun.sort();
    assert_eq!(rerun, vec![0, 1]);
    for _ in 0..4 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, None);
        assert_eq!(
            t.shuffle_inputs[0].num_maps(),
            2,
            "reducers launch with every map output"
        );
        h.succeed(&ex, &t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 4);
    h.no_more_tasks();
}

/// s0: source0 --shuffle 0-->, s1: source1 --shuffle 1-->, both read by the result node.
fn two_parent_plan() -> Plan {
    let shuffle = |sid: u32, parent: u32| Dependency {
        kind: Some(Kind::Shuffle(ShuffleDependency {
            shuffle_id: sid,
            parent,
            num_reduce_partitions: 1,
            ..Default::default()
        })),
    };
    let source = |id: u32| RddNode {
        id,
        num_partitions: 1,
        name: format!("source{id}"),
        ..Default::default()
    };
    Plan {
        nodes: vec![
            source(0),
            source(1),
            RddNode {
                id: 2,
                num_partitions: 1,
                name: "cogroup".into(),
                deps: vec![shuffle(0, 0), shuffle(1, 1)],
                ..Default::default()
            },
        ],
        final_rdd: 2,
        ..Default::default()
    }
}

#[test]
fn parent_output_lost_while_the_other_parent_runs_is_recomputed() {
    let h = Harness::new(&[("e1", 1), ("e2", 1)], SchedulerConfig::default());
    let events = h.sched.submit(two_parent_plan(), HashMap::new());
    let (ex_a, a) = h.next_task();
    let (ex_b, b) = h.next_task();
    // The first map stage finishes on its executor; that executor then dies while
    // the other map stage still runs.
    h.succeed(&ex_a, &a);
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: ex_a.clone(),
        reason: "killed".into(),
    });
    h.succeed(&ex_b, &b);
    let (ex, t) = h.next_task();
    assert_eq!(t.shuffle_id, a.shuffle_id, "the lost output is recomputed");
    h.succeed(&ex, &t);
    let (ex, t) = h.next_task();
    assert_eq!(t.shuffle_id, None, "then the result stage runs");
    assert!(t.shuffle_inputs.iter().all(|s| s.num_maps() == 1));
    h.succeed(&ex, &t);
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 1);
}

#[test]
fn duplicate_or_out_of_range_partitions_are_refused_or_merged() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let mut plan = two_stage_plan();
    plan.partitions = vec![1, 1];
    let events = h.sched.submit(plan, HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let (ex, t) = h.next_task();
    assert_eq!(t.partition, 1);
    h.succeed(&ex, &t);
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(results.keys().copied().collect::<Vec<_>>(), vec![1]);

    let mut plan = two_stage_plan();
    plan.partitions = vec![0, 7];
    let events = h.sched.submit(plan, HashMap::new());
    let (_, outcome, _) = drain_until_end(&events);
    match outcome {
        Err(JobFailure::InvalidPlan(m)) => assert!(m.contains("partition 7"), "{m}"),
        other => panic!("unexpected {other:?}"),
    }
}

/// `task`'s status from `exec`, ending with `outcome` (no metrics beyond the defaults).
fn finished(exec: &str, task: &TaskDescription, outcome: task_status::Outcome) -> SchedulerEvent {
    SchedulerEvent::TaskFinished(Box::new(TaskStatus {
        task_id: task.task_id,
        executor_id: exec.to_string(),
        metrics: Some(Default::default()),
        outcome: Some(outcome),
        barrier: None,
    }))
}
