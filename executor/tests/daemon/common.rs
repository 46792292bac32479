//! A fake driver, and helpers shared by the tests.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ember_executor::config::Config;
use ember_proto::auth::RequireSecret;
use ember_proto::driver_server::{Driver, DriverServer};
use ember_proto::*;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

/// Bounds every wait in the tests.
pub const WAIT: Duration = Duration::from_secs(5);

pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// A config for a work dir under `root`, prepared; `secret` is both the cluster secret
/// and the executor secret (what the fake driver checks).
pub fn config(root: &Path, secret: Option<&str>) -> Config {
    let config = Config {
        driver: "http://127.0.0.1:1".into(),
        cores: 3,
        memory_bytes: 123 << 20,
        work_dir: root.join("work"),
        secret: secret.map(str::to_string),
        executor_secret: secret.map(str::to_string),
        host: "127.0.0.1".into(),
        advertise_host: "127.0.0.1".into(),
        worker_idle: std::time::Duration::from_secs(60),
        binary_max_age: std::time::Duration::from_secs(3600),
        decommission_timeout: std::time::Duration::from_secs(5),
        driver_reconnect: std::time::Duration::ZERO,
        worker_users: None,
    };
    config.prepare_work_dir().unwrap();
    config
}

/// Serves the Shuffle service `service` on 127.0.0.1 (an ephemeral port), registered,
/// until the token is cancelled; its URL.
pub async fn serve_shuffle(
    service: ember_executor::blocks::ShuffleService,
) -> (String, tokio_util::sync::CancellationToken) {
    use ember_executor::blocks;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        blocks::serve(
            listener,
            service,
            tokio::sync::watch::channel(true).1,
            s.cancelled_owned(),
        )
        .await
    });
    (blocks::advertised_address("127.0.0.1", port), stop)
}

/// A Shuffle client of `url` sending `secret` (if any) with every call.
pub async fn shuffle_client(
    url: &str,
    secret: Option<&str>,
) -> ember_proto::shuffle_client::ShuffleClient<
    InterceptedService<tonic::transport::Channel, ember_proto::auth::AddSecret>,
> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    ember_proto::shuffle_client::ShuffleClient::with_interceptor(
        channel,
        ember_proto::auth::AddSecret::new(secret).unwrap(),
    )
    .max_decoding_message_size(ember_proto::auth::MAX_MESSAGE_BYTES)
}

/// One executor's channel, as the fake driver sees it.
pub struct ExecutorConn {
    pub from_executor: Streaming<ExecutorMessage>,
    pub to_executor: mpsc::Sender<Result<DriverMessage, Status>>,
    /// The map outputs the executor reported holding after registering (taken out of
    /// the messages `next` returns).
    pub held: Vec<ember_proto::HeldOutputs>,
}

impl ExecutorConn {
    /// The next message other than a report of held outputs (kept in `held`).
    pub async fn next(&mut self) -> executor_message::Msg {
        loop {
            let msg = within("a message from the executor", self.from_executor.message())
                .await
                .expect("executor channel failed")
                .expect("executor channel ended")
                .msg
                .expect("empty executor message");
            match msg {
                executor_message::Msg::HeldOutputs(h) => self.held.push(h),
                other => return other,
            }
        }
    }

    /// The next message that is not a heartbeat.
    pub async fn next_non_heartbeat(&mut self) -> executor_message::Msg {
        loop {
            match self.next().await {
                executor_message::Msg::Heartbeat(_) => continue,
                other => return other,
            }
        }
    }

    pub async fn send(&self, msg: driver_message::Msg) {
        self.to_executor
            .send(Ok(DriverMessage { msg: Some(msg) }))
            .await
            .expect("executor went away");
    }
}

/// A driver that serves binaries by hash (whatever bytes the test says, or whatever
/// chunks) and hands each executor channel to the test.
pub struct FakeDriver {
    pub binaries: HashMap<String, Vec<u8>>,
    /// Chunks served for a hash instead of those of its bytes.
    pub chunks: HashMap<String, Vec<BinaryChunk>>,
    pub fetches: Arc<AtomicUsize>,
    pub channels: mpsc::UnboundedSender<ExecutorConn>,
}

type Stream<T> = ReceiverStream<Result<T, Status>>;

#[tonic::async_trait]
impl Driver for FakeDriver {
    type ExecutorChannelStream = Stream<DriverMessage>;
    type FetchBinaryStream = Stream<BinaryChunk>;
    type OpenSessionStream = Stream<SessionEvent>;
    type SubmitJobStream = Stream<JobEvents>;

