//! The Shuffle gRPC service: streams blocks of the shuffle files in this executor's
//! shuffle directory (`shuffle/session-<i>/` of the session owning the shuffle id) to
//! reducers on any executor.
//!
//! Invariants:
//! * Blocks go out in the order of the request's `map_partitions`, each as chunks of at
//!   most [`CHUNK_BYTES`] read from the data file at the block's offset (or from memory
//!   when the output is resident, `ember_shuffle::resident`); the first chunk of a block
//!   carries `first`, `block_len` and the index's `crc32`; an empty block is exactly one
//!   chunk with `first` and no data. The crc is not verified here: the reducer checks it
//!   on the bytes it received. Consecutive chunks travel together in `BlockChunks`
//!   messages of at most 1 MiB of data (or one chunk) and `MAX_CHUNKS_PER_MESSAGE`
//!   chunks, so a thousand tiny blocks are one message, not a thousand.
//! * At most [`CHANNEL_MESSAGES`] messages per request wait in memory: a slow reducer slows
//!   the reads instead of growing the daemon. Each request is read by one task on the
//!   blocking pool (plain file I/O, no pool hop per block), which it holds while it
//!   streams.
//! * A session's blocks go only to its own tasks: a request must carry the shuffle key
//!   of the session owning its shuffle id (learned from that session's launched tasks,
//!   see [`SessionKeys`]), compared in constant time; otherwise `PERMISSION_DENIED`
//!   before any file is touched. The key is the only credential asked for (workers
//!   hold no cluster secret). Keys are never logged or echoed.
//! * `PushMapOutput` (a peer's replica, `replicated:N`) is taken only with the executor
//!   secret, and stored by [`crate::replica_store`]; it is then served like any output.
//!   The same port takes the raw push of a map output (`crate::raw_push`, told apart by
//!   its first byte), under the same rules through the same store.
//!   So is `PushCachedBlock` (a decommissioning peer's cached partition), stored for
//!   the session's worker to adopt; it is never served.
//! * A request is decoded only up to [`MAX_FETCH_REQUEST_MESSAGE_BYTES`] and names at
//!   most [`MAX_FETCH_MAP_IDS`] map ids (else `INVALID_ARGUMENT`, checked before
//!   anything is allocated for them); idle connections are dropped by HTTP/2 keepalive.
//! * A request is checked whole before any block goes out: a map id asked twice, or
//!   one whose output this executor does not hold for the shuffle, is
//!   `INVALID_ARGUMENT` naming the id; more than one block adding up to over
//!   [`MAX_FETCH_REQUEST_BYTES`] (by the index) is `RESOURCE_EXHAUSTED`. So a request
//!   costs at most what the reducer could read by asking for each block once.
//! * Any later problem ends the stream with `NOT_FOUND` (the map output is not here) or
//!   `DATA_LOSS` (it is here but broken), the message naming the file and what is wrong.
//!   Nothing a reducer sends can panic the daemon.

use ember_proto::IdRange;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ember_proto::auth::MAX_MESSAGE_BYTES;
pub use ember_proto::limits::MAX_FETCH_REQUEST_BYTES;
use ember_proto::limits::{CHUNKS_MESSAGE_BYTES, MAX_CHUNKS_PER_MESSAGE};
use ember_proto::listener::{BoundedListener, ConnectionLimits, FirstRequest};
use ember_proto::shuffle_server::{Shuffle, ShuffleServer};
use ember_proto::{BlockChunk, BlockChunks, Empty, FetchBlocksRequest, MapOutputPiece};
use ember_shuffle::reader::{open_local_block, LocalBlock};
use ember_shuffle::resident::View;
use ember_shuffle::BlockId;
use ember_shuffle::ShuffleError;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Largest piece of a block in one message.
pub const CHUNK_BYTES: usize = 1024 * 1024;
/// `BlockChunks` messages buffered per request between the file reads and the network.
pub const CHANNEL_MESSAGES: usize = 4;
/// Most map ids one fetch may name: the default of the driver's
/// `--max-partitions-per-node` (100,000), so no map stage a default driver accepts
/// needs more ids from one executor in one request.
pub const MAX_FETCH_MAP_IDS: usize = 100_000;
/// Largest `FetchBlocksRequest` this service decodes. The request is a list of map ids:
/// [`MAX_FETCH_MAP_IDS`] ids are at most 500 kB as packed varints (5 bytes each), plus
/// a 64-character session key and two ids; 2 MiB leaves ample headroom while keeping
/// anyone who can reach the port from making the daemon buffer a 256 MiB body.
pub const MAX_FETCH_REQUEST_MESSAGE_BYTES: usize = 2 << 20;
/// HTTP/2 keepalive ping interval of the shuffle server (as the driver's): a dead
/// reducer's connection is dropped within interval + timeout, freeing its slot.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a keepalive ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub use crate::session_keys::SessionKeys;

