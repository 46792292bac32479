//! The client's session with the driver, and getting it back when the driver restarts.
//!
//! [`Link::open`] connects, makes sure the driver holds this binary (uploading it,
//! chunked, if not) and opens a session; [`Link::hold`] keeps the session stream open
//! for the context's lifetime. When that stream breaks (the driver died or restarted),
//! the holder tries for `EMBER_DRIVER_RECONNECT_SECS` (default 60; 0 turns it off) to
//! reopen the same session on the driver at the same address, proving it owns the
//! session with its token (`OpenSessionRequest::resume_session_id`): a driver restarted
//! with its state directory (`--binary-dir`) gives back the same ids, so the jobs that
//! were running can be resubmitted and find the map outputs the executors kept.
//!
//! Invariants: the session's identity (id, id range, token) never changes; each
//! successful reopen starts a new *generation*, and the driver client of the current
//! generation is the only one calls go through; a job that lost its stream waits for a
//! generation after the one it used, or for the link to be lost for good (the grace
//! ran out, or the driver refused the session: restarted without it, or after its
//! grace), and then fails with that reason. Nothing here blocks forever: every wait is
//! bounded by the grace period.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ember_proto::auth::{self, AddSecret, MAX_MESSAGE_BYTES};
use ember_proto::driver_client::DriverClient;
use ember_proto::{
    session_event, BinaryChunk, BinaryRef, OpenSessionRequest, SessionEvent, SessionOpened,
};
use parking_lot::Mutex;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};
use tracing::{debug, info, warn};

use crate::error::{EmberError, Result};

/// A gRPC client of the driver that adds the cluster secret to every call.
pub(crate) type Driver = DriverClient<InterceptedService<Channel, AddSecret>>;

/// Bytes per chunk of an uploaded binary.
const CHUNK_BYTES: usize = ember_proto::binary_chunk::MAX_CHUNK_BYTES;

/// Pause between attempts to reopen the session.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How long a job whose stream broke waits for the session holder to notice a lost
/// driver before it takes the break for a failure of its own.
const NOTICE_WAIT: Duration = Duration::from_secs(3);

/// How long the client tries to reopen its session after the driver went away
/// (`EMBER_DRIVER_RECONNECT_SECS`, default 60; 0: it does not).
pub(crate) fn reconnect_grace() -> Result<Duration> {
    match std::env::var("EMBER_DRIVER_RECONNECT_SECS") {
        Err(_) => Ok(Duration::from_secs(60)),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| {
                EmberError::Config(format!(
                    "EMBER_DRIVER_RECONNECT_SECS: expected a whole number of seconds, got {}",
                    crate::io::excerpt(&v)
                ))
            }),
    }
}

/// Which generation of the session is current, or why it is gone for good.
#[derive(Debug, Clone, Default)]
struct Generation {
    number: u64,
    lost: Option<String>,
}

/// The session and the driver client of its current generation.
pub(crate) struct Link {
    pub url: String,
    pub session: SessionOpened,
    add_secret: AddSecret,
    app_name: String,
    binary: (std::path::PathBuf, String),
    driver: Mutex<Driver>,
    generation: watch::Sender<Generation>,
    /// The session stream broke and the holder is reopening it.
    reconnecting: AtomicBool,
    grace: Duration,
}

/// Why opening (or reopening) a session failed.
enum OpenError {
    /// The driver answered and said no: trying again cannot help.
    Refused(String),
    /// No driver answered, or the call broke: worth another try.
    Unreachable(String),
}

impl OpenError {
    fn text(&self) -> &str {
        match self {
            OpenError::Refused(s) | OpenError::Unreachable(s) => s,
        }
    }
}

impl Link {
    /// Connects to the driver at `url`, makes sure it has this binary, and opens a
    /// session; the stream returned must be given to [`Link::hold`].
    pub(crate) async fn open(
        url: &str,
        app_name: &str,
        conf: Vec<(String, String)>,
    ) -> Result<(Arc<Link>, Streaming<SessionEvent>)> {
        let binary = super::binary::current()?.clone();
        let secret = super::client_secret()?;
        let add_secret = AddSecret::new(secret.as_deref()).map_err(EmberError::Config)?;
        let grace = reconnect_grace()?;
        let conf = (conf.into_iter())
            .map(|(name, value)| ember_proto::ConfEntry { name, value })
            .collect();
        let (driver, stream, session) = open_once(url, &add_secret, &binary, app_name, conf, None)
            .await
            .map_err(|e| EmberError::Cluster(format!("driver {url}: {}", e.text())))?;
        info!(
            session = session.session_id,
            executors = session.executors,
            cores = session.total_cores,
            "connected to driver {url}"
        );
        let link = Link {
            url: url.to_string(),
            session,
            add_secret,
            app_name: app_name.to_string(),
            binary,
            driver: Mutex::new(driver),
            generation: watch::Sender::new(Generation::default()),
            reconnecting: AtomicBool::new(false),
            grace,
        };
        Ok((Arc::new(link), stream))
    }

    /// The driver client of the current generation, and that generation.
    pub(crate) fn driver(&self) -> (Driver, u64) {
        let generation = self.generation.borrow().number;
        (self.driver.lock().clone(), generation)
    }

    /// Why the session is gone for good, if it is.
    pub(crate) fn lost(&self) -> Option<String> {
        self.generation.borrow().lost.clone()
    }

    /// Whether a broken job stream should wait for the session to come back.
    pub(crate) fn reconnects(&self) -> bool {
        !self.grace.is_zero()
    }

