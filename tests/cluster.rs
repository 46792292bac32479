//! Cluster mode with real processes: a driver and three executors on 127.0.0.1, the
//! example jobs submitted to them with `--master http://...`, results compared with the
//! same jobs in local mode; concurrent clients; the shared secret; binary hash checks;
//! a failing job leaving the daemons healthy; session cleanup of shuffle files.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::cluster::Cluster;
use common::process::run_example;
use common::SplitMix;

/// Writes `files` input files of `lines` lines each under `dir/name`; returns the dir.
fn inputs(
    dir: &Path,
    name: &str,
    files: usize,
    lines: usize,
    mut line: impl FnMut(&mut SplitMix) -> String,
) -> PathBuf {
    let d = dir.join(name);
    fs::create_dir_all(&d).unwrap();
    let mut rng = SplitMix::new(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    for f in 0..files {
        let text: String = (0..lines).map(|_| line(&mut rng) + "\n").collect();
        fs::write(d.join(format!("part-{f}.txt")), text).unwrap();
    }
    d
}

fn text(rng: &mut SplitMix) -> String {
    const WORDS: [&str; 12] = [
        "ember",
        "spark",
        "rdd",
        "shuffle",
        "stage",
        "task",
        "lineage",
        "driver",
        "executor",
        "partition",
        "Ünïcode",
        "x",
    ];
    (0..1 + rng.below(12))
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn kv(rng: &mut SplitMix) -> String {
    format!(
        "{},{}.{:03}",
        rng.below(5000),
        rng.below(1000),
        rng.below(1000)
    )
}

fn edge(rng: &mut SplitMix) -> String {
    format!("n{} n{}", rng.below(200), rng.below(200))
}

/// The part files of an output directory, by name, with their contents.
fn output(dir: &Path) -> Vec<(String, String)> {
    assert!(
        dir.join("_SUCCESS").exists(),
        "{} has no _SUCCESS",
        dir.display()
    );
    let mut parts: Vec<(String, String)> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part-"))
        .map(|n| (n.clone(), fs::read_to_string(dir.join(&n)).unwrap()))
        .collect();
    parts.sort();
    parts
}

/// Runs `name` in local mode (3 slots) and on the cluster with the same arguments and
/// asserts that the outputs are identical part by part.
fn same_as_local(cluster: &Cluster, scratch: &Path, name: &str, input: &Path, extra: &[&str]) {
    let local_out = scratch.join(format!("{name}-local"));
    let cluster_out = scratch.join(format!("{name}-cluster"));
    let mut args: Vec<&str> = vec!["--partitions", "3"];
    args.extend_from_slice(extra);
    let input = input.to_str().unwrap();
    let mut local_args = vec!["--master", "local[3]"];
    local_args.extend(&args);
    local_args.extend([input, local_out.to_str().unwrap()]);
    let local = run_example(name, &local_args, scratch);
    assert!(local.success, "{name} in local mode: {local:?}");
    let mut cluster_args = args.clone();
    cluster_args.extend([input, cluster_out.to_str().unwrap()]);
    let run = cluster.run(name, &cluster_args, scratch);
    assert!(
        run.success,
        "{name} on the cluster: {run:?}\n{}",
        cluster.logs()
    );
    let (want, got) = (output(&local_out), output(&cluster_out));
    assert!(
        !want.iter().all(|(_, t)| t.is_empty()),
        "{name} wrote nothing"
    );
    assert_eq!(got, want, "{name}: cluster output differs from local mode");
}

#[test]
fn examples_on_a_cluster_match_local_mode_and_sessions_clean_up() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(3, 1, None);
    let words = inputs(s, "words", 4, 3000, text);
    let kvs = inputs(s, "kv", 3, 4000, kv);
    let edges = inputs(s, "edges", 2, 1500, edge);
    same_as_local(&cluster, s, "wordcount", &words, &[]);
    same_as_local(&cluster, s, "kvsum", &kvs, &[]);
    same_as_local(&cluster, s, "sort", &kvs, &[]);
    same_as_local(&cluster, s, "join", &kvs, &["--min-count", "2"]);
    same_as_local(&cluster, s, "pagerank", &edges, &["--iterations", "4"]);

    // Every job ran on more than one executor: map outputs moved between them.
    let status = cluster.status().unwrap();
    assert_eq!(status.executors.len(), 3);
    // Each client's session ended with its process: its shuffle files are deleted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<PathBuf> = (0..3)
            .flat_map(|i| {
                fs::read_dir(cluster.dir().join(format!("executor-{i}/shuffle")))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .map(|e| e.path())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "shuffle files left after the sessions ended: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn two_clients_at_once_both_get_right_results() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(3, 1, None);
    let words = inputs(s, "words", 3, 4000, text);
    let kvs = inputs(s, "kv", 3, 4000, kv);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| same_as_local(&cluster, s, "wordcount", &words, &[]));
        let b = scope.spawn(|| same_as_local(&cluster, s, "kvsum", &kvs, &[]));
        a.join().unwrap();
        b.join().unwrap();
    });
}

