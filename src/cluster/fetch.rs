//! Reading map outputs held by other executors: a reducer in a worker asks the
//! executor that holds them for its blocks over the `Shuffle` gRPC service, one stream
//! per (executor, reducer) carrying the blocks of every map output there in order.
//!
//! Invariants: a block is handed to the decoder only after its length and crc32 have
//! been checked against what the serving executor read from its index; every failure
//! (executor unreachable, file missing there, short or corrupt block) is a typed
//! `FetchFailed` naming the executor, shuffle, map and reduce partition, so the
//! scheduler reruns exactly that map output. Bytes in flight per stream are bounded by
//! the server's chunk queue and HTTP/2 flow control, not by the block count; chunks come
//! several to a message (`BlockChunks`), so the reducer waits on the network once per
//! message, not once per block. Every
//! request carries the shuffle key of the session owning the shuffle (learned from
//! that session's tasks, see [`RemoteShuffle::learn_key`]) and no other credential:
//! executors serve a session's blocks only to it, and workers hold no cluster secret.

use dashmap::DashMap;
use ember_proto::auth::MAX_MESSAGE_BYTES;
use ember_proto::limits::MAX_CHUNKS_PER_MESSAGE;
use ember_proto::shuffle_client::ShuffleClient;
use ember_proto::IdRange;
use ember_proto::{BlockChunk, BlockChunks, FetchBlocksRequest};
use std::collections::VecDeque;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::Streaming;

use super::runtime;
use super::session::{connect_channel, status_text};
use crate::env::{RemoteBlockSource, RemoteBlockStream};
use crate::error::Result;
use crate::shuffle::BlockId;

type Client = ShuffleClient<Channel>;

/// Longest wait for the next piece of a block stream (or for the stream to open)
/// before the fetch counts as failed: an executor that stopped answering without
/// closing its connections must not hang its reducers. `EMBER_FETCH_TIMEOUT_MS`
/// overrides it.
fn fetch_timeout() -> std::time::Duration {
    static T: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let ms = std::env::var("EMBER_FETCH_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30_000);
        std::time::Duration::from_millis(ms)
    })
}

/// `fut`, or an error naming the executor if it takes longer than [`fetch_timeout`].
async fn timed<T>(
    executor_id: &str,
    fut: impl std::future::Future<Output = T>,
) -> std::result::Result<T, String> {
    tokio::time::timeout(fetch_timeout(), fut)
        .await
        .map_err(|_| {
            format!(
                "executor {executor_id} sent nothing for {} ms",
                fetch_timeout().as_millis()
            )
        })
}

/// Connections to other executors' shuffle services, shared by a worker's tasks.
pub(crate) struct RemoteShuffle {
    clients: DashMap<String, Client>,
    /// Session id range -> that session's shuffle key.
    keys: DashMap<IdRange, String>,
}

impl RemoteShuffle {
    pub(crate) fn new() -> Self {
        RemoteShuffle {
            clients: DashMap::new(),
            keys: DashMap::new(),
        }
    }

    /// Remembers the shuffle key of the session owning RDD id `owned_id` (a task's
    /// plan carries it); an empty key is ignored.
    pub(crate) fn learn_key(&self, owned_id: u32, key: &str) {
        if !key.is_empty() {
            self.keys.insert(IdRange::of_id(owned_id), key.to_string());
        }
    }

    /// Forgets the keys of the sessions owning ids `[id_lo, id_hi)` (they ended).
    pub(crate) fn forget_keys(&self, id_lo: u32, id_hi: u32) {
        let (lo, hi) = (IdRange::of_id(id_lo), IdRange::of_id(id_hi));
        self.keys.retain(|range, _| *range < lo || *range >= hi);
    }

    /// The key to fetch shuffle `shuffle_id` with (empty if no task of its session ran
    /// here: the executor then refuses the fetch).
    fn key_for(&self, shuffle_id: u32) -> String {
        self.keys
            .get(&IdRange::of_id(shuffle_id))
            .map(|k| k.clone())
            .unwrap_or_default()
    }

