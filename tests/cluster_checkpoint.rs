//! Checkpoints on a cluster: an iterative job (`examples/pagerank`) checkpointing every
//! few iterations into a directory all executors share loses an executor (SIGKILL) after
//! its first checkpoints and still writes exactly the ranks of a fault-free local run;
//! the checkpoint files are object files the reruns read from, not the lineage.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::process::run_example;
use common::SplitMix;

/// Two edge files of a random graph.
fn edges(dir: &Path) -> std::path::PathBuf {
    let d = dir.join("edges");
    fs::create_dir_all(&d).unwrap();
    let mut rng = SplitMix::new(0xed6e);
    for f in 0..2 {
        let text: String = (0..3000)
            .map(|_| format!("n{} n{}\n", rng.below(400), rng.below(400)))
            .collect();
        fs::write(d.join(format!("part-{f}.txt")), text).unwrap();
    }
    d
}

/// The `part-*` lines of an output directory, sorted.
fn output(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .flat_map(|e| {
            fs::read_to_string(e.path())
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines
}

/// Checkpoint directories (`rdd-N`) completed so far under `root`.
fn checkpoints_done(root: &Path) -> usize {
    let mut n = 0;
    for context_dir in fs::read_dir(root).into_iter().flatten().flatten() {
        for rdd in fs::read_dir(context_dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if rdd.path().join("_SUCCESS").exists() {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn an_executor_lost_after_checkpoints_still_gives_the_fault_free_ranks() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = edges(s);
    let flags = [
        "--partitions",
        "3",
        "--iterations",
        "24",
        "--checkpoint-every",
        "4",
    ];
    // The fault-free answer, in local mode.
    let local_out = s.join("local");
    let mut local_args = vec!["--master", "local[3]"];
    local_args.extend(flags);
    let local_cp = s.join("local-checkpoints");
    local_args.extend(["--checkpoint-dir", local_cp.to_str().unwrap()]);
    local_args.extend([input.to_str().unwrap(), local_out.to_str().unwrap()]);
    let run = run_example("pagerank", &local_args, s);
    assert!(run.success, "{run:?}");
    let want = output(&local_out);
    assert!(want.len() > 300);

    let mut cluster = Cluster::start(3, 1, None);
    let shared = s.join("checkpoints");
    let out = s.join("cluster");
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["--checkpoint-dir", shared.to_str().unwrap()]);
    args.extend([input.to_str().unwrap(), out.to_str().unwrap()]);
    let mut client = cluster.spawn("pagerank", &args, s);
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoints_done(&shared) < 2 {
        assert!(
            !client.finished(),
            "the job ended before its second checkpoint"
        );
        assert!(Instant::now() < deadline, "no second checkpoint in 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.signal_executor(1, "KILL");
    let run = client.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert_eq!(output(&out), want, "ranks differ from the fault-free run");
    assert!(
        checkpoints_done(&shared) >= 5,
        "every fourth iteration checkpointed"
    );
    let log = cluster.driver_log();
    assert!(log.contains("executor lost"), "{log}");
}
