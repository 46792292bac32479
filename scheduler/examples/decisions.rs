//! The driver's scheduler alone against simulated executors: how many task decisions
//! (a task placed on a slot, its description built, its status taken in) it makes per
//! second. No network and no task work: a responder thread plays every executor and
//! answers each launch at once with a success, so the scheduler's event loop is the
//! only thing measured. It runs on the driver daemon's allocator (mimalloc, huge pages
//! off), so what it measures is what the driver's scheduler thread does.
//!
//! ```sh
//! cargo run --release -p ember-scheduler --example decisions -- \
//!     [--executors 1000] [--slots 1] [--maps 50000] [--reduces 1000] [--tasks 100000] \
//!     [--pipeline-depth N] [--scheduling-mode fifo|fair]
//! ```
//!
//! `--pipeline-depth` overrides `SchedulerConfig::pipeline_depth` (the most tasks one
//! slot may have in flight for a stage of brief tasks; default: the config's);
//! `--scheduling-mode` sets the slots' sharing (default: the config's, `fifo`; the
//! driver daemon's default is `fair`).
//!
//! Two jobs run one after the other: a one-stage job of `--tasks` tasks, and a two-stage
//! job of `--maps` map tasks shuffled into `--reduces` result tasks (each reducer's
//! description lists every map output, as a real reduce task's does). Each prints its
//! tasks, seconds and decisions per second (and, for the two-stage job, when each stage
//! completed); the exit status is non-zero if a job does not succeed or a partition's
//! result is missing.

use std::collections::HashMap;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use ember_proto::{
    dependency::Kind, task_status, task_success, Dependency, MapStatus, Plan, RddNode,
    ShuffleDependency, TaskDescription, TaskStatus, TaskSuccess,
};
use ember_scheduler::{
    JobEvent, SchedulerConfig, SchedulerEvent, SchedulerHandle, StageShared, TaskLauncher,
};

// The driver daemon's allocator, set up as `driver/src/main.rs` sets it up.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Launcher(Sender<(String, TaskDescription)>);

impl TaskLauncher for Launcher {
    fn launch(&mut self, executor_id: &str, task: TaskDescription, _stage: &StageShared) {
        // As the cluster's launcher does, the plan stays shared (sent once per executor).
        let _ = self.0.send((executor_id.to_string(), task));
    }
    fn kill(&mut self, _: &str, _: u64) {}
}

fn arg(args: &[String], name: &str, default: u32) -> u32 {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} takes a positive integer")),
        None => default,
    }
}

fn node(id: u32, parts: u32, deps: Vec<Dependency>) -> RddNode {
    RddNode {
        id,
        num_partitions: parts,
        deps,
        name: format!("n{id}"),
        ..Default::default()
    }
}

fn one_stage(tasks: u32) -> Plan {
    Plan {
        nodes: vec![node(0, tasks, vec![])],
        final_rdd: 0,
        ..Default::default()
    }
}

fn two_stage(maps: u32, reduces: u32, shuffle_id: u32) -> Plan {
    let shuffle = Dependency {
        kind: Some(Kind::Shuffle(ShuffleDependency {
            shuffle_id,
            parent: 0,
            num_reduce_partitions: reduces,
            ..Default::default()
        })),
    };
    Plan {
        nodes: vec![node(0, maps, vec![]), node(1, reduces, vec![shuffle])],
        final_rdd: 1,
        ..Default::default()
    }
}

/// Plays every executor: answers each launch with a success at once.
fn respond(
    launched: Receiver<(String, TaskDescription)>,
    sched: Sender<SchedulerEvent>,
    reduces: u32,
) {
    for (executor_id, task) in launched {
        let output = match task.shuffle_id {
            Some(shuffle_id) => task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored: false,
                shuffle_id,
                map_partition: task.partition,
                block_sizes: vec![1; reduces as usize],
            }),
            None => task_success::Output::Result(task.partition.to_le_bytes().to_vec()),
        };
        let status = TaskStatus {
            barrier: None,
            task_id: task.task_id,
            executor_id,
            metrics: Some(Default::default()),
            outcome: Some(task_status::Outcome::Success(TaskSuccess {
                output: Some(output),
                ..Default::default()
            })),
        };
        if sched
            .send(SchedulerEvent::TaskFinished(Box::new(status)))
            .is_err()
        {
            return;
        }
    }
}

