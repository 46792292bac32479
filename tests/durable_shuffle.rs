//! Shuffle output that outlives its executor (issue 37), with real processes: the gated
//! faultjob (`examples/faultjob.rs --gate DIR`) on 3 one-core executors, one executor
//! killed while the second stage waits at the gate. With `storage:DIR` or
//! `replicated:1` durability no map task of the first stage runs again, and the output
//! is exactly a fault-free run's; a missing or damaged copy, or a copy that was never
//! made, falls back to lineage with the same exact output.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::Cluster;
use common::faultjob::*;

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
    let console = run.kill_and_finish(&mut cluster, victim, &want);
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
    run.kill_and_finish(&mut cluster, victim, &want);
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

/// Every copy of the first shuffle's map outputs on the cluster's executors: file name
/// -> (executor, bytes) of each copy.
fn copies(cluster: &Cluster, executors: usize) -> BTreeMap<String, Vec<(usize, Vec<u8>)>> {
    let mut all: BTreeMap<String, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
    for (i, names) in first_shuffle_outputs(cluster, executors)
        .into_iter()
        .enumerate()
    {
        for name in names {
            let path = cluster.executor_dir(i).join("shuffle").join(&name);
            let file = Path::new(&name)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            all.entry(file)
                .or_default()
                .push((i, fs::read(&path).unwrap()));
        }
    }
    all
}

/// A gated faultjob with `replicated:1` durability on 3 one-core executors (with a
/// cluster secret, so pushes carry the executor secret), and a fault-free run's output.
/// The executors log each replication (`map output replicated`, see [`writers`]).
fn start_replicated(s: &Path) -> (Cluster, GateRun, (String, u64)) {
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let cluster = Cluster::start_with(
        3,
        1,
        Some("replication-test-secret-0123456789abcdef"),
        &[],
        &[],
        &[("EMBER_LOG", "info,ember_executor::replicate=debug")],
    );
    let run = start_gated_with_env(
        &cluster,
        &input,
        s,
        &[("EMBER_SHUFFLE_DURABILITY", "replicated:1")],
    );
    (cluster, run, want)
}

/// Which executor wrote (and pushed) each map output of `shuffle`, from the executors'
/// logs: map partition -> executor index.
fn writers(cluster: &Cluster, executors: usize, shuffle: u32) -> BTreeMap<u32, usize> {
    let mut by_map = BTreeMap::new();
    for i in 0..executors {
        let log = fs::read_to_string(cluster.dir().join(format!("executor-{i}.log"))).unwrap();
        for line in log.lines().filter(|l| l.contains("map output replicated")) {
            let field = |name: &str| -> Option<u32> {
                line.split(&format!("{name}="))
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            };
            if field("shuffle_id") == Some(shuffle) {
                by_map.insert(field("map").unwrap(), i);
            }
        }
    }
    by_map
}

/// `replicated:1` (issue 37): each map output is pushed to one other executor before its
/// task counts as finished, so a kill -9 after the map stage loses no output and no map
/// task runs again; reducers read the dead executor's outputs from their replicas.
#[test]
fn with_replicated_shuffle_outputs_a_killed_executor_reruns_no_map_task() {
    let scratch = tempfile::tempdir().unwrap();
    let (mut cluster, run, want) = start_replicated(scratch.path());
    let (shuffle, _) = first_shuffle(&cluster, 3);
    // Every output is on exactly two executors, byte for byte the same.
    let all = copies(&cluster, 3);
    assert_eq!(all.len(), 6, "{:?}", all.keys());
    for (name, held) in &all {
        assert_eq!(
            held.len(),
            2,
            "{name} is on executors {:?}",
            held.iter().map(|c| c.0).collect::<Vec<_>>()
        );
        assert_ne!(held[0].0, held[1].0, "{name}");
        assert_eq!(
            held[0].1, held[1].1,
            "the replica of {name} is its output byte for byte"
        );
    }
    let wrote = writers(&cluster, 3, shuffle);
    assert_eq!(
        wrote.len(),
        6,
        "every output was replicated by its writer: {wrote:?}"
    );
    let mut originals = [0usize; 3];
    for i in wrote.values() {
        originals[*i] += 1;
    }
    let victim = (0..3).max_by_key(|i| originals[*i]).unwrap();
    let kept = originals[victim];
    assert!(kept > 0);
    let console = run.kill_and_finish(&mut cluster, victim, &want);
    assert!(
        console.contains("lost executor executor-")
            && console.contains(&format!(
                "its {kept} map output(s) are served by replicas on other executors"
            )),
        "{console}"
    );
    let log = cluster.driver_log();
    assert!(
        log.contains("map outputs of the lost executor are served by their replicas"),
        "{log}"
    );
    // The map stage ran once, in full, and never again.
    assert_eq!(
        submissions(&log, shuffle),
        vec![6],
        "map stage submissions:\n{log}"
    );
}

