//! Barrier stages on a cluster of two executors: ranks on both talk directly (the
//! driver relays only their addresses), the answers equal local mode's bit for bit, and
//! an executor killed (SIGKILL) in the middle of a 200-superstep job ends the stage's
//! other ranks, the stage waits for slots, reruns from the last superstep every rank
//! committed, and gives the fault-free answer.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::process::run_example;

const LOGREG: [&str; 8] = [
    "--rows",
    "60000",
    "--features",
    "16",
    "--iterations",
    "200",
    "--checkpoint-every",
    "10",
];

fn weights(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("weights="))
        .unwrap_or_else(|| panic!("no weights line in {stdout}"))
        .to_string()
}

/// The newest committed superstep under the checkpoint directory `root`, if any.
fn newest_committed(root: &Path) -> Option<u64> {
    let mut best = None;
    for ctx_dir in fs::read_dir(root).ok()?.flatten() {
        for stage in fs::read_dir(ctx_dir.path()).into_iter().flatten().flatten() {
            for step in fs::read_dir(stage.path()).into_iter().flatten().flatten() {
                let name = step.file_name().to_string_lossy().into_owned();
                let n = name
                    .strip_prefix("step-")
                    .and_then(|n| n.parse::<u64>().ok());
                if let (Some(n), true) = (n, step.path().join("COMMITTED").is_file()) {
                    best = best.max(Some(n));
                }
            }
        }
    }
    best
}

#[test]
fn barrier_stages_span_executors_and_survive_a_killed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let events = tmp.path().join("events");
    let mut cluster = Cluster::start_with(
        2,
        2,
        None,
        &["--event-log-dir", events.to_str().unwrap()],
        &[],
        &[],
    );

    // Four ranks over two executors: one all-reduce stage timed end to end.
    let run = cluster.run(
        "collectives",
        &["--op", "all_reduce", "--bytes", "65536", "--iters", "30"],
        tmp.path(),
    );
    assert!(run.success, "collectives: {run:?}\n{}", cluster.logs());
    assert!(
        run.stdout
            .contains("op=all_reduce ranks=4 bytes=65536 median_us="),
        "{}",
        run.stdout
    );

    // The fault-free answer, in local mode with as many ranks.
    let mut local_args = vec!["--master", "local[4]"];
    local_args.extend(LOGREG);
    let reference = run_example("logreg", &local_args, tmp.path());
    assert!(reference.success, "{reference:?}");
    let want = weights(&reference.stdout);

    // The same job on the cluster, an executor killed in the middle.
    let ckpt = tmp.path().join("checkpoints");
    let mut args: Vec<&str> = LOGREG.to_vec();
    let ckpt_arg = ckpt.to_string_lossy().into_owned();
    args.extend(["--checkpoint-dir", &ckpt_arg]);
    let job = cluster.spawn("logreg", &args, tmp.path());
    let deadline = Instant::now() + Duration::from_secs(240);
    let seen = loop {
        match newest_committed(&ckpt) {
            Some(step) if step >= 79 => break step,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no superstep checkpoint 79 in time\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    cluster.signal_executor(1, "KILL");
    // The rerun needs four slots: it waits for a new executor.
    cluster.add_executor();
    let done = job.wait();
    assert!(
        done.success,
        "logreg after the kill: {done:?}\n{}",
        cluster.logs()
    );
    assert_eq!(
        weights(&done.stdout),
        want,
        "the fault-free weights, bit for bit"
    );

    // The rerun resumed from a checkpoint at least as new as the one seen before the
    // kill, so at most the 10 supersteps of one period ran again.
    let logs = cluster.logs();
    let resumed: Vec<u64> = logs
        .lines()
        .filter(|l| l.contains("resuming from a superstep checkpoint"))
        .filter_map(|l| l.split("step=").nth(1))
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!resumed.is_empty(), "no rank resumed:\n{logs}");
    assert!(
        resumed.iter().all(|s| *s >= seen),
        "resumed from {resumed:?}, older than step {seen} committed before the kill"
    );
    assert!(
        logs.contains("a task of a barrier stage failed; rerunning all 4 of its tasks"),
        "{logs}"
    );

    // The event log says the same: the failed attempt's surviving ranks got to superstep
    // F, the rerun's ranks resumed after R, and F - R is at most one checkpoint period.
    let mut reached = 0u64;
    let mut resumed_after = Vec::new();
    for file in fs::read_dir(&events).unwrap().flatten() {
        for line in fs::read_to_string(file.path()).unwrap_or_default().lines() {
            let e: serde_json::Value = serde_json::from_str(line).unwrap();
            if e["event"] != "task_supersteps" {
                continue;
            }
            let steps = e["supersteps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["op"] == "all_reduce_slice")
                .count() as u64;
            match e["resumed_after"].as_u64() {
                Some(r) => resumed_after.push(r),
                // The last call is the one that failed: steps - 1 completed.
                None if e["stage_attempt"] == 1 => reached = reached.max(steps.saturating_sub(1)),
                None => {}
            }
        }
    }
    assert!(
        reached > 0,
        "no superstep of the failed attempt in the event log"
    );
    assert!(
        resumed_after.len() >= 4,
        "every rank of the rerun resumed: {resumed_after:?}"
    );
    for r in &resumed_after {
        assert!(*r >= seen, "resumed after {r}, before {seen}");
        assert!(
            reached.saturating_sub(r + 1) <= 10,
            "{reached} supersteps done before the kill, resumed after {r}: more than 10 run again"
        );
    }
}
