//! The registration loop against a fake driver: register, heartbeat, launch, cleanup,
//! loss and re-registration, and a refused secret.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ember_executor::binaries::BinaryStore;
use ember_executor::blocks::SharedExecutorId;
use ember_executor::registration::{self, Registration, RegistrationError};
use ember_proto::*;
use tokio_util::sync::CancellationToken;

use crate::common::*;

fn registration(
    cfg: ember_executor::config::Config,
) -> (Registration, SharedExecutorId, CancellationToken) {
    let id = SharedExecutorId::default();
    let token = CancellationToken::new();
    let cfg = Arc::new(cfg);
    let reg = Registration {
        decommission: Default::default(),
        binaries: Arc::new(BinaryStore::new(cfg.binaries_dir())),
        config: cfg,
        shuffle_address: "http://127.0.0.1:9".into(),
        executor_id: id.clone(),
        session_keys: Default::default(),
        shutdown: token.clone(),
        registered: Default::default(),
    };
    (reg, id, token)
}

/// Answers the executor's `Register` with `Registered` as `id`, and waits for its first
/// heartbeat.
async fn registered_as(conn: &mut ExecutorConn, id: &str) {
    conn.send(driver_message::Msg::Registered(Registered {
        executor_id: id.into(),
        heartbeat_interval_ms: 50,
    }))
    .await;
    assert!(matches!(
        conn.next().await,
        executor_message::Msg::Heartbeat(_)
    ));
}

