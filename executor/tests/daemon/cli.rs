//! The daemon binary: refusal to start, its stdout line, exit codes, and SIGTERM.

use std::collections::HashMap;
use std::process::Stdio;

use ember_proto::decommissioning::Phase;
use ember_proto::{driver_message, executor_message, MigratedOutputs, Registered};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::*;

fn executor(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-executor"));
    cmd.args(args)
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_EXECUTOR_SECRET_FILE")
        .env_remove("EMBER_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Reads the first stdout line and checks it; returns the stderr reader task.
async fn started(child: &mut Child) -> tokio::task::JoinHandle<String> {
    let mut stderr = child.stderr.take().unwrap();
    let err = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = within("the stdout line", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let port = line
        .strip_prefix("ember-executor shuffle service on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected stdout line {line:?}"));
    assert!(port.parse::<u16>().unwrap() > 0);
    err
}

/// An executor started with `extra` args against a fake driver, registered (as
/// `executor_id`) and heartbeating: the driver, the process, its stderr reader and its
/// channel.
struct Registered1 {
    _driver: FakeDriverHandle,
    child: Child,
    stderr: tokio::task::JoinHandle<String>,
    conn: ExecutorConn,
}

async fn registered(extra: &[&str], executor_id: &str) -> Registered1 {
    let mut driver = start_driver(HashMap::new(), None).await;
    let mut args = vec![
        "--driver",
        driver.url.as_str(),
        "--cores",
        "2",
        "--memory",
        "1g",
    ];
    args.extend_from_slice(extra);
    let mut child = executor(&args).spawn().unwrap();
    let stderr = started(&mut child).await;
    let mut conn = within("registration", driver.channels.recv())
        .await
        .unwrap();
    match conn.next().await {
        executor_message::Msg::Register(r) => assert_eq!((r.cores, r.memory_bytes), (2, 1 << 30)),
        other => panic!("expected Register, got {other:?}"),
    }
    conn.send(driver_message::Msg::Registered(Registered {
        executor_id: executor_id.into(),
        heartbeat_interval_ms: 100,
    }))
    .await;
    assert!(matches!(
        conn.next().await,
        executor_message::Msg::Heartbeat(_)
    ));
    Registered1 {
        _driver: driver,
        child,
        stderr,
        conn,
    }
}

/// Sends SIGTERM to `child`.
fn sigterm(child: &Child) {
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
}

/// The work dir the daemon logged (a temp dir of its own), from its stderr.
fn work_dir_of(stderr: &str) -> String {
    let dir = stderr
        .split_whitespace()
        .find_map(|w| w.strip_prefix("work_dir="))
        .unwrap_or_else(|| panic!("no work_dir in the log: {stderr}"));
    assert!(dir.contains("ember-executor-"), "{dir}");
    dir.to_string()
}

/// Runs the executor with `args`; asserts it refuses to start (exit 2, nothing on
/// stdout) with a message containing `why`.
async fn refused(args: &[&str], why: &str) {
    let out = within("exit", executor(args).output()).await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(why), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn refuses_a_public_host_without_a_secret() {
    refused(
        &["--driver", "http://127.0.0.1:1", "--host", "10.1.2.3"],
        "without an executor secret: the driver accepts executors only with it; give \
         --executor-secret-file",
    )
    .await;
}

#[tokio::test]
async fn refuses_short_secrets_off_loopback_and_a_cluster_secret_alone() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "tiny\n").unwrap();
    let strong = dir.path().join("strong");
    std::fs::write(&strong, "s".repeat(32)).unwrap();
    let (short, strong) = (short.to_str().unwrap(), strong.to_str().unwrap());
    let public = ["--driver", "http://127.0.0.1:1", "--host", "10.1.2.3"];
    let args = [&public[..], &["--executor-secret-file", short]].concat();
    refused(
        &args,
        "--executor-secret-file holds a secret of 4 characters; on a non-loopback address \
         (10.1.2.3) a secret needs at least 32",
    )
    .await;
    let args = [
        &public[..],
        &["--executor-secret-file", strong, "--secret-file", short],
    ]
    .concat();
    refused(
        &args,
        &format!("--secret-file {short} holds a secret of 4 characters"),
    )
    .await;
    // On loopback, a cluster secret without the executor secret cannot register.
    refused(
        &["--driver", "http://127.0.0.1:1", "--secret-file", strong],
        "a cluster secret is given but no executor secret",
    )
    .await;
}

#[tokio::test]
async fn exits_1_when_the_driver_refuses_its_secret() {
    let driver = start_driver(HashMap::new(), Some("right")).await;
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("executor-secret");
    std::fs::write(&wrong, "wrong").unwrap();
    let mut child = executor(&["--driver", &driver.url])
        .env("EMBER_EXECUTOR_SECRET_FILE", &wrong)
        .spawn()
        .unwrap();
    let stderr = started(&mut child).await;
    let status = within("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(1));
    let stderr = stderr.await.unwrap();
    assert!(
        stderr.contains("driver refused registration: wrong or missing executor secret"),
        "{stderr}"
    );
}

#[tokio::test]
async fn sigterm_decommissions_it_then_it_exits_0_and_removes_its_temp_dir() {
    let Registered1 {
        _driver,
        mut child,
        stderr,
        mut conn,
    } = registered(&[], "exec-T").await;
    sigterm(&child);
    // It says it is leaving, then (running nothing) that it is drained, waits for the
    // plan, and, the plan empty, that it is done.
    let phase = |m: executor_message::Msg| match m {
        executor_message::Msg::Decommissioning(d) => Phase::try_from(d.phase).unwrap(),
        other => panic!("expected a decommissioning phase, got {other:?}"),
    };
    assert_eq!(phase(conn.next_non_heartbeat().await), Phase::Draining);
    assert_eq!(phase(conn.next_non_heartbeat().await), Phase::Drained);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(child.try_wait().unwrap().is_none(), "it waits for the plan");
    // A cached block no worker of it holds (none runs): nothing to move, and it says so.
    let block = ember_proto::MigratedBlock {
        rdd_id: 5,
        partition: 0,
        target: Some(ember_proto::MapHost::default()),
        bytes: 0,
    };
    conn.send(driver_message::Msg::MigrateOutputs(MigratedOutputs {
        outputs: vec![],
        last: true,
        blocks: vec![block],
    }))
    .await;
    assert_eq!(phase(conn.next_non_heartbeat().await), Phase::Done);
    // The driver ends the channel; the executor exits 0.
    drop(conn);
    let status = within("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let stderr = stderr.await.unwrap();
    assert!(stderr.contains("decommissioning"), "{stderr}");
    assert!(stderr.contains("held by no worker"), "{stderr}");
    let work_dir = work_dir_of(&stderr);
    assert!(
        !std::path::Path::new(&work_dir).exists(),
        "{work_dir} left behind"
    );
}

#[tokio::test]
async fn with_no_decommission_timeout_sigterm_stops_it_at_once() {
    let Registered1 {
        _driver,
        mut child,
        stderr,
        conn: _conn,
    } = registered(&["--decommission-timeout", "0"], "exec-U").await;
    sigterm(&child);
    let status = within("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let stderr = stderr.await.unwrap();
    assert!(!stderr.contains("decommissioning"), "{stderr}");
    let work_dir = work_dir_of(&stderr);
    assert!(
        !std::path::Path::new(&work_dir).exists(),
        "{work_dir} left behind"
    );
}

/// `ember-executor health --addr ADDR`: (exit code, stdout + stderr).
async fn health(addr: &str) -> (Option<i32>, String) {
    let out = within(
        "health",
        Command::new(env!("CARGO_BIN_EXE_ember-executor"))
            .args(["health", "--addr", addr, "--timeout-ms", "2000"])
            .output(),
    )
    .await
    .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[tokio::test]
async fn health_is_serving_only_while_registered_with_the_driver() {
    let mut driver = start_driver(HashMap::new(), None).await;
    // Its own work dir: the executor is killed at the end, and must leave nothing in /tmp.
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let mut child = executor(&[
        "--driver",
        &driver.url,
        "--work-dir",
        work.to_str().unwrap(),
    ])
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = within("the stdout line", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let addr = line
        .strip_prefix("ember-executor shuffle service on ")
        .unwrap_or_else(|| panic!("unexpected stdout line {line:?}"))
        .to_string();
    let conn = driver.accept_register("registration").await;
    // Not yet registered: NOT_SERVING, exit 1, the reason on stderr.
    let (code, text) = health(&addr).await;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("ember-executor health: {addr} is NOT_SERVING")),
        "{text}"
    );

    conn.send(driver_message::Msg::Registered(Registered {
        executor_id: "exec-H".into(),
        heartbeat_interval_ms: 100,
    }))
    .await;
    let serving = within("SERVING", async {
        loop {
            let (code, text) = health(&addr).await;
            if code == Some(0) {
                return text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(serving.trim(), format!("{addr}: serving"));

    // The driver goes away: NOT_SERVING again.
    drop(conn);
    drop(driver);
    within("NOT_SERVING", async {
        while health(&addr).await.0 != Some(1) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let _ = child.kill().await;
    // Nothing listens on a closed port: exit 1 naming the address.
    let (code, text) = health("http://127.0.0.1:1").await;
    assert_eq!(code, Some(1));
    assert!(text.contains("cannot reach http://127.0.0.1:1"), "{text}");
}

/// Threads of process `pid` named as tokio names its runtime's workers.
fn runtime_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "tokio-rt-worker")
        })
        .count()
}

#[tokio::test]
async fn io_threads_sizes_its_runtime_by_default_to_its_cores_and_refuses_zero() {
    refused(
        &["--driver", "http://127.0.0.1:1", "--io-threads", "0"],
        "--io-threads must be at least 1",
    )
    .await;

    let driver = start_driver(HashMap::new(), None).await;
    for (extra, want) in [(&["--cores", "1"][..], 1), (&["--io-threads", "3"][..], 3)] {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().to_str().unwrap();
        let mut args = vec!["--driver", &driver.url, "--work-dir", work];
        args.extend_from_slice(extra);
        let mut child = executor(&args).spawn().unwrap();
        let _stderr = started(&mut child).await;
        let pid = child.id().unwrap();
        // A new thread takes its name once it runs, so the count may lag its spawn:
        // look again until it matches or ten seconds pass.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = runtime_threads(pid);
        while seen != want && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            seen = runtime_threads(pid);
        }
        assert_eq!(seen, want, "{args:?}");
        child.kill().await.unwrap();
    }
}

/// Mode bits (with setuid/setgid/sticky) of `path`.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Starts the executor on `work` until its stdout line, then kills it.
async fn runs_on(driver_url: &str, work: &std::path::Path) {
    let mut child = executor(&["--driver", driver_url, "--work-dir", work.to_str().unwrap()])
        .spawn()
        .unwrap();
    let _stderr = started(&mut child).await;
    child.kill().await.unwrap();
}

#[tokio::test]
async fn work_dir_refuses_a_foreign_non_empty_directory_and_changes_nothing_in_it() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    // A shared 1777 directory with someone's files, some named as ember's subdirectories.
    let shared = root.path().join("shared");
    std::fs::create_dir_all(shared.join("shuffle")).unwrap();
    std::fs::create_dir_all(shared.join("workers")).unwrap();
    std::fs::write(shared.join("shuffle/keep.txt"), "mine").unwrap();
    std::fs::write(shared.join("workers/w.txt"), "also mine").unwrap();
    std::fs::write(shared.join("notes.txt"), "notes").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let listing = |dir: &std::path::Path| {
        let mut names: Vec<_> = walk(dir);
        names.sort();
        names
    };
    let before = listing(&shared);

    let why = format!(
        "work dir {} is not empty and was not made by ember-executor (no .ember-executor in it)",
        shared.display()
    );
    refused(
        &[
            "--driver",
            "http://127.0.0.1:1",
            "--work-dir",
            shared.to_str().unwrap(),
        ],
        &why,
    )
    .await;
    assert_eq!(mode(&shared), 0o1777);
    assert_eq!(listing(&shared), before);
    assert_eq!(
        std::fs::read_to_string(shared.join("shuffle/keep.txt")).unwrap(),
        "mine"
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("workers/w.txt")).unwrap(),
        "also mine"
    );
}

/// Every path under `dir`, relative to it.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn work_dir_adopts_an_empty_directory_and_reuses_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let driver = start_driver(HashMap::new(), None).await;
    let root = tempfile::tempdir().unwrap();

    // An empty shared directory: adopted, marked, its own mode left alone.
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o1777)).unwrap();
    runs_on(&driver.url, &empty).await;
    assert_eq!(
        std::fs::read_to_string(empty.join(".ember-executor")).unwrap(),
        "adopted\n"
    );
    assert_eq!(mode(&empty), 0o1777);
    assert_eq!(mode(&empty.join("shuffle")), 0o700);
    // Its own again (not empty now): accepted, still not chmodded.
    runs_on(&driver.url, &empty).await;
    assert_eq!(mode(&empty), 0o1777);

    // A missing one: created 0700; the next run takes it back and empties shuffle/.
    let fresh = root.path().join("a/b/work");
    runs_on(&driver.url, &fresh).await;
    assert_eq!(
        std::fs::read_to_string(fresh.join(".ember-executor")).unwrap(),
        "created\n"
    );
    assert_eq!(mode(&fresh), 0o700);
    std::fs::write(fresh.join("shuffle/stale.data"), "old").unwrap();
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
    runs_on(&driver.url, &fresh).await;
    assert!(!fresh.join("shuffle/stale.data").exists());
    assert_eq!(mode(&fresh), 0o700);
}