    async fn client(&self, address: &str) -> std::result::Result<Client, String> {
        if let Some(c) = self.clients.get(address) {
            return Ok(c.clone());
        }
        let channel = connect_channel(address).await?;
        let client = ShuffleClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        self.clients.insert(address.to_string(), client.clone());
        Ok(client)
    }
}

impl RemoteBlockSource for RemoteShuffle {
    /// The blocks of reduce partition `reduce` of `shuffle_id` from map outputs `maps`,
    /// all held by `executor_id` serving at `address`, verified, in the order of `maps`.
    /// The request goes out now and its answer is received in the background (at most
    /// [`PREFETCH_MESSAGES`] messages ahead of the reader), so the serving executor reads
    /// the blocks while the reducer works on others.
    fn fetch(
        self: std::sync::Arc<Self>,
        executor_id: &str,
        address: &str,
        shuffle_id: u32,
        reduce: u32,
        maps: Vec<u32>,
    ) -> RemoteBlockStream {
        let (tx, messages) = mpsc::channel(PREFETCH_MESSAGES);
        let request = FetchBlocksRequest {
            shuffle_id,
            reduce_partition: reduce,
            map_partitions: maps.clone(),
            session_key: self.key_for(shuffle_id),
        };
        runtime::get().spawn(receive_all(
            self,
            executor_id.to_string(),
            address.to_string(),
            request,
            tx,
        ));
        Box::new(RemoteBlocks {
            executor_id: executor_id.to_string(),
            shuffle_id,
            reduce,
            maps,
            next: 0,
            messages,
            pending: VecDeque::new(),
            ended: false,
            failed: false,
        })
    }
}

/// Messages of one block stream the receiving task may queue for its reader (each at
/// most `limits::CHUNKS_MESSAGE_BYTES` of data, 1 MiB); beyond them the reader holds
/// the chunks of the message it is taking apart, and HTTP/2 flow control bounds what
/// the connection has buffered.
pub(crate) const PREFETCH_MESSAGES: usize = 2;

