//! The job client: a context whose master is `http://host:port` talks to the driver
//! daemon through this.
//!
//! On connect it checks that the driver holds this binary (uploading it, chunked, if
//! not), then opens a session: a stream the client holds open for the context's
//! lifetime, whose closing tells the driver to cancel the session's jobs and delete its
//! shuffle files. The session gives the context its id ranges, so two clients never
//! share an RDD, shuffle or broadcast id. Each action is one `SubmitJob` call whose
//! streamed events are turned back into the scheduler's [`JobEvent`]s. The context's
//! cleaner forgets what no live RDD reaches through a [`Releaser`] (`ReleaseShuffles`,
//! `Unpersist`; each call bounded in time, a failure only logged).
//!
//! Invariants: every job's event channel ends with `JobSucceeded` or `JobFailed`, even
//! when the driver is unreachable or goes away mid-job (then the failure names the
//! driver and the cause), so a caller never hangs; each broadcast value is sent to the
//! driver once per session.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use ember_proto::auth::{self, AddSecret, MAX_MESSAGE_BYTES};
use ember_proto::driver_client::DriverClient;
use ember_proto::{
    session_event, BinaryChunk, BinaryRef, BroadcastValue, OpenSessionRequest, Plan,
    ReleaseShufflesRequest, SessionOpened, SubmitJobRequest, UnpersistRequest,
};
use ember_scheduler::{wire, JobEvent, JobFailure};
use parking_lot::Mutex;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use super::runtime;
use crate::backend::Backend;
use crate::cleaner::ReleaseTarget;
use crate::error::{EmberError, Result};

/// A gRPC client of the driver that adds the cluster secret to every call.
pub(crate) type Driver = DriverClient<InterceptedService<Channel, AddSecret>>;

/// Bytes per chunk of an uploaded binary.
const CHUNK_BYTES: usize = ember_proto::binary_chunk::MAX_CHUNK_BYTES;

/// A connected client session.
pub(crate) struct ClusterClient {
    url: String,
    driver: Driver,
    pub session: SessionOpened,
    /// Holds the session stream open; aborting it ends the session.
    session_task: tokio::task::JoinHandle<()>,
    /// Set when the session stream ends on the driver's side.
    driver_lost: Arc<Mutex<Option<String>>>,
    /// Broadcasts the driver accepted (or is being sent with a job in flight).
    sent_broadcasts: Arc<Mutex<HashSet<u64>>>,
    /// Job id -> the switch that stops its event-forwarding task (which drops the
    /// stream: the driver then cancels the job).
    running: Arc<Mutex<HashMap<u64, tokio::sync::oneshot::Sender<()>>>>,
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        self.running.lock().clear();
        self.session_task.abort();
    }
}

/// Opens a channel to `url` (driver or executor) with the secret attached.
pub(crate) async fn connect_channel(url: &str) -> std::result::Result<Channel, String> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("invalid address {url:?}: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {url}: {}", source_chain(&e)))
}