    async fn executor_channel(
        &self,
        request: Request<Streaming<ExecutorMessage>>,
    ) -> Result<Response<Self::ExecutorChannelStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        let _ = self.channels.send(ExecutorConn {
            from_executor: request.into_inner(),
            to_executor: tx,
            held: Vec::new(),
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn has_binary(
        &self,
        _: Request<BinaryRef>,
    ) -> Result<Response<HasBinaryResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn upload_binary(
        &self,
        _: Request<Streaming<BinaryChunk>>,
    ) -> Result<Response<BinaryRef>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn fetch_binary(
        &self,
        request: Request<BinaryRef>,
    ) -> Result<Response<Self::FetchBinaryStream>, Status> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let sha = request.into_inner().sha256;
        let Some(bytes) = self.binaries.get(&sha).cloned() else {
            return Err(Status::not_found(format!("no binary {sha}")));
        };
        let (tx, rx) = mpsc::channel(4);
        let chunks = match self.chunks.get(&sha) {
            Some(chunks) => chunks.clone(),
            None => chunks_of(&sha, &bytes),
        };
        tokio::spawn(async move {
            for chunk in chunks {
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn open_session(
        &self,
        _: Request<OpenSessionRequest>,
    ) -> Result<Response<Self::OpenSessionStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn submit_job(
        &self,
        _: Request<SubmitJobRequest>,
    ) -> Result<Response<Self::SubmitJobStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn unpersist(&self, _: Request<UnpersistRequest>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn release_shuffles(
        &self,
        _: Request<ReleaseShufflesRequest>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn status(&self, _: Request<Empty>) -> Result<Response<ClusterStatus>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn cancel_jobs(
        &self,
        _: Request<ember_proto::CancelJobsRequest>,
    ) -> Result<Response<ember_proto::CancelJobsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// A running fake driver.
pub struct FakeDriverHandle {
    pub url: String,
    pub fetches: Arc<AtomicUsize>,
    pub channels: mpsc::UnboundedReceiver<ExecutorConn>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDriverHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeDriverHandle {
    /// The next executor channel, after checking that it opens with `Register`.
    pub async fn accept_register(&mut self, what: &str) -> ExecutorConn {
        let mut conn = within(what, self.channels.recv()).await.unwrap();
        assert!(matches!(
            conn.next().await,
            executor_message::Msg::Register(_)
        ));
        conn
    }
}

/// `bytes` as the real driver sends them: LZ4-encoded chunks, small (64 bytes) so the
/// executor assembles several; the first names the binary and its length.
pub fn chunks_of(sha: &str, bytes: &[u8]) -> Vec<BinaryChunk> {
    let mut chunks: Vec<BinaryChunk> = bytes
        .chunks(64)
        .map(ember_proto::binary_chunk::encode)
        .collect();
    if chunks.is_empty() {
        chunks.push(BinaryChunk::default());
    }
    chunks[0].sha256 = sha.to_string();
    chunks[0].total_len = bytes.len() as u64;
    chunks
}

/// Starts a fake driver on 127.0.0.1:0 serving `binaries` (hash -> bytes).
pub async fn start_driver(
    binaries: HashMap<String, Vec<u8>>,
    secret: Option<&str>,
) -> FakeDriverHandle {
    start_driver_with_chunks(binaries, HashMap::new(), secret).await
}

/// [`start_driver`], serving `chunks` (hash -> chunks) as they are.
pub async fn start_driver_with_chunks(
    binaries: HashMap<String, Vec<u8>>,
    chunks: HashMap<String, Vec<BinaryChunk>>,
    secret: Option<&str>,
) -> FakeDriverHandle {
    let (tx, channels) = mpsc::unbounded_channel();
    let fetches = Arc::new(AtomicUsize::new(0));
    let driver = FakeDriver {
        binaries,
        chunks,
        fetches: fetches.clone(),
        channels: tx,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let svc = InterceptedService::new(
        DriverServer::new(driver),
        RequireSecret::new(secret, "driver"),
    );
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    FakeDriverHandle {
        url,
        fetches,
        channels,
        server,
    }
}

/// A connected driver client for `url`.
pub async fn driver_conn(
    url: &str,
    secret: Option<&str>,
) -> ember_executor::driver_conn::DriverConn {
    let channel = ember_executor::driver_conn::driver_endpoint(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    ember_executor::driver_conn::driver_client(channel, secret).unwrap()
}

/// A client that never connects unless used (for tests that need no driver).
pub fn unused_driver_conn() -> ember_executor::driver_conn::DriverConn {
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
    ember_executor::driver_conn::driver_client(channel, None).unwrap()
}

/// A task of binary `sha`.
pub fn task(task_id: u64, sha: &str) -> TaskDescription {
    TaskDescription {
        task_id,
        partition: task_id as u32,
        plan: Some(Plan {
            binary_hash: sha.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Installs `bytes` as verified binary `sha256(bytes)` in `config`'s store; returns the hash.
pub fn install_binary(config: &Config, bytes: &[u8]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let sha = sha256_hex(bytes);
    let path = config.binaries_dir().join(&sha);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    sha
}

/// The user error of a failed status, or a panic.
pub fn user_error(status: &TaskStatus) -> &str {
    match &status.outcome {
        Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::UserError(m)),
        })) => m,
        other => panic!("expected a user error, got {other:?}"),
    }
}

/// The next status the executor sends on `rx`, skipping heartbeats.
pub async fn next_status(rx: &mut mpsc::Receiver<ExecutorMessage>) -> TaskStatus {
    loop {
        let msg = within("a task status", rx.recv())
            .await
            .expect("channel closed");
        match msg.msg {
            Some(executor_message::Msg::Status(s)) => return s,
            Some(executor_message::Msg::Heartbeat(_)) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}