/// Runs one job to its end; returns its tasks (launches), seconds, and the seconds at
/// which each stage completed.
fn run(sched: &SchedulerHandle, plan: Plan, results: u32) -> Result<(u64, f64, Vec<f64>), String> {
    let start = Instant::now();
    let events = sched.submit(plan, HashMap::new());
    let mut seen = vec![false; results as usize];
    let mut tasks = 0u64;
    let mut stage_ends = Vec::new();
    loop {
        match events.recv() {
            Ok(JobEvent::TaskResult { partition, result }) => {
                let p = partition as usize;
                if result != partition.to_le_bytes() || p >= seen.len() || seen[p] {
                    return Err(format!("partition {partition}: a wrong or repeated result"));
                }
                seen[p] = true;
            }
            Ok(JobEvent::TaskEnded { succeeded, .. }) => {
                if !succeeded {
                    return Err("a task failed".into());
                }
                tasks += 1;
            }
            Ok(JobEvent::StageCompleted { .. }) => stage_ends.push(start.elapsed().as_secs_f64()),
            Ok(JobEvent::JobSucceeded { .. }) => break,
            Ok(JobEvent::JobFailed { failure, .. }) => {
                return Err(format!("job failed: {failure:?}"))
            }
            Ok(_) => {}
            Err(_) => return Err("the scheduler stopped".into()),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if let Some(p) = seen.iter().position(|s| !s) {
        return Err(format!("partition {p}: no result"));
    }
    Ok((tasks, secs, stage_ends))
}

fn main() {
    // SAFETY: plain integer arguments; harmless where unsupported (as in the driver).
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let executors = arg(&args, "--executors", 1000);
    let slots = arg(&args, "--slots", 1);
    let maps = arg(&args, "--maps", 50_000);
    let reduces = arg(&args, "--reduces", 1000);
    let tasks = arg(&args, "--tasks", 100_000);
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut config = SchedulerConfig::default();
    config.pipeline_depth = arg(&args, "--pipeline-depth", config.pipeline_depth);
    if let Some(i) = args.iter().position(|a| a == "--scheduling-mode") {
        let mode = args.get(i + 1).map(String::as_str).unwrap_or_default();
        config.fair.mode = mode
            .parse()
            .unwrap_or_else(|e| panic!("--scheduling-mode: {e}"));
    }
    let sched = SchedulerHandle::start(config, Box::new(Launcher(tx)));
    for e in 0..executors {
        sched.send(SchedulerEvent::ExecutorAdded {
            executor_id: format!("exec-{e:04}"),
            slots,
            shuffle_address: format!("127.0.0.1:{}", 20_000 + e),
            host: String::new(),
        });
    }
    let responder = {
        let to_sched = sched.sender();
        std::thread::spawn(move || respond(rx, to_sched, reduces))
    };
    println!("{executors} simulated executors x {slots} slots");
    let mut ok = true;
    for (name, plan, results) in [
        (format!("one stage, {tasks} tasks"), one_stage(tasks), tasks),
        (
            format!("{maps} maps -> {reduces} reduces"),
            two_stage(maps, reduces, 0),
            reduces,
        ),
    ] {
        match run(&sched, plan, results) {
            Ok((n, secs, stage_ends)) => {
                println!(
                    "{name}: {n} tasks in {secs:.3} s = {:.0} decisions/s",
                    n as f64 / secs
                );
                if stage_ends.len() > 1 {
                    let ends: Vec<String> =
                        stage_ends.iter().map(|s| format!("{s:.3} s")).collect();
                    println!("  stages completed after {}", ends.join(", "));
                }
            }
            Err(e) => {
                println!("{name}: FAILED: {e}");
                ok = false;
            }
        }
    }
    sched.send(SchedulerEvent::Shutdown);
    drop(sched);
    let _ = responder.join();
    std::process::exit(if ok { 0 } else { 1 });
}
