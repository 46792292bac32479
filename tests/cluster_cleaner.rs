//! The context cleaner in cluster mode, with real processes (a driver and two
//! executors on 127.0.0.1): a client running 50 jobs that each create and drop a new
//! shuffle keeps the executors' shuffle directories bounded while it runs, and empty
//! once it has dropped everything, while its session is still open (so it is the
//! cleaner's `ReleaseShuffles`, not the session's end, that deleted them).

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::Cluster;

/// Shuffles whose files may be on the executors at any moment (a leak would reach 50).
const BOUND: usize = 16;

/// The shuffle ids and number of files in the executors' shuffle directories.
fn on_disk(cluster: &Cluster, executors: usize) -> (BTreeSet<u32>, usize) {
    let mut ids = BTreeSet::new();
    let mut files = 0;
    for i in 0..executors {
        // Shuffle files live in one directory per session: `shuffle/session-<i>/`.
        let dir = cluster.executor_dir(i).join("shuffle");
        for session in fs::read_dir(&dir).into_iter().flatten().flatten() {
            for e in fs::read_dir(session.path()).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = ember::shuffle::shuffle_id_of_file(&name);
                ids.extend(id);
                files += 1;
            }
        }
    }
    (ids, files)
}

fn exists(p: &Path) -> bool {
    p.exists()
}

#[test]
fn fifty_shuffle_jobs_on_a_cluster_keep_the_executors_shuffle_dirs_bounded() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(2, 2, None);
    let gate = s.join("gate");
    fs::create_dir_all(&gate).unwrap();
    let mut job = cluster.spawn(
        "manyshuffles",
        &["--jobs", "50", "--gate", gate.to_str().unwrap()],
        s,
    );
    // While the jobs run: never more than a few shuffles' files.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = BTreeSet::new();
    let mut worst = 0;
    while !exists(&gate.join("done")) {
        assert!(
            !job.finished(),
            "the client ended before its gate: {}",
            cluster.logs()
        );
        assert!(Instant::now() < deadline, "the 50 jobs did not finish");
        let (ids, _) = on_disk(&cluster, 2);
        worst = worst.max(ids.len());
        assert!(
            ids.len() <= BOUND,
            "files of {} shuffles on the executors: {ids:?}",
            ids.len()
        );
        seen.extend(ids);
        std::thread::sleep(Duration::from_millis(5));
    }
    // Everything dropped, session still open: the files go (eventually).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ids, files) = on_disk(&cluster, 2);
        if files == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{files} shuffle files of {ids:?} left on the executors after the client \
             dropped every RDD\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !seen.is_empty(),
        "no shuffle file was ever seen: the test saw nothing"
    );
    assert!(!job.finished(), "the session must still be open here");
    assert_eq!(cluster.status().unwrap().sessions, 1);
    eprintln!(
        "50 cluster jobs: at most {worst} shuffles' files on the executors at once; \
         {} distinct shuffles seen; 0 files before the session ended",
        seen.len()
    );
    fs::write(gate.join("open"), b"").unwrap();
    let run = job.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert!(run.stdout.contains("jobs ok: 50"), "{run:?}");
}
