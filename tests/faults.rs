//! Fault tolerance with real processes: executors killed (SIGKILL) or stopped
//! (SIGSTOP) in the middle of a shuffle-heavy job, shuffle files deleted or corrupted
//! under an executor, tasks that panic once or always, a lost driver, and a chaos run;
//! every job that can finish must give exactly the output of a fault-free run.
//!
//! The job is `examples/faultjob.rs` (three stages, two shuffles). Its `--gate DIR`
//! switch holds the second stage until the test has done its damage.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::process::run_example;
use common::SplitMix;

const PARTITIONS: &str = "6";

/// Six kv input files of `lines` lines each.
fn kv_input(dir: &Path, lines: usize) -> PathBuf {
    let d = dir.join("input");
    fs::create_dir_all(&d).unwrap();
    let mut rng = SplitMix::new(0x5eed);
    for f in 0..6 {
        let text: String = (0..lines)
            .map(|_| {
                format!(
                    "{},{}.{:03}\n",
                    rng.below(3000),
                    rng.below(1000),
                    rng.below(1000)
                )
            })
            .collect();
        fs::write(d.join(format!("part-{f}.txt")), text).unwrap();
    }
    d
}

/// The concatenated part files of a finished output directory, in order.
fn output(dir: &Path) -> String {
    assert!(
        dir.join("_SUCCESS").exists(),
        "{} has no _SUCCESS",
        dir.display()
    );
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part-"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| fs::read_to_string(dir.join(n)).unwrap())
        .collect()
}

/// Starts faultjob on the cluster: `--partitions 6`, then `switches`, INPUT, OUTPUT.
fn spawn_faultjob(
    cluster: &Cluster,
    switches: &[&str],
    input: &Path,
    out: &Path,
    scratch: &Path,
) -> common::process::Running {
    spawn_faultjob_with_env(cluster, switches, input, out, scratch, &[])
}

/// [`spawn_faultjob`] with more environment variables for the client.
fn spawn_faultjob_with_env(
    cluster: &Cluster,
    switches: &[&str],
    input: &Path,
    out: &Path,
    scratch: &Path,
    env: &[(&str, &str)],
) -> common::process::Running {
    let mut args = vec!["--partitions", PARTITIONS];
    args.extend_from_slice(switches);
    args.extend([input.to_str().unwrap(), out.to_str().unwrap()]);
    cluster.spawn_with_env("faultjob", &args, scratch, env)
}

/// The output of a fault-free local run of faultjob over `input`, and its count of
/// records parsed (checked against the input's line count).
fn reference(input: &Path, scratch: &Path) -> (String, u64) {
    let out = scratch.join("reference");
    let run = run_example(
        "faultjob",
        &[
            "--master",
            "local[3]",
            "--partitions",
            PARTITIONS,
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        scratch,
    );
    assert!(run.success, "reference run: {run:?}");
    let text = output(&out);
    assert!(text.lines().count() > 1000);
    let lines: usize = fs::read_dir(input)
        .unwrap()
        .flatten()
        .map(|e| fs::read_to_string(e.path()).unwrap().lines().count())
        .sum();
    assert_eq!(
        parsed(&run),
        lines as u64,
        "records parsed in a fault-free run"
    );
    (text, parsed(&run))
}

/// The session's first shuffle id and the map outputs (data files) of it that each
/// executor holds.
fn first_shuffle(cluster: &Cluster, executors: usize) -> (u32, Vec<Vec<String>>) {
    let per: Vec<Vec<(u32, String)>> = (0..executors)
        .map(|i| {
            // Each session's files are in `shuffle/session-<i>/`: names are relative to
            // `shuffle/`.
            fs::read_dir(cluster.executor_dir(i).join("shuffle"))
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|session| {
                    let dir = session.file_name().to_string_lossy().into_owned();
                    fs::read_dir(session.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(move |e| (dir.clone(), e))
                })
                .filter_map(|(dir, e)| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let id = ember::shuffle::parse_file_name(&name)?.0;
                    // Committed outputs only, not a writer's temporary.
                    (name.ends_with(".data") && !name.starts_with('.'))
                        .then(|| (id, format!("{dir}/{name}")))
                })
                .collect()
        })
        .collect();
    let first = per.iter().flatten().map(|(id, _)| *id).min();
    let held = per
        .into_iter()
        .map(|v| {
            v.into_iter()
                .filter(|(id, _)| Some(*id) == first)
                .map(|(_, n)| n)
                .collect()
        })
        .collect();
    (first.unwrap_or(0), held)
}

