//! Counts and sizes from the wire are bounded: plans, broadcasts and uploads over a
//! limit are refused with an error naming it, and the driver goes on serving jobs.
//! Nodes of no partitions are fine: their jobs succeed at once. The binary store
//! deletes binaries no session uses once they are old enough, and holds at most its
//! limit of bytes.

mod common;

use common::*;
use ember_driver::server::ServerLimits;
use ember_proto::{BinaryChunk, BroadcastValue, SubmitJobRequest};
use ember_scheduler::JobEvent;
use tonic::Code;

/// A `SubmitJob` into session `opened`, carrying its token.
fn submit(
    opened: &ember_proto::SessionOpened,
    plan: ember_proto::Plan,
    new: Vec<BroadcastValue>,
) -> tonic::Request<SubmitJobRequest> {
    let req = SubmitJobRequest {
        session_id: opened.session_id,
        plan: Some(plan),
        new_broadcasts: new,
    };
    ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token).unwrap()
}

#[tokio::test]
async fn huge_plans_are_refused_and_a_normal_job_runs_afterwards() {
    let (_driver, mut c, mut exec, sha) = ready(ServerLimits::default(), 2).await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    for parts in [u32::MAX, 1 << 25] {
        let err = c
            .submit_job(submit(
                &opened,
                tiny_plan(opened.id_base, parts, &sha),
                vec![],
            ))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted);
        assert_eq!(
            err.message(),
            format!(
                "the number of partitions of node {} (tiny) is {parts}, over the limit of 100000 (--max-partitions-per-node)",
                opened.id_base
            )
        );
    }
    let mut many = tiny_plan(opened.id_base, 1, &sha);
    many.nodes = (0..10_001)
        .map(|i| ember_proto::RddNode {
            id: opened.id_base + i,
            num_partitions: 1,
            ..Default::default()
        })
        .collect();
    let err = c
        .submit_job(submit(&opened, many, vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "the number of nodes in the plan is 10001, over the limit of 10000 (--max-plan-nodes)"
    );

    let mut job = c
        .submit_job(submit(&opened, tiny_plan(opened.id_base, 1, &sha), vec![]))
        .await
        .unwrap()
        .into_inner();
    let task = exec.launched().await.task.expect("task");
    exec.succeed(&task, vec![42]).await;
    let events = job_events(&mut job).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, JobEvent::TaskResult { result, .. } if result == &[42])),
        "{events:?}"
    );
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
}

#[tokio::test]
async fn a_job_over_an_rdd_of_no_partitions_succeeds_with_no_results() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let _exec = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let mut job = c
        .submit_job(submit(&opened, tiny_plan(opened.id_base, 0, &sha), vec![]))
        .await
        .unwrap()
        .into_inner();
    let events = job_events(&mut job).await;
    assert!(
        matches!(events.first(), Some(JobEvent::Started { .. })),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(JobEvent::JobSucceeded { .. })),
        "{events:?}"
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, JobEvent::TaskResult { .. })));
}

#[tokio::test]
async fn broadcasts_per_session_are_bounded_in_count_and_bytes() {
    let (_driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_broadcasts_per_session: 2,
            max_broadcast_bytes_per_session: 8,
            ..ServerLimits::default()
        },
        1,
    )
    .await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let b = |i: u64, len: usize| BroadcastValue {
        id: opened.broadcast_base + i,
        value: vec![7; len].into(),
    };
    let plan = || tiny_plan(opened.id_base, 1, &sha);
    let cases = [
        (
            vec![b(0, 1), b(1, 1), b(2, 1)],
            "the session would hold 3 broadcasts, over the limit of 2 (--max-broadcasts-per-session)",
        ),
        (
            vec![b(0, 9)],
            "the session's broadcasts would total 9 bytes, over the limit of 8 (--max-broadcast-bytes-per-session)",
        ),
    ];
    for (new, message) in cases {
        let err = c
            .submit_job(submit(&opened, plan(), new))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted);
        assert_eq!(err.message(), message);
    }
    // Within the limits (a value sent again replaces the old one).
    for new in [vec![b(0, 4), b(1, 4)], vec![b(1, 4)]] {
        let mut job = c
            .submit_job(submit(&opened, plan(), new))
            .await
            .unwrap()
            .into_inner();
        let task = exec.launched().await.task.expect("task");
        exec.succeed(&task, vec![]).await;
        let events = job_events(&mut job).await;
        assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
    }
}

