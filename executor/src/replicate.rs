//! The pushing side of `replicated:N` shuffle durability: when a map task whose
//! description names `replica_targets` succeeds, this executor pushes the committed map
//! output file to each target's shuffle port (the raw push, `crate::raw_push`, under the
//! executor secret) and only then reports the task finished, its `MapStatus.replicas`
//! naming the targets that confirmed a checked copy. A decommissioning executor moves
//! its outputs the same way; its cached blocks go by `Shuffle.PushCachedBlock`.
//!
//! Invariants:
//! * A task's status reaches the driver once, after its pushes ended (confirmed, failed
//!   or timed out): what the driver records as replicas is what is stored. The task
//!   stays in the running set until then, so heartbeats still list it.
//! * The file is opened without following symlinks and must be a regular file of one
//!   link owned by its session directory's owner (a worker cannot point the daemon at
//!   another file); it is read once from that handle, piece by piece (at most
//!   [`PIECE_BYTES`] each); every target gets the same pieces, and the crc32 of the
//!   whole file is computed on the bytes sent (the header announces the length of the
//!   open file; the crc follows the last piece and the receiver checks both). The
//!   pieces go to all targets at once; a target that does not take one within
//!   [`PIECE_SEND_TIMEOUT`] is dropped, so one stalled peer costs only its own copy.
//! * What is pushed is the output the task was launched to write (shuffle and map from
//!   its description), and `MapStatus.replicas` is this daemon's alone: whatever a
//!   worker put there is cleared.
//! * A failed push is never a task failure: the output keeps the copies that were
//!   confirmed (possibly none) and lineage stays its fallback; the failure is logged
//!   naming the target executor.
//! * Nothing is pushed for a task that did not succeed; a push plan is dropped with its
//!   task's status, whatever the outcome.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ember_proto::auth::AddSecret;
use ember_proto::shuffle_client::ShuffleClient;
use ember_proto::{
    task_status, task_success, CachedBlockPiece, IdRange, MapHost, MapStatus, RawPushHeader,
    TaskStatus,
};
use tokio::sync::mpsc;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::config::Config;
use crate::raw_push::{self, PushPiece};

/// Most bytes of the file in one piece (well under the service's 2 MiB decoding limit).
pub const PIECE_BYTES: usize = 1024 * 1024;
/// Pieces queued per target between the file reads and its stream.
pub const QUEUED_PIECES: usize = 4;
/// Longest a target may take to accept the next piece before its push is given up (so
/// one stalled peer does not hold the others' copies back).
pub const PIECE_SEND_TIMEOUT: Duration = Duration::from_secs(10);

type Client = ShuffleClient<InterceptedService<Channel, AddSecret>>;

/// Where one task's output goes, and the key its session's blocks are served with; the
/// shuffle and map partition are the task's own (from its launch), never what its
/// worker's status claims.
#[derive(Debug, Clone)]
struct Plan {
    shuffle_id: u32,
    map: u32,
    targets: Vec<MapHost>,
    session_key: String,
}

/// The push plans of this registration's running map tasks, and one client per peer.
pub struct Replication {
    config: Arc<Config>,
    plans: Mutex<HashMap<u64, Plan>>,
    clients: Mutex<HashMap<String, Client>>,
}

impl Replication {
    pub fn new(config: Arc<Config>) -> Self {
        Replication {
            config,
            plans: Mutex::default(),
            clients: Mutex::default(),
        }
    }

    /// Remembers that task `task_id`, writing map output `map` of `shuffle_id`, pushes
    /// it to `targets` (nothing if none, or if its session has no key: no peer would
    /// serve it).
    pub fn plan(
        &self,
        task_id: u64,
        shuffle_id: u32,
        map: u32,
        targets: Vec<MapHost>,
        session_key: &str,
    ) {
        if targets.is_empty() || session_key.is_empty() {
            return;
        }
        let targets = targets
            .into_iter()
            .take(ember_proto::limits::MAX_SHUFFLE_REPLICAS)
            .collect();
        self.plans.lock().unwrap_or_else(|p| p.into_inner()).insert(
            task_id,
            Plan {
                shuffle_id,
                map,
                targets,
                session_key: session_key.to_string(),
            },
        );
    }

