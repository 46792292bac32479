//! The credential model through the real daemons: clients hold the cluster secret,
//! executors the executor secret, and neither opens the other's calls.

mod common;

use common::cluster::Cluster;
use ember_proto::auth::AddSecret;
use ember_proto::driver_client::DriverClient;
use ember_proto::{executor_message, BinaryRef, ExecutorMessage, RegisterExecutor};
use futures_util::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

const SECRET: &str = "cluster-secret-held-by-every-client";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(
    url: &str,
    secret: &str,
) -> DriverClient<tonic::service::interceptor::InterceptedService<Channel, AddSecret>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    DriverClient::with_interceptor(channel, AddSecret::new(Some(secret)).unwrap())
}

/// A client holding the cluster secret that poses as an executor offering 64 cores is
/// refused and gets no task, while a real client's job on the same cluster counts
/// exactly its records on the real executor.
#[test]
fn a_client_posing_as_an_executor_is_refused_and_real_jobs_count_exactly() {
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, 1, Some(SECRET));
    let rt = runtime();
    let (posed, fetched) = rt.block_on(async {
        let mut c = client(&cluster.url, SECRET).await;
        let register = ExecutorMessage {
            msg: Some(executor_message::Msg::Register(RegisterExecutor {
                cores: 64,
                memory_bytes: 64 << 30,
                shuffle_address: "http://127.0.0.1:1".into(),
                host: "127.0.0.1".into(),
                pid: std::process::id(),
            })),
        };
        // The stream stays open (never ends) so a driver that accepted it would keep
        // the fake executor registered and could hand it tasks.
        let messages =
            futures_util::stream::iter([register]).chain(futures_util::stream::pending());
        let posed = match c.executor_channel(messages).await {
            Ok(resp) => {
                let mut inbound = resp.into_inner();
                let first =
                    tokio::time::timeout(std::time::Duration::from_secs(5), inbound.message())
                        .await;
                panic!("the driver accepted a client's executor channel; first message: {first:?}")
            }
            Err(status) => status,
        };
        let fetched = match c
            .fetch_binary(BinaryRef {
                sha256: "0".repeat(64),
            })
            .await
        {
            Ok(_) => panic!("FetchBinary with the cluster secret must be refused"),
            Err(status) => status,
        };
        (posed, fetched)
    });
    assert_eq!(posed.code(), Code::PermissionDenied, "{posed:?}");
    assert!(
        posed.message().contains("ExecutorChannel is for executors")
            && posed.message().contains("--executor-secret-file"),
        "{posed:?}"
    );
    assert_eq!(fetched.code(), Code::PermissionDenied, "{fetched:?}");
    // Only the real executors, with their 1 core each, are registered.
    let status = cluster.status().unwrap();
    assert_eq!(status.executors.len(), 2, "{status:?}");
    assert!(status.executors.iter().all(|e| e.cores == 1), "{status:?}");

    let run = cluster.run(
        "manytasks",
        &["--tasks", "300", "--runs", "1"],
        scratch.path(),
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    // manytasks checks its count itself (300 records, one per task) and says so.
    assert!(run.stdout.contains("ANCHOR tasks=300"), "{run:?}");

    // A shuffle across both executors: reducers fetch remote blocks with their
    // session's key alone (executors and workers hold no cluster secret), and the
    // output is local mode's.
    let s = scratch.path();
    let input = s.join("words.txt");
    let text: String = (0..3000)
        .map(|i| format!("w{} w{} common\n", i % 97, i % 13))
        .collect();
    std::fs::write(&input, text).unwrap();
    let input = input.to_str().unwrap();
    let (local_out, cluster_out) = (s.join("wc-local"), s.join("wc-cluster"));
    let local = common::process::run_example(
        "wordcount",
        &[
            "--master",
            "local[2]",
            "--partitions",
            "4",
            input,
            local_out.to_str().unwrap(),
        ],
        s,
    );
    assert!(local.success, "{local:?}");
    let run = cluster.run(
        "wordcount",
        &["--partitions", "4", input, cluster_out.to_str().unwrap()],
        s,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    let parts = |d: &std::path::Path| -> Vec<(String, String)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("part-"))
            .map(|n| (n.clone(), std::fs::read_to_string(d.join(&n)).unwrap()))
            .collect();
        v.sort();
        v
    };
    let want = parts(&local_out);
    assert_eq!(want.len(), 4);
    assert_eq!(parts(&cluster_out), want);

    let log = cluster.driver_log();
    let refusal = log
        .lines()
        .find(|l| l.contains("refused a call") && l.contains("ExecutorChannel"))
        .unwrap_or_else(|| panic!("the refusal is logged with its endpoint:\n{log}"));
    assert!(refusal.contains("peer=127.0.0.1:"), "{refusal}");
    assert!(log.contains("FetchBinary"), "{log}");
    assert!(!log.contains(SECRET), "the secret never reaches the log");
    let executor_secret = cluster.executor_secret().unwrap();
    assert!(!log.contains(&executor_secret));
}

/// The executor secret opens only executors' calls: it cannot open a session.
#[test]
fn the_executor_secret_does_not_open_client_calls() {
    let cluster = Cluster::start(0, 1, Some(SECRET));
    let executor_secret = cluster.executor_secret().unwrap();
    let refused = runtime().block_on(async {
        let mut c = client(&cluster.url, &executor_secret).await;
        let opened = c
            .open_session(ember_proto::OpenSessionRequest {
                app_name: "not-a-client".into(),
                binary_sha256: "0".repeat(64),
                conf: Vec::new(),
                resume_session_id: 0,
            })
            .await;
        match opened {
            Ok(_) => panic!("OpenSession with the executor secret must be refused"),
            Err(status) => status,
        }
    });
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("OpenSession is for job clients"),
        "{refused:?}"
    );
}
