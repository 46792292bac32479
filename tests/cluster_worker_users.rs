//! Job code under `ember-executor --worker-uids`: each session's workers run as a uid
//! of its own, so a job can read neither the executor's secret file nor another
//! session's shuffle files, while jobs still give exactly local mode's results.
//!
//! Needs root (the executor starts workers as other users); as another user the test
//! says so and checks only that the executor refuses the flag.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::{daemon_bin, Cluster};
use common::process::run_example;

const SECRET: &str = "cluster-secret-of-the-worker-uid-test";
/// Uids and a group no account on a test machine uses.
const FIRST_UID: u32 = 3_998_000;
const UIDS: &str = "3998000-3998009";
const GID: &str = "3998000";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn worker_uid(uid: u32) -> bool {
    (FIRST_UID..FIRST_UID + 10).contains(&uid)
}

/// Waits up to 60 s for `cond`.
fn eventually(what: &str, cluster: &Cluster, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sorted lines of every part file in `dir`.
fn lines(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with("part-") {
            out.extend(
                fs::read_to_string(entry.path())
                    .unwrap()
                    .lines()
                    .map(String::from),
            );
        }
    }
    out.sort();
    out
}

/// The shuffle data files under the executor's `shuffle/` and the session directories
/// holding them.
fn shuffle_files(work_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(sessions) = fs::read_dir(work_dir.join("shuffle")) else {
        return files;
    };
    for session in sessions.flatten() {
        for f in fs::read_dir(session.path()).into_iter().flatten().flatten() {
            if f.file_name().to_string_lossy().ends_with(".data") {
                files.push(f.path());
            }
        }
    }
    files
}