/// Launches task `task_id` of a plan in the session owning `rdd` with shuffle key `key`
/// (its binary is unknown here, so it fails) and waits for its status.
async fn run_with_key(conn: &mut ExecutorConn, task_id: u64, rdd: u32, key: &str) {
    let mut t = task(task_id, &sha256_hex(b"not here"));
    if let Some(plan) = t.plan.as_mut() {
        plan.final_rdd = rdd;
        plan.shuffle_key = key.into();
    }
    conn.send(driver_message::Msg::Launch(LaunchTask {
        task: Some(t),
        ..Default::default()
    }))
    .await;
    assert!(matches!(
        conn.next_non_heartbeat().await,
        executor_message::Msg::Status(_)
    ));
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    within(what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn registers_runs_the_channel_and_reregisters_after_a_loss() {
    let claimed = sha256_hex(b"the real job");
    let mut driver = start_driver(
        HashMap::from([(claimed.clone(), b"a forgery".to_vec())]),
        Some("s"),
    )
    .await;
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(root.path(), Some("s"));
    cfg.driver = driver.url.clone();
    // Session 0's shuffle 10, and session 1's shuffles S+30, S+31 and S+310.
    const S: u32 = ember_proto::IDS_PER_SESSION;
    let session0 = cfg.session_shuffle_dir(ember_proto::IdRange::of_id(0));
    let shuffle = cfg.session_shuffle_dir(ember_proto::IdRange::of_id(S));
    std::fs::create_dir_all(&session0).unwrap();
    std::fs::create_dir_all(&shuffle).unwrap();
    for name in ["shuffle_10_0.data", "shuffle_10_0.index"] {
        std::fs::write(session0.join(name), b"x").unwrap();
    }
    for name in [
        format!("shuffle_{}_1.data", S + 30),
        format!("shuffle_{}_0.data", S + 31),
        format!(".shuffle_{}_1.index.x.tmp", S + 31),
        format!("shuffle_{}_0.data", S + 310),
        format!("rdd_{}_0.cached", S + 40),
        format!("rdd_{}_3.cached", S + 40),
        format!("rdd_{}_0.cached", S + 41),
    ] {
        std::fs::write(shuffle.join(name), b"x").unwrap();
    }
    let (reg, id, token) = registration(cfg);
    let run = tokio::spawn(async move { registration::run(&reg).await });

    let mut conn = within("the executor channel", driver.channels.recv())
        .await
        .unwrap();
    match conn.next().await {
        executor_message::Msg::Register(r) => {
            assert_eq!((r.cores, r.memory_bytes), (3, 123 << 20));
            assert_eq!(r.shuffle_address, "http://127.0.0.1:9");
            assert_eq!((r.host.as_str(), r.pid), ("127.0.0.1", std::process::id()));
        }
        other => panic!("expected Register, got {other:?}"),
    }
    conn.send(driver_message::Msg::Registered(Registered {
        executor_id: "exec-A".into(),
        heartbeat_interval_ms: 50,
    }))
    .await;
    match conn.next().await {
        executor_message::Msg::Heartbeat(h) => assert!(h.running_tasks.is_empty()),
        other => panic!("expected a heartbeat, got {other:?}"),
    }
    assert_eq!(*id.lock().unwrap(), "exec-A");

    // A task whose binary the driver serves wrong is refused.
    conn.send(driver_message::Msg::Launch(LaunchTask {
        task: Some(task(9, &claimed)),
        broadcasts: vec![],
        ..Default::default()
    }))
    .await;
    let status = match conn.next_non_heartbeat().await {
        executor_message::Msg::Status(s) => s,
        other => panic!("expected a status, got {other:?}"),
    };
    assert_eq!((status.task_id, status.executor_id.as_str()), (9, "exec-A"));
    let actual = sha256_hex(b"a forgery");
    assert_eq!(
        user_error(&status),
        format!(
            "binary {claimed} fetched from the driver does not match its hash (content hashes \
             to {actual}); refusing to run it"
        )
    );

    // A session cleanup deletes that session's shuffle directory only.
    conn.send(driver_message::Msg::Cleanup(CleanupSession {
        id_lo: 0,
        id_hi: S,
        broadcast_lo: 0,
        broadcast_hi: 0,
    }))
    .await;
    eventually("session cleanup", || !session0.exists()).await;
    assert!(shuffle.join(format!("shuffle_{}_1.data", S + 30)).exists());

    // Released shuffles: exactly their files go (temporaries too), nothing else.
    conn.send(driver_message::Msg::RemoveShuffles(RemoveShuffles {
        shuffle_ids: vec![S + 31, S + 99],
    }))
    .await;
    eventually("shuffle release", || {
        !shuffle.join(format!("shuffle_{}_0.data", S + 31)).exists()
    })
    .await;
    assert!(!shuffle
        .join(format!(".shuffle_{}_1.index.x.tmp", S + 31))
        .exists());
    assert!(shuffle.join(format!("shuffle_{}_0.data", S + 310)).exists());
    assert!(shuffle.join(format!("shuffle_{}_1.data", S + 30)).exists());

    // An unpersisted RDD's blocks moved here go, exactly those.
    conn.send(driver_message::Msg::Unpersist(ember_proto::UnpersistRdd {
        rdd_id: S + 40,
    }))
    .await;
    eventually("unpersist", || {
        !shuffle.join(format!("rdd_{}_0.cached", S + 40)).exists()
            && !shuffle.join(format!("rdd_{}_3.cached", S + 40)).exists()
    })
    .await;
    assert!(shuffle.join(format!("rdd_{}_0.cached", S + 41)).exists());
    assert!(shuffle.join(format!("shuffle_{}_0.data", S + 310)).exists());

    // The driver restarts: the executor drops its shuffle files and registers again.
    drop(conn);
    let mut conn = driver.accept_register("re-registration").await;
    assert!(!shuffle.exists());
    registered_as(&mut conn, "exec-B").await;
    assert_eq!(*id.lock().unwrap(), "exec-B");

    token.cancel();
    within("shutdown", run).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_secret_stops_the_loop() {
    let driver = start_driver(HashMap::new(), Some("right")).await;
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(root.path(), Some("wrong"));
    cfg.driver = driver.url.clone();
    let (reg, _, _) = registration(cfg);
    let err = within("refusal", registration::run(&reg))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistrationError::Unauthenticated(_)));
    assert!(
        err.to_string()
            .starts_with("driver refused registration: wrong or missing executor secret"),
        "{err}"
    );
}

/// A committed map output file of blocks of `sizes` bytes, with its index.
fn map_output(path: &std::path::Path, sizes: &[u64]) {
    let mut bytes = Vec::new();
    let mut entries = Vec::new();
    for &len in sizes {
        let block = vec![3u8; len as usize];
        entries.push(ember_shuffle::BlockEntry {
            offset: bytes.len() as u64,
            len,
            crc: if len == 0 { 0 } else { crc32fast::hash(&block) },
        });
        bytes.extend_from_slice(&block);
    }
    bytes.extend_from_slice(&ember_shuffle::IndexFile::encode(&entries));
    std::fs::write(path, bytes).unwrap();
}

/// With `--driver-reconnect-secs`, a lost driver's map outputs stay, and the next
/// registration reports them (with their index's block sizes) before anything else.
#[tokio::test]
async fn a_lost_drivers_outputs_are_kept_and_reported_to_the_next_registration() {
    let mut driver = start_driver(HashMap::new(), Some("s")).await;
    let root = tempfile::tempdir().unwrap();
    let mut cfg = config(root.path(), Some("s"));
    cfg.driver = driver.url.clone();
    cfg.driver_reconnect = Duration::from_secs(30);
    const S: u32 = ember_proto::IDS_PER_SESSION;
    let shuffle = cfg.session_shuffle_dir(ember_proto::IdRange::of_id(S));
    std::fs::create_dir_all(&shuffle).unwrap();
    let output = shuffle.join(format!("shuffle_{}_2.data", S + 5));
    map_output(&output, &[3, 0, 2]);
    let (reg, id, token) = registration(cfg);
    let run = tokio::spawn(async move { registration::run(&reg).await });

    let held = |conn: &ExecutorConn| -> Vec<(u32, u32, Vec<u64>)> {
        assert!(conn.held.last().is_some_and(|h| h.last), "{:?}", conn.held);
        (conn.held.iter())
            .flat_map(|h| &h.outputs)
            .map(|o| (o.shuffle_id, o.map_partition, o.block_sizes.clone()))
            .collect()
    };
    let mut conn = driver.accept_register("registration").await;
    registered_as(&mut conn, "exec-A").await;
    assert_eq!(
        held(&conn),
        vec![],
        "a first registration holds nothing from before"
    );
    // A task of the session teaches its key (the binary is unknown: the task fails).
    run_with_key(&mut conn, 1, S + 1, "the session's key").await;

    // The driver goes and comes back: the file stays and is reported, with the
    // digest of the key it is held under.
    drop(conn);
    let mut conn = driver.accept_register("re-registration").await;
    assert!(output.exists(), "the output was deleted at the loss");
    registered_as(&mut conn, "exec-B").await;
    assert_eq!(*id.lock().unwrap(), "exec-B");
    assert_eq!(held(&conn), vec![(S + 5, 2, vec![3, 0, 2])]);
    let sessions = &conn.held.first().unwrap().sessions;
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].range, 1);
    assert_eq!(
        sessions[0].shuffle_key_sha256,
        sha256_hex(b"the session's key")
    );

    // A task of another session given the same id range (another key): the earlier
    // session's files go before it runs.
    run_with_key(&mut conn, 2, S + 1, "a later session's key").await;
    assert!(!output.exists(), "an earlier session's output was kept");

    token.cancel();
    within("shutdown", run).await.unwrap().unwrap();
}