/// A damaged replica of a killed executor's output: the reducer that reads it finds the
/// damage (its blocks' crc32s), and lineage recomputes what is lost; the answer is exact.
#[test]
fn a_damaged_replica_falls_back_to_lineage() {
    let scratch = tempfile::tempdir().unwrap();
    let (mut cluster, run, want) = start_replicated(scratch.path());
    let (shuffle, _) = first_shuffle(&cluster, 3);
    let all = copies(&cluster, 3);
    // The victim: an executor with an output of its own; damage every replica of its
    // outputs (the copy on the other executor).
    let wrote = writers(&cluster, 3, shuffle);
    let victim = *wrote.values().next().unwrap();
    let mut damaged = 0;
    for (name, held) in &all {
        let (_, map) = ember::shuffle::parse_file_name(name).unwrap();
        if wrote[&map] != victim {
            continue;
        }
        let replica = held.iter().find(|c| c.0 != victim).unwrap();
        let dir = cluster.executor_dir(replica.0).join("shuffle");
        let path = first_shuffle_outputs(&cluster, 3)[replica.0]
            .iter()
            .find(|n| n.ends_with(name.as_str()))
            .map(|n| dir.join(n))
            .unwrap();
        let mut bytes = replica.1.clone();
        flip_a_byte_in_every_block(&mut bytes);
        fs::write(&path, bytes).unwrap();
        damaged += 1;
    }
    assert!(damaged > 0);
    run.kill_and_finish(&mut cluster, victim, &want);
    let log = cluster.driver_log();
    assert!(
        log.contains("fetch failure"),
        "a reducer found the damage:\n{log}"
    );
    let runs = submissions(&log, shuffle);
    assert!(
        runs.len() >= 2 && runs[0] == 6 && runs[1..].iter().all(|n| (1..6).contains(n)),
        "the map stage ran in full once, then only for lost outputs: {runs:?}\n{log}"
    );
}

/// An executor killed while the map stage runs and pushes its outputs: pushes to it fail
/// (those outputs keep no replica), its own outputs are lost; lineage reruns what has no
/// copy, and the answer is exact.
#[test]
fn an_executor_killed_while_outputs_are_pushed_to_it_still_gives_the_same_output() {
    let scratch = tempfile::tempdir().unwrap();
    let replicated = [("EMBER_SHUFFLE_DURABILITY", "replicated:1")];
    // 6 outputs and their 6 replicas when the map stage is done.
    kill_during_the_map_stage(scratch.path(), &replicated, 12);
}

/// SIGTERM (what `docker stop` and a Kubernetes scale-down send) with `local`
/// durability: the executor decommissions. It takes no more tasks, its running
/// second-stage task finishes once the gate opens, its map outputs move to the other
/// executors, and it exits 0; no map task runs again and the output is exact.
#[test]
fn a_sigterm_decommissions_the_executor_and_no_map_task_runs_again() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let mut cluster = Cluster::start(3, 1, None);
    // The last stage takes a while: the executor is gone before the job ends.
    let run = start_gated_with(&cluster, &input, s, &["--reduce-delay-ms", "1500"], &[]);
    // Every executor's one slot holds a second-stage task waiting at the gate.
    wait_for("three tasks at the gate", Duration::from_secs(60), || {
        fs::read_dir(&run.gate)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("waiting-"))
            .count()
            == 3
    });
    let (shuffle, held) = first_shuffle(&cluster, 3);
    let victim = (0..3).max_by_key(|i| held[*i].len()).unwrap();
    cluster.signal_executor(victim, "TERM");
    // It waits for its running task rather than leave.
    std::thread::sleep(Duration::from_millis(500));
    assert!(cluster.all_alive(), "{}", cluster.logs());
    let (out, records, console) = run.open_and_finish_with_console(&cluster);
    assert_eq!(
        (out, records),
        want,
        "output differs from the fault-free run"
    );
    let status = cluster.wait_executor(victim, Duration::from_secs(60));
    assert!(
        status.success(),
        "the decommissioned executor exited {status}"
    );
    // The job heard of it, and why its outputs did not need recomputing.
    assert!(
        console.contains("was decommissioned; its ")
            && console.contains("map output(s) moved to other executors"),
        "{console}"
    );
    let log = cluster.driver_log();
    assert!(log.contains("executor decommissioned"), "{log}");
    let moved: usize = log
        .lines()
        .filter(|l| l.contains("map outputs moved off a decommissioning executor"))
        .filter_map(|l| {
            l.split("outputs=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert!(
        moved >= held[victim].len(),
        "{moved} outputs moved, the victim held {} of the first shuffle:\n{log}",
        held[victim].len()
    );
    // Neither map stage ran again: the first shuffle's outputs and the second's (the
    // task that finished during the decommission included) moved.
    assert_eq!(submissions(&log, shuffle), vec![6], "{log}");
    assert_eq!(submissions(&log, shuffle + 1), vec![6], "{log}");
}

/// The `block_cached` events of the driver's event logs under `events`: (executor id,
/// the executor it was moved from, or "").
fn cached_events(events: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in fs::read_dir(events).into_iter().flatten().flatten() {
        let text = fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            if !line.contains("\"event\":\"block_cached\"") {
                continue;
            }
            let field = |name: &str| -> String {
                let tag = format!("\"{name}\":\"");
                line.split_once(&tag)
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(v, _)| v.to_string())
                    .unwrap_or_default()
            };
            out.push((field("executor_id"), field("moved_from")));
        }
    }
    out
}