#[test]
fn a_panicking_job_fails_with_its_message_and_the_daemons_stay_healthy() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let mut cluster = Cluster::start(3, 1, None);
    let bad = s.join("bad");
    fs::create_dir_all(&bad).unwrap();
    fs::write(bad.join("a.txt"), "1,2\n2,3\nthis is not a kv line\n3,4\n").unwrap();
    let out = s.join("bad-out");
    let run = cluster.run("kvsum", &[bad.to_str().unwrap(), out.to_str().unwrap()], s);
    assert!(!run.success, "a malformed line must fail the job");
    assert!(
        run.stderr.contains("malformed line at") && run.stderr.contains("a.txt:3"),
        "the job's error names the bad line: {run:?}"
    );
    assert!(!out.join("_SUCCESS").exists());
    assert!(cluster.all_alive(), "a daemon died:\n{}", cluster.logs());
    assert_eq!(cluster.status().unwrap().executors.len(), 3);
    let words = inputs(s, "words", 2, 500, text);
    same_as_local(&cluster, s, "wordcount", &words, &[]);
}

#[test]
fn the_shared_secret_is_required() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let mut cluster = Cluster::start(1, 1, Some("correct-horse"));
    let words = inputs(s, "words", 1, 200, text);
    let input = words.to_str().unwrap();
    let url = cluster.url.clone();
    for (secret, needle) in [
        (None, "missing cluster secret"),
        (Some("wrong"), "wrong secret"),
    ] {
        let out = s.join(format!("out-{secret:?}"));
        let envs: Vec<(&str, &str)> = secret
            .map(|v| vec![("EMBER_SECRET", v)])
            .unwrap_or_default();
        let run = common::process::run_example_env(
            "wordcount",
            &["--master", &url, input, out.to_str().unwrap()],
            s,
            &envs,
        );
        assert!(
            !run.success,
            "a client with secret {secret:?} must be refused"
        );
        assert!(run.stderr.contains(needle), "expected {needle:?}: {run:?}");
    }
    let driver_log = fs::read_to_string(cluster.dir().join("driver.log")).unwrap();
    assert!(
        driver_log.contains("refused a call"),
        "refusals are logged:\n{driver_log}"
    );

    // An executor with the wrong secret is refused and stops with a clear message.
    let wrong = s.join("wrong-executor-secret");
    fs::write(&wrong, "wrong").unwrap();
    let exec = std::process::Command::new(common::cluster::daemon_bin("ember-executor"))
        .args(["--driver", &url, "--cores", "1", "--shuffle-port", "0"])
        .arg("--executor-secret-file")
        .arg(&wrong)
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_EXECUTOR_SECRET_FILE")
        .output()
        .unwrap();
    assert_eq!(exec.status.code(), Some(1), "{exec:?}");
    assert!(
        String::from_utf8_lossy(&exec.stderr).contains("secret"),
        "{exec:?}"
    );

    // With the right secret the job runs.
    same_as_local(&cluster, s, "wordcount", &words, &[]);
    assert!(cluster.all_alive());
}

#[test]
fn a_binary_whose_hash_does_not_match_is_refused() {
    let cluster = Cluster::start(0, 1, None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async {
        let mut client = ember_proto::driver_client::DriverClient::connect(cluster.url.clone())
            .await
            .unwrap();
        let declared = "0".repeat(64);
        let chunk = ember_proto::BinaryChunk {
            sha256: declared,
            total_len: 5,
            data: b"hello".to_vec(),
            ..Default::default()
        };
        client
            .upload_binary(tokio_stream::iter(vec![chunk]))
            .await
            .unwrap_err()
    });
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("hash mismatch"), "{err:?}");
}

#[test]
fn executors_re_register_with_a_restarted_driver() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let mut cluster = Cluster::start(2, 1, None);
    let words = inputs(s, "words", 2, 500, text);
    same_as_local(&cluster, s, "wordcount", &words, &[]);
    cluster.restart_driver();
    cluster.wait_for_executors(2);
    assert!(cluster.all_alive(), "{}", cluster.logs());
    // The new driver has no binary yet: the client uploads it again, executors reuse
    // theirs (same hash) and run the job.
    let again = s.join("again");
    fs::create_dir_all(&again).unwrap();
    same_as_local(&cluster, &again, "wordcount", &words, &[]);
}

#[test]
fn a_client_that_dies_mid_job_has_its_job_cancelled_and_tasks_killed() {
    client_ended_mid_job_has_its_job_cancelled(libc::SIGKILL);
}