/// The executor id of the current registration (empty before the first), for messages.
pub type SharedExecutorId = Arc<Mutex<String>>;

/// Serves the shuffle files of one directory.
#[derive(Clone)]
pub struct ShuffleService {
    dir: PathBuf,
    executor_id: SharedExecutorId,
    keys: SessionKeys,
    max_request_bytes: u64,
    /// The credential of `PushMapOutput` (executors only); `None`: open (loopback).
    executor_secret: Option<Arc<str>>,
}

impl ShuffleService {
    pub fn new(dir: impl Into<PathBuf>, executor_id: SharedExecutorId) -> Self {
        ShuffleService {
            dir: dir.into(),
            executor_id,
            keys: SessionKeys::default(),
            max_request_bytes: MAX_FETCH_REQUEST_BYTES,
            executor_secret: None,
        }
    }

    /// The same service taking pushed replicas only from calls carrying `secret` (the
    /// executor secret; `None` leaves pushes open, which the daemon allows on loopback).
    pub fn with_executor_secret(mut self, secret: Option<&str>) -> Self {
        self.executor_secret = secret.map(Arc::from);
        self
    }

    /// The same service with another bound on a request's bytes (for tests; the
    /// daemon uses [`MAX_FETCH_REQUEST_BYTES`], which reducers batch their fetches by).
    pub fn with_max_request_bytes(mut self, bytes: u64) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// What taking a raw push needs: the shuffle directory, the session keys and the
    /// executor secret (`crate::raw_push`).
    pub(crate) fn push_parts(&self) -> (&Path, &SessionKeys, Option<&str>) {
        (&self.dir, &self.keys, self.executor_secret.as_deref())
    }

    /// The session keys fetches are checked against (give them to the registration).
    pub fn session_keys(&self) -> SessionKeys {
        self.keys.clone()
    }
}

impl ShuffleService {
    /// A peer's push of `what` (a map output, a cached block): taken only with the
    /// executor secret, stored by [`crate::replica_store`].
    async fn take_push<P: crate::replica_store::Piece>(
        &self,
        request: Request<Streaming<P>>,
        what: &str,
    ) -> Result<Response<Empty>, Status> {
        if ember_proto::auth::check(&request, self.executor_secret.as_deref()).is_err() {
            tracing::warn!("refused {what} push without the executor secret");
            return Err(Status::unauthenticated(format!(
                "pushing {what} takes the executor secret"
            )));
        }
        match crate::replica_store::receive(&self.dir, &self.keys, request.into_inner()).await {
            Ok(stored) => {
                tracing::debug!(path = %stored.path.display(), bytes = stored.bytes, "stored {what} pushed here");
                Ok(Response::new(Empty {}))
            }
            Err(status) => {
                tracing::warn!("refused {what} push: {}", status.message());
                Err(status)
            }
        }
    }
}

#[tonic::async_trait]
impl Shuffle for ShuffleService {
    type FetchBlocksStream = ReceiverStream<Result<BlockChunks, Status>>;

    async fn push_map_output(
        &self,
        request: Request<Streaming<MapOutputPiece>>,
    ) -> Result<Response<Empty>, Status> {
        self.take_push(request, "a map output").await
    }