/// The id executor `i` registered with (from its log).
fn executor_id(cluster: &Cluster, i: usize) -> String {
    let log = fs::read_to_string(cluster.dir().join(format!("executor-{i}.log"))).unwrap();
    log.lines()
        .filter(|l| l.contains("registered with the driver"))
        .find_map(|l| {
            let rest = l.split_once("executor_id=")?.1;
            Some(
                rest.split_whitespace()
                    .next()?
                    .trim_matches('"')
                    .to_string(),
            )
        })
        .unwrap_or_else(|| panic!("no registration in {log}"))
}

/// SIGTERM of an executor holding cached partitions between two jobs (issue 37): it
/// decommissions, its cached blocks (held nowhere else) move to the other executors,
/// and the next job reads them there. The input is parsed once over both jobs (no
/// cached partition is computed again) and the output is exactly a fault-free run's;
/// the event log says where each block went and where it came from.
#[test]
fn a_sigterm_moves_cached_blocks_and_the_next_job_computes_none_again() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = kv_input(s, 4000);
    let want = reference(&input, s);
    let events = s.join("events");
    let mut cluster = Cluster::start_with(
        3,
        1,
        None,
        &["--event-log-dir", events.to_str().unwrap()],
        &[],
        &[],
    );
    let gate = s.join("cache-gate");
    fs::create_dir_all(&gate).unwrap();
    let out = s.join("out");
    let client = spawn_faultjob(
        &cluster,
        &["--cache-gate", gate.to_str().unwrap()],
        &input,
        &out,
        s,
    );
    wait_for("six cached blocks", Duration::from_secs(60), || {
        gate.join("cached").exists() && cached_events(&events).len() == 6
    });
    let ids: Vec<String> = (0..3).map(|i| executor_id(&cluster, i)).collect();
    let held = |i: usize| {
        cached_events(&events)
            .iter()
            .filter(|(e, _)| *e == ids[i])
            .count()
    };
    let victim = (0..3).max_by_key(|i| held(*i)).unwrap();
    let victim_blocks = held(victim);
    assert!(victim_blocks > 0);
    cluster.signal_executor(victim, "TERM");
    let status = cluster.wait_executor(victim, Duration::from_secs(60));
    assert!(
        status.success(),
        "the decommissioned executor exited {status}\n{}",
        cluster.logs()
    );
    fs::write(gate.join("go"), b"").unwrap();
    let run = client.wait();
    assert!(run.success, "the job failed: {run:?}\n{}", cluster.logs());
    assert_eq!(
        (output(&out), parsed(&run)),
        want,
        "output or parse count differs from the fault-free run (a count above the \
         input's lines means cached partitions were computed again)\n{}",
        cluster.logs()
    );
    let log = cluster.driver_log();
    assert!(
        log.lines().any(
            |l| l.contains("cached blocks moved off a decommissioning executor")
                && l.contains(&format!("blocks={victim_blocks}"))
        ),
        "{log}"
    );
    let moved: Vec<(String, String)> = cached_events(&events)
        .into_iter()
        .filter(|(_, from)| !from.is_empty())
        .collect();
    assert_eq!(moved.len(), victim_blocks, "{moved:?}");
    assert!(
        moved
            .iter()
            .all(|(to, from)| *from == ids[victim] && *to != ids[victim]),
        "{moved:?}"
    );
}