/// Ctrl-C of a cluster-mode client: no handler of ember's is installed there, the
/// client dies of the signal and the driver cancels its job as for a crash.
#[test]
fn a_client_interrupted_mid_job_has_its_job_cancelled_and_tasks_killed() {
    client_ended_mid_job_has_its_job_cancelled(libc::SIGINT);
}

fn client_ended_mid_job_has_its_job_cancelled(signal: i32) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(2, 1, None);
    // Big enough that the job is still running when the client is killed.
    let words = inputs(s, "words", 4, 150_000, text);
    let out = s.join("out");
    let mut cmd = std::process::Command::new(common::process::example_bin("wordcount"));
    cmd.args(["--master", &cluster.url, "--partitions", "8"])
        .arg(&words)
        .arg(&out)
        .env("EMBER_PROGRESS", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SIGINT at its default, as in a terminal, whatever this test inherited.
    // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut client = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let st = cluster.status().unwrap();
        if st.running_jobs > 0 && st.executors.iter().any(|e| e.running_tasks > 0) {
            break;
        }
        assert!(
            client.try_wait().unwrap().is_none(),
            "the job ended before it could be interrupted; give it more input"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(client.id() as i32, signal) }, 0);
    let status = client.wait().unwrap();
    assert_eq!(status.signal(), Some(signal), "{status:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let st = cluster.status().unwrap();
        let busy: u32 = st.executors.iter().map(|e| e.running_tasks).sum();
        if st.sessions == 0 && st.running_jobs == 0 && busy == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dead client's job still runs: {st:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!out.join("_SUCCESS").exists());
    // The slots are free again: the next client's job runs.
    let small = inputs(s, "small", 1, 300, text);
    same_as_local(&cluster, s, "wordcount", &small, &[]);
}

#[test]
fn one_clients_failing_job_does_not_disturb_anothers() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(3, 1, None);
    let kvs = inputs(s, "kv", 3, 20_000, kv);
    let bad = s.join("bad");
    fs::create_dir_all(&bad).unwrap();
    let mut text: String = (0..20_000).map(|i| format!("{i},1\n")).collect();
    text.push_str("oops\n");
    fs::write(bad.join("b.txt"), text).unwrap();
    std::thread::scope(|scope| {
        let good = scope.spawn(|| same_as_local(&cluster, s, "kvsum", &kvs, &[]));
        let failing = scope.spawn(|| {
            let out = s.join("bad-out");
            cluster.run("kvsum", &[bad.to_str().unwrap(), out.to_str().unwrap()], s)
        });
        good.join().unwrap();
        let run = failing.join().unwrap();
        assert!(
            !run.success && run.stderr.contains("b.txt:20001"),
            "{run:?}"
        );
    });
}

/// A worker serves one session: when the client's session ends, its worker is stopped
/// at once (however long the idle timeout), and the next client's job starts another.
/// (Stopping idle workers of a live session: `executor/tests/daemon/workers.rs`.)
#[test]
fn a_sessions_worker_stops_when_the_session_ends_and_starts_again_on_the_next_job() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start_with(1, 1, None, &[], &["--worker-idle-secs", "3600"], &[]);
    let words = inputs(s, "words", 1, 300, text);
    let workers = cluster.dir().join("executor-0/workers");
    // A worker's scratch dir lives exactly as long as the worker process.
    let live_workers = || {
        fs::read_dir(&workers)
            .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
            .unwrap_or(0)
    };
    same_as_local(&cluster, s, "wordcount", &words, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while live_workers() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker of an ended session was not stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let again = s.join("again");
    fs::create_dir_all(&again).unwrap();
    same_as_local(&cluster, &again, "wordcount", &words, &[]);
}

#[test]
fn relative_paths_are_resolved_in_the_clients_working_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(2, 1, None);
    inputs(s, "words", 2, 500, text);
    let local = s.join("local-out");
    let run = run_example(
        "wordcount",
        &[
            "--master",
            "local[2]",
            s.join("words").to_str().unwrap(),
            local.to_str().unwrap(),
        ],
        s,
    );
    assert!(run.success, "{run:?}");
    // The executors run in another directory: the client's relative paths must reach
    // them absolute, for reading the input and for writing and committing the output.
    let out = std::process::Command::new(common::process::example_bin("wordcount"))
        .args(["--master", &cluster.url, "words", "relative-out"])
        .current_dir(s)
        .env("EMBER_PROGRESS", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(output(&s.join("relative-out")), output(&local));
}

