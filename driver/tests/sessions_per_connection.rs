//! One client connection holds at most `--max-sessions-per-connection` sessions (each
//! takes one of the 4,094 session id ranges); another connection is not affected, and
//! a closed session frees its place.

mod common;

use std::time::Duration;

use common::*;
use ember_driver::server::ServerLimits;
use ember_proto::OpenSessionRequest;
use tonic::Code;

#[tokio::test]
async fn the_sessions_of_one_connection_are_bounded_and_others_still_open() {
    let driver = start(Options {
        limits: ServerLimits {
            max_sessions_per_connection: 3,
            ..ServerLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let sha = upload(&mut c, b"a binary").await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(open_session(&mut c, &sha).await);
    }
    let refused = c
        .open_session(OpenSessionRequest {
            app_name: "fourth".into(),
            binary_sha256: sha.clone(),
            conf: Vec::new(),
            resume_session_id: 0,
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("already holds 3 sessions")
            && refused
                .message()
                .contains("(--max-sessions-per-connection 3)"),
        "{refused:?}"
    );
    assert_eq!(driver.daemon.status().sessions, 3);

    // Another connection (another client) still opens one.
    let mut other = client(driver.addr, None).await;
    let (opened, _other_session) = open_session(&mut other, &sha).await;
    assert!(opened.session_id > 0);

    // Closing one of the first connection's sessions frees its place there.
    drop(held.pop());
    let deadline = std::time::Instant::now() + WAIT;
    while driver.daemon.status().sessions > 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session did not end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (again, _again_session) = open_session(&mut c, &sha).await;
    assert!(again.session_id > opened.session_id);
}