/// An error and its causes on one line (tonic's transport errors hide the useful part).
pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl ClusterClient {
    /// Connects to the driver at `url`, makes sure it has this binary, and opens a
    /// session.
    /// `conf`: the context's settings, shown on the driver's Environment page.
    pub(crate) fn connect(
        url: &str,
        app_name: &str,
        conf: Vec<(String, String)>,
    ) -> Result<ClusterClient> {
        let (exe, sha) = super::binary::current()?.clone();
        let secret = super::client_secret()?;
        let add_secret = AddSecret::new(secret.as_deref()).map_err(EmberError::Config)?;
        let cluster_err =
            |what: &str, e: String| EmberError::Cluster(format!("driver {url}: {what}: {e}"));
        runtime::block_on(async {
            let channel = connect_channel(url).await.map_err(EmberError::Cluster)?;
            let mut driver = DriverClient::with_interceptor(channel, add_secret)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let present = driver
                .has_binary(BinaryRef {
                    sha256: sha.clone(),
                })
                .await
                .map_err(|s| cluster_err("checking the job binary", status_text(&s)))?
                .into_inner()
                .present;
            if !present {
                upload_binary(&mut driver, &exe, &sha)
                    .await
                    .map_err(|e| cluster_err("uploading the job binary", e))?;
            }
            let mut stream = driver
                .open_session(OpenSessionRequest {
                    app_name: app_name.to_string(),
                    binary_sha256: sha.clone(),
                    conf: (conf.into_iter())
                        .map(|(name, value)| ember_proto::ConfEntry { name, value })
                        .collect(),
                })
                .await
                .map_err(|s| cluster_err("opening a session", status_text(&s)))?
                .into_inner();
            let first = stream
                .message()
                .await
                .map_err(|s| cluster_err("opening a session", status_text(&s)))?;
            let Some(ember_proto::SessionEvent {
                event: Some(session_event::Event::Opened(session)),
            }) = first
            else {
                return Err(cluster_err(
                    "opening a session",
                    "the driver sent no session".into(),
                ));
            };
            info!(
                session = session.session_id,
                executors = session.executors,
                cores = session.total_cores,
                "connected to driver {url}"
            );
            let driver_lost = Arc::new(Mutex::new(None));
            let lost = driver_lost.clone();
            let url_owned = url.to_string();
            let session_task = tokio::spawn(async move {
                let why = loop {
                    match stream.message().await {
                        Ok(Some(_)) => continue,
                        Ok(None) => break "the driver closed the session".to_string(),
                        Err(s) => break status_text(&s),
                    }
                };
                warn!("lost the session with driver {url_owned}: {why}");
                *lost.lock() = Some(why);
            });
            Ok(ClusterClient {
                url: url.to_string(),
                driver,
                session,
                session_task,
                driver_lost,
                sent_broadcasts: Arc::new(Mutex::new(HashSet::new())),
                running: Arc::new(Mutex::new(HashMap::new())),
            })
        })
    }

    /// Submits a plan; the job's events (always ending in success or failure) arrive on
    /// the returned channel. `broadcasts` are all of the context's broadcasts; only
    /// those the driver has not seen are sent.
    pub(crate) fn submit(
        &self,
        plan: Plan,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Receiver<JobEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        if let Some(why) = self.driver_lost.lock().clone() {
            fail(
                &tx,
                format!("lost the connection to the driver at {}: {why}", self.url),
            );
            return rx;
        }
        let new_broadcasts: Vec<BroadcastValue> = {
            let mut sent = self.sent_broadcasts.lock();
            broadcasts
                .iter()
                .filter(|(id, _)| sent.insert(**id))
                .map(|(id, v)| BroadcastValue {
                    id: *id,
                    value: v.clone().into(),
                })
                .collect()
        };
        let request = SubmitJobRequest {
            session_id: self.session.session_id,
            plan: Some(plan),
            new_broadcasts,
        };
        let new_ids: Vec<u64> = request.new_broadcasts.iter().map(|b| b.id).collect();
        let sent_broadcasts = self.sent_broadcasts.clone();
        let request =
            auth::with_session_token(tonic::Request::new(request), &self.session.session_token);
        let mut driver = self.driver.clone();
        let url = self.url.clone();
        let running = self.running.clone();
        runtime::get().spawn(async move {
            let (cancel_tx, mut cancel_rx) = tokio::sync::oneshot::channel::<()>();
            let mut cancel_tx = Some(cancel_tx);
            let submitted = match request {
                Ok(request) => driver.submit_job(request).await,
                Err(s) => Err(s),
            };
            let mut stream = match submitted {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    // The driver did not take the job, so not its broadcasts either:
                    // the next job must send them.
                    sent_broadcasts.lock().retain(|id| !new_ids.contains(id));
                    return fail(
                        &tx,
                        format!("the driver at {url} refused the job: {}", status_text(&s)),
                    );
                }
            };
            let mut job_id = None;
            'stream: loop {
                let next = tokio::select! {
                    m = stream.message() => m,
                    _ = &mut cancel_rx, if cancel_tx.is_none() => {
                        debug!("job {job_id:?} cancelled by the client");
                        break;
                    }
                };
                let batch = match next {
                    Ok(Some(batch)) if !batch.events.is_empty() => batch,
                    Ok(Some(_)) => {
                        fail(
                            &tx,
                            format!("the driver at {url} sent an empty batch of job events"),
                        );
                        break;
                    }
                    Ok(None) => {
                        fail(
                            &tx,
                            format!("the driver at {url} ended the job's event stream early"),
                        );
                        break;
                    }
                    Err(s) => {
                        fail(
                            &tx,
                            format!(
                                "lost the connection to the driver at {url}: {}",
                                status_text(&s)
                            ),
                        );
                        break;
                    }
                };
                for ev in batch.events {
                    let ev = match wire::from_wire(ev) {
                        Ok(ev) => ev,
                        Err(e) => {
                            fail(
                                &tx,
                                format!("the driver at {url} sent a malformed job event: {e}"),
                            );
                            break 'stream;
                        }
                    };
                    let end = ev.ends_job();
                    if let JobEvent::Started { job_id: id, .. } = &ev {
                        job_id = Some(*id);
                        if let Some(c) = cancel_tx.take() {
                            running.lock().insert(*id, c);
                        }
                    }
                    if tx.send(ev).is_err() || end {
                        break 'stream;
                    }
                }
            }
            if let Some(id) = job_id {
                running.lock().remove(&id);
            }
        });
        rx
    }

    /// Cancels a running job: dropping its stream tells the driver.
    pub(crate) fn cancel(&self, job_id: u64) {
        if let Some(stop) = self.running.lock().remove(&job_id) {
            let _ = stop.send(());
        }
    }

    /// Tells the driver (and through it every executor) to drop the cached blocks of
    /// an RDD. Waits for the driver's answer, so a job submitted afterwards cannot
    /// overtake it and find the blocks still there.
    pub(crate) fn unpersist(&self, rdd_id: u32) {
        self.releaser().unpersist(rdd_id);
    }

    /// What the context's cleaner forgets shuffles and cached blocks through.
    pub(crate) fn releaser(&self) -> Releaser {
        Releaser {
            driver: self.driver.clone(),
            session_id: self.session.session_id,
            token: self.session.session_token.clone(),
        }
    }
}

