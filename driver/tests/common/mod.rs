//! Helpers for the driver daemon's gRPC tests: a daemon on an ephemeral loopback port,
//! clients with or without the secret, a fake executor, and hand-built plans.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ember_driver::server::{DriverConfig, DriverDaemon};
use ember_proto::auth::AddSecret;
use ember_proto::driver_client::DriverClient;
use ember_proto::{
    driver_message, executor_message, task_status, task_success, BinaryChunk, DriverMessage,
    ExecutorMessage, Heartbeat, OpenSessionRequest, Plan, RddNode, RegisterExecutor, SessionEvent,
    SessionOpened, TaskDescription, TaskStatus, TaskSuccess,
};
use ember_scheduler::JobEvent;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

pub mod process;

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(5);

pub type Client = DriverClient<InterceptedService<Channel, AddSecret>>;

/// A daemon serving on 127.0.0.1 at an ephemeral port; stops when dropped.
pub struct TestDriver {
    pub addr: SocketAddr,
    pub daemon: Arc<DriverDaemon>,
    pub binary_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for TestDriver {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl TestDriver {
    /// Signals shutdown; the server must then return within `within`.
    pub async fn stop_within(mut self, within: Duration) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let served = self.served.take().expect("serving");
        tokio::time::timeout(within, served)
            .await
            .expect("server stops in time")
            .expect("server task");
    }
}

/// The executor secret a test driver with a cluster secret gets unless told otherwise.
pub const EXECUTOR_SECRET: &str = "executor-s3cret";

pub struct Options {
    pub secret: Option<&'static str>,
    /// The operator secret (the web UI's credential).
    pub operator_secret: Option<&'static str>,
    /// Defaults to [`EXECUTOR_SECRET`] when `secret` is set.
    pub executor_secret: Option<&'static str>,
    pub heartbeat_timeout: Duration,
    pub max_task_attempts: u32,
    pub plan_limits: ember_scheduler::PlanLimits,
    pub limits: ember_driver::server::ServerLimits,
    /// A directory of the test's that outlives the driver: binaries and session state
    /// files go there (as `--binary-dir` does), so a second driver recovers them.
    pub state_dir: Option<PathBuf>,
    /// How long a recovered session waits for its client.
    pub session_reconnect: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            secret: None,
            operator_secret: None,
            executor_secret: None,
            heartbeat_timeout: Duration::from_secs(30),
            max_task_attempts: 4,
            plan_limits: Default::default(),
            limits: Default::default(),
            state_dir: None,
            session_reconnect: Duration::from_secs(60),
        }
    }
}