    async fn push_cached_block(
        &self,
        request: Request<Streaming<ember_proto::CachedBlockPiece>>,
    ) -> Result<Response<Empty>, Status> {
        self.take_push(request, "a cached block").await
    }

    async fn fetch_blocks(
        &self,
        request: Request<FetchBlocksRequest>,
    ) -> Result<Response<Self::FetchBlocksStream>, Status> {
        let req = request.into_inner();
        let (shuffle_id, reduce_partition) = (req.shuffle_id, req.reduce_partition);
        if req.map_partitions.len() > MAX_FETCH_MAP_IDS {
            let status = Status::invalid_argument(format!(
                "the fetch of shuffle {} reduce {} names {} map ids, over the \
                 {MAX_FETCH_MAP_IDS} one request may name",
                req.shuffle_id,
                req.reduce_partition,
                req.map_partitions.len()
            ));
            tracing::warn!(
                shuffle_id = req.shuffle_id,
                "refused a shuffle fetch: {}",
                status.message()
            );
            return Err(status);
        }
        if let Err(status) = self.keys.check(req.shuffle_id, &req.session_key) {
            tracing::warn!(
                shuffle_id = req.shuffle_id,
                "refused a shuffle fetch: {}",
                status.message()
            );
            return Err(status);
        }
        // The shuffle's session's directory: an id alone names it, never a path.
        let dir = crate::config::session_shuffle_dir(&self.dir, IdRange::of_id(req.shuffle_id));
        let executor_id = self
            .executor_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let max = self.max_request_bytes;
        let (tx, rx) = mpsc::channel(CHANNEL_MESSAGES);
        let (checked_tx, checked) = tokio::sync::oneshot::channel();
        // One blocking task per request checks it, answers through `checked`, then reads
        // every block in turn (plain file I/O, one hop to the blocking pool per request,
        // not several per block; the blocks the check found in memory are not looked up
        // again).
        tokio::task::spawn_blocking(move || {
            let found = match check_request(&dir, &executor_id, &req, max) {
                Ok(found) => found,
                Err(status) => {
                    let _ = checked_tx.send(Err(status));
                    return;
                }
            };
            if checked_tx.send(Ok(())).is_err() {
                return;
            }
            if let Err(status) = stream_blocks(&dir, &executor_id, &req, found, &tx) {
                tracing::warn!(
                    shuffle_id = req.shuffle_id,
                    reduce_partition = req.reduce_partition,
                    "shuffle fetch failed: {}",
                    status.message()
                );
                let _ = tx.blocking_send(Err(status));
            }
        });
        let refused = match checked.await {
            Ok(Ok(())) => None,
            Ok(Err(status)) => Some(status),
            Err(_) => Some(Status::internal("checking a fetch request failed")),
        };
        if let Some(status) = refused {
            tracing::warn!(
                shuffle_id,
                reduce_partition,
                "refused a shuffle fetch: {}",
                status.message()
            );
            return Err(status);
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Checks `req` before anything is sent: no map id twice, every map id an output this
/// executor holds for the shuffle, and at most `max_bytes` of blocks in all (unless one
/// block is asked). Reads only the indexes (and makes small outputs resident, see
/// `ember_shuffle::resident`). Returns, per map id in order, the block if it was found in
/// memory or empty (so the stream need not look it up again; a block in a file is
/// reopened then, so no request holds many files open). Runs on the blocking pool.
fn check_request(
    dir: &Path,
    executor_id: &str,
    req: &FetchBlocksRequest,
    max_bytes: u64,
) -> Result<Vec<Option<LocalBlock>>, Status> {
    // Grow with the ids actually checked, never sized from the wire count.
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    let mut total = 0u64;
    let view = View::now();
    let mut id = request_block(executor_id, req);
    for &map_partition in &req.map_partitions {
        if !seen.insert(map_partition) {
            return Err(Status::invalid_argument(format!(
                "map id {map_partition} appears more than once in the fetch of shuffle {} \
                 reduce {}; ask for each block once",
                req.shuffle_id, req.reduce_partition
            )));
        }
        id.map_partition = map_partition;
        match open_local_block(&view, dir, &id) {
            Ok(block) => {
                total = total.saturating_add(block.len());
                found.push(match block {
                    LocalBlock::File(..) => None,
                    in_memory => Some(in_memory),
                });
            }
            Err(_) => {
                found.push(None);
                let data = ember_shuffle::data_path(dir, req.shuffle_id, map_partition);
                if !data.exists() {
                    return Err(Status::invalid_argument(format!(
                        "map id {map_partition} is not a map output executor {executor_id} \
                         holds for shuffle {} ({} does not exist)",
                        req.shuffle_id,
                        data.display()
                    )));
                }
                // A broken file is reported by the stream (DATA_LOSS), block by block.
            }
        }
    }
    if req.map_partitions.len() > 1 && total > max_bytes {
        return Err(Status::resource_exhausted(format!(
            "the fetch of shuffle {} reduce {} asks for {} blocks of {total} bytes in all, \
             over the {max_bytes} bytes one request may ask for; split it",
            req.shuffle_id,
            req.reduce_partition,
            req.map_partitions.len()
        )));
    }
    Ok(found)
}

/// The id of a block `req` asks for from `executor_id` (its map partition to be set per
/// block: one id per request, not one allocation per block).
fn request_block(executor_id: &str, req: &FetchBlocksRequest) -> BlockId {
    BlockId {
        executor_id: executor_id.to_string(),
        shuffle_id: req.shuffle_id,
        map_partition: 0,
        reduce_partition: req.reduce_partition,
    }
}

/// Chunks gathered into `BlockChunks` messages: a message goes out when the next chunk
/// would take its data past [`CHUNKS_MESSAGE_BYTES`] or it holds
/// [`MAX_CHUNKS_PER_MESSAGE`] chunks, and at the end.
struct Batcher<'a> {
    tx: &'a mpsc::Sender<Result<BlockChunks, Status>>,
    chunks: Vec<BlockChunk>,
    bytes: usize,
}

impl Batcher<'_> {
    /// Adds `chunk`, sending the message before it if full; `false` if the reducer went
    /// away.
    fn push(&mut self, chunk: BlockChunk) -> bool {
        let full = self.chunks.len() >= MAX_CHUNKS_PER_MESSAGE
            || self.bytes + chunk.data.len() > CHUNKS_MESSAGE_BYTES;
        if full && !self.chunks.is_empty() && !self.flush() {
            return false;
        }
        self.bytes += chunk.data.len();
        self.chunks.push(chunk);
        true
    }

    /// Sends what is gathered (nothing if nothing is); `false` if the reducer went away.
    fn flush(&mut self) -> bool {
        if self.chunks.is_empty() {
            return true;
        }
        self.bytes = 0;
        let chunks = std::mem::take(&mut self.chunks);
        self.tx.blocking_send(Ok(BlockChunks { chunks })).is_ok()
    }
}

/// Sends every requested block down `tx` (those `found` by the check as they were
/// found, the others looked up now); `Ok` also when the reducer went away. Runs on the
/// blocking pool.
fn stream_blocks(
    dir: &Path,
    executor_id: &str,
    req: &FetchBlocksRequest,
    found: Vec<Option<LocalBlock>>,
    tx: &mpsc::Sender<Result<BlockChunks, Status>>,
) -> Result<(), Status> {
    let mut out = Batcher {
        tx,
        chunks: Vec::new(),
        bytes: 0,
    };
    let view = View::now();
    let mut id = request_block(executor_id, req);
    for (&map_partition, block) in req.map_partitions.iter().zip(found) {
        id.map_partition = map_partition;
        let block = match block {
            Some(block) => Ok(block),
            None => open_local_block(&view, dir, &id),
        };
        match send_block(dir, &id, block, &mut out) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(status) => {
                // The blocks before the failed one still reach the reducer, then the error.
                out.flush();
                return Err(status);
            }
        }
    }
    out.flush();
    Ok(())
}

