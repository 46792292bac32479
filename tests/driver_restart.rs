//! A driver that restarts (issue 40): kill -9 of the driver while faultjob
//! (`examples/faultjob.rs --gate DIR`, three stages) waits at its gate in stage 2, then
//! a new driver on the same address with the same flags. The executors kept their map
//! outputs and report them, the client reopens its session and resubmits the job, and
//! the finished map stage is not run again: the output and the accumulator are a
//! fault-free run's, and the two drivers' event logs show the stage run once.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::Cluster;
use common::faultjob::*;
use serde_json::Value;

/// The events of every event log under `dir`, one list per log file, in file-name order
/// (the first driver's log sorts first: names end in its start time).
fn event_logs(dir: &Path) -> Vec<(PathBuf, Vec<Value>)> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let events = fs::read_to_string(&f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            (f, events)
        })
        .collect()
}

fn kind(e: &Value) -> &str {
    e["event"].as_str().unwrap_or("")
}

/// The stage ids (the driver's) writing shuffle `shuffle` in a log's submitted jobs.
fn stages_writing(events: &[Value], shuffle: u64) -> BTreeSet<u64> {
    events
        .iter()
        .filter(|e| kind(e) == "job_submitted")
        .flat_map(|e| e["stages"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["shuffle_id"].as_u64() == Some(shuffle))
        .filter_map(|s| s["stage_id"].as_u64())
        .collect()
}

/// Tasks started in a log for the stages `stages`.
fn task_starts(events: &[Value], stages: &BTreeSet<u64>) -> usize {
    events
        .iter()
        .filter(|e| kind(e) == "task_started")
        .filter(|e| e["stage_id"].as_u64().is_some_and(|s| stages.contains(&s)))
        .count()
}

/// The smallest shuffle id any submitted job of a log writes (faultjob's first).
fn first_shuffle_id(events: &[Value]) -> u64 {
    events
        .iter()
        .filter(|e| kind(e) == "job_submitted")
        .flat_map(|e| e["stages"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["shuffle_id"].as_u64())
        .min()
        .expect("a shuffle stage")
}

/// The map-output files (committed outputs) left under every executor's shuffle dir.
fn shuffle_files(cluster: &Cluster, executors: usize) -> usize {
    first_shuffle_outputs(cluster, executors)
        .iter()
        .map(Vec::len)
        .sum()
}

#[test]
fn a_restarted_driver_finishes_the_running_job_without_running_the_finished_map_stage() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 2000);
    let want = reference(&input, s);
    let events = s.join("events");
    let events_flag = events.to_str().unwrap();
    let mut cluster = Cluster::start_with(3, 1, None, &["--event-log-dir", events_flag], &[], &[]);
    let run = start_gated(&cluster, &input, s);
    // Stage 1 is done: its six outputs are on the executors.
    assert_eq!(shuffle_files(&cluster, 3), 6, "{}", cluster.logs());
    cluster.restart_driver_with_the_same_flags();
    cluster.wait_for_executors(3);
    let (out, parsed) = run.open_and_finish(&cluster);
    assert_eq!(
        (out, parsed),
        want,
        "output differs from the fault-free run"
    );

    let logs = event_logs(&events);
    assert_eq!(logs.len(), 2, "one event log per driver: {logs:?}");
    let (first, second) = (&logs[0].1, &logs[1].1);
    let shuffle = first_shuffle_id(first);
    let map_stage_1 = stages_writing(first, shuffle);
    let map_stage_2 = stages_writing(second, shuffle);
    assert_eq!(
        task_starts(first, &map_stage_1),
        6,
        "the first driver ran the map stage"
    );
    assert_eq!(
        task_starts(second, &map_stage_2),
        0,
        "the restarted driver ran no map task of the finished stage"
    );
    let skipped: BTreeSet<u64> = (second.iter())
        .filter(|e| kind(e) == "stage_skipped")
        .filter_map(|e| e["stage_id"].as_u64())
        .collect();
    assert!(
        map_stage_2.iter().all(|s| skipped.contains(s)),
        "the map stage is skipped in the second log: {second:?}"
    );
    let recovered: u64 = (second.iter())
        .filter(|e| kind(e) == "outputs_recovered")
        .filter(|e| e["shuffle_id"].as_u64() == Some(shuffle))
        .filter_map(|e| e["outputs"].as_u64())
        .sum();
    assert_eq!(
        recovered, 6,
        "the second log says the outputs were recovered"
    );
    // The session ended with its client: its state file went with it.
    let state = cluster.dir().join("driver-binaries").join("sessions");
    wait_for(
        "the session's state file to go",
        Duration::from_secs(30),
        || fs::read_dir(&state).map(|d| d.count() == 0).unwrap_or(true),
    );
}

/// A restart between two jobs of one client (faultjob `--cache-gate`: a first job
/// counts the cached input, the client waits, then runs the three-stage job): the
/// client reopens its session and the next job runs as on the first driver. The cached
/// blocks lived in the old driver's worker processes, so the second job parses the
/// input again (the accumulator counts it twice, as any recompute of a lost cache).
#[test]
fn a_driver_restart_between_two_jobs_changes_nothing_for_the_next_job() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 2000);
    let (want, lines) = reference(&input, s);
    let mut cluster = Cluster::start(2, 1, None);
    let cache_gate = s.join("cache-gate");
    fs::create_dir_all(&cache_gate).unwrap();
    let out = s.join("out");
    let mut client = spawn_faultjob(
        &cluster,
        &["--cache-gate", cache_gate.to_str().unwrap()],
        &input,
        &out,
        s,
    );
    wait_for("the first job to end", Duration::from_secs(60), || {
        assert!(!client.finished(), "the job ended before its gate opened");
        cache_gate.join("cached").exists()
    });
    cluster.restart_driver_with_the_same_flags();
    cluster.wait_for_executors(2);
    // The client notices and reopens its session before the next job.
    wait_for(
        "the client to reopen its session",
        Duration::from_secs(30),
        || {
            cluster
                .driver_log()
                .contains("session reopened by its client")
        },
    );
    fs::write(cache_gate.join("go"), b"").unwrap();
    let run = client.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert_eq!(output(&out), want, "output differs from the fault-free run");
    assert_eq!(parsed(&run), 2 * lines, "{run:?}");
}

/// The driver and the client both die mid-job: the restarted driver recovers the
/// session, nobody reopens it, and after `--session-reconnect-secs` the executors
/// delete its files (nothing is left on disk).
#[test]
fn a_session_whose_client_died_too_is_cleaned_up_after_the_grace_period() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 2000);
    let mut cluster = Cluster::start_with(2, 1, None, &["--session-reconnect-secs", "2"], &[], &[]);
    let run = start_gated(&cluster, &input, s);
    assert_eq!(shuffle_files(&cluster, 2), 6, "{}", cluster.logs());
    cluster.kill_driver();
    drop(run.client); // killed and reaped
    cluster.restart_driver_with_the_same_flags();
    cluster.wait_for_executors(2);
    wait_for(
        "the executors to delete the session's files",
        Duration::from_secs(30),
        || shuffle_files(&cluster, 2) == 0,
    );
    let log = cluster.driver_log();
    assert!(
        log.contains("session recovered from the state directory"),
        "{log}"
    );
    assert!(
        log.contains("no client reopened the recovered session in time"),
        "{log}"
    );
    let state = cluster.dir().join("driver-binaries").join("sessions");
    assert_eq!(fs::read_dir(&state).unwrap().count(), 0, "state files left");
}