#[tokio::test]
async fn uploads_are_bounded_in_size_and_chunk_count() {
    let driver = start(Options {
        limits: ServerLimits {
            max_binary_bytes: 8,
            ..ServerLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let big = b"123456789".to_vec();
    let err = upload_as(&mut c, &big, &sha256_hex(&big))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "a binary of 9 bytes is over the limit of 8 bytes (--max-binary-bytes)"
    );
    // Empty chunks without end: refused after the allowance.
    let bytes = b"abc".to_vec();
    let mut chunks = vec![BinaryChunk {
        sha256: sha256_hex(&bytes),
        total_len: 3,
        data: vec![],
        ..Default::default()
    }];
    chunks.extend((0..2000).map(|_| BinaryChunk::default()));
    chunks.push(BinaryChunk {
        data: bytes.clone(),
        ..Default::default()
    });
    let err = c
        .upload_binary(tokio_stream::iter(chunks))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "an upload of 3 bytes may have at most 1024 chunks (one per KiB and 1024 more); got more"
    );
    assert_eq!(upload(&mut c, &bytes).await, sha256_hex(&bytes));
}

#[tokio::test]
async fn binaries_no_session_uses_are_deleted_after_the_max_age() {
    let driver = start(Options {
        limits: ServerLimits {
            binary_max_age: std::time::Duration::ZERO,
            ..ServerLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let used = upload(&mut c, b"used by a session").await;
    let unused = upload(&mut c, b"used by nobody").await;
    let (_opened, session) = open_session(&mut c, &used).await;
    assert_eq!(driver.daemon.collect_binaries(), vec![unused.clone()]);
    assert!(!driver.binary_dir.join(&unused).exists());
    assert!(driver.binary_dir.join(&used).exists());
    // Once its session has ended, the other one goes too.
    drop(session);
    let deadline = std::time::Instant::now() + WAIT;
    while driver.daemon.status().sessions > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session did not end"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(driver.daemon.collect_binaries(), vec![used.clone()]);
    assert_eq!(std::fs::read_dir(&driver.binary_dir).unwrap().count(), 0);
}

#[tokio::test]
async fn the_binary_store_holds_at_most_its_limit_and_takes_uploads_again_once_binaries_go() {
    let driver = start(Options {
        limits: ServerLimits {
            max_binary_store_bytes: 20,
            binary_max_age: std::time::Duration::ZERO,
            ..ServerLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let first = upload(&mut c, b"twelve bytes").await; // 12 of 20
                                                       // The same binary again is counted once (its bytes are checked, not stored again);
                                                       // other bytes under its digest are refused and leave it as it was.
    assert_eq!(upload(&mut c, b"twelve bytes").await, first);
    let err = upload_as(&mut c, b"twelve bytez", &first)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("binary hash mismatch"),
        "{}",
        err.message()
    );
    assert_eq!(fetch_binary(&mut c, &first).await, b"twelve bytes");
    let eight = upload(&mut c, b"8 bytes!").await; // 20 of 20
    let more = b"one byte too many".to_vec();
    let err = upload_as(&mut c, &more, &sha256_hex(&more))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "the binary store is full: it holds 20 bytes and 0 more are being uploaded; a binary of \
         17 bytes would pass its limit of 20 bytes (--max-binary-store-bytes); binaries no \
         session uses are deleted once unused for 0 s"
    );
    // Nothing of the refused upload is on disk: just the two binaries.
    let mut names: Vec<String> = std::fs::read_dir(&driver.binary_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want = vec![first.clone(), eight.clone()];
    want.sort();
    assert_eq!(names, want);
    // Once unused binaries are deleted, their bytes are free again.
    let (_opened, _session) = open_session(&mut c, &first).await;
    assert_eq!(driver.daemon.collect_binaries(), vec![eight]);
    assert_eq!(upload(&mut c, b"eight b.").await, sha256_hex(b"eight b."));
    let err = upload_as(&mut c, b"x", &sha256_hex(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "20 of 20 again");
}