pub async fn start(opts: Options) -> TestDriver {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary_dir = (opts.state_dir.as_deref())
        .unwrap_or(dir.path())
        .join("binaries");
    let session_state_dir = opts.state_dir.as_ref().map(|d| d.join("binaries/sessions"));
    let daemon = Arc::new(
        DriverDaemon::start(DriverConfig {
            heartbeat_timeout: opts.heartbeat_timeout,
            scheduler: ember_scheduler::SchedulerConfig {
                max_task_attempts: opts.max_task_attempts,
                limits: opts.plan_limits,
                ..Default::default()
            },
            binary_dir: binary_dir.clone(),
            secret: opts.secret.map(str::to_string),
            operator_secret: opts.operator_secret.map(str::to_string),
            executor_secret: opts
                .executor_secret
                .or(opts.secret.map(|_| EXECUTOR_SECRET))
                .map(str::to_string),
            limits: opts.limits,
            event_log_dir: None,
            session_state_dir,
            session_reconnect: opts.session_reconnect,
            flags: Vec::new(),
        })
        .expect("start daemon"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let d = daemon.clone();
    let served = tokio::spawn(async move {
        d.serve(listener, async {
            let _ = stopped.await;
        })
        .await
        .expect("serve");
    });
    TestDriver {
        addr,
        daemon,
        binary_dir,
        stop: Some(stop),
        served: Some(served),
        _dir: dir,
    }
}

/// A driver with `limits`, a client without a secret, a fake executor with `cores`
/// cores and the binary `b"bin"` uploaded: (driver, client, executor, the binary's sha).
pub async fn ready(
    limits: ember_driver::server::ServerLimits,
    cores: u32,
) -> (TestDriver, Client, FakeExecutor, String) {
    let driver = start(Options {
        limits,
        ..Options::default()
    })
    .await;
    let mut c = client(driver.addr, None).await;
    let exec = FakeExecutor::register(&mut c, cores).await;
    let sha = upload(&mut c, b"bin").await;
    (driver, c, exec, sha)
}

pub async fn client(addr: SocketAddr, secret: Option<&str>) -> Client {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    DriverClient::with_interceptor(channel, AddSecret::new(secret).expect("secret"))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Uploads `bytes` declared as `sha256`, in chunks of 3 bytes.
pub async fn upload_as(
    client: &mut Client,
    bytes: &[u8],
    sha256: &str,
) -> Result<String, tonic::Status> {
    let mut chunks: Vec<BinaryChunk> = bytes
        .chunks(3)
        .map(|c| BinaryChunk {
            data: c.to_vec(),
            ..Default::default()
        })
        .collect();
    if chunks.is_empty() {
        chunks.push(BinaryChunk::default());
    }
    chunks[0].sha256 = sha256.to_string();
    chunks[0].total_len = bytes.len() as u64;
    let r = client
        .upload_binary(tokio_stream::iter(chunks))
        .await?
        .into_inner();
    Ok(r.sha256)
}

/// Everything `FetchBinary` sends for `sha`, decoded.
pub async fn fetch_binary(c: &mut Client, sha: &str) -> Vec<u8> {
    let mut stream = c
        .fetch_binary(ember_proto::BinaryRef {
            sha256: sha.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("a first chunk");
    assert_eq!(first.sha256, sha);
    let mut decoder = ember_proto::binary_chunk::Decoder::new(first.total_len);
    let mut got = decoder.decode(&first).unwrap().to_vec();
    while let Some(chunk) = stream.message().await.unwrap() {
        assert!(chunk.sha256.is_empty() && chunk.total_len == 0);
        got.extend_from_slice(decoder.decode(&chunk).unwrap());
    }
    got
}

pub async fn upload(client: &mut Client, bytes: &[u8]) -> String {
    upload_as(client, bytes, &sha256_hex(bytes))
        .await
        .expect("upload")
}

/// Opens a session; returns what the driver said and the stream that keeps it open.
pub async fn open_session(
    client: &mut Client,
    sha: &str,
) -> (SessionOpened, Streaming<SessionEvent>) {
    open_named(client, sha, "test".into()).await
}

/// Opens a session named `app_name`; returns what the driver said and the stream that
/// keeps it open.
pub async fn open_named(
    client: &mut Client,
    sha: &str,
    app_name: String,
) -> (SessionOpened, Streaming<SessionEvent>) {
    open_with_conf(client, sha, app_name, Vec::new()).await
}

/// Opens a session named `app_name` whose client reports configuration `conf`.
pub async fn open_with_conf(
    client: &mut Client,
    sha: &str,
    app_name: String,
    conf: Vec<ember_proto::ConfEntry>,
) -> (SessionOpened, Streaming<SessionEvent>) {
    let mut stream = client
        .open_session(OpenSessionRequest {
            app_name,
            binary_sha256: sha.into(),
            conf,
            resume_session_id: 0,
        })
        .await
        .expect("open session")
        .into_inner();
    let ev = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("session event in time")
        .expect("session event")
        .expect("stream open");
    match ev.event {
        Some(ember_proto::session_event::Event::Opened(o)) => (o, stream),
        other => panic!("expected SessionOpened, got {other:?}"),
    }
}

/// One node with `partitions` partitions and no dependencies.
pub fn tiny_plan(id_base: u32, partitions: u32, sha: &str) -> Plan {
    Plan {
        nodes: vec![RddNode {
            id: id_base,
            num_partitions: partitions,
            name: "tiny".into(),
            ..Default::default()
        }],
        final_rdd: id_base,
        binary_hash: sha.into(),
        description: "tiny test job".into(),
        ..Default::default()
    }
}

/// Reads job events until the job ends; asserts that no batch is empty and that the
/// end is the last event of its batch.
pub async fn job_events(stream: &mut Streaming<ember_proto::JobEvents>) -> Vec<JobEvent> {
    let mut out = Vec::new();
    loop {
        let batch = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("job events in time")
            .expect("job stream ok")
            .expect("job stream ended before the job did");
        assert!(!batch.events.is_empty(), "an empty batch of job events");
        let n = batch.events.len();
        for (i, ev) in batch.events.into_iter().enumerate() {
            let ev = ember_scheduler::wire::from_wire(ev).expect("valid event");
            let last = ev.ends_job();
            out.push(ev);
            if last {
                assert_eq!(i + 1, n, "events after the job's end in its batch");
                return out;
            }
        }
    }
}

/// A fake executor: an executor channel driven by the test.
pub struct FakeExecutor {
    pub id: String,
    pub tx: mpsc::Sender<ExecutorMessage>,
    pub rx: Streaming<DriverMessage>,
    /// Launches of a `LaunchTasks` batch not yet taken by `recv`.
    batched: std::collections::VecDeque<ember_proto::LaunchTask>,
}

impl FakeExecutor {
    pub async fn register(client: &mut Client, cores: u32) -> FakeExecutor {
        Self::register_holding(client, cores, ember_proto::HeldOutputs::default()).await
    }

    /// [`register`](Self::register), reporting `held` (marked last) after `Registered`.
    pub async fn register_holding(
        client: &mut Client,
        cores: u32,
        mut held: ember_proto::HeldOutputs,
    ) -> FakeExecutor {
        let (tx, rx) = mpsc::channel(64);
        let register = ExecutorMessage {
            msg: Some(executor_message::Msg::Register(RegisterExecutor {
                cores,
                memory_bytes: 1 << 30,
                shuffle_address: "http://127.0.0.1:1".into(),
                host: "127.0.0.1".into(),
                pid: 42,
            })),
        };
        tx.send(register).await.expect("queue register");
        let mut rx = client
            .executor_channel(ReceiverStream::new(rx))
            .await
            .expect("executor channel")
            .into_inner();
        let id = match Self::recv_from(&mut rx).await {
            driver_message::Msg::Registered(r) => {
                assert_eq!(r.heartbeat_interval_ms, 1000);
                r.executor_id
            }
            other => panic!("expected Registered, got {other:?}"),
        };
        // The driver adds an executor once it has said which map outputs it holds.
        held.last = true;
        let held = executor_message::Msg::HeldOutputs(held);
        tx.send(ExecutorMessage { msg: Some(held) })
            .await
            .expect("queue held outputs");
        FakeExecutor {
            id,
            tx,
            rx,
            batched: Default::default(),
        }
    }

    async fn recv_from(rx: &mut Streaming<DriverMessage>) -> driver_message::Msg {
        tokio::time::timeout(WAIT, rx.message())
            .await
            .expect("driver message in time")
            .expect("executor stream ok")
            .expect("executor stream open")
            .msg
            .expect("message with a body")
    }

    /// The next message; the launches of a batch come one by one, as `Launch`.
    pub async fn recv(&mut self) -> driver_message::Msg {
        if let Some(l) = self.batched.pop_front() {
            return driver_message::Msg::Launch(l);
        }
        match Self::recv_from(&mut self.rx).await {
            driver_message::Msg::LaunchBatch(b) => {
                assert!(b.launches.len() > 1, "a batch of one goes as Launch");
                self.batched.extend(b.launches);
                driver_message::Msg::Launch(self.batched.pop_front().expect("a launch"))
            }
            other => other,
        }
    }

    /// The next message, which must be a launch.
    pub async fn launched(&mut self) -> ember_proto::LaunchTask {
        match self.recv().await {
            driver_message::Msg::Launch(l) => l,
            other => panic!("expected LaunchTask, got {other:?}"),
        }
    }

    pub async fn send(&self, msg: executor_message::Msg) {
        self.tx
            .send(ExecutorMessage { msg: Some(msg) })
            .await
            .expect("send to driver");
    }

    pub async fn heartbeat(&self) {
        self.send(executor_message::Msg::Heartbeat(Heartbeat::default()))
            .await;
    }

    /// Reports `task` done with `result` as its output.
    pub async fn succeed(&self, task: &TaskDescription, result: Vec<u8>) {
        let status = TaskStatus {
            barrier: None,
            task_id: task.task_id,
            executor_id: self.id.clone(),
            metrics: None,
            outcome: Some(task_status::Outcome::Success(TaskSuccess {
                output: Some(task_success::Output::Result(result)),
                ..Default::default()
            })),
        };
        self.send(executor_message::Msg::Status(status)).await;
    }
}
