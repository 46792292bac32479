//! The driver daemon through its public gRPC surface: a job on a fake executor,
//! binaries, the secret, broadcasts, refused requests and the status page.

mod common;

use std::time::Duration;

use common::*;
use ember_proto::{
    executor_message, BinaryRef, BroadcastValue, Empty, ExecutorMessage, Heartbeat,
    SubmitJobRequest, UnpersistRequest,
};
use ember_scheduler::JobEvent;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

#[tokio::test]
async fn a_job_runs_on_a_fake_executor_and_streams_its_results() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 2).await;
    assert_eq!(exec.id, "executor-1");

    let binary = b"not really an executable".to_vec();
    let sha = upload(&mut c, &binary).await;
    let present = c
        .has_binary(BinaryRef {
            sha256: sha.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(present.present);
    let mut fetched = c
        .fetch_binary(BinaryRef {
            sha256: sha.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = fetched.message().await.unwrap().unwrap();
    assert_eq!(
        (first.sha256.as_str(), first.total_len),
        (sha.as_str(), binary.len() as u64)
    );
    let mut got = first.data;
    while let Some(chunk) = fetched.message().await.unwrap() {
        got.extend(chunk.data);
    }
    assert_eq!(got, binary);

    let (opened, _session) = open_session(&mut c, &sha).await;
    assert_eq!(opened.session_id, 1);
    assert_eq!(opened.id_base, 1 << 20);
    assert_eq!(opened.broadcast_base, 1 << 40);
    assert_eq!((opened.total_cores, opened.executors), (2, 1));

    let plan = tiny_plan(opened.id_base, 2, &sha);
    let mut job = c
        .submit_job(tok(
            &opened,
            SubmitJobRequest {
                session_id: opened.session_id,
                plan: Some(plan),
                new_broadcasts: vec![],
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut partitions = Vec::new();
    for _ in 0..2 {
        let l = exec.launched().await;
        let task = l.task.expect("task");
        partitions.push(task.partition);
        exec.succeed(&task, vec![task.partition as u8 + 10]).await;
    }
    partitions.sort_unstable();
    assert_eq!(partitions, vec![0, 1]);

    let events = job_events(&mut job).await;
    assert!(matches!(events[0], JobEvent::Started { .. }), "{events:?}");
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
    let mut results: Vec<(u32, Vec<u8>)> = events
        .iter()
        .filter_map(|e| match e {
            JobEvent::TaskResult { partition, result } => Some((*partition, result.clone())),
            _ => None,
        })
        .collect();
    results.sort();
    assert_eq!(results, vec![(0, vec![10]), (1, vec![11])]);

    let status = c.status(Empty {}).await.unwrap().into_inner();
    assert_eq!(status.executors.len(), 1);
    assert_eq!(status.executors[0].cores, 2);
    assert_eq!(status.sessions, 1);
    assert_eq!(status.running_jobs, 0);
}

#[tokio::test]
async fn uploads_and_fetches_are_checked() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let bytes = b"some bytes".to_vec();
    let wrong = sha256_hex(b"other bytes");
    let err = upload_as(&mut c, &bytes, &wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let expected = format!(
        "binary hash mismatch: declared {wrong}, content hashes to {}",
        sha256_hex(&bytes)
    );
    assert_eq!(err.message(), expected);
    let present = c
        .has_binary(BinaryRef {
            sha256: wrong.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!present.present, "a refused upload leaves nothing behind");
    assert_eq!(
        std::fs::read_dir(&driver.binary_dir).unwrap().count(),
        0,
        "no temporary file is left"
    );

    for bad in ["../../etc/passwd", &wrong.to_uppercase(), ""] {
        let err = upload_as(&mut c, &bytes, bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
    }
    let err = c
        .fetch_binary(BinaryRef {
            sha256: wrong.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), format!("no binary {wrong} on this driver"));

    let err = c
        .open_session(ember_proto::OpenSessionRequest {
            app_name: "x".into(),
            binary_sha256: wrong,
            conf: Vec::new(),
            resume_session_id: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    // Declared longer than sent.
    let sha = sha256_hex(&bytes);
    let short = vec![ember_proto::BinaryChunk {
        sha256: sha.clone(),
        total_len: 100,
        data: bytes.clone(),
        ..Default::default()
    }];
    let err = c
        .upload_binary(tokio_stream::iter(short))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("length"), "{}", err.message());
    assert_eq!(upload(&mut c, &bytes).await, sha);
}

#[tokio::test]
async fn a_wrong_or_missing_secret_is_unauthenticated() {
    let driver = start(Options {
        secret: Some("s3cret"),
        ..Options::default()
    })
    .await;
    for secret in [Some("nope"), None] {
        let mut c = client(driver.addr, secret).await;
        let err = c.status(Empty {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{secret:?}");
        let err = c
            .has_binary(BinaryRef {
                sha256: sha256_hex(b"x"),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }
    // Without a secret even a large body is refused by the interceptor, before any
    // method (which would decode the body first) runs.
    let mut c = client(driver.addr, None).await;
    let err = c
        .has_binary(BinaryRef {
            sha256: "x".repeat(32 << 20),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message()
            .contains("every call to this driver needs the cluster secret"),
        "{}",
        err.message()
    );
    let mut c = client(driver.addr, Some("s3cret")).await;
    assert!(c.status(Empty {}).await.is_ok());
}

#[tokio::test]
async fn a_broadcast_reaches_an_executor_once() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 2).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;

    let err = c
        .submit_job(tok(
            &opened,
            SubmitJobRequest {
                session_id: opened.session_id,
                plan: Some(tiny_plan(opened.id_base, 1, &sha)),
                new_broadcasts: vec![BroadcastValue {
                    id: 3,
                    value: Default::default(),
                }],
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::InvalidArgument,
        "broadcast outside the range"
    );

    let bid = opened.broadcast_base + 1;
    for (round, new) in [
        vec![BroadcastValue {
            id: bid,
            value: b"hello"[..].into(),
        }],
        vec![],
    ]
    .into_iter()
    .enumerate()
    {
        let mut job = c
            .submit_job(tok(
                &opened,
                SubmitJobRequest {
                    session_id: opened.session_id,
                    plan: Some(tiny_plan(opened.id_base, 2, &sha)),
                    new_broadcasts: new,
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let mut sent = Vec::new();
        for _ in 0..2 {
            let l = exec.launched().await;
            let task = l.task.expect("task");
            assert!(task.broadcasts.is_empty(), "the task's own map is cleared");
            sent.extend(l.broadcasts);
            exec.succeed(&task, vec![]).await;
        }
        if round == 0 {
            assert_eq!(sent.len(), 1, "one of the two tasks carries it");
            assert_eq!((sent[0].id, &sent[0].value[..]), (bid, &b"hello"[..]));
        } else {
            assert!(sent.is_empty(), "a later job does not resend it");
        }
        let events = job_events(&mut job).await;
        assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
    }
}

/// A stage's plan travels to an executor with its first task only: the others name it
/// by id, and a later job's stage (a new plan) is sent again.
#[tokio::test]
async fn a_stage_plan_reaches_an_executor_once() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let mut exec = FakeExecutor::register(&mut c, 4).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let mut ids = Vec::new();
    for _job in 0..2 {
        let plan = tiny_plan(opened.id_base, 4, &sha);
        let mut job = c
            .submit_job(tok(
                &opened,
                SubmitJobRequest {
                    session_id: opened.session_id,
                    plan: Some(plan.clone()),
                    new_broadcasts: vec![],
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let mut launches = Vec::new();
        for _ in 0..4 {
            launches.push(exec.launched().await);
        }
        let plan_id = launches[0].task.as_ref().expect("task").plan_id;
        assert_ne!(plan_id, 0, "tasks name their stage plan");
        for (i, l) in launches.iter().enumerate() {
            let task = l.task.as_ref().expect("task");
            assert!(task.plan.is_none(), "no task carries the plan itself");
            assert_eq!(task.plan_id, plan_id, "one stage, one plan");
            match (&l.plan, i) {
                (Some(p), 0) => {
                    assert_eq!(p.id, plan_id);
                    let sent = p.plan.as_ref().expect("the plan");
                    assert_eq!(sent.nodes[0].name, "tiny");
                    assert_eq!(sent.binary_hash, sha);
                }
                (None, 0) => panic!("the first task of the stage comes without its plan"),
                (Some(_), _) => panic!("task {i} of the stage brought the plan again"),
                (None, _) => {}
            }
            assert!(
                l.forget_plans.is_empty(),
                "far from the bound: nothing forgotten"
            );
        }
        for l in &launches {
            exec.succeed(l.task.as_ref().unwrap(), vec![]).await;
        }
        let events = job_events(&mut job).await;
        assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
        ids.push(plan_id);
    }
    assert_ne!(ids[0], ids[1], "another job's stage is another plan");
}

#[tokio::test]
async fn malformed_requests_are_refused() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;

    // An executor channel must start with `register`.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(ExecutorMessage {
        msg: Some(executor_message::Msg::Heartbeat(Heartbeat::default())),
    })
    .await
    .unwrap();
    let r = c.executor_channel(ReceiverStream::new(rx)).await;
    let code = match r {
        Err(e) => e.code(),
        Ok(resp) => match resp.into_inner().message().await {
            Err(e) => e.code(),
            Ok(m) => panic!("expected an error, got {m:?}"),
        },
    };
    assert_eq!(code, Code::InvalidArgument);

    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let submit = |session_id, plan| SubmitJobRequest {
        session_id,
        plan,
        new_broadcasts: vec![],
    };
    let err = c
        .submit_job(tok(
            &opened,
            submit(99, Some(tiny_plan(opened.id_base, 1, &sha))),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    for plan in [
        None,
        Some(tiny_plan(7, 1, &sha)),
        Some(tiny_plan(opened.id_base + (1 << 20), 1, &sha)),
        Some(tiny_plan(opened.id_base, 1, &sha256_hex(b"not uploaded"))),
    ] {
        let err = c
            .submit_job(tok(&opened, submit(opened.session_id, plan.clone())))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{plan:?}");
    }
    let err = c
        .unpersist(tok(
            &opened,
            UnpersistRequest {
                session_id: opened.session_id,
                rdd_id: 5,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    c.unpersist(tok(
        &opened,
        UnpersistRequest {
            session_id: opened.session_id,
            rdd_id: opened.id_base,
        },
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn the_web_ui_lists_executors() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let exec = FakeExecutor::register(&mut c, 3).await;
    exec.heartbeat().await;
    let (addr, ui) = serve_status_page(&driver).await;
    let get = |path: &'static str| http_get(addr, path, "");
    // The UI's store is fed asynchronously from the scheduler's listener bus.
    let mut api = String::new();
    for _ in 0..50 {
        api = tokio::time::timeout(WAIT, get("/api/v1/executors"))
            .await
            .unwrap();
        if api.contains("executor-1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(api.starts_with("HTTP/1.1 200 OK\r\n"), "{api}");
    assert!(api.contains("application/json"), "{api}");
    assert!(
        api.contains("\"executor_id\":\"executor-1\",\"slots\":3"),
        "{api}"
    );
    let page = tokio::time::timeout(WAIT, get("/executors")).await.unwrap();
    assert!(
        page.contains("text/html") && page.contains("<td>executor-1</td>"),
        "{page}"
    );
    let jobs = tokio::time::timeout(WAIT, get("/api/v1/jobs"))
        .await
        .unwrap();
    assert!(jobs.ends_with("[]"), "no jobs yet: {jobs}");
    let missing = tokio::time::timeout(WAIT, get("/nope")).await.unwrap();
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    ui.abort();
}

/// Serves `driver`'s status page on an ephemeral loopback port (for 5 s at most).
async fn serve_status_page(
    driver: &TestDriver,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let daemon = driver.daemon.clone();
    let ui = tokio::spawn(async move {
        let _ = daemon
            .serve_ui(listener, tokio::time::sleep(Duration::from_secs(5)))
            .await;
    });
    (addr, ui)
}

/// The whole HTTP/1.1 response to `GET path` with extra `headers` (each ending in CRLF).
async fn http_get(addr: std::net::SocketAddr, path: &str, headers: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// `req` carrying the token of session `opened`.
fn tok<T>(opened: &ember_proto::SessionOpened, req: T) -> tonic::Request<T> {
    ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token).unwrap()
}

#[tokio::test]
async fn the_web_ui_requires_the_operator_secret_when_one_is_set() {
    let driver = start(Options {
        secret: Some("s3cret"),
        operator_secret: Some("0per"),
        ..Options::default()
    })
    .await;
    // Executors register with the executor secret, not the cluster secret.
    let mut e = client(driver.addr, Some(common::EXECUTOR_SECRET)).await;
    let _exec = FakeExecutor::register(&mut e, 3).await;
    let (addr, ui) = serve_status_page(&driver).await;
    let get = |headers: &'static str| http_get(addr, "/api/v1/executors", headers);
    for headers in [
        "",
        "Authorization: Bearer nope\r\n",
        "Authorization: 0per\r\n",
        "X-Authorization: Bearer 0per\r\n",
        // The cluster secret: every client holds it, so it opens nothing here.
        "Authorization: Bearer s3cret\r\n",
    ] {
        let page = tokio::time::timeout(WAIT, get(headers)).await.unwrap();
        assert!(
            page.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{headers:?}: {page}"
        );
        assert!(
            page.to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{page}"
        );
        assert!(
            !page.contains("executor-1"),
            "nothing of the state leaks: {page}"
        );
    }
    // Bearer, or basic auth with the operator secret as password (base64 of "u:0per").
    for headers in [
        "Authorization: Bearer 0per\r\n",
        "Authorization: Basic dTowcGVy\r\n",
    ] {
        let mut page = String::new();
        for _ in 0..50 {
            page = tokio::time::timeout(WAIT, get(headers)).await.unwrap();
            if page.contains("executor-1") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            page.starts_with("HTTP/1.1 200 OK\r\n") && page.contains("executor-1"),
            "{headers:?}: {page}"
        );
    }
    ui.abort();
}
