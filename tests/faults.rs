//! Fault tolerance with real processes: executors killed (SIGKILL) or stopped
//! (SIGSTOP) in the middle of a shuffle-heavy job, shuffle files deleted or corrupted
//! under an executor, tasks that panic once or always, a lost driver, and a chaos run;
//! every job that can finish must give exactly the output of a fault-free run.
//!
//! The job is `examples/faultjob.rs` (three stages, two shuffles). Its `--gate DIR`
//! switch holds the second stage until the test has done its damage.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::faultjob::*;
use common::SplitMix;

#[test]
fn killing_an_executor_after_the_map_stage_reruns_only_its_map_outputs() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start(3, 1, None);
    let run = start_gated(&cluster, &input, s);
    let (shuffle, held) = first_shuffle(&cluster, 3);
    let total: usize = held.iter().map(Vec::len).sum();
    assert_eq!(total, 6, "all map outputs written: {held:?}");
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    let lost = held[victim].len();
    let console = run.kill_and_finish(&mut cluster, victim, &want);
    // The client's console says that a stage ran again for lost output.
    assert!(
        console.contains("runs again, attempt 2") && console.contains("for output that was lost"),
        "{console}"
    );
    // ... after a line naming the executor that was lost and why.
    let lost_line = console
        .find("lost executor executor-")
        .unwrap_or_else(|| panic!("no lost-executor line in {console}"));
    assert!(
        lost_line < console.find("runs again").unwrap(),
        "the loss is told before the rerun: {console}"
    );
    let log = cluster.driver_log();
    assert!(log.contains("executor lost"), "{log}");
    // The map stage ran once in full, then only for the outputs the dead executor held.
    assert_eq!(
        submissions(&log, shuffle),
        vec![6, lost],
        "map stage submissions (the victim held {lost} outputs):\n{log}"
    );
}

#[test]
fn killing_an_executor_during_the_map_stage_still_gives_the_same_output() {
    let scratch = tempfile::tempdir().unwrap();
    kill_during_the_map_stage(scratch.path(), &[], 6);
}

#[test]
fn deleted_and_corrupted_shuffle_files_are_recomputed() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let cluster = Cluster::start(3, 1, None);
    let run = start_gated(&cluster, &input, s);
    let held = first_shuffle_outputs(&cluster, 3);
    let mut damaged = 0;
    for (i, names) in held.iter().enumerate() {
        let Some(name) = names.first() else { continue };
        let data = cluster.executor_dir(i).join("shuffle").join(name);
        if damaged == 0 {
            fs::remove_file(&data).unwrap();
        } else {
            let mut bytes = fs::read(&data).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            fs::write(&data, bytes).unwrap();
        }
        damaged += 1;
        if damaged == 2 {
            break;
        }
    }
    assert_eq!(damaged, 2, "two executors hold map outputs: {held:?}");
    assert_eq!(run.open_and_finish(&cluster), want);
    let log = cluster.driver_log();
    assert!(log.contains("fetch failure"), "{log}");
}