    /// If `status` is a map task's success with a push plan, pushes its output and
    /// returns the status naming the confirmed replicas; otherwise `Err(status)` (to be
    /// reported at once). Any status drops its task's plan; replicas a worker claims are
    /// cleared first (only this daemon says where copies are); only the output the task
    /// was launched to write is pushed.
    pub(crate) fn pushing(
        self: &Arc<Self>,
        mut status: TaskStatus,
    ) -> Result<impl std::future::Future<Output = TaskStatus> + Send + 'static, Box<TaskStatus>>
    {
        let plan = self
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&status.task_id);
        let task_id = status.task_id;
        let Some(ms) = map_status_mut(&mut status) else {
            return Err(Box::new(status));
        };
        ms.replicas.clear();
        let Some(plan) = plan else {
            return Err(Box::new(status));
        };
        if (ms.shuffle_id, ms.map_partition) != (plan.shuffle_id, plan.map) {
            tracing::warn!(
                task_id,
                "a worker reported map output {} of shuffle {} for a task launched to write \
                 map output {} of shuffle {}; not replicated",
                ms.map_partition,
                ms.shuffle_id,
                plan.map,
                plan.shuffle_id
            );
            return Err(Box::new(status));
        }
        let this = self.clone();
        Ok(async move {
            let confirmed = this
                .push_output(plan.shuffle_id, plan.map, &plan.session_key, &plan.targets)
                .await;
            tracing::debug!(
                shuffle_id = plan.shuffle_id,
                map = plan.map,
                to = ?confirmed
                    .iter()
                    .map(|t| String::from_utf8_lossy(&t.executor_id).into_owned())
                    .collect::<Vec<_>>(),
                "map output replicated"
            );
            if let Some(ms) = map_status_mut(&mut status) {
                ms.replicas = confirmed;
            }
            status
        })
    }

    /// Pushes map output `map` of `shuffle_id` (of the session whose shuffle key is
    /// `session_key`) to `targets`; the ones that confirmed a checked copy. Also what a
    /// decommissioning executor moves its outputs with (`crate::decommission`).
    pub async fn push_output(
        &self,
        shuffle_id: u32,
        map: u32,
        session_key: &str,
        targets: &[MapHost],
    ) -> Vec<MapHost> {
        let dir = self.config.session_shuffle_dir(IdRange::of_id(shuffle_id));
        let path = ember_shuffle::data_path(&dir, shuffle_id, map);
        let (file, file_len) = match open_output(&path, &dir).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(
                    "cannot replicate map output {map} of shuffle {shuffle_id}: {}: {e}",
                    path.display()
                );
                return Vec::new();
            }
        };
        let timeout = ember_proto::limits::push_time_limit(file_len);
        let mut senders = Vec::new();
        let mut calls = Vec::new();
        for target in targets {
            let (tx, rx) = mpsc::channel::<PushPiece>(QUEUED_PIECES);
            let address = String::from_utf8_lossy(&target.shuffle_address).into_owned();
            let header = RawPushHeader {
                executor_secret: self.config.executor_secret.clone().unwrap_or_default(),
                shuffle_id,
                map_partition: map,
                session_key: session_key.to_string(),
                file_len,
            };
            senders.push(tx);
            calls.push(async move {
                match tokio::time::timeout(timeout, raw_push::push(&address, header, rx)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
                }
            });
        }
        let reading = feed(file, path, file_len, senders, |p: PushPiece| p);
        let (read, results) = tokio::join!(reading, futures_util::future::join_all(calls));
        if let Err(e) = read {
            tracing::warn!("cannot replicate map output {map} of shuffle {shuffle_id}: {e}");
            return Vec::new();
        }
        let mut confirmed = Vec::new();
        for (target, result) in targets.iter().zip(results) {
            match result {
                Ok(()) => confirmed.push(target.clone()),
                Err(e) => tracing::warn!(
                    target = %String::from_utf8_lossy(&target.executor_id),
                    "map output {map} of shuffle {shuffle_id} was not replicated there \
                     (lineage stays its fallback): {e}"
                ),
            }
        }
        confirmed
    }

    /// Where cached block `partition` of `rdd_id` is written for moving (or arrived here):
    /// `ember_shuffle::cached_block_path` in its session's shuffle directory.
    pub fn block_file(&self, rdd_id: u32, partition: u32) -> PathBuf {
        let dir = self.config.session_shuffle_dir(IdRange::of_id(rdd_id));
        ember_shuffle::cached_block_path(&dir, rdd_id, partition)
    }

    /// Pushes cached block `partition` of `rdd_id`, written for moving into its session's
    /// shuffle directory (`ember_shuffle::cached_block_path`), to `target`
    /// (`Shuffle.PushCachedBlock`); the bytes the target confirmed storing, or why not.
    /// What a decommissioning executor moves its cached blocks with.
    pub async fn push_block(
        &self,
        rdd_id: u32,
        partition: u32,
        session_key: &str,
        target: &MapHost,
    ) -> Result<u64, String> {
        let dir = self.config.session_shuffle_dir(IdRange::of_id(rdd_id));
        let path = self.block_file(rdd_id, partition);
        let (file, file_len) = open_output(&path, &dir)
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let timeout = ember_proto::limits::push_time_limit(file_len);
        let (tx, rx) = mpsc::channel::<CachedBlockPiece>(QUEUED_PIECES);
        let mut client = self.client(&String::from_utf8_lossy(&target.shuffle_address))?;
        let call = async move {
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            answer(timeout, client.push_cached_block(stream)).await
        };
        let session_key = session_key.to_string();
        let reading = feed(file, path, file_len, vec![tx], move |p: PushPiece| {
            CachedBlockPiece {
                rdd_id,
                partition,
                session_key: key_if_first(&p, &session_key),
                file_len,
                crc32: p.crc32,
                data: p.data,
                last: p.last,
            }
        });
        let (read, pushed) = tokio::join!(reading, call);
        read?;
        pushed?;
        Ok(file_len)
    }

    /// The client of the peer serving at `address` (connected lazily, kept).
    fn client(&self, address: &str) -> Result<Client, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(address) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(address.to_string())
            .map_err(|e| {
                format!(
                    "invalid shuffle address {:?}: {e}",
                    crate::config::bounded(address)
                )
            })?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .http2_adaptive_window(true);
        let secret = self.config.executor_secret.as_deref();
        let client =
            ShuffleClient::with_interceptor(endpoint.connect_lazy(), AddSecret::new(secret)?)
                .max_encoding_message_size(2 * PIECE_BYTES);
        clients.insert(address.to_string(), client.clone());
        Ok(client)
    }
}

