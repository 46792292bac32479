//! Barrier stages: gang launch (all ranks in one pass, each on a free slot, or none),
//! the too-wide error, no speculation, the rendezvous, and Spark's failure rule (one
//! rank failing kills the others and reruns every rank under a new key, within the
//! stage-attempt limit). The test plays the executors through a launcher that records
//! launches, flushes (one per dispatch pass), kills and peers in order.

mod chain; // map stage -> barrier stage -> reduce, with a fetch failure
mod failures; // Spark's failure rule and the attempt limit
mod launch; // all or none, free slots only, too wide, no speculation
mod rendezvous; // addresses in, peers out

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ember_proto::{
    dependency::Kind, task_failure, task_status, task_success, AccumulatorUpdate, BarrierPeers,
    Dependency, MapStatus, Plan, RddNode, ShuffleDependency, TaskDescription, TaskFailure,
    TaskSuccess,
};

use super::reducers;
use crate::{SchedulerConfig, SchedulerEvent, SchedulerHandle, StageShared, TaskLauncher};

/// What the scheduler asked of the launcher, in order.
#[derive(Debug)]
enum Out {
    Launch(String, Box<TaskDescription>),
    /// The end of a dispatch pass.
    Flush,
    Kill(u64),
    Peers(String, Vec<u64>, BarrierPeers),
}

struct Recorder(Sender<Out>);

impl TaskLauncher for Recorder {
    fn launch(&mut self, executor_id: &str, task: TaskDescription, stage: &StageShared) {
        let task = Box::new(stage.describe(task));
        let _ = self.0.send(Out::Launch(executor_id.into(), task));
    }
    fn flush(&mut self) {
        let _ = self.0.send(Out::Flush);
    }
    fn kill(&mut self, _: &str, task_id: u64) {
        let _ = self.0.send(Out::Kill(task_id));
    }
    fn barrier_peers(&mut self, executor_id: &str, task_ids: &[u64], peers: &BarrierPeers) {
        let _ = self.0.send(Out::Peers(
            executor_id.into(),
            task_ids.to_vec(),
            peers.clone(),
        ));
    }
}

/// What the scheduler did while a test step settled.
#[derive(Debug, Default)]
struct Seen {
    /// Launches grouped by dispatch pass (empty passes left out).
    passes: Vec<Vec<(String, TaskDescription)>>,
    kills: Vec<u64>,
    peers: Vec<(String, Vec<u64>, BarrierPeers)>,
}

impl Seen {
    fn launches(&self) -> Vec<(String, TaskDescription)> {
        self.passes.iter().flatten().cloned().collect()
    }
}

struct Gangs {
    sched: SchedulerHandle,
    out: Receiver<Out>,
    /// Where each task seen launched went (the executor that relays its address).
    ran_on: std::cell::RefCell<HashMap<u64, String>>,
}

/// How long the scheduler is given to react before a step counts as settled.
const QUIET: Duration = Duration::from_millis(150);
const WAIT: Duration = Duration::from_secs(5);

impl Gangs {
    fn new(executors: &[(&str, u32)], config: SchedulerConfig) -> Self {
        let (tx, out) = crossbeam_channel::unbounded();
        let sched = SchedulerHandle::start(config, Box::new(Recorder(tx)));
        let g = Gangs {
            sched,
            out,
            ran_on: Default::default(),
        };
        for (id, slots) in executors {
            g.add_executor(id, *slots);
        }
        g
    }

    fn add_executor(&self, id: &str, slots: u32) {
        self.sched.send(SchedulerEvent::ExecutorAdded {
            executor_id: id.into(),
            slots,
            shuffle_address: String::new(),
            host: String::new(),
        });
    }

    /// Everything the scheduler does until it has done nothing but flush for `QUIET`.
    fn settle(&self) -> Seen {
        let mut seen = Seen::default();
        let mut pass = Vec::new();
        let mut last = Instant::now();
        loop {
            let left = QUIET.saturating_sub(last.elapsed());
            let Ok(ev) = self.out.recv_timeout(left) else {
                break;
            };
            match ev {
                Out::Flush => {
                    if !pass.is_empty() {
                        seen.passes.push(std::mem::take(&mut pass));
                    }
                    continue; // a flush alone is no activity (speculation ticks)
                }
                Out::Launch(e, t) => {
                    self.ran_on.borrow_mut().insert(t.task_id, e.clone());
                    pass.push((e, *t))
                }
                Out::Kill(id) => seen.kills.push(id),
                Out::Peers(e, ids, p) => seen.peers.push((e, ids, p)),
            }
            last = Instant::now();
        }
        assert!(
            pass.is_empty(),
            "launches not followed by a flush: {pass:?}"
        );
        seen
    }