fn first_shuffle_outputs(cluster: &Cluster, executors: usize) -> Vec<Vec<String>> {
    first_shuffle(cluster, executors).1
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The driver's submissions of the map stage writing `shuffle_id`: the number of
/// partitions of each ("submitting stage NAME: all N partitions ... shuffle=S ..." or
/// "...: K of N partitions [..] ...").
fn submissions(driver_log: &str, shuffle_id: u32) -> Vec<usize> {
    let tag = format!("shuffle={shuffle_id}");
    driver_log
        .lines()
        .filter(|l| l.contains("submitting stage") && l.split_whitespace().any(|w| w == tag))
        .filter_map(|l| {
            let (_, rest) = l.split_once("submitting stage ")?.1.split_once(": ")?;
            let mut words = rest.split_whitespace();
            match words.next()? {
                "all" => words.next()?.parse().ok(),
                k => k.parse().ok(),
            }
        })
        .collect()
}

struct GateRun {
    gate: PathBuf,
    out: PathBuf,
    client: common::process::Running,
}

/// Starts faultjob on the cluster with its gate closed; returns once the first stage
/// has finished (a second-stage task is waiting at the gate).
fn start_gated(cluster: &Cluster, input: &Path, scratch: &Path) -> GateRun {
    start_gated_with_env(cluster, input, scratch, &[])
}

/// [`start_gated`] with more environment variables for the client.
fn start_gated_with_env(
    cluster: &Cluster,
    input: &Path,
    scratch: &Path,
    env: &[(&str, &str)],
) -> GateRun {
    let gate = scratch.join("gate");
    fs::create_dir_all(&gate).unwrap();
    let out = scratch.join("out");
    let mut client = spawn_faultjob_with_env(
        cluster,
        &["--gate", gate.to_str().unwrap()],
        input,
        &out,
        scratch,
        env,
    );
    wait_for("the second stage to start", Duration::from_secs(60), || {
        assert!(!client.finished(), "the job ended before its gate opened");
        fs::read_dir(&gate)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("waiting-"))
    });
    GateRun { gate, out, client }
}

impl GateRun {
    /// Opens the gate; returns the output and the records-parsed count the job printed.
    fn open_and_finish(self, cluster: &Cluster) -> (String, u64) {
        let (out, parsed, _) = self.open_and_finish_with_console(cluster);
        (out, parsed)
    }

    /// [`open_and_finish`](Self::open_and_finish) with what the client printed on stderr.
    fn open_and_finish_with_console(self, cluster: &Cluster) -> (String, u64, String) {
        fs::write(self.gate.join("open"), b"").unwrap();
        let run = self.client.wait();
        assert!(run.success, "the job failed: {run:?}\n{}", cluster.logs());
        (output(&self.out), parsed(&run), run.stderr.clone())
    }
}

/// The `records parsed: N` the job printed (its accumulator's value).
fn parsed(run: &common::process::Run) -> u64 {
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix("records parsed: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no records count in {run:?}"))
}

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
    cluster.signal_executor(victim, "KILL");
    let (out, records, console) = run.open_and_finish_with_console(&cluster);
    assert_eq!(
        (out, records),
        want,
        "output differs from the fault-free run"
    );
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

/// A gated faultjob with `storage:` durability on 3 one-core executors, its stored
/// directory (in `scratch`) and the output of a fault-free run.
struct Stored {
    want: (String, u64),
    store: PathBuf,
    cluster: Cluster,
    run: GateRun,
}

fn start_stored(s: &Path) -> Stored {
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let store = s.join("shared-store");
    let durability = format!("storage:{}", store.display());
    let cluster = Cluster::start(3, 1, None);
    let run = start_gated_with_env(
        &cluster,
        &input,
        s,
        &[("EMBER_SHUFFLE_DURABILITY", durability.as_str())],
    );
    Stored {
        want,
        store,
        cluster,
        run,
    }
}

/// `storage:` shuffle durability (issue 37): every map output is committed to a
/// directory all executors see, so a kill -9 after the map stage loses no output and no
/// map task runs again; the copies go when the application ends.
#[test]
fn with_stored_shuffle_outputs_a_killed_executor_reruns_no_map_task() {
    let scratch = tempfile::tempdir().unwrap();
    let Stored {
        want,
        store,
        mut cluster,
        run,
    } = start_stored(scratch.path());
    let (shuffle, held) = first_shuffle(&cluster, 3);
    assert_eq!(held.iter().map(Vec::len).sum::<usize>(), 6, "{held:?}");
    // One directory of this application's own, with a copy of every map output of the
    // first shuffle, each byte for byte its executor's file.
    let apps: Vec<PathBuf> = fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(apps.len(), 1, "{apps:?}");
    let app = &apps[0];
    assert!(app
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("ember-app-"));
    for (i, names) in held.iter().enumerate() {
        for name in names {
            let local = fs::read(cluster.executor_dir(i).join("shuffle").join(name)).unwrap();
            let file = Path::new(name).file_name().unwrap();
            let copy = fs::read(app.join(file))
                .unwrap_or_else(|e| panic!("no stored copy of {name}: {e}"));
            assert_eq!(copy, local, "the stored copy of {name}");
        }
    }
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    assert!(!held[victim].is_empty());
    cluster.signal_executor(victim, "KILL");
    let (out, records, console) = run.open_and_finish_with_console(&cluster);
    assert_eq!(
        (out, records),
        want,
        "output differs from the fault-free run"
    );
    // The client's console names the executor and says its outputs come from storage.
    let kept = held[victim].len();
    assert!(
        console.contains(&format!("its {kept} map output(s) are read from storage"))
            && console.contains("lost executor executor-"),
        "{console}"
    );
    let log = cluster.driver_log();
    assert!(log.contains("executor lost"), "{log}");
    assert!(
        log.contains("map outputs of the lost executor are read from storage"),
        "{log}"
    );
    // The map stage ran once, in full, and never again.
    assert_eq!(
        submissions(&log, shuffle),
        vec![6],
        "map stage submissions:\n{log}"
    );
    // The application's copies are gone with it.
    assert!(!app.exists(), "{} is left behind", app.display());
}