#[tokio::test]
async fn work_dir_of_an_executor_from_before_the_marker_is_taken_back() {
    use std::os::unix::fs::PermissionsExt;
    let driver = start_driver(HashMap::new(), None).await;
    let root = tempfile::tempdir().unwrap();

    // What an earlier ember executor left (a docker volume kept across recreation).
    let old = root.path().join("old");
    std::fs::create_dir_all(old.join("binaries")).unwrap();
    std::fs::create_dir_all(old.join("shuffle")).unwrap();
    std::fs::create_dir_all(old.join("workers")).unwrap();
    std::fs::write(old.join("binaries/abc"), "binary").unwrap();
    std::fs::write(old.join("shuffle/stale.data"), "old").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    runs_on(&driver.url, &old).await;
    assert_eq!(
        std::fs::read_to_string(old.join(".ember-executor")).unwrap(),
        "created\n"
    );
    assert_eq!(mode(&old), 0o700);
    assert!(!old.join("shuffle/stale.data").exists());
    assert_eq!(
        std::fs::read_to_string(old.join("binaries/abc")).unwrap(),
        "binary"
    );

    // Some of them only: taken back too.
    let part = root.path().join("part");
    std::fs::create_dir_all(part.join("shuffle")).unwrap();
    runs_on(&driver.url, &part).await;
    assert_eq!(
        std::fs::read_to_string(part.join(".ember-executor")).unwrap(),
        "created\n"
    );

    // ember's names, but a file where a directory should be: someone else's.
    let file = root.path().join("file");
    std::fs::create_dir_all(file.join("binaries")).unwrap();
    std::fs::write(file.join("shuffle"), "not a directory").unwrap();
    let why = format!(
        "work dir {} is not empty and was not made by ember-executor",
        file.display()
    );
    refused(
        &[
            "--driver",
            &driver.url,
            "--work-dir",
            file.to_str().unwrap(),
        ],
        &why,
    )
    .await;
    assert!(!file.join(".ember-executor").exists());
    assert_eq!(
        std::fs::read_to_string(file.join("shuffle")).unwrap(),
        "not a directory"
    );
}