/// The map status of a successful map task's status.
fn map_status_mut(status: &mut TaskStatus) -> Option<&mut MapStatus> {
    match status.outcome.as_mut()? {
        task_status::Outcome::Success(s) => match s.output.as_mut()? {
            task_success::Output::MapStatus(ms) => Some(ms),
            _ => None,
        },
        _ => None,
    }
}

/// Opens a committed map output to push it, refusing anything but a regular file of
/// one link owned by the owner of its session directory `dir`, opened without following
/// a symlink: a worker (which owns its outputs) cannot make this daemon read and send
/// another file. Its length is the open file's.
async fn open_output(path: &Path, dir: &Path) -> Result<(Arc<std::fs::File>, u64), String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let (path, dir) = (path.to_path_buf(), dir.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let owner = std::fs::metadata(&dir).map_err(|e| e.to_string())?.uid();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        if !meta.file_type().is_file() || meta.nlink() != 1 || meta.uid() != owner {
            return Err(format!(
                "not a map output file (a regular file of one link owned by uid {owner})"
            ));
        }
        Ok((Arc::new(file), meta.len()))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The session key a gRPC piece carries: `key` in the first, nothing after.
fn key_if_first(p: &PushPiece, key: &str) -> String {
    if p.first {
        key.to_string()
    } else {
        String::new()
    }
}

/// Reads `file` (at `path`) once and sends every piece, made by `make`, to every
/// sender: the header in the first, the crc32 of all bytes in the last. A sender whose
/// push ended, or that takes a piece no sooner than [`PIECE_SEND_TIMEOUT`], is dropped
/// (its push then fails); the others go on.
async fn feed<P: Clone + Send + 'static>(
    file: Arc<std::fs::File>,
    path: PathBuf,
    file_len: u64,
    mut senders: Vec<mpsc::Sender<P>>,
    make: impl Fn(PushPiece) -> P,
) -> Result<(), String> {
    let mut crc = crc32fast::Hasher::new();
    let mut sent: u64 = 0;
    let mut first = true;
    loop {
        let want = (file_len - sent).min(PIECE_BYTES as u64) as usize;
        // Read on a blocking thread straight into the piece's spare capacity: no zeroed
        // buffer, no copy out of tokio's file buffer (the replicated sort's profile had
        // both, 3 % of its samples).
        let f = file.clone();
        let data = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            use std::io::Read;
            let mut data = Vec::with_capacity(want);
            (&*f).take(want as u64).read_to_end(&mut data)?;
            if data.len() < want {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file ended {} bytes early", want - data.len()),
                ));
            }
            Ok(data)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map_err(|e| format!("{} (after {sent} bytes): {e}", path.display()))?;
        crc.update(&data);
        sent += want as u64;
        let last = sent == file_len;
        let piece = make(PushPiece {
            data: data.into(),
            first,
            last,
            crc32: if last { crc.clone().finalize() } else { 0 },
        });
        first = false;
        let sends = senders.into_iter().map(|tx| {
            let piece = piece.clone();
            async move {
                match tokio::time::timeout(PIECE_SEND_TIMEOUT, tx.send(piece)).await {
                    Ok(Ok(())) => Some(tx),
                    _ => None,
                }
            }
        });
        senders = futures_util::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
            .collect();
        if last || senders.is_empty() {
            return Ok(());
        }
    }
}