    /// A job's stream of generation `used` broke with `why`: waits (bounded) for a
    /// later generation, whose driver client it returns, or fails with the reason the
    /// session is gone.
    pub(crate) async fn after_break(
        &self,
        used: u64,
        why: &str,
    ) -> std::result::Result<(Driver, u64), String> {
        let mut rx = self.generation.subscribe();
        let ready = |g: &Generation| g.number > used || g.lost.is_some();
        // The holder notices a lost driver on its own stream at about the same time.
        let noticed = tokio::time::timeout(NOTICE_WAIT, rx.wait_for(ready))
            .await
            .is_ok();
        if !noticed && !self.reconnecting.load(Ordering::Acquire) {
            return Err(why.to_string());
        }
        let bound = self.grace + NOTICE_WAIT + RECONNECT_PAUSE;
        let g = match tokio::time::timeout(bound, rx.wait_for(ready)).await {
            Ok(Ok(g)) => g.clone(),
            _ => return Err(format!("{why}; the session did not come back")),
        };
        match g.lost {
            Some(lost) => Err(lost),
            None => Ok((self.driver.lock().clone(), g.number)),
        }
    }

    /// Holds the session stream open until the link is dropped; when it breaks, reopens
    /// the session for up to the grace period (a new generation each time), else
    /// records the loss.
    pub(crate) async fn hold(self: Arc<Self>, mut stream: Streaming<SessionEvent>) {
        let url = self.url.clone();
        loop {
            let why = loop {
                match stream.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => break "the driver closed the session".to_string(),
                    Err(s) => break status_text(&s),
                }
            };
            if self.grace.is_zero() {
                warn!("lost the session with driver {url}: {why}");
                self.set_lost(why);
                return;
            }
            self.reconnecting.store(true, Ordering::Release);
            warn!(
                "lost the session with driver {url}: {why}; trying to reopen it for up to {} s",
                self.grace.as_secs()
            );
            match self.reopen(&why).await {
                Ok(next) => {
                    stream = next;
                    self.reconnecting.store(false, Ordering::Release);
                }
                Err(lost) => {
                    warn!("{lost}");
                    self.set_lost(lost);
                    self.reconnecting.store(false, Ordering::Release);
                    return;
                }
            }
        }
    }

    fn set_lost(&self, why: String) {
        self.generation.send_modify(|g| g.lost = Some(why));
    }

    /// Tries to reopen the session until the grace period ends.
    async fn reopen(&self, why: &str) -> std::result::Result<Streaming<SessionEvent>, String> {
        let (url, id) = (&self.url, self.session.session_id);
        let deadline = tokio::time::Instant::now() + self.grace;
        let mut last = why.to_string();
        loop {
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "lost the connection to the driver at {url}: {why}; it did not take \
                     session {id} back within {} s (last: {last})",
                    self.grace.as_secs()
                ));
            }
            tokio::time::sleep(RECONNECT_PAUSE).await;
            let resume = Some((id, self.session.session_token.as_str()));
            let opened = open_once(
                url,
                &self.add_secret,
                &self.binary,
                &self.app_name,
                Vec::new(),
                resume,
            )
            .await;
            match opened {
                Ok((driver, stream, _)) => {
                    *self.driver.lock() = driver;
                    self.generation.send_modify(|g| g.number += 1);
                    info!("reopened session {id} on the driver at {url}");
                    return Ok(stream);
                }
                Err(OpenError::Refused(e)) => {
                    return Err(format!(
                        "lost the connection to the driver at {url}: {why}; the driver \
                         answering there now refused session {id}: {e}"
                    ))
                }
                Err(OpenError::Unreachable(e)) => {
                    debug!("reopening session {id}: {e}");
                    last = e;
                }
            }
        }
    }
}

/// One attempt: connect, check or upload the binary, open (or reopen, with `resume`'s
/// id and token) the session and read its `SessionOpened`.
async fn open_once(
    url: &str,
    add_secret: &AddSecret,
    (exe, sha): &(std::path::PathBuf, String),
    app_name: &str,
    conf: Vec<ember_proto::ConfEntry>,
    resume: Option<(u64, &str)>,
) -> std::result::Result<(Driver, Streaming<SessionEvent>, SessionOpened), OpenError> {
    let unreachable = |what: &str, e: String| OpenError::Unreachable(format!("{what}: {e}"));
    let classify = |what: &str, s: &tonic::Status| match s.code() {
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded => {
            OpenError::Unreachable(format!("{what}: {}", status_text(s)))
        }
        _ => OpenError::Refused(format!("{what}: {}", status_text(s))),
    };
    let channel = connect_channel(url).await.map_err(OpenError::Unreachable)?;
    let mut driver = DriverClient::with_interceptor(channel, add_secret.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let present = driver
        .has_binary(BinaryRef {
            sha256: sha.clone(),
        })
        .await
        .map_err(|s| classify("checking the job binary", &s))?
        .into_inner()
        .present;
    if !present {
        upload_binary(&mut driver, exe, sha)
            .await
            .map_err(|e| unreachable("uploading the job binary", e))?;
    }
    let request = OpenSessionRequest {
        app_name: app_name.to_string(),
        binary_sha256: sha.clone(),
        conf,
        resume_session_id: resume.map_or(0, |(id, _)| id),
    };
    let mut request = tonic::Request::new(request);
    if let Some((_, token)) = resume {
        request = auth::with_session_token(request, token)
            .map_err(|s| OpenError::Refused(status_text(&s)))?;
    }
    let mut stream = driver
        .open_session(request)
        .await
        .map_err(|s| classify("opening a session", &s))?
        .into_inner();
    let first = stream
        .message()
        .await
        .map_err(|s| classify("opening a session", &s))?;
    let Some(SessionEvent {
        event: Some(session_event::Event::Opened(session)),
    }) = first
    else {
        return Err(OpenError::Unreachable(
            "opening a session: the driver sent no session".into(),
        ));
    };
    Ok((driver, stream, session))
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
