//! The pushing side of `replicated:N` shuffle durability: when a map task whose
//! description names `replica_targets` succeeds, this executor pushes the committed map
//! output file to each target's shuffle service (`Shuffle.PushMapOutput`, under the
//! executor secret) and only then reports the task finished, its `MapStatus.replicas`
//! naming the targets that confirmed a checked copy.
//!
//! Invariants:
//! * A task's status reaches the driver once, after its pushes ended (confirmed, failed
//!   or timed out): what the driver records as replicas is what is stored. The task
//!   stays in the running set until then, so heartbeats still list it.
//! * The file is read once, piece by piece (at most [`PIECE_BYTES`] each); every target
//!   gets the same pieces, and the crc32 of the whole file is computed on the bytes sent
//!   (the header announces the length from the file's metadata; the last piece carries
//!   the crc and the receiver checks both). A target that is slow holds the others back
//!   by at most [`QUEUED_PIECES`] pieces.
//! * A failed push is never a task failure: the output keeps the copies that were
//!   confirmed (possibly none) and lineage stays its fallback; the failure is logged
//!   naming the target executor.
//! * Nothing is pushed for a task that did not succeed; a push plan is dropped with its
//!   task's status, whatever the outcome.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ember_proto::auth::AddSecret;
use ember_proto::shuffle_client::ShuffleClient;
use ember_proto::{task_status, task_success, IdRange, MapHost, MapOutputPiece, TaskStatus};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::config::Config;

/// Most bytes of the file in one piece (well under the service's 2 MiB decoding limit).
pub const PIECE_BYTES: usize = 1024 * 1024;
/// Pieces queued per target between the file reads and its stream.
pub const QUEUED_PIECES: usize = 4;
/// Time a push may take: this much, plus one second per 16 MiB of the file.
pub const PUSH_BASE_TIMEOUT: Duration = Duration::from_secs(30);

type Client = ShuffleClient<InterceptedService<Channel, AddSecret>>;

/// Where one task's output goes, and the key its session's blocks are served with.
#[derive(Debug, Clone)]
struct Plan {
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

    /// Remembers that task `task_id`'s output goes to `targets` (nothing if none, or if
    /// its session has no key: no peer would serve it).
    pub fn plan(&self, task_id: u64, targets: Vec<MapHost>, session_key: &str) {
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
                targets,
                session_key: session_key.to_string(),
            },
        );
    }

    /// Takes task `status`'s push plan: `Some` only when the task succeeded with a map
    /// output to push. Any other status just drops its plan.
    fn take_for(&self, status: &TaskStatus) -> Option<(Plan, u32, u32)> {
        let plan = self
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&status.task_id)?;
        let Some(task_status::Outcome::Success(success)) = &status.outcome else {
            return None;
        };
        let Some(task_success::Output::MapStatus(ms)) = &success.output else {
            return None;
        };
        Some((plan, ms.shuffle_id, ms.map_partition))
    }

    /// If `status` is a map task's success with a push plan, pushes its output and
    /// returns the status naming the confirmed replicas; otherwise `Err(status)` as it
    /// came (to be reported at once).
    pub(crate) fn pushing(
        self: &Arc<Self>,
        status: TaskStatus,
    ) -> Result<impl std::future::Future<Output = TaskStatus> + Send + 'static, TaskStatus> {
        let Some((plan, shuffle_id, map)) = self.take_for(&status) else {
            return Err(status);
        };
        let this = self.clone();
        Ok(async move {
            let confirmed = this
                .push_output(shuffle_id, map, &plan.session_key, &plan.targets)
                .await;
            let mut status = status;
            if let Some(task_status::Outcome::Success(s)) = status.outcome.as_mut() {
                if let Some(task_success::Output::MapStatus(ms)) = s.output.as_mut() {
                    ms.replicas = confirmed;
                }
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
        let file_len = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(e) => {
                tracing::warn!(
                    "cannot replicate map output {map} of shuffle {shuffle_id}: {}: {e}",
                    path.display()
                );
                return Vec::new();
            }
        };
        let timeout = PUSH_BASE_TIMEOUT + Duration::from_secs(file_len >> 24);
        let mut senders = Vec::new();
        let mut calls = Vec::new();
        for target in targets {
            let (tx, rx) = mpsc::channel::<MapOutputPiece>(QUEUED_PIECES);
            let client = self.client(&String::from_utf8_lossy(&target.shuffle_address));
            senders.push(tx);
            calls.push(async move {
                let mut client = client?;
                let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
                match tokio::time::timeout(timeout, client.push_map_output(stream)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(s)) => Err(format!("{}: {}", code_name(s.code()), s.message())),
                    Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
                }
            });
        }
        let reading = feed(
            path,
            file_len,
            shuffle_id,
            map,
            session_key.to_string(),
            senders,
        );
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

/// Reads the file at `path` once and sends every piece to every sender: the header in
/// the first, the crc32 of all bytes in the last (an empty file is one piece with both).
/// A sender whose push ended is dropped; the others go on.
async fn feed(
    path: PathBuf,
    file_len: u64,
    shuffle_id: u32,
    map: u32,
    session_key: String,
    mut senders: Vec<mpsc::Sender<MapOutputPiece>>,
) -> Result<(), String> {
    let mut file = tokio::fs::File::open(&path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut crc = crc32fast::Hasher::new();
    let mut sent: u64 = 0;
    let mut first = true;
    loop {
        let want = (file_len - sent).min(PIECE_BYTES as u64) as usize;
        let mut data = vec![0u8; want];
        file.read_exact(&mut data)
            .await
            .map_err(|e| format!("{} (after {sent} bytes): {e}", path.display()))?;
        crc.update(&data);
        sent += want as u64;
        let last = sent == file_len;
        let piece = MapOutputPiece {
            shuffle_id,
            map_partition: map,
            session_key: if first {
                session_key.clone()
            } else {
                String::new()
            },
            file_len,
            crc32: if last { crc.clone().finalize() } else { 0 },
            data: data.into(),
            last,
        };
        first = false;
        let mut live = Vec::with_capacity(senders.len());
        for tx in senders {
            if tx.send(piece.clone()).await.is_ok() {
                live.push(tx);
            }
        }
        senders = live;
        if last || senders.is_empty() {
            return Ok(());
        }
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Unauthenticated => "refused (executor secret)",
        tonic::Code::PermissionDenied => "refused (session key)",
        tonic::Code::DataLoss => "damaged in transit",
        tonic::Code::Unavailable => "unreachable",
        _ => "failed",
    }
}