/// Sends `request` to `executor_id` at `address` and forwards each message of its answer
/// to `tx`, then ends (dropping `tx`) at the stream's end, after forwarding an error, or
/// when the reader went away.
async fn receive_all(
    owner: std::sync::Arc<RemoteShuffle>,
    executor_id: String,
    address: String,
    request: FetchBlocksRequest,
    tx: mpsc::Sender<std::result::Result<BlockChunks, String>>,
) {
    let opened = tokio::select! {
        _ = tx.closed() => return,
        s = open_stream(&owner, &executor_id, &address, request) => s,
    };
    let mut stream = match opened {
        Ok(stream) => stream,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    loop {
        // The reader gone (its task ended or failed), the stream is dropped at once.
        let message = tokio::select! {
            _ = tx.closed() => return,
            m = timed(&executor_id, stream.message()) => m,
        };
        let message = match message {
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => return,
            Ok(Err(s)) => Err(format!("executor {executor_id}: {}", status_text(&s))),
            Err(e) => Err(e),
        };
        let failed = message.is_err();
        if tx.send(message).await.is_err() || failed {
            return;
        }
    }
}

/// The answer stream of `request` to `executor_id` at `address`.
async fn open_stream(
    owner: &RemoteShuffle,
    executor_id: &str,
    address: &str,
    request: FetchBlocksRequest,
) -> std::result::Result<Streaming<BlockChunks>, String> {
    let mut client = match timed(executor_id, owner.client(address)).await? {
        Ok(c) => c,
        Err(e) => return Err(format!("executor {executor_id} unreachable: {e}")),
    };
    match timed(executor_id, client.fetch_blocks(request)).await? {
        Ok(r) => Ok(r.into_inner()),
        Err(s) => {
            owner.clients.remove(address);
            Err(format!(
                "executor {executor_id} refused the fetch: {}",
                status_text(&s)
            ))
        }
    }
}

/// Iterator over the verified bytes of remote blocks; yields at most one error, last.
pub(crate) struct RemoteBlocks {
    executor_id: String,
    shuffle_id: u32,
    reduce: u32,
    maps: Vec<u32>,
    next: usize,
    /// The answer's messages, from [`receive_all`].
    messages: mpsc::Receiver<std::result::Result<BlockChunks, String>>,
    /// Chunks received and not yet taken, in stream order.
    pending: VecDeque<BlockChunk>,
    /// The stream ended (after the chunks in `pending`).
    ended: bool,
    failed: bool,
}

impl RemoteBlocks {
    fn id(&self, map: u32) -> BlockId {
        BlockId {
            executor_id: self.executor_id.clone(),
            shuffle_id: self.shuffle_id,
            map_partition: map,
            reduce_partition: self.reduce,
        }
    }

    /// The next chunk of the stream; `None` at its end. Waits only when no received
    /// chunk is left.
    fn next_chunk(&mut self) -> std::result::Result<Option<BlockChunk>, String> {
        if let Some(c) = self.pending.pop_front() {
            return Ok(Some(c));
        }
        if self.ended {
            return Ok(None);
        }
        match self.messages.blocking_recv() {
            None => {
                self.ended = true;
                Ok(None)
            }
            Some(Err(e)) => Err(e),
            Some(Ok(m)) if m.chunks.is_empty() || m.chunks.len() > MAX_CHUNKS_PER_MESSAGE => {
                Err(format!(
                    "executor {} sent a message of {} block chunks (1 to {MAX_CHUNKS_PER_MESSAGE} expected)",
                    self.executor_id,
                    m.chunks.len()
                ))
            }
            Some(Ok(m)) => {
                self.pending.extend(m.chunks);
                Ok(self.pending.pop_front())
            }
        }
    }

    fn next_block(&mut self, map: u32) -> std::result::Result<Vec<u8>, String> {
        let Some(first) = self.next_chunk()? else {
            return Err("the block stream ended before this block".into());
        };
        if !first.first || first.map_partition != map {
            return Err(format!(
                "executor {} sent a chunk of map output {} where block {map} should start",
                self.executor_id, first.map_partition
            ));
        }
        let len = usize::try_from(first.block_len).map_err(|_| "block too large".to_string())?;
        if len > MAX_MESSAGE_BYTES.saturating_mul(64) {
            return Err(format!("block of {len} bytes is too large"));
        }
        let crc = first.crc32;
        let mut bytes = first.data;
        bytes.reserve(len.saturating_sub(bytes.len()));
        while bytes.len() < len {
            match self.next_chunk()? {
                Some(c) if !c.first && c.map_partition == map => bytes.extend_from_slice(&c.data),
                Some(c) => {
                    self.pending.push_front(c);
                    break;
                }
                None => break,
            }
        }
        if bytes.len() != len {
            return Err(format!(
                "block stream from executor {} gave {} of {len} bytes",
                self.executor_id,
                bytes.len()
            ));
        }
        let actual = crc32fast::hash(&bytes);
        if actual != crc {
            return Err(format!(
                "checksum mismatch in the block from executor {}: expected crc32 {crc:08x}, got {actual:08x}",
                self.executor_id
            ));
        }
        Ok(bytes)
    }
}

impl Iterator for RemoteBlocks {
    type Item = Result<(BlockId, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.maps.len() {
            return None;
        }
        let map = self.maps[self.next];
        self.next += 1;
        let id = self.id(map);
        match self.next_block(map) {
            Ok(bytes) => Some(Ok((id, bytes))),
            Err(message) => {
                self.failed = true;
                Some(Err(id.fetch_failed(message).into()))
            }
        }
    }
}