#[test]
fn a_task_that_panics_once_is_retried_and_one_that_always_panics_fails_the_job() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 1000);
    let want = reference(&input, s);
    let cluster = Cluster::start(3, 1, None);
    let marker = s.join("marker");
    fs::create_dir_all(&marker).unwrap();
    let out = s.join("once");
    let run = spawn_faultjob(
        &cluster,
        &["--panic-once", marker.to_str().unwrap()],
        &input,
        &out,
        s,
    )
    .wait();
    assert!(run.success, "{run:?}");
    assert!(
        marker.join("panicked").exists(),
        "the first attempt did panic"
    );
    assert_eq!(
        (output(&out), parsed(&run)),
        want,
        "the failed attempt's accumulator update is not counted"
    );

    let out = s.join("always");
    let run = spawn_faultjob(&cluster, &["--always-panic", "1"], &input, &out, s).wait();
    assert!(!run.success);
    assert!(
        run.stderr.contains("injected failure in partition 1")
            && run.stderr.contains("partition 1"),
        "the job's error carries the panic and names the partition: {run:?}"
    );
    assert!(run.stderr.contains("executor executor-"), "{run:?}");
    // The worker runs the shipped binary: the panic still names the job's own file:line.
    let source =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/faultjob.rs"))
            .unwrap();
    let line = 1 + source
        .lines()
        .position(|l| l.contains(r#"panic!("injected failure in partition {partition}")"#))
        .expect("the panic in examples/faultjob.rs");
    let at = format!("panicked at examples/faultjob.rs:{line}:");
    assert!(run.stderr.contains(&at), "the error names {at}: {run:?}");
    assert!(!out.join("_SUCCESS").exists());
    let retries = cluster
        .driver_log()
        .lines()
        .filter(|l| {
            l.contains("task failed, retrying") && l.contains("injected failure in partition 1")
        })
        .count();
    assert_eq!(retries, 3, "4 attempts in all:\n{}", cluster.driver_log());
}

#[test]
fn a_stopped_executor_is_lost_after_the_heartbeat_timeout() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start_with(
        3,
        1,
        None,
        &["--heartbeat-timeout-ms", "2000"],
        &[],
        &[("EMBER_FETCH_TIMEOUT_MS", "3000")],
    );
    let run = start_gated(&cluster, &input, s);
    let held = first_shuffle_outputs(&cluster, 3);
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    cluster.signal_executor(victim, "STOP");
    let result = run.open_and_finish(&cluster);
    cluster.signal_executor(victim, "CONT");
    assert_eq!(result, want);
    let log = cluster.driver_log();
    assert!(log.contains("sent no heartbeat"), "{log}");
}

#[test]
fn losing_the_driver_fails_the_client_clearly_and_executors_wait_for_a_new_one() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 2000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start(2, 1, None);
    // The client waits 3 s for a driver to take its session back (60 by default).
    let run = start_gated_with_env(&cluster, &input, s, &[("EMBER_DRIVER_RECONNECT_SECS", "3")]);
    cluster.kill_driver();
    let started = Instant::now();
    let result = run.client.wait();
    assert!(!result.success);
    assert!(
        result.stderr.contains("driver") && result.stderr.contains("within 3 s"),
        "a clear error naming the driver and the wait: {result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the client must not hang"
    );
    // The executors killed their workers' tasks and wait; a new driver gets them back.
    cluster.restart_driver();
    cluster.wait_for_executors(2);
    let again = s.join("again");
    fs::create_dir_all(&again).unwrap();
    let out = again.join("out");
    let run = spawn_faultjob(&cluster, &[], &input, &out, &again).wait();
    assert!(run.success, "{run:?}");
    assert_eq!((output(&out), parsed(&run)), want);
}

#[test]
fn chaos_ten_runs_each_losing_a_random_executor_at_a_random_moment() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 3000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start(3, 1, None);
    let mut live: Vec<usize> = vec![0, 1, 2];
    // How long a fault-free run takes here bounds the random kill moment.
    let t0 = Instant::now();
    let out = s.join("warm");
    let run = spawn_faultjob(&cluster, &[], &input, &out, s).wait();
    assert!(run.success, "{run:?}");
    assert_eq!((output(&out), parsed(&run)), want);
    let typical = t0.elapsed();
    let mut rng = SplitMix::new(0xc4a05);
    for round in 0..10 {
        let dir = s.join(format!("round-{round}"));
        fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let client = spawn_faultjob(&cluster, &["--map-delay-ms", "20"], &input, &out, &dir);
        let delay = Duration::from_millis(rng.below(typical.as_millis() as u64 + 1));
        std::thread::sleep(delay);
        let victim = live.remove(rng.below(live.len() as u64) as usize);
        cluster.signal_executor(victim, "KILL");
        let run = client.wait();
        assert!(
            run.success,
            "round {round} (killed executor {victim} after {delay:?}): {run:?}\n{}",
            cluster.logs()
        );
        assert_eq!(
            (output(&out), parsed(&run)),
            want,
            "round {round}: output differs"
        );
        live.push(cluster.add_executor());
        cluster.wait_for_executors(3);
    }
}