/// A push call's outcome within `timeout`: nothing, or why it failed.
async fn answer<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<(), String> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(s)) => Err(format!("{}: {}", code_name(s.code()), s.message())),
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
    }
}

pub(crate) fn code_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Unauthenticated => "refused (executor secret)",
        tonic::Code::PermissionDenied => "refused (session key)",
        tonic::Code::DataLoss => "damaged in transit",
        tonic::Code::Unavailable => "unreachable",
        _ => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_regular_output_file_of_the_directorys_owner_is_pushed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let secret = d.join("secret");
        std::fs::write(&secret, b"do not send").unwrap();
        // A symlink in the output's place.
        let link = ember_shuffle::data_path(d, 1, 0);
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert!(open_output(&link, d).await.is_err(), "a symlink is refused");
        // A second hard link to another file.
        let hard = ember_shuffle::data_path(d, 1, 1);
        std::fs::hard_link(&secret, &hard).unwrap();
        let e = open_output(&hard, d).await.unwrap_err();
        assert!(e.contains("one link"), "{e}");
        // A directory in its place.
        let sub = ember_shuffle::data_path(d, 1, 2);
        std::fs::create_dir(&sub).unwrap();
        assert!(open_output(&sub, d).await.is_err());
        // The real thing: its length is the open file's.
        let ok = ember_shuffle::data_path(d, 1, 3);
        std::fs::write(&ok, vec![7u8; 1000]).unwrap();
        let (_, len) = open_output(&ok, d).await.unwrap();
        assert_eq!(len, 1000);
    }
}