/// Stored copies that are missing or damaged when their executor is gone: the first bad
/// copy a reducer finds makes every stored copy of that executor's outputs of the
/// shuffle suspect, and lineage recomputes them in one stage attempt; the answer is
/// exact.
#[test]
fn a_damaged_stored_copy_falls_back_to_lineage_for_that_executors_outputs() {
    let scratch = tempfile::tempdir().unwrap();
    let Stored {
        want,
        store,
        mut cluster,
        run,
    } = start_stored(scratch.path());
    let (shuffle, held) = first_shuffle(&cluster, 3);
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    let names = &held[victim];
    assert!(names.len() >= 2, "the victim holds two outputs: {held:?}");
    let app = fs::read_dir(&store)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let copy = |name: &String| app.join(Path::new(name).file_name().unwrap());
    // One copy deleted, another with a flipped byte in every block (whichever reducer
    // reads it from storage finds the damage; a reducer that fetched it from the victim
    // before the kill does not need to).
    fs::remove_file(copy(&names[0])).unwrap();
    let file = copy(&names[1]);
    let mut bytes = fs::read(&file).unwrap();
    flip_a_byte_in_every_block(&mut bytes);
    fs::write(&file, bytes).unwrap();
    let (sid, map) =
        ember::shuffle::parse_file_name(&file.file_name().unwrap().to_string_lossy()).unwrap();
    for r in 0..6 {
        let id = ember::shuffle::BlockId {
            executor_id: "check".into(),
            shuffle_id: sid,
            map_partition: map,
            reduce_partition: r,
        };
        let read = ember::shuffle::read_local_block(&app, &id);
        assert!(
            read.is_err() || read.unwrap().is_empty(),
            "block {r} reads back clean"
        );
    }
    cluster.signal_executor(victim, "KILL");
    let (out, records) = run.open_and_finish(&cluster);
    assert_eq!(
        (out, records),
        want,
        "output differs from the fault-free run"
    );
    let log = cluster.driver_log();
    assert!(
        log.contains("map outputs of the lost executor are read from storage"),
        "{log}"
    );
    // The map stage ran in full once; then, as a stored copy was found bad, the
    // victim's outputs of that shuffle ran again, once each, and no other output did.
    let runs = submissions(&log, shuffle);
    assert_eq!(
        runs,
        vec![6, names.len()],
        "the victim held {names:?}\n{log}"
    );
}

/// Flips the middle byte of every non-empty block of a map output file (blocks, then
/// the index: `20 * R + 16` bytes, see `shuffle/src/index.rs`).
fn flip_a_byte_in_every_block(file: &mut [u8]) {
    let n = file.len();
    let r = u32::from_le_bytes(file[n - 16..n - 12].try_into().unwrap()) as usize;
    let index = n - (20 * r + 16);
    for b in 0..r {
        let e = index + 20 * b;
        let offset = u64::from_le_bytes(file[e..e + 8].try_into().unwrap()) as usize;
        let len = u64::from_le_bytes(file[e + 8..e + 16].try_into().unwrap()) as usize;
        if len > 0 {
            file[offset + len / 2] ^= 0x5a;
        }
    }
}

#[test]
fn killing_an_executor_during_the_map_stage_still_gives_the_same_output() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 3000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start(3, 1, None);
    let out = s.join("out");
    let client = spawn_faultjob(&cluster, &["--map-delay-ms", "150"], &input, &out, s);
    // Some map outputs exist, others are still being written.
    wait_for("a first map output", Duration::from_secs(60), || {
        first_shuffle_outputs(&cluster, 3)
            .iter()
            .any(|v| !v.is_empty())
    });
    let done: usize = first_shuffle_outputs(&cluster, 3)
        .iter()
        .map(Vec::len)
        .sum();
    assert!(done < 6, "the map stage finished before the kill");
    cluster.signal_executor(1, "KILL");
    let run = client.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert_eq!((output(&out), parsed(&run)), want);
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
    let run = start_gated(&cluster, &input, s);
    cluster.kill_driver();
    let started = Instant::now();
    let result = run.client.wait();
    assert!(!result.success);
    assert!(
        result.stderr.contains("driver"),
        "a clear error naming the driver: {result:?}"
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