/// The ids of the registered executors.
fn executor_ids(cluster: &Cluster) -> Vec<String> {
    let status = cluster.status().unwrap();
    status
        .executors
        .into_iter()
        .map(|e| e.executor_id)
        .collect()
}

#[test]
fn a_huge_failure_message_is_cut_and_the_executor_stays_registered() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 1000);
    let want = reference(&input, s);
    // Executors send at most 1 MiB per task status: the 3 MiB panic message exceeds it.
    let limit = [("EMBER_MAX_MESSAGE_BYTES", "1048576")];
    let mut cluster = Cluster::start_with(1, 1, None, &[], &[], &limit);
    let before = executor_ids(&cluster);
    let out = s.join("huge");
    let run = spawn_faultjob(&cluster, &["--huge-panic-mb", "3"], &input, &out, s).wait();
    assert!(!run.success);
    // The message keeps its first 4 KiB and says how much of the rest was cut.
    let cut: usize = run
        .stderr
        .split_once("xxxx… (")
        .and_then(|(_, rest)| rest.split_once(" bytes more)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no cut message: {:.5000}", run.stderr));
    assert!(
        run.stderr.contains("injected huge failure: xxxx"),
        "{:.5000}",
        run.stderr
    );
    assert!(
        ((3 << 20) - 4096..3 << 20).contains(&cut),
        "{cut} bytes cut"
    );
    assert!(
        run.stderr.len() < 64 << 10,
        "the error is {} bytes",
        run.stderr.len()
    );
    assert!(!out.join("_SUCCESS").exists());
    assert!(cluster.all_alive(), "{}", cluster.logs());
    assert_eq!(
        executor_ids(&cluster),
        before,
        "the executor was lost and re-registered"
    );
    let out = s.join("after");
    let run = spawn_faultjob(&cluster, &[], &input, &out, s).wait();
    assert!(run.success, "{run:?}");
    assert_eq!((output(&out), parsed(&run)), want);
}

#[test]
fn a_result_over_the_message_limit_fails_its_task_and_the_next_job_runs() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 1000);
    let want = reference(&input, s);
    let limit = [("EMBER_MAX_MESSAGE_BYTES", "1048576")];
    let cluster = Cluster::start_with(1, 1, None, &[], &[], &limit);
    let before = executor_ids(&cluster);
    let out = s.join("out");
    let run = spawn_faultjob(&cluster, &["--big-result-mb", "2"], &input, &out, s).wait();
    let failed = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("big result failed: "))
        .unwrap_or_else(|| panic!("the 2 MiB result did not fail: {run:?}"));
    assert!(
        failed.contains("task result of 20971")
            && failed.contains("bytes exceeds the 1048576-byte limit of one message"),
        "{failed}"
    );
    // The same client's next job, on the same executor, runs as usual.
    assert!(run.success, "{run:?}");
    assert_eq!((output(&out), parsed(&run)), want);
    assert_eq!(
        executor_ids(&cluster),
        before,
        "the executor was lost and re-registered"
    );
}

#[test]
fn an_executor_deletes_a_binary_no_worker_has_used_for_its_max_age() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 1000);
    let want = reference(&input, s);
    let flags = ["--worker-idle-secs", "1", "--binary-max-age-secs", "1"];
    let cluster = Cluster::start_with(1, 1, None, &[], &flags, &[]);
    let run = spawn_faultjob(&cluster, &[], &input, &s.join("first"), s).wait();
    assert!(run.success, "{run:?}");
    let binaries = cluster.executor_dir(0).join("binaries");
    let stored = || fs::read_dir(&binaries).unwrap().flatten().count();
    // Its worker stops after 1 s idle; a second later the binary is unused too long.
    wait_for("the binary to be deleted", Duration::from_secs(30), || {
        stored() == 0
    });
    // The next job fetches it again.
    let out = s.join("again");
    let run = spawn_faultjob(&cluster, &[], &input, &out, s).wait();
    assert!(run.success, "{run:?}");
    assert_eq!((output(&out), parsed(&run)), want);
    assert_eq!(stored(), 1);
}
