//! The driver daemon when things go away: executors that close their channel or stop
//! heartbeating, clients that drop a job stream or their session.

mod common;

use std::time::Duration;

use common::*;
use ember_proto::{driver_message, Empty, SubmitJobRequest};
use ember_scheduler::{JobEvent, JobFailure};
use tonic::Code;

/// A job of `partitions` tasks in session `opened`, carrying its token.
fn submit(
    opened: &ember_proto::SessionOpened,
    partitions: u32,
    sha: &str,
) -> tonic::Request<SubmitJobRequest> {
    let req = SubmitJobRequest {
        session_id: opened.session_id,
        plan: Some(tiny_plan(opened.id_base, partitions, sha)),
        new_broadcasts: vec![],
    };
    ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token).unwrap()
}

#[tokio::test]
async fn a_task_on_a_closed_executor_fails_over_without_using_an_attempt() {
    // One attempt per task: the rerun after a lost executor must not count as one.
    let driver = start(Options {
        max_task_attempts: 1,
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let mut first = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let mut job = c
        .submit_job(submit(&opened, 1, &sha))
        .await
        .unwrap()
        .into_inner();
    let lost_task = first.launched().await.task.expect("task");
    assert_eq!(lost_task.attempt, 0);

    let mut second = FakeExecutor::register(&mut c, 1).await;
    assert_eq!(second.id, "executor-2");
    drop(first);

    let retry = second.launched().await.task.expect("task");
    assert_eq!(retry.partition, lost_task.partition);
    assert_eq!(retry.attempt, 1);
    assert_ne!(retry.task_id, lost_task.task_id);
    second.succeed(&retry, vec![7]).await;

    let events = job_events(&mut job).await;
    assert!(
        events.iter().any(|e| matches!(e, JobEvent::TaskEnded { succeeded: false, executor_id, .. } if executor_id == "executor-1")),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(JobEvent::JobSucceeded { .. })),
        "{events:?}"
    );
    let status = c.status(Empty {}).await.unwrap().into_inner();
    let ids: Vec<&str> = status
        .executors
        .iter()
        .map(|e| e.executor_id.as_str())
        .collect();
    assert_eq!(ids, vec!["executor-2"]);
}

#[tokio::test]
async fn a_silent_executor_is_lost_and_its_stream_ends() {
    let driver = start(Options {
        heartbeat_timeout: Duration::from_millis(400),
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let mut silent = FakeExecutor::register(&mut c, 1).await;
    let talker = FakeExecutor::register(&mut c, 1).await;
    let beats = tokio::spawn(async move {
        loop {
            talker.heartbeat().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // The silent one's response stream ends (so a real executor would re-register).
    let end = tokio::time::timeout(WAIT, silent.rx.message())
        .await
        .expect("stream ends in time");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    let status = c.status(Empty {}).await.unwrap().into_inner();
    let ids: Vec<&str> = status
        .executors
        .iter()
        .map(|e| e.executor_id.as_str())
        .collect();
    assert_eq!(ids, vec!["executor-2"], "the heartbeating executor stays");
    beats.abort();
}

#[tokio::test]
async fn dropping_the_job_stream_cancels_the_job_and_kills_its_task() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let job = c
        .submit_job(submit(&opened, 1, &sha))
        .await
        .unwrap()
        .into_inner();
    let task = exec.launched().await.task.expect("task");
    drop(job);
    match exec.recv().await {
        driver_message::Msg::Kill(k) => assert_eq!(k.task_id, task.task_id),
        other => panic!("expected KillTask, got {other:?}"),
    }
    // The task slot comes back once the killed attempt reports; the next job runs.
    exec.send(ember_proto::executor_message::Msg::Status(
        ember_proto::TaskStatus {
            barrier: None,
            task_id: task.task_id,
            executor_id: exec.id.clone(),
            metrics: None,
            outcome: Some(ember_proto::task_status::Outcome::Failure(
                ember_proto::TaskFailure {
                    reason: Some(ember_proto::task_failure::Reason::Killed("killed".into())),
                },
            )),
        },
    ))
    .await;
    let mut next = c
        .submit_job(submit(&opened, 1, &sha))
        .await
        .unwrap()
        .into_inner();
    let t2 = exec.launched().await.task.expect("task");
    exec.succeed(&t2, vec![]).await;
    let events = job_events(&mut next).await;
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
}

#[tokio::test]
async fn a_closed_session_cancels_its_jobs_cleans_up_and_frees_its_id_range() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, session) = open_session(&mut c, &sha).await;
    let mut job = c
        .submit_job(submit(&opened, 1, &sha))
        .await
        .unwrap()
        .into_inner();
    let task = exec.launched().await.task.expect("task");
    drop(session);

    // The kill comes from the scheduler thread and the cleanup once the job has ended
    // on the job's own thread, so they may reach the executor in either order.
    let (mut killed, mut cleaned) = (false, false);
    while !(killed && cleaned) {
        match exec.recv().await {
            driver_message::Msg::Kill(k) => {
                assert_eq!(k.task_id, task.task_id);
                killed = true;
            }
            driver_message::Msg::Cleanup(cl) => {
                assert_eq!((cl.id_lo, cl.id_hi), (1 << 20, 2 << 20));
                assert_eq!((cl.broadcast_lo, cl.broadcast_hi), (1 << 40, 2 << 40));
                cleaned = true;
            }
            other => panic!("expected KillTask and CleanupSession, got {other:?}"),
        }
    }
    let events = job_events(&mut job).await;
    match events.last() {
        Some(JobEvent::JobFailed {
            failure: JobFailure::Cancelled(reason),
            ..
        }) => assert_eq!(reason, "client session 1 disconnected"),
        other => panic!("expected a cancelled job, got {other:?}"),
    }
    let err = c.submit_job(submit(&opened, 1, &sha)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // The id range is free again: the next session gets the same ids under a new id.
    let (again, _session) = open_session(&mut c, &sha).await;
    assert_eq!(again.session_id, 2);
    assert_eq!(again.id_base, opened.id_base);
    let status = c.status(Empty {}).await.unwrap().into_inner();
    assert_eq!((status.sessions, status.running_jobs), (1, 0));
}

#[tokio::test]
async fn shutdown_ends_open_session_executor_and_job_streams() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, mut session) = open_session(&mut c, &sha).await;
    let mut job = c
        .submit_job(submit(&opened, 1, &sha))
        .await
        .unwrap()
        .into_inner();
    let _task = exec.launched().await;
    driver.stop_within(Duration::from_secs(3)).await;

    let events = job_events(&mut job).await;
    assert!(
        matches!(
            events.last(),
            Some(JobEvent::JobFailed {
                failure: JobFailure::Cancelled(_),
                ..
            })
        ),
        "{events:?}"
    );
    let end = tokio::time::timeout(WAIT, session.message())
        .await
        .expect("in time");
    assert!(
        matches!(&end, Err(e) if e.code() == Code::Unavailable),
        "{end:?}"
    );
    let end = tokio::time::timeout(WAIT, exec.rx.message())
        .await
        .expect("in time");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
}