/// Adds the chunks of block `id` (as looked up: `block`) to `out`; `Ok(false)` if the
/// reducer went away.
fn send_block(
    dir: &Path,
    id: &BlockId,
    block: ember_shuffle::Result<LocalBlock>,
    out: &mut Batcher,
) -> Result<bool, Status> {
    use std::io::Read;
    let what = |msg: &dyn std::fmt::Display| {
        format!(
            "shuffle {} map {} reduce {} on executor {}: {msg}",
            id.shuffle_id, id.map_partition, id.reduce_partition, id.executor_id
        )
    };
    let (mut reader, data_path, entry) = match block.map(LocalBlock::into_reader) {
        Ok(None) => {
            let chunk = BlockChunk {
                map_partition: id.map_partition,
                block_len: 0,
                crc32: 0,
                data: Vec::new(),
                first: true,
            };
            return Ok(out.push(chunk));
        }
        Ok(Some(found)) => found,
        Err(e) => {
            let msg = match e {
                ShuffleError::FetchFailed { message, .. } => message,
                other => other.to_string(),
            };
            // No file: the output is not (or no longer) here; a file that cannot be
            // read as one is lost data.
            let path = ember_shuffle::data_path(dir, id.shuffle_id, id.map_partition);
            return Err(if path.exists() {
                Status::data_loss(what(&msg))
            } else {
                Status::not_found(what(&msg))
            });
        }
    };
    let mut chunk = BlockChunk {
        map_partition: id.map_partition,
        block_len: entry.len,
        crc32: entry.crc,
        data: Vec::new(),
        first: true,
    };
    let mut remaining = entry.len;
    while remaining > 0 {
        let n = remaining.min(CHUNK_BYTES as u64) as usize;
        let mut data = vec![0u8; n];
        reader.read_exact(&mut data).map_err(|e| {
            Status::data_loss(what(&format!(
                "short read of shuffle data file {} at offset {}: {e}",
                data_path.display(),
                entry.offset + (entry.len - remaining)
            )))
        })?;
        remaining -= n as u64;
        crate::metrics::metrics().served(n as u64);
        chunk.data = data;
        if !out.push(chunk) {
            return Ok(false);
        }
        chunk = BlockChunk {
            map_partition: id.map_partition,
            block_len: 0,
            crc32: 0,
            data: Vec::new(),
            first: false,
        };
    }
    Ok(true)
}

