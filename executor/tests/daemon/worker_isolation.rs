//! Workers never cross sessions or processes: a reused id range gets a fresh worker
//! process after its session's cleanup, and only the started child may take a new
//! worker's socket (another process racing to connect is dropped).

use std::time::Duration;

use ember_executor::protocol;
use ember_proto::*;
use futures_util::{SinkExt, StreamExt};

use crate::common::*;
use crate::workers::{
    alive, connect, launch, launch_in, launch_new_worker, next_worker, recording_workers, recv,
    send_status,
};

/// After a session's cleanup, the next session given the same id range gets a new
/// worker process, even while another session's task of the same binary runs: the
/// ended session's process never serves the next client.
#[tokio::test]
async fn a_reused_id_range_gets_a_new_worker_while_the_binary_is_busy() {
    let (_root, _cfg, probe, sha, mut rx, mut workers) = recording_workers(Some("cluster-secret"));
    let mut seen = Vec::new();
    let (a, b) = (1u32 << 20, 2u32 << 20);

    let (pid_a, _, mut wa) =
        launch_new_worker(&mut workers, launch_in(1, &sha, a), &probe, &mut seen, &sha).await;
    assert!(matches!(recv(&mut wa).await, to_worker::Msg::Run(t) if t.task_id == 1));
    let (pid_b, _, mut wb) =
        launch_new_worker(&mut workers, launch_in(2, &sha, b), &probe, &mut seen, &sha).await;
    assert!(matches!(recv(&mut wb).await, to_worker::Msg::Run(t) if t.task_id == 2));
    send_status(&mut wa, 1).await;
    assert_eq!(next_status(&mut rx).await.task_id, 1);

    // Session a ends while session b's task of the same binary is still running.
    let cleanup = CleanupSession {
        id_lo: a,
        id_hi: b,
        broadcast_lo: 1 << 40,
        broadcast_hi: 2 << 40,
    };
    workers.cleanup(cleanup);
    assert!(matches!(recv(&mut wa).await, to_worker::Msg::Cleanup(c) if c == cleanup));
    assert_eq!(workers.running_tasks(), [2]);

    // The next session gets range a: its task runs in a new process, not a's or b's.
    workers.launch(launch_in(3, &sha, a)).await;
    let (pid_c, env_c) = next_worker(&probe, &mut seen).await;
    assert_ne!(pid_c, pid_a);
    assert_ne!(pid_c, pid_b);
    let mut wc = connect(&env_c, pid_c, &sha).await;
    assert!(
        matches!(recv(&mut wc).await, to_worker::Msg::Run(t) if t.task_id == 3 && t.plan.as_ref().unwrap().shuffle_key == format!("key-of-{a}"))
    );
    within("session a's old worker to stop", async {
        while alive(pid_a) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    send_status(&mut wb, 2).await;
    assert_eq!(next_status(&mut rx).await.task_id, 2);
    send_status(&mut wc, 3).await;
    assert_eq!(next_status(&mut rx).await.task_id, 3);
    within("shutdown", workers.shutdown()).await;
    assert!(!alive(pid_b) && !alive(pid_c));
}

/// Environment variable that makes [`intruder_helper`] act: the worker socket to race to.
const INTRUDER_SOCKET_ENV: &str = "EMBER_TEST_INTRUDER_SOCKET";

/// A helper, not a check of its own: re-run by
/// [`a_connection_from_another_process_is_dropped_and_the_worker_still_accepted`] in a
/// separate process with [`INTRUDER_SOCKET_ENV`] set, it connects to that worker socket
/// first, claims to be the worker and prints whether the executor served or closed it.
#[tokio::test]
async fn intruder_helper() {
    let Ok(socket) = std::env::var(INTRUDER_SOCKET_ENV) else {
        return;
    };
    let sha = std::env::var("EMBER_TEST_INTRUDER_SHA").unwrap();
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut w = protocol::framed(stream);
    let ready = FromWorker {
        msg: Some(from_worker::Msg::Ready(WorkerReady {
            pid: std::process::id(),
            binary_sha256: sha,
        })),
    };
    let _ = w.send(protocol::encode_from_worker(&ready)).await;
    match tokio::time::timeout(Duration::from_secs(20), w.next()).await {
        Ok(Some(Ok(_))) => println!("INTRUDER-SERVED"),
        Ok(_) => println!("INTRUDER-CLOSED"),
        Err(_) => println!("INTRUDER-WAITED"),
    }
}

/// Another process of the same user connecting first to a new worker's socket is
/// dropped (its peer pid is not the worker's), and the executor still takes the real
/// connection and sends it the task.
#[tokio::test]
async fn a_connection_from_another_process_is_dropped_and_the_worker_still_accepted() {
    let (_root, _cfg, probe, sha, mut rx, mut workers) = recording_workers(None);
    workers.launch(launch(1, &sha, &[])).await;
    let (pid, env) = next_worker(&probe, &mut Vec::new()).await;

    let intruder = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_isolation::intruder_helper",
            "--nocapture",
        ])
        .env(INTRUDER_SOCKET_ENV, &env["EMBER_WORKER_SOCKET"])
        .env("EMBER_TEST_INTRUDER_SHA", &sha)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = within("the intruder to finish", intruder.wait_with_output())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("INTRUDER-CLOSED"), "{stdout}");

    // The worker (played by this process, which the executor trusts) is still taken.
    let mut w = connect(&env, pid, &sha).await;
    assert!(matches!(recv(&mut w).await, to_worker::Msg::Run(t) if t.task_id == 1));
    send_status(&mut w, 1).await;
    assert_eq!(next_status(&mut rx).await.task_id, 1);
    within("shutdown", workers.shutdown()).await;
    assert!(!alive(pid));
}