/// How long one cleanup call (`Unpersist`, `ReleaseShuffles`) may take.
const CLEANUP_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The session-scoped calls that forget things (for `unpersist` and the cleaner):
/// blocking, bounded in time, failures logged (the session's end cleans up anyway).
pub(crate) struct Releaser {
    driver: Driver,
    session_id: u64,
    token: String,
}

impl Releaser {
    fn request<T>(&self, msg: T) -> std::result::Result<tonic::Request<T>, tonic::Status> {
        let mut request = tonic::Request::new(msg);
        request.set_timeout(CLEANUP_CALL_TIMEOUT);
        auth::with_session_token(request, &self.token)
    }

    /// Drops the cached blocks of an RDD on every executor; waits for the driver.
    pub(crate) fn unpersist(&self, rdd_id: u32) {
        let mut driver = self.driver.clone();
        let request = self.request(UnpersistRequest {
            session_id: self.session_id,
            rdd_id,
        });
        let sent = runtime::block_on(async move { driver.unpersist(request?).await });
        if let Err(s) = sent {
            warn!("unpersist of rdd {rdd_id} failed: {}", status_text(&s));
        }
    }

    /// Cancels the session's jobs of job group `group` (all with `None`), running or
    /// waiting: the driver answers once it has handed the cancel to its scheduler.
    pub(crate) fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()> {
        let mut driver = self.driver.clone();
        let request = self.request(ember_proto::CancelJobsRequest {
            session_id: self.session_id,
            job_group: group.map(str::to_string),
        });
        let sent = runtime::block_on(async move { driver.cancel_jobs(request?).await });
        match sent {
            Ok(r) => {
                debug!(
                    waiting_cancelled = r.into_inner().waiting_cancelled,
                    "cancelled jobs"
                );
                Ok(())
            }
            Err(s) => Err(crate::error::EmberError::Cluster(format!(
                "cancelling jobs failed: {}",
                status_text(&s)
            ))),
        }
    }