/// The address to advertise for a service bound on `host:port` (`http://HOST:PORT`,
/// with IPv6 addresses in brackets).
pub fn advertised_address(host: &str, port: u16) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// Serves `service` on `listener` until `shutdown` resolves (each fetch authenticated
/// by its session's shuffle key); beside it the gRPC health service, SERVING while
/// `registered` is true (the executor is registered with its driver) and NOT_SERVING
/// otherwise.
pub async fn serve(
    listener: TcpListener,
    service: ShuffleService,
    registered: tokio::sync::watch::Receiver<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = bounded(listener, ConnectionLimits::default());
    serve_bounded(incoming, service, registered, shutdown).await
}

/// `listener` as the shuffle service's port: at most `limits.max_connections` open, each
/// with `limits.first_request_timeout` to send the HTTP/2 preface.
pub fn bounded(listener: TcpListener, limits: ConnectionLimits) -> BoundedListener {
    BoundedListener::new(listener, limits, FirstRequest::Http2, "shuffle")
}

/// [`serve`] on a [`bounded`] listener.
pub async fn serve_bounded(
    incoming: BoundedListener,
    service: ShuffleService,
    mut registered: tokio::sync::watch::Receiver<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = ember_proto::health::health_reporter();
    tokio::spawn(async move {
        loop {
            let status = if *registered.borrow_and_update() {
                ember_proto::health::ServingStatus::Serving
            } else {
                ember_proto::health::ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            if registered.changed().await.is_err() {
                return; // the registration loop is gone
            }
        }
    });
    let svc = ShuffleServer::new(service.clone())
        .max_decoding_message_size(MAX_FETCH_REQUEST_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(health)
        .add_service(svc)
        .serve_with_incoming_shutdown(crate::raw_push::split_incoming(incoming, service), shutdown)
        .await
}
