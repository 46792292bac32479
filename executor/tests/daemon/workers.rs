//! Worker processes: the protocol with a fake worker played by the test itself, and
//! crash handling. The "job binary" is a shell script that records its environment and
//! then sleeps (or exits at once); the test connects to the socket in its place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ember_executor::binaries::BinaryStore;
use ember_executor::config::Config;
use ember_executor::protocol::{self, WorkerFramed};
use ember_executor::workers::Workers;
use ember_proto::*;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::common::*;

pub(crate) fn workers(cfg: &Arc<Config>, tx: mpsc::Sender<ExecutorMessage>) -> Workers {
    let store = Arc::new(BinaryStore::new(cfg.binaries_dir()));
    Workers::new(
        cfg.clone(),
        "exec-1".into(),
        store,
        unused_driver_conn(),
        tx,
    )
}

pub(crate) fn launch(task_id: u64, sha: &str, broadcasts: &[(u64, &[u8])]) -> LaunchTask {
    LaunchTask {
        task: Some(task(task_id, sha)),
        broadcasts: broadcasts
            .iter()
            .map(|(id, v)| BroadcastValue {
                id: *id,
                value: v.to_vec().into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A work root, its config (with `secret`), and a recording script installed as a
/// verified binary that writes to `<root>/probe`: (root, config, probe, sha).
pub(crate) fn recording_setup(
    secret: Option<&str>,
) -> (tempfile::TempDir, Arc<Config>, PathBuf, String) {
    let root = tempfile::tempdir().unwrap();
    let cfg = Arc::new(config(root.path(), secret));
    let probe = root.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let sha = install_binary(&cfg, recording_script(&probe).as_bytes());
    (root, cfg, probe, sha)
}

/// A [`recording_setup`] with `secret` and its workers, which report to the returned
/// receiver: (root, config, probe, sha, receiver, workers).
pub(crate) fn recording_workers(
    secret: Option<&str>,
) -> (
    tempfile::TempDir,
    Arc<Config>,
    PathBuf,
    String,
    mpsc::Receiver<ExecutorMessage>,
    Workers,
) {
    let (root, cfg, probe, sha) = recording_setup(secret);
    let (tx, rx) = mpsc::channel(64);
    let workers = workers(&cfg, tx);
    (root, cfg, probe, sha, rx, workers)
}

/// A script that writes its environment to `<probe>/env-<pid>` and sleeps.
fn recording_script(probe: &Path) -> String {
    let p = probe.display();
    format!("#!/bin/sh\nenv > \"{p}/tmp-$$\" && mv \"{p}/tmp-$$\" \"{p}/env-$$\"\nexec sleep 30\n")
}

/// Waits for a worker not in `seen` to record its environment; returns pid and env.
pub(crate) async fn next_worker(
    probe: &Path,
    seen: &mut Vec<u32>,
) -> (u32, HashMap<String, String>) {
    within("a worker process to start", async {
        loop {
            for e in std::fs::read_dir(probe).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                let Some(pid) = name.strip_prefix("env-") else {
                    continue;
                };
                let pid: u32 = pid.parse().unwrap();
                if seen.contains(&pid) {
                    continue;
                }
                seen.push(pid);
                let text = std::fs::read_to_string(probe.join(&name)).unwrap();
                let env = text
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                return (pid, env);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Launches `task`, waits for the new worker process it starts (one not in `seen`) and
/// connects in its place: (its pid, its environment, the connection).
pub(crate) async fn launch_new_worker(
    workers: &mut Workers,
    task: LaunchTask,
    probe: &Path,
    seen: &mut Vec<u32>,
    sha: &str,
) -> (u32, HashMap<String, String>, WorkerFramed) {
    workers.launch(task).await;
    let (pid, env) = next_worker(probe, seen).await;
    let w = connect(&env, pid, sha).await;
    (pid, env, w)
}

pub(crate) async fn connect(env: &HashMap<String, String>, pid: u32, sha: &str) -> WorkerFramed {
    let stream = tokio::net::UnixStream::connect(&env["EMBER_WORKER_SOCKET"])
        .await
        .unwrap();
    let mut w = protocol::framed(stream);
    let ready = FromWorker {
        msg: Some(from_worker::Msg::Ready(WorkerReady {
            pid,
            binary_sha256: sha.to_string(),
        })),
    };
    w.send(protocol::encode_from_worker(&ready)).await.unwrap();
    w
}

pub(crate) async fn recv(w: &mut WorkerFramed) -> to_worker::Msg {
    let frame = within("a frame to the worker", w.next())
        .await
        .unwrap()
        .unwrap();
    protocol::decode_to_worker(&frame).unwrap().msg.unwrap()
}

pub(crate) async fn send_status(w: &mut WorkerFramed, task_id: u64) {
    let status = TaskStatus {
        barrier: None,
        task_id,
        executor_id: "made-up".into(),
        metrics: None,
        outcome: Some(task_status::Outcome::Success(TaskSuccess {
            output: Some(task_success::Output::Result(b"ok".to_vec())),
            ..Default::default()
        })),
    };
    let msg = FromWorker {
        msg: Some(from_worker::Msg::Status(status)),
    };
    w.send(protocol::encode_from_worker(&msg)).await.unwrap();
}

pub(crate) fn alive(pid: u32) -> bool {
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

async fn gone(path: PathBuf) {
    within("a worker dir to be removed", async {
        while path.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn worker_protocol_broadcasts_statuses_kills_and_a_crash() {
    let (_root, cfg, probe, sha) = recording_setup(Some("cluster-secret"));
    let sha16 = &sha[..16];
    let (tx, mut rx) = mpsc::channel(64);
    let mut workers = workers(&cfg, tx);
    let mut seen = Vec::new();

    workers.launch(launch(1, &sha, &[(5, b"five")])).await;
    let (pid, env) = next_worker(&probe, &mut seen).await;
    assert_eq!(env["EMBER_EXECUTOR_ID"], "exec-1");
    assert_eq!(env["EMBER_WORKER_CORES"], "3");
    assert_eq!(env["EMBER_EXECUTOR_MEMORY"], (123u64 << 20).to_string());
    assert_eq!(env["EMBER_BINARY_SHA256"], sha);
    // Workers run job code: neither the cluster secret nor the executor secret (the
    // config holds both as "cluster-secret") reaches them, by any variable.
    for name in [
        "EMBER_SECRET",
        "EMBER_SECRET_FILE",
        "EMBER_EXECUTOR_SECRET_FILE",
    ] {
        assert!(!env.contains_key(name), "{name} reached the worker");
    }
    assert!(
        !env.values().any(|v| v.contains("cluster-secret")),
        "a secret reached the worker: {env:?}"
    );
    // The session's own shuffle directory, made for it (0700).
    let shuffle_dir = Path::new(&env["EMBER_WORKER_SHUFFLE_DIR"]);
    assert_eq!(shuffle_dir.parent(), Some(cfg.shuffle_dir().as_path()));
    assert!(shuffle_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(ember_executor::config::session_of_dir)
        .is_some());
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(shuffle_dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let scratch = PathBuf::from(&env["EMBER_WORKER_DIR"]);
    assert!(scratch.is_dir() && scratch.starts_with(cfg.workers_dir()));
    let socket = &env["EMBER_WORKER_SOCKET"];
    assert!(
        socket.ends_with(".sock") && socket.contains(sha16),
        "{socket}"
    );
    assert!(!env.contains_key("EMBER_MASTER"));

    let mut w = connect(&env, pid, &sha).await;
    // The broadcast goes before the task that needs it.
    assert!(
        matches!(recv(&mut w).await, to_worker::Msg::Broadcast(b) if b.id == 5 && b.value[..] == b"five"[..])
    );
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 1));
    assert_eq!(workers.running_tasks(), [1]);

    // The status goes to the driver under this executor's id, once.
    send_status(&mut w, 1).await;
    let s = next_status(&mut rx).await;
    assert_eq!((s.task_id, s.executor_id.as_str()), (1, "exec-1"));
    assert!(matches!(s.outcome, Some(task_status::Outcome::Success(_))));
    send_status(&mut w, 1).await; // a duplicate: dropped

    workers.launch(launch(2, &sha, &[])).await;
    workers.launch(launch(3, &sha, &[(6, b"six")])).await;
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 2));
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Broadcast(b) if b.id == 6));
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 3));
    workers.kill(KillTask {
        interrupt: Default::default(),
        task_id: 2,
        reason: "test".into(),
    });
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Kill(k) if k.task_id == 2));
    assert_eq!(workers.running_tasks(), [2, 3]);

    // The worker dies: both its tasks fail, saying how.
    assert!(std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    for id in [2, 3] {
        let s = next_status(&mut rx).await;
        assert_eq!(s.task_id, id);
        assert_eq!(
            user_error(&s),
            format!("worker process for binary {sha16} exited (signal: 9 (SIGKILL)) while running this task")
        );
    }
    assert!(workers.running_tasks().is_empty());
    gone(scratch).await;

    // The next task starts a new worker, which gets the broadcasts still stored.
    workers.launch(launch(4, &sha, &[])).await;
    let (pid2, env2) = next_worker(&probe, &mut seen).await;
    assert_ne!(env2["EMBER_WORKER_SOCKET"], env["EMBER_WORKER_SOCKET"]);
    let mut w2 = connect(&env2, pid2, &sha).await;
    assert!(matches!(recv(&mut w2).await, to_worker::Msg::Broadcast(b) if b.id == 5));
    assert!(matches!(recv(&mut w2).await, to_worker::Msg::Broadcast(b) if b.id == 6));
    assert!(matches!(recv(&mut w2).await, to_worker::Msg::Run(t) if t.task_id == 4));

    // The session ends while task 4 runs: the worker gets the cleanup, is stopped, and
    // the task fails saying why.
    let cleanup = CleanupSession {
        id_lo: 0,
        id_hi: 1 << 20,
        broadcast_lo: 0,
        broadcast_hi: 1 << 40,
    };
    workers.cleanup(cleanup);
    assert!(matches!(recv(&mut w2).await, to_worker::Msg::Cleanup(c) if c == cleanup));
    let s = next_status(&mut rx).await;
    assert_eq!(s.task_id, 4);
    assert_eq!(
        user_error(&s),
        "task 4's session ended; its worker process was stopped"
    );
    assert!(workers.running_tasks().is_empty());
    assert!(!alive(pid2), "worker {pid2} still running");
    gone(PathBuf::from(&env2["EMBER_WORKER_DIR"])).await;

    // Losing the driver kills every worker (here a fresh one).
    let (pid3, env3, _w3) =
        launch_new_worker(&mut workers, launch(5, &sha, &[]), &probe, &mut seen, &sha).await;
    within("shutdown", workers.shutdown()).await;
    assert!(!alive(pid3), "worker {pid3} still running");
    gone(PathBuf::from(&env3["EMBER_WORKER_DIR"])).await;
}

#[tokio::test]
async fn a_worker_that_exits_before_ready_fails_every_waiting_task_with_a_hint() {
    let root = tempfile::tempdir().unwrap();
    let cfg = Arc::new(config(root.path(), None));
    let sha = install_binary(&cfg, b"#!/bin/sh\nexit 3\n");
    let (tx, mut rx) = mpsc::channel(64);
    let mut workers = workers(&cfg, tx);
    workers.launch(launch(1, &sha, &[])).await;
    workers.launch(launch(2, &sha, &[])).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let s = next_status(&mut rx).await;
        let msg = user_error(&s);
        assert!(
            msg.contains(&format!("worker process for binary {}", &sha[..16])),
            "{msg}"
        );
        assert!(
            msg.contains("exited (exit status: 3) before it was ready"),
            "{msg}"
        );
        assert!(msg.contains("ember::Context::from_env()"), "{msg}");
        assert_eq!(s.executor_id, "exec-1");
        ids.push(s.task_id);
    }
    ids.sort();
    assert_eq!(ids, [1, 2]);
    assert!(workers.running_tasks().is_empty());
    workers.shutdown().await;
    assert_eq!(std::fs::read_dir(cfg.workers_dir()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_worker_of_another_binary_or_a_bad_hash_is_refused() {
    let (_root, _cfg, probe, sha, mut rx, mut workers) = recording_workers(None);

    workers.launch(launch(1, "not-a-hash", &[])).await;
    let s = next_status(&mut rx).await;
    assert!(
        user_error(&s).contains("not a SHA-256"),
        "{}",
        user_error(&s)
    );

    workers.launch(launch(2, &sha, &[])).await;
    let (pid, env) = next_worker(&probe, &mut Vec::new()).await;
    let _w = connect(&env, pid, &"0".repeat(64)).await;
    let s = next_status(&mut rx).await;
    assert_eq!(s.task_id, 2);
    assert!(
        user_error(&s).contains("reports that it runs binary"),
        "{}",
        user_error(&s)
    );
    assert!(!alive(pid), "a refused worker is killed");
    workers.shutdown().await;
}

#[tokio::test]
async fn a_stored_binary_that_changed_is_never_run_but_fetched_again() {
    let root = tempfile::tempdir().unwrap();
    let probe = root.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let real = recording_script(&probe);
    let sha = sha256_hex(real.as_bytes());
    let driver = start_driver(
        HashMap::from([(sha.clone(), real.clone().into_bytes())]),
        None,
    )
    .await;
    let cfg = Arc::new(config(root.path(), None));
    let stored = cfg.binaries_dir().join(&sha);
    let planted = root.path().join("planted-ran");
    let tamper = || {
        let evil = format!(
            "#!/bin/sh\ntouch \"{}\"\nexec sleep 30\n",
            planted.display()
        );
        std::fs::write(&stored, evil).unwrap();
        std::fs::set_permissions(&stored, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
    };
    install_binary(&cfg, real.as_bytes());
    tamper();

    // With the driver reachable: the changed file is replaced by a fresh copy, which runs.
    let (tx, mut rx) = mpsc::channel(64);
    let store = Arc::new(BinaryStore::new(cfg.binaries_dir()));
    let conn = driver_conn(&driver.url, None).await;
    let mut workers = Workers::new(cfg.clone(), "exec-1".into(), store.clone(), conn, tx);
    workers.launch(launch(1, &sha, &[])).await;
    let (pid, env) = next_worker(&probe, &mut Vec::new()).await;
    assert_eq!(driver.fetches.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), real);
    let _w = connect(&env, pid, &sha).await;
    workers.shutdown().await;

    // Without a driver: the task fails naming the mismatch, and nothing is run.
    tamper();
    let (tx, _rx2) = mpsc::channel(64);
    drop(std::mem::replace(&mut rx, _rx2));
    let mut workers = Workers::new(
        cfg.clone(),
        "exec-1".into(),
        store,
        unused_driver_conn(),
        tx,
    );
    workers.launch(launch(2, &sha, &[])).await;
    let s = next_status(&mut rx).await;
    let msg = user_error(&s);
    assert!(
        msg.starts_with(&format!(
            "stored binary {sha} changed on disk after it was verified"
        )) && msg.contains("refusing to run it; fetching it again failed"),
        "{msg}"
    );
    assert!(!planted.exists(), "the planted binary was run");
    assert!(!stored.exists(), "the changed binary is deleted");
    workers.shutdown().await;
}

/// A launch of `task_id` naming stage plan `plan_id`, carrying the plan when `send`.
fn launch_of_plan(task_id: u64, sha: &str, plan_id: u64, send: bool, forget: &[u64]) -> LaunchTask {
    let mut t = task(task_id, sha);
    let plan = t.plan.take().map(|mut p| {
        p.description = format!("stage plan {plan_id}");
        p
    });
    t.plan_id = plan_id;
    LaunchTask {
        task: Some(t),
        plan: send.then_some(StagePlan { id: plan_id, plan }),
        forget_plans: forget.to_vec(),
        ..Default::default()
    }
}

/// A stage plan goes to the worker once, before the first task naming it; a forgotten
/// plan is forgotten by the worker too; a task naming a plan never sent fails, saying so.
#[tokio::test]
async fn a_stage_plan_goes_to_the_worker_once_and_is_forgotten_when_the_driver_says() {
    let (_root, _cfg, probe, sha, mut rx, mut workers) = recording_workers(None);

    workers.launch(launch_of_plan(1, &sha, 7, true, &[])).await;
    workers.launch(launch_of_plan(2, &sha, 7, false, &[])).await;
    let (pid, env) = next_worker(&probe, &mut Vec::new()).await;
    let mut w = connect(&env, pid, &sha).await;
    assert!(matches!(
        recv(&mut w).await,
        to_worker::Msg::Plan(p) if p.id == 7
            && p.plan.as_ref().is_some_and(|p| p.description == "stage plan 7")
    ));
    for id in [1, 2] {
        assert!(matches!(
            recv(&mut w).await,
            to_worker::Msg::Run(t) if t.task_id == id && t.plan.is_none() && t.plan_id == 7
        ));
    }

    // A task of a plan this executor never got fails without reaching the worker.
    workers.launch(launch_of_plan(3, &sha, 9, false, &[])).await;
    let s = next_status(&mut rx).await;
    assert_eq!(s.task_id, 3);
    assert_eq!(
        user_error(&s),
        "task 3 names stage plan 9, which this executor does not hold (never sent, or \
         forgotten); refusing to run it"
    );

    // Forgetting 7 while sending 8: the worker drops 7 first, then gets 8.
    workers.launch(launch_of_plan(4, &sha, 8, true, &[7])).await;
    assert!(matches!(recv(&mut w).await, to_worker::Msg::ForgetPlans(f) if f.ids == [7]));
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Plan(p) if p.id == 8));
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 4));
    workers.launch(launch_of_plan(5, &sha, 7, false, &[])).await;
    let s = next_status(&mut rx).await;
    assert_eq!(s.task_id, 5);
    assert!(user_error(&s).contains("names stage plan 7, which this executor does not hold"));
    within("shutdown", workers.shutdown()).await;
}

/// A task of the session owning ids from `id_base`.
pub(crate) fn launch_in(task_id: u64, sha: &str, id_base: u32) -> LaunchTask {
    let mut l = launch(task_id, sha, &[]);
    if let Some(plan) = l.task.as_mut().and_then(|t| t.plan.as_mut()) {
        plan.final_rdd = id_base;
        plan.shuffle_key = format!("key-of-{id_base}");
    }
    l
}

/// Two sessions of one binary get two worker processes, each sent only its own
/// session's tasks (and so shuffle keys); a session's cleanup stops its idle worker.
#[tokio::test]
async fn each_session_of_a_binary_gets_its_own_worker() {
    let (_root, _cfg, probe, sha, mut rx, mut workers) = recording_workers(Some("cluster-secret"));
    let mut seen = Vec::new();
    let (a, b) = (1u32 << 20, 2u32 << 20);

    let (pid_a, _, mut wa) =
        launch_new_worker(&mut workers, launch_in(1, &sha, a), &probe, &mut seen, &sha).await;
    assert!(
        matches!(recv(&mut wa).await, to_worker::Msg::Run(t) if t.task_id == 1 && t.plan.as_ref().unwrap().shuffle_key == format!("key-of-{a}"))
    );
    workers.launch(launch_in(2, &sha, b)).await;
    let (pid_b, env_b) = next_worker(&probe, &mut seen).await;
    assert_ne!(pid_a, pid_b);
    let mut wb = connect(&env_b, pid_b, &sha).await;
    assert!(
        matches!(recv(&mut wb).await, to_worker::Msg::Run(t) if t.task_id == 2 && t.plan.as_ref().unwrap().shuffle_key == format!("key-of-{b}"))
    );
    // Session a's next task goes to a's worker, not b's.
    workers.launch(launch_in(3, &sha, a + 7)).await;
    assert!(matches!(recv(&mut wa).await, to_worker::Msg::Run(t) if t.task_id == 3));
    send_status(&mut wa, 1).await;
    assert_eq!(next_status(&mut rx).await.task_id, 1);
    send_status(&mut wb, 2).await;
    assert_eq!(next_status(&mut rx).await.task_id, 2);
    send_status(&mut wa, 3).await;
    assert_eq!(next_status(&mut rx).await.task_id, 3);
    assert!(workers.running_tasks().is_empty());

    // Session a ends: its worker gets the cleanup and is stopped; b's lives on.
    let cleanup = CleanupSession {
        id_lo: a,
        id_hi: b,
        broadcast_lo: 1 << 40,
        broadcast_hi: 2 << 40,
    };
    workers.cleanup(cleanup);
    assert!(matches!(recv(&mut wa).await, to_worker::Msg::Cleanup(c) if c == cleanup));
    within("session a's worker to stop", async {
        while alive(pid_a) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(alive(pid_b));
    within("shutdown", workers.shutdown()).await;
    assert!(!alive(pid_b));
}

/// A worker with no task for `worker_idle` is stopped; the next task of its session
/// starts a new one.
#[tokio::test]
async fn an_idle_worker_is_stopped_and_the_next_task_starts_another() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(root.path(), None);
    cfg.worker_idle = Duration::from_millis(300);
    let cfg = Arc::new(cfg);
    let probe = root.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let sha = install_binary(&cfg, recording_script(&probe).as_bytes());
    let (tx, mut rx) = mpsc::channel(64);
    let mut workers = workers(&cfg, tx);
    let mut seen = Vec::new();
    let (pid, _, mut w) =
        launch_new_worker(&mut workers, launch(1, &sha, &[]), &probe, &mut seen, &sha).await;
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 1));
    send_status(&mut w, 1).await;
    assert_eq!(next_status(&mut rx).await.task_id, 1);
    within("the idle worker to stop", async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    workers.launch(launch(2, &sha, &[])).await;
    let (pid2, env2) = next_worker(&probe, &mut seen).await;
    assert_ne!(pid, pid2);
    let mut w2 = connect(&env2, pid2, &sha).await;
    assert!(matches!(recv(&mut w2).await, to_worker::Msg::Run(t) if t.task_id == 2));
    workers.shutdown().await;
}