    /// Tells the driver that no live RDD reaches `shuffle_ids` (at most
    /// `MAX_RELEASED_SHUFFLES`): their map outputs and files go.
    pub(crate) fn release_shuffles(&self, shuffle_ids: &[u32]) {
        let mut driver = self.driver.clone();
        let request = self.request(ReleaseShufflesRequest {
            session_id: self.session_id,
            shuffle_ids: shuffle_ids.to_vec(),
        });
        let sent = runtime::block_on(async move { driver.release_shuffles(request?).await });
        match sent {
            Ok(_) => debug!(count = shuffle_ids.len(), "released shuffles"),
            Err(s) => warn!(
                "release of {} shuffles failed: {}",
                shuffle_ids.len(),
                status_text(&s)
            ),
        }
    }
}

fn fail(tx: &Sender<JobEvent>, message: String) {
    let _ = tx.send(JobEvent::JobFailed {
        job_id: u64::MAX,
        failure: JobFailure::Cancelled(message),
    });
}

/// A status as "CODE: message".
pub(crate) fn status_text(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// Sends the binary at `path` to the driver, each chunk LZ4-compressed
/// (`ember_proto::binary_chunk`); `sha` and the declared length are the file's own.
async fn upload_binary(
    driver: &mut Driver,
    path: &std::path::Path,
    sha: &str,
) -> std::result::Result<(), String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let total_len = file.metadata().map_err(|e| e.to_string())?.len();
    let (tx, rx) = tokio::sync::mpsc::channel::<BinaryChunk>(4);
    let sha_owned = sha.to_string();
    let path_owned = path.to_path_buf();
    let reader = tokio::task::spawn_blocking(move || -> std::result::Result<u64, String> {
        use std::io::Read;
        let mut file = file.take(total_len);
        let mut first = true;
        let mut sent = 0u64;
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) => return Err(format!("cannot read {}: {e}", path_owned.display())),
                }
            }
            if filled == 0 && !first {
                return Ok(sent);
            }
            let mut chunk = ember_proto::binary_chunk::encode(&buf[..filled]);
            if first {
                chunk.sha256 = sha_owned.clone();
                chunk.total_len = total_len;
            }
            first = false;
            sent += chunk.data.len() as u64;
            if tx.blocking_send(chunk).is_err() || filled < buf.len() {
                return Ok(sent);
            }
        }
    });
    info!(
        "uploading job binary {} ({total_len} bytes) to the driver",
        &sha[..16.min(sha.len())]
    );
    let sent = driver
        .upload_binary(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| status_text(&s));
    let read = reader.await.map_err(|e| e.to_string())?;
    let compressed = read?;
    sent?;
    debug!(
        "uploaded job binary {}: {total_len} bytes as {compressed} compressed",
        &sha[..16.min(sha.len())]
    );
    Ok(())
}

impl Backend for ClusterClient {
    fn submit(
        &self,
        plan: ember_proto::Plan,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Receiver<JobEvent> {
        ClusterClient::submit(self, plan, broadcasts)
    }

    fn cancel(&self, job_id: u64, _reason: &str) {
        ClusterClient::cancel(self, job_id)
    }

    fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()> {
        self.releaser().cancel_jobs(group)
    }

    fn unpersist(&self, rdd_id: u32) {
        ClusterClient::unpersist(self, rdd_id)
    }

    fn release_target(&self) -> Box<dyn ReleaseTarget> {
        Box::new(self.releaser())
    }

    fn session_token(&self) -> Option<String> {
        Some(self.session.session_token.clone())
    }
}

impl ReleaseTarget for Releaser {
    fn release_shuffles(&self, ids: &[u32]) {
        Releaser::release_shuffles(self, ids)
    }

    fn unpersist(&self, rdd_id: u32) {
        Releaser::unpersist(self, rdd_id)
    }
}
