//! One driver shared by several clients (`examples/sharing.rs` against real daemons):
//! under `fair` (the driver's default) a client's small job runs while another's large
//! one holds the cluster, under `fifo` it waits for it; a job group cancelled from
//! another thread ends the blocked action with an error naming the group, with
//! `interrupt_on_cancel` its stuck tasks' worker process is ended (their slots free
//! long before the tasks would have ended), without it they run out; and a cancelled
//! save leaves no `_SUCCESS`.

mod common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;

/// Waits (bounded) until the cluster runs at least one task.
fn wait_running(cluster: &Cluster, hog: &mut common::process::Running) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = cluster.status().unwrap();
        if st.executors.iter().any(|e| e.running_tasks > 0) {
            return;
        }
        assert!(!hog.finished(), "the large job ended before it ran");
        assert!(
            Instant::now() < deadline,
            "the large job's tasks never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a 3-job probe while a 240-task hog (50 ms a task, 2 slots: ~6 s) runs;
/// whether the hog had finished when the probe did.
fn probe_during_hog(driver_args: &[&str]) -> bool {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start_with(1, 2, None, driver_args, &[], &[]);
    let mut hog = cluster.spawn("sharing", &["hog", "--tasks", "240", "--sleep-ms", "50"], s);
    wait_running(&cluster, &mut hog);
    let probe = cluster.run("sharing", &["probe", "--jobs", "3", "--gap-ms", "20"], s);
    assert!(probe.success, "{probe:?}\n{}", cluster.logs());
    assert_eq!(probe.stdout.matches("probe job").count(), 3, "{probe:?}");
    let hog_done_first = hog.finished();
    let hog = hog.wait();
    assert!(
        hog.success && hog.stdout.contains("ANCHOR hog_seconds="),
        "{hog:?}"
    );
    hog_done_first
}

/// `sharing cancel` of 2 tasks sleeping `sleep_ms`, cancelled `wait_ms` after submission.
fn cancel(
    cluster: &Cluster,
    scratch: &std::path::Path,
    sleep_ms: &str,
    wait_ms: &str,
    extra: &[&str],
) -> common::process::Run {
    let mut args = vec![
        "cancel",
        "--tasks",
        "2",
        "--sleep-ms",
        sleep_ms,
        "--wait-ms",
        wait_ms,
    ];
    args.extend_from_slice(extra);
    cluster.run("sharing", &args, scratch)
}

#[test]
fn under_fair_scheduling_a_small_job_runs_while_a_large_one_holds_the_cluster() {
    assert!(
        !probe_during_hog(&[]),
        "the probe should have finished while the large job still ran"
    );
}

#[test]
fn under_fifo_scheduling_a_small_job_waits_for_the_large_one() {
    assert!(
        probe_during_hog(&["--scheduling-mode", "fifo"]),
        "under fifo the probe's first job waits for the large job's queue"
    );
}

#[test]
fn cancelling_an_interrupting_group_from_another_thread_ends_its_stuck_tasks() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(1, 2, None);
    // Two tasks sleeping 10 minutes in user code; cancelled 3 s after submission.
    let run = cancel(
        &cluster,
        s,
        "600000",
        "3000",
        &["--interrupt", "--probe-tasks", "2"],
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert!(
        run.stdout.contains(
            "action failed: job cancelled: part of cancelled job group \"sharing-cancel\""
        ),
        "{run:?}"
    );
    // The probe ran on the freed slots: the worker running the stuck tasks was ended.
    assert!(
        run.stdout.contains("ANCHOR cancel_to_probe_done_ms="),
        "{run:?}"
    );
    let logs = cluster.logs();
    assert!(
        logs.contains("cancelled with interrupt_on_cancel, did not stop within 250 ms"),
        "{logs}"
    );
    // The executor's count (its heartbeats) follows.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.status().unwrap().executors[0].running_tasks != 0 {
        assert!(
            Instant::now() < deadline,
            "tasks still counted as running\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_cancelled_group_without_interrupt_runs_out_and_its_save_leaves_no_success_file() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(1, 2, None);
    let out = s.join("out");
    let run = cancel(
        &cluster,
        s,
        "4000",
        "2500",
        &["--save", out.to_str().unwrap()],
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert!(
        run.stdout
            .contains("part of cancelled job group \"sharing-cancel\""),
        "{run:?}"
    );
    assert!(!out.join("_SUCCESS").exists(), "a cancelled save committed");
    let parts: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !parts
            .iter()
            .any(|p| p.to_string_lossy().starts_with("part-")),
        "a cancelled save left output: {parts:?}"
    );
    let logs = cluster.logs();
    assert!(
        !logs.contains("did not stop within"),
        "no worker is ended without interrupt_on_cancel: {logs}"
    );
}