#[test]
fn each_session_runs_as_its_own_uid_and_reads_no_secret_nor_another_sessions_shuffle() {
    if !is_root() {
        // Without root the flag must be refused at start, naming why.
        let out = std::process::Command::new(daemon_bin("ember-executor"))
            .args(["--driver", "http://127.0.0.1:9", "--worker-uids", UIDS])
            .args(["--worker-gid", GID])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("needs the executor to run as root"),
            "{stderr}"
        );
        eprintln!("not root: only checked that --worker-uids is refused");
        return;
    }
    // Four cores: A's two reduce tasks hold two while they wait at the gate.
    let cluster = Cluster::start_with(
        1,
        4,
        Some(SECRET),
        &[],
        &["--worker-uids", UIDS, "--worker-gid", GID],
        &[],
    );
    // Inputs and outputs where the worker uids may read and write.
    // Outputs: the scratch dir is the worker group's and setgid, as the README says an
    // output's parent must be.
    let scratch = tempfile::tempdir().unwrap();
    let gid: u32 = GID.parse().unwrap();
    std::os::unix::fs::chown(scratch.path(), None, Some(gid)).unwrap();
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o2775)).unwrap();
    let s = scratch.path();
    let input = s.join("kv.txt");
    let text: String = (0..3000).map(|i| format!("{},{}\n", i % 97, i)).collect();
    fs::write(&input, text).unwrap();
    let gate = s.join("gate");
    fs::create_dir(&gate).unwrap();
    fs::set_permissions(&gate, fs::Permissions::from_mode(0o777)).unwrap();

    // Session A stops between its two stages, its map output on the executor's disk.
    let a_out = s.join("a-out");
    let args = |out: &Path, gate: Option<&Path>| {
        let mut v: Vec<String> = vec!["--partitions".into(), "2".into()];
        if let Some(g) = gate {
            v.extend(["--gate".into(), g.display().to_string()]);
        }
        v.extend([input.display().to_string(), out.display().to_string()]);
        v
    };
    let a_args = args(&a_out, Some(&gate));
    let a_refs: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let a = cluster.spawn("faultjob", &a_refs, s);
    let marker = gate.join("waiting-0");
    eventually("session A to reach its gate", &cluster, || marker.exists());
    let work = cluster.executor_dir(0);
    let a_files = shuffle_files(&work);
    assert!(
        !a_files.is_empty(),
        "no shuffle files under {}",
        work.display()
    );
    // A's job code ran as a worker uid with the worker group, and its shuffle directory
    // is that uid's alone.
    let a_uid = fs::metadata(&marker).unwrap().uid();
    assert!(
        worker_uid(a_uid),
        "the gate marker was written by uid {a_uid}"
    );
    assert_eq!(fs::metadata(&marker).unwrap().gid().to_string(), GID);
    let a_dir = a_files[0].parent().unwrap().to_path_buf();
    let meta = fs::metadata(&a_dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (a_uid, 0o700));
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&work.join("shuffle")), 0o711);
    assert_eq!(mode(&work.join("workers")), 0o711);

    // Session B's job code cannot read A's shuffle file, nor the executor's secret.
    let secret_file = cluster.dir().join("executor-secret");
    assert_eq!(mode(&secret_file), 0o600);
    for (i, target) in [a_files[0].clone(), secret_file].iter().enumerate() {
        let out = s.join(format!("b-out-{i}"));
        let run = cluster.run(
            "wordcount",
            &[target.to_str().unwrap(), out.to_str().unwrap()],
            s,
        );
        assert!(
            !run.success,
            "a job read {} through a worker: {run:?}",
            target.display()
        );
        assert!(
            run.stderr.contains("Permission denied")
                && run.stderr.contains(&*target.to_string_lossy()),
            "expected a permission error naming {}: {run:?}",
            target.display()
        );
    }

    // Session C, while A still holds its uid, runs as another uid and gets exactly
    // local mode's word counts.
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample-text");
    let (c_out, local_out) = (s.join("c-out"), s.join("c-local"));
    let run = cluster.run(
        "wordcount",
        &[sample.to_str().unwrap(), c_out.to_str().unwrap()],
        s,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    let local = run_example(
        "wordcount",
        &[
            "--master",
            "local[2]",
            sample.to_str().unwrap(),
            local_out.to_str().unwrap(),
        ],
        s,
    );
    assert!(local.success, "{local:?}");
    assert_eq!(lines(&c_out), lines(&local_out));
    assert!(!lines(&c_out).is_empty());
    let part = fs::read_dir(&c_out)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .unwrap()
        .path();
    let c_uid = fs::metadata(&part).unwrap().uid();
    assert!(
        worker_uid(c_uid) && c_uid != a_uid,
        "C wrote as uid {c_uid}, A runs as {a_uid}"
    );

    // A goes on and finishes with local mode's result; its session's shuffle directory
    // is gone once it ended.
    fs::write(gate.join("open"), b"").unwrap();
    let a = a.wait();
    assert!(a.success, "{a:?}\n{}", cluster.logs());
    let a_local = s.join("a-local");
    let local_args = args(&a_local, None);
    let mut refs: Vec<&str> = vec!["--master", "local[2]"];
    refs.extend(local_args.iter().map(String::as_str));
    let local = run_example("faultjob", &refs, s);
    assert!(local.success, "{local:?}");
    assert_eq!(lines(&a_out), lines(&a_local));
    eventually(
        "session A's shuffle directory to be removed",
        &cluster,
        || !a_dir.exists(),
    );

    // A barrier stage under worker uids: its ranks listen on TCP (a worker's private
    // socket directory is closed to other uids) and still agree with local mode.
    let logreg = ["--rows", "2000", "--features", "4", "--iterations", "5"];
    let run = cluster.run("logreg", &logreg, s);
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    let mut local_args = vec!["--master", "local[4]"];
    local_args.extend(logreg);
    let local = run_example("logreg", &local_args, s);
    assert!(local.success, "{local:?}");
    let weights = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("weights="))
            .map(str::to_string)
    };
    assert_eq!(weights(&run.stdout), weights(&local.stdout));
    assert!(weights(&run.stdout).is_some(), "{}", run.stdout);
}
