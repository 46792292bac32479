//! Sessions across a driver restart (issue 40): a driver with a state directory keeps
//! one 0600 file per open session (never the token itself), a driver started on the
//! same directory recovers them, and only the client holding the token reopens its
//! session, once, with the same ids; a session nobody reopens is finalized after the
//! grace period (its file goes, its executors are told to clean up).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use ember_proto::{auth, driver_message, OpenSessionRequest, SessionOpened};
use tonic::Code;

/// Reopens session `id` with `token` (none: no token metadata).
async fn reopen(
    client: &mut Client,
    sha: &str,
    id: u64,
    token: Option<&str>,
) -> Result<(SessionOpened, tonic::Streaming<ember_proto::SessionEvent>), tonic::Status> {
    let request = OpenSessionRequest {
        app_name: String::new(),
        binary_sha256: sha.into(),
        conf: Vec::new(),
        resume_session_id: id,
    };
    let mut request = tonic::Request::new(request);
    if let Some(t) = token {
        request = auth::with_session_token(request, t).unwrap();
    }
    let mut stream = client.open_session(request).await?.into_inner();
    let ev = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("an answer in time")?
        .expect("the stream is open");
    match ev.event {
        Some(ember_proto::session_event::Event::Opened(o)) => Ok((o, stream)),
        other => panic!("expected SessionOpened, got {other:?}"),
    }
}

fn state_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("binaries/sessions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_restarted_driver_gives_a_session_back_to_its_client_only() {
    let state = tempfile::tempdir().unwrap();
    let options = || Options {
        state_dir: Some(state.path().to_path_buf()),
        ..Options::default()
    };
    let driver = start(options()).await;
    let mut c = client(driver.addr, None).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, stream) = open_named(&mut c, &sha, "resumable".into()).await;
    let files = state_files(state.path());
    assert_eq!(files.len(), 1, "one state file per open session");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(files[0].parent().unwrap()), 0o700);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        !text.contains(&opened.session_token),
        "the state file holds the token itself: {text}"
    );
    // The driver stops (as a kill would leave it): the file stays.
    driver.stop_within(Duration::from_secs(10)).await;
    drop(stream);
    assert_eq!(state_files(state.path()).len(), 1);

    let driver = start(options()).await;
    let mut c = client(driver.addr, None).await;
    let id = opened.session_id;
    let err = reopen(&mut c, &sha, id, None).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = reopen(&mut c, &sha, id, Some(&"0".repeat(64)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(!err.message().contains(&opened.session_token));
    let err = reopen(&mut c, &sha, id + 1, Some(&opened.session_token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let (again, _held) = reopen(&mut c, &sha, id, Some(&opened.session_token))
        .await
        .expect("the client reopens its session");
    assert_eq!(
        (again.session_id, again.id_base, again.broadcast_base),
        (opened.session_id, opened.id_base, opened.broadcast_base)
    );
    assert_eq!(again.session_token, opened.session_token);
    // One client at a time.
    let err = reopen(&mut c, &sha, id, Some(&opened.session_token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // A new session does not take the recovered one's id or range.
    let (other, _other_stream) = open_session(&mut c, &sha).await;
    assert!(other.session_id > id);
    assert_ne!(other.id_base, opened.id_base);
    // The reopened session runs jobs.
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let request = ember_proto::SubmitJobRequest {
        session_id: id,
        plan: Some(tiny_plan(opened.id_base, 1, &sha)),
        new_broadcasts: vec![],
    };
    let request =
        auth::with_session_token(tonic::Request::new(request), &opened.session_token).unwrap();
    let mut job = c.submit_job(request).await.unwrap().into_inner();
    let launch = exec.launched().await;
    exec.succeed(launch.task.as_ref().unwrap(), vec![1]).await;
    let events = job_events(&mut job).await;
    assert!(
        matches!(
            events.last(),
            Some(ember_scheduler::JobEvent::JobSucceeded { .. })
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_recovered_session_nobody_reopens_is_finalized_after_the_grace() {
    let state = tempfile::tempdir().unwrap();
    let options = |grace: u64| Options {
        state_dir: Some(state.path().to_path_buf()),
        session_reconnect: Duration::from_secs(grace),
        ..Options::default()
    };
    let driver = start(options(60)).await;
    let mut c = client(driver.addr, None).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, stream) = open_session(&mut c, &sha).await;
    driver.stop_within(Duration::from_secs(10)).await;
    drop(stream);

    let driver = start(options(1)).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    // After the grace: the executor is told to clean up the session's ids, the file goes.
    let cleanup = loop {
        if let driver_message::Msg::Cleanup(c) = exec.recv().await {
            break c;
        }
    };
    assert_eq!(cleanup.id_lo, opened.id_base);
    assert!(state_files(state.path()).is_empty());
    let err = reopen(&mut c, &sha, opened.session_id, Some(&opened.session_token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

/// Outputs an executor reports holding count only under the session's own shuffle
/// key: the same id range under another key (an earlier session's files, whose cleanup
/// the executor missed) is cleaned up, the session's own are kept.
#[tokio::test]
async fn held_outputs_under_another_key_of_the_range_are_cleaned_up() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _stream) = open_session(&mut c, &sha).await;
    // The session's shuffle key, as its tasks carry it.
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let request = ember_proto::SubmitJobRequest {
        session_id: opened.session_id,
        plan: Some(tiny_plan(opened.id_base, 1, &sha)),
        new_broadcasts: vec![],
    };
    let request =
        auth::with_session_token(tonic::Request::new(request), &opened.session_token).unwrap();
    let _job = c.submit_job(request).await.unwrap().into_inner();
    let launch = exec.launched().await;
    let key = launch.plan.unwrap().plan.unwrap().shuffle_key;
    let holding = |key: &str| ember_proto::HeldOutputs {
        outputs: vec![ember_proto::HeldOutput {
            shuffle_id: opened.id_base + 5,
            map_partition: 0,
            block_sizes: vec![1],
        }],
        sessions: vec![ember_proto::HeldSession {
            range: ember_proto::IdRange::of_id(opened.id_base).index(),
            shuffle_key_sha256: sha256_hex(key.as_bytes()),
        }],
        last: true,
    };
    let mut stale = FakeExecutor::register_holding(&mut c, 1, holding("an earlier key")).await;
    match stale.recv().await {
        driver_message::Msg::Cleanup(cleanup) => assert_eq!(cleanup.id_lo, opened.id_base),
        other => panic!("expected a cleanup of the stale range, got {other:?}"),
    }
    let mut own = FakeExecutor::register_holding(&mut c, 1, holding(&key)).await;
    let next = tokio::time::timeout(Duration::from_millis(500), own.rx.message()).await;
    assert!(
        next.is_err(),
        "the session's own outputs were cleaned up: {next:?}"
    );
}
