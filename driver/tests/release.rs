//! `ReleaseShuffles` (the client cleaner's call) through the driver's gRPC surface: a
//! session releases only its own shuffles (another session's id, another session's
//! id with its own token, or too many ids are refused and change nothing), and a
//! release it may make forgets the map outputs and has the executors delete the files.

mod common;

use common::*;
use ember_proto::limits::MAX_RELEASED_SHUFFLES;
use ember_proto::{
    dependency, driver_message, executor_message, task_status, task_success, Dependency, MapStatus,
    Plan, RddNode, ReleaseShufflesRequest, SessionOpened, ShuffleDependency, SubmitJobRequest,
    TaskStatus, TaskSuccess,
};
use ember_scheduler::JobEvent;
use tonic::Code;

/// `req` carrying the token of session `opened`.
fn tok<T>(opened: &SessionOpened, req: T) -> tonic::Request<T> {
    ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token).unwrap()
}

/// source (2 partitions) --shuffle `base`--> reduce (2 partitions), ids from `base`.
fn shuffle_plan(base: u32, sha: &str) -> Plan {
    let shuffle = Dependency {
        kind: Some(dependency::Kind::Shuffle(ShuffleDependency {
            shuffle_id: base,
            parent: base,
            num_reduce_partitions: 2,
            ..Default::default()
        })),
    };
    Plan {
        nodes: vec![
            RddNode {
                id: base,
                num_partitions: 2,
                name: "source".into(),
                ..Default::default()
            },
            RddNode {
                id: base + 1,
                num_partitions: 2,
                name: "reduce".into(),
                deps: vec![shuffle],
                ..Default::default()
            },
        ],
        final_rdd: base + 1,
        binary_hash: sha.into(),
        description: "two-stage test job".into(),
        ..Default::default()
    }
}

/// Runs `shuffle_plan` of session `opened` on `exec`; returns (map tasks run, stages
/// skipped).
async fn run_job(
    c: &mut Client,
    exec: &mut FakeExecutor,
    opened: &SessionOpened,
    sha: &str,
) -> (u32, u32) {
    let mut job = c
        .submit_job(tok(
            opened,
            SubmitJobRequest {
                session_id: opened.session_id,
                plan: Some(shuffle_plan(opened.id_base, sha)),
                new_broadcasts: vec![],
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut map_tasks = 0;
    let mut results = 0;
    while results < 2 {
        let task = exec.launched().await.task.expect("a task");
        match task.shuffle_id {
            Some(sid) => {
                map_tasks += 1;
                let status = TaskStatus {
                    barrier: None,
                    task_id: task.task_id,
                    executor_id: exec.id.clone(),
                    metrics: None,
                    outcome: Some(task_status::Outcome::Success(TaskSuccess {
                        output: Some(task_success::Output::MapStatus(MapStatus {
                            replicas: Default::default(),
                            stored: false,
                            shuffle_id: sid,
                            map_partition: task.partition,
                            block_sizes: vec![1, 1],
                        })),
                        ..Default::default()
                    })),
                };
                exec.send(executor_message::Msg::Status(status)).await;
            }
            None => {
                results += 1;
                exec.succeed(&task, vec![task.partition as u8]).await;
            }
        }
    }
    let events = job_events(&mut job).await;
    assert!(
        matches!(events.last(), Some(JobEvent::JobSucceeded { .. })),
        "{events:?}"
    );
    let skipped = events
        .iter()
        .filter(|e| matches!(e, JobEvent::StageSkipped(_)))
        .count() as u32;
    (map_tasks, skipped)
}

fn release(
    opened: &SessionOpened,
    session_id: u64,
    ids: Vec<u32>,
) -> tonic::Request<ReleaseShufflesRequest> {
    tok(
        opened,
        ReleaseShufflesRequest {
            session_id,
            shuffle_ids: ids,
        },
    )
}

#[tokio::test]
async fn a_session_releases_only_its_own_shuffles_and_a_release_deletes_their_files() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 2).await;
    let sha = upload(&mut c, b"a job binary").await;
    let (a, _a_stream) = open_session(&mut c, &sha).await;
    let (b, _b_stream) = open_session(&mut c, &sha).await;
    assert_ne!(a.id_base, b.id_base);
    assert_eq!(run_job(&mut c, &mut exec, &a, &sha).await, (2, 0));

    // B names A's shuffle in its own session: outside its id range.
    let st = c
        .release_shuffles(release(&b, b.session_id, vec![b.id_base, a.id_base]))
        .await
        .expect_err("another session's shuffle released");
    assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
    assert!(
        st.message().contains(&format!("shuffle {}", a.id_base))
            && st.message().contains("outside this session's id range"),
        "{st:?}"
    );
    // B names A's session with its own token.
    let st = c
        .release_shuffles(release(&b, a.session_id, vec![a.id_base]))
        .await
        .expect_err("a release with another session's token");
    assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
    assert!(!st.message().contains(&b.session_token), "{st:?}");
    // A itself, with too many ids (all its own).
    let too_many: Vec<u32> = (0..=MAX_RELEASED_SHUFFLES as u32)
        .map(|i| a.id_base + i)
        .collect();
    let st = c
        .release_shuffles(release(&a, a.session_id, too_many))
        .await
        .expect_err("an unbounded release");
    assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
    assert!(st.message().contains("at most"), "{st:?}");

    // None of that touched A's shuffle: its map stage is skipped.
    assert_eq!(run_job(&mut c, &mut exec, &a, &sha).await, (0, 1));

    // A releases its shuffle: every executor is told to delete exactly that one.
    c.release_shuffles(release(&a, a.session_id, vec![a.id_base, a.id_base]))
        .await
        .expect("own release");
    match exec.recv().await {
        driver_message::Msg::RemoveShuffles(r) => assert_eq!(r.shuffle_ids, vec![a.id_base]),
        other => panic!("expected RemoveShuffles, got {other:?}"),
    }
    // And the scheduler forgot its map outputs: the map stage runs again.
    assert_eq!(run_job(&mut c, &mut exec, &a, &sha).await, (2, 0));
}