#[test]
fn unpersist_drops_cached_partitions_on_the_executors() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    // One executor: every task lands where the cached blocks are.
    let cluster = Cluster::start(1, 2, None);
    let words = inputs(s, "words", 3, 400, text);
    let out = s.join("out");
    let run = cluster.run(
        "cache",
        &[
            "--partitions",
            "3",
            words.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        s,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    // 3 partitions read by the first count, none by the second (cached), 3 again after
    // unpersist + cache: a stale block left on the executor would have been read instead.
    assert_eq!(
        output(&out),
        vec![(
            "part-00000".to_string(),
            "lines\t1200\tpartitions computed\t6\n".to_string()
        )]
    );
}

/// A second client holding the cluster secret cannot reach into another client's
/// session: submitting a job into it or unpersisting its RDDs is refused with
/// `PermissionDenied`, whether it sends no session token or its own.
#[test]
fn a_second_client_cannot_use_another_clients_session() {
    use ember_proto::{OpenSessionRequest, Plan, RddNode, SubmitJobRequest, UnpersistRequest};
    use sha2::Digest;
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start(1, 1, Some("shared-secret"));
    let kvs = inputs(s, "kv", 1, 200, kv);
    // The first client: a job held at its gate, so its session stays open.
    let gate = s.join("gate");
    fs::create_dir_all(&gate).unwrap();
    let out = s.join("out");
    let (gate_s, kvs_s, out_s) = (
        gate.to_str().unwrap(),
        kvs.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let first = cluster.spawn("faultjob", &["--gate", gate_s, kvs_s, out_s], s);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !fs::read_dir(&gate)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("waiting-"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first job never reached its gate"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let binary = fs::read(common::process::example_bin("faultjob")).unwrap();
    let sha = format!("{:x}", sha2::Sha256::digest(&binary));
    // Session ids are sequential: the first client's is 1, its ids start at 2^20.
    let (victim, base) = (1u64, 1u32 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refusals: Vec<tonic::Status> = rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(cluster.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let auth = ember_proto::auth::AddSecret::new(Some("shared-secret")).unwrap();
        let mut c = ember_proto::driver_client::DriverClient::with_interceptor(channel, auth);
        let plan = Plan {
            nodes: vec![RddNode {
                id: base,
                num_partitions: 0,
                ..Default::default()
            }],
            final_rdd: base,
            binary_hash: sha.clone(),
            ..Default::default()
        };
        let submit = |token: String| {
            let mut req = tonic::Request::new(SubmitJobRequest {
                session_id: victim,
                plan: Some(plan.clone()),
                new_broadcasts: vec![],
            });
            if !token.is_empty() {
                req.metadata_mut()
                    .insert(SESSION_TOKEN_HEADER, token.parse().unwrap());
            }
            req
        };
        let unpersist = |token: String| {
            let mut req = tonic::Request::new(UnpersistRequest {
                session_id: victim,
                rdd_id: base,
            });
            if !token.is_empty() {
                req.metadata_mut()
                    .insert(SESSION_TOKEN_HEADER, token.parse().unwrap());
            }
            req
        };
        // The attacker's own session: its token is valid, but not for session 1.
        let mut own = c
            .open_session(OpenSessionRequest {
                app_name: "intruder".into(),
                binary_sha256: sha.clone(),
                conf: Vec::new(),
                resume_session_id: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let own_token = session_token(own.message().await.unwrap());
        let mut refusals = Vec::new();
        for token in [String::new(), own_token.clone(), "f".repeat(64)] {
            match c.submit_job(submit(token.clone())).await {
                Ok(_) => {
                    panic!("a job was accepted into another client's session (token {token:?})")
                }
                Err(st) => refusals.push(st),
            }
            match c.unpersist(unpersist(token.clone())).await {
                Ok(_) => panic!("an unpersist was accepted for another client's session"),
                Err(st) => refusals.push(st),
            }
        }
        for st in &refusals {
            assert!(
                !own_token.is_empty() && !st.message().contains(&own_token),
                "a refusal echoes the token: {st:?}"
            );
        }
        refusals
    });
    for st in &refusals {
        assert_eq!(st.code(), tonic::Code::PermissionDenied, "{st:?}");
        assert!(
            st.message().contains("session 1") && st.message().contains("token"),
            "{st:?}"
        );
    }
    // The first client is unharmed: its job completes with the right output.
    fs::write(gate.join("open"), b"").unwrap();
    let run = first.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert!(out.join("_SUCCESS").exists());
}

/// Metadata key of the session token on session-scoped calls.
const SESSION_TOKEN_HEADER: &str = ember_proto::auth::SESSION_TOKEN_METADATA;

/// The token of the session a `SessionOpened` event opened.
fn session_token(event: Option<ember_proto::SessionEvent>) -> String {
    match event.and_then(|e| e.event) {
        Some(ember_proto::session_event::Event::Opened(o)) => o.session_token,
        None => panic!("the driver sent no SessionOpened"),
    }
}