    /// The launches of the next pass that launches anything (waiting up to `WAIT`).
    fn next_pass(&self) -> Vec<(String, TaskDescription)> {
        let deadline = Instant::now() + WAIT;
        let mut pass = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left).expect("a dispatch pass") {
                Out::Launch(e, t) => {
                    self.ran_on.borrow_mut().insert(t.task_id, e.clone());
                    pass.push((e, *t))
                }
                Out::Flush if !pass.is_empty() => return pass,
                Out::Flush => {}
                other => panic!("expected launches, got {other:?}"),
            }
        }
    }

    fn reply(&self, exec: &str, task: &TaskDescription, outcome: task_status::Outcome) {
        self.sched.send(super::finished(exec, task, outcome));
    }

    /// A success: a result task returns `[partition, stage attempt]` (which attempt a
    /// delivered result came from) and adds `accumulator` to accumulator 1; a map task
    /// writes one byte per reducer.
    fn succeed_with(&self, exec: &str, task: &TaskDescription, accumulator: u8) {
        let output = match task.shuffle_id {
            Some(sid) => task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored: false,
                shuffle_id: sid,
                map_partition: task.partition,
                block_sizes: vec![1; reducers(task, sid) as usize],
            }),
            None => {
                task_success::Output::Result(vec![task.partition as u8, task.stage_attempt as u8])
            }
        };
        let success = TaskSuccess {
            output: Some(output),
            accumulators: vec![AccumulatorUpdate {
                id: 1,
                value: vec![accumulator],
            }],
            ..Default::default()
        };
        self.reply(exec, task, task_status::Outcome::Success(success));
    }

    fn succeed(&self, exec: &str, task: &TaskDescription) {
        self.succeed_with(exec, task, 0);
    }

    fn fail(&self, exec: &str, task: &TaskDescription, reason: task_failure::Reason) {
        let failure = TaskFailure {
            reason: Some(reason),
        };
        self.reply(exec, task, task_status::Outcome::Failure(failure));
    }

    /// `task` reports `address` through the executor it was launched on.
    fn address(&self, task: &TaskDescription, address: &str) {
        let exec = self.ran_on.borrow().get(&task.task_id).cloned();
        self.address_via(&exec.unwrap_or_default(), task, address);
    }

    fn address_via(&self, executor_id: &str, task: &TaskDescription, address: &str) {
        self.sched.send(SchedulerEvent::BarrierAddress {
            task_id: task.task_id,
            executor_id: executor_id.into(),
            address: address.into(),
        });
    }
}

fn node(id: u32, partitions: u32, name: &str, barrier: bool, deps: Vec<Dependency>) -> RddNode {
    RddNode {
        id,
        num_partitions: partitions,
        name: name.into(),
        barrier,
        deps,
        ..Default::default()
    }
}

fn shuffle(shuffle_id: u32, parent: u32, reducers: u32) -> Dependency {
    Dependency {
        kind: Some(Kind::Shuffle(ShuffleDependency {
            shuffle_id,
            parent,
            num_reduce_partitions: reducers,
            ..Default::default()
        })),
    }
}

/// One result stage of `n` partitions, barrier or not.
fn one_stage(n: u32, barrier: bool) -> Plan {
    let name = if barrier { "barrier" } else { "source" };
    Plan {
        nodes: vec![node(0, n, name, barrier, vec![])],
        final_rdd: 0,
        ..Default::default()
    }
}

/// Checks one gang launch: every rank of a stage of `world` once, one key of 32 bytes,
/// no executor holding more ranks than `slots` gives it; returns the launches by rank.
fn check_gang(
    pass: &[(String, TaskDescription)],
    world: u32,
    slots: &[(&str, u32)],
) -> Vec<(String, TaskDescription)> {
    let mut by_rank: BTreeMap<u32, (String, TaskDescription)> = BTreeMap::new();
    for (e, t) in pass {
        let b = t.barrier.as_ref().expect("a barrier task carries its rank");
        assert_eq!(
            (b.world, b.rank, b.stage_attempt),
            (world, t.partition, t.stage_attempt)
        );
        assert_eq!(b.key.len(), 32);
        assert!(
            by_rank.insert(b.rank, (e.clone(), t.clone())).is_none(),
            "rank twice"
        );
    }
    assert_eq!(by_rank.len() as u32, world, "every rank in the one pass");
    let key = &pass[0].1.barrier.as_ref().unwrap().key;
    assert!(
        pass.iter()
            .all(|(_, t)| &t.barrier.as_ref().unwrap().key == key),
        "one key"
    );
    for (id, n) in slots {
        let on = pass.iter().filter(|(e, _)| e == id).count() as u32;
        assert!(on <= *n, "{on} ranks on {id}, which has {n} slots");
    }
    by_rank.into_values().collect()
}
