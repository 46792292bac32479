//! Both ends of the raw push (`ember_proto::raw_push`) on an executor: [`push`] sends a
//! committed map output to a peer's shuffle port as plain bytes, [`serve`] takes one a
//! peer sends here, and [`split_incoming`] tells such connections from the port's gRPC
//! ones by their first byte.
//!
//! Invariants:
//! * A raw push is taken under exactly the rules of `Shuffle.PushMapOutput`: the
//!   executor secret (compared in constant time) before anything else, then
//!   `replica_store::receive` with the header as the first piece, so the size bound,
//!   the session key, the temporary name, the length and crc checks and the rename are
//!   one code path for both. No byte of the file is read before the header passed.
//! * Every read has a deadline: the first byte and the header the listener's
//!   first-request timeout from accept, each later read [`READ_TIMEOUT`], and the whole
//!   push `limits::push_time_limit` of its length (`replica_store`): a peer that stops
//!   or trickles frees its connection slot.
//! * A raw push in flight ends with the shuffle server: the routing task holds every
//!   connection's task and aborts them when the server stops taking connections.
//! * Data is read in pieces of at most [`RECV_PIECE_BYTES`], never past the announced
//!   length.
//! * The sending side reads the file once (`replicate::feed`) and writes each piece as
//!   it comes; a push that fails is reported with the peer's reply when it sent one
//!   (a refusal names its reason), else with what failed locally.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use ember_proto::auth::constant_time_eq;
use ember_proto::listener::{BoundedConn, BoundedListener};
use ember_proto::raw_push::{read_head, read_reply, write_head, write_reply, MAGIC};
use ember_proto::{MapOutputPiece, RawPushHeader};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::blocks::SessionKeys;
use crate::replica_store::Stored;

/// Longest wait for the next bytes of a push (header, data or crc).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of the file in one piece handed to the replica writer.
pub const RECV_PIECE_BYTES: usize = 512 * 1024;
/// Longest wait for a connection to a peer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refused push's remaining bytes are taken after the reply.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections told apart but not yet taken by the gRPC server.
const ROUTED_QUEUE: usize = 64;

/// One piece of a file to push, as `replicate::feed` reads it (for the raw push, and made
/// into the messages of a gRPC push).
#[derive(Clone)]
pub struct PushPiece {
    pub data: bytes::Bytes,
    /// The first piece (a gRPC push's carries the header).
    pub first: bool,
    pub last: bool,
    /// The crc32 of the whole file on the last piece.
    pub crc32: u32,
}

/// The connections of the shuffle port that are not raw pushes, for the gRPC server;
/// raw pushes are served here, each on its own task, by [`serve`] with `service`'s
/// directory, keys and secret. Each connection's first byte is awaited (peeked, not
/// consumed) on its own task within the listener's first-request timeout, so a silent
/// connection holds up no other. The routing task ends when the gRPC server drops the
/// stream.
pub fn split_incoming(
    mut incoming: BoundedListener,
    service: crate::blocks::ShuffleService,
) -> ReceiverStream<std::io::Result<BoundedConn>> {
    let (tx, rx) = mpsc::channel(ROUTED_QUEUE);
    let first_request = incoming.limits().first_request_timeout;
    tokio::spawn(async move {
        // Every connection's task, so that the raw pushes in flight end with the server
        // (dropping the set aborts them; a push's temporary goes with it).
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (conn, peer) = tokio::select! {
                accepted = incoming.accept() => accepted,
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                () = tx.closed() => return,
            };
            let (tx, service) = (tx.clone(), service.clone());
            conns.spawn(async move {
                let started = tokio::time::Instant::now();
                let mut first = [0u8; 1];
                match tokio::time::timeout(first_request, conn.get_ref().peek(&mut first)).await {
                    Ok(Ok(1)) if first[0] == MAGIC[0] => {
                        // The header is the first request: due by the same deadline.
                        let header_by = started + first_request;
                        let (dir, keys, secret) = service.push_parts();
                        serve(conn, peer, header_by, dir, keys, secret).await;
                    }
                    Ok(Ok(1)) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    // Closed, failed or silent before its first byte: dropped.
                    _ => {}
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Takes one raw push on `conn` (from `peer`, its header due by `header_by`) into the
/// session directories under `dir` and answers it: stored, or why not.
pub async fn serve<C: AsyncRead + AsyncWrite + Unpin>(
    conn: C,
    peer: SocketAddr,
    header_by: tokio::time::Instant,
    dir: &Path,
    keys: &SessionKeys,
    secret: Option<&str>,
) {
    let (mut rd, mut wr) = tokio::io::split(conn);
    let (code, message) = match receive(&mut rd, header_by, dir, keys, secret).await {
        Ok(stored) => {
            tracing::debug!(%peer, path = %stored.path.display(), bytes = stored.bytes, "stored a map output pushed here (raw)");
            (tonic::Code::Ok, String::new())
        }
        Err(status) => {
            tracing::warn!(%peer, "refused a map output push: {}", status.message());
            (status.code(), status.message().to_string())
        }
    };
    let _ = tokio::time::timeout(READ_TIMEOUT, write_reply(&mut wr, code, &message)).await;
    // Closing with unread data would reset the connection, which may discard the reply
    // before the pusher reads it: end the sending side and take what is still in
    // flight (the pusher stops once it reads the reply), for a moment at most.
    let _ = wr.shutdown().await;
    let mut sink = tokio::io::sink();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, tokio::io::copy(&mut rd, &mut sink)).await;
}

/// Reads the header, checks the secret, and stores the file through
/// `replica_store::receive`.
async fn receive<R: AsyncRead + Unpin>(
    rd: &mut R,
    header_by: tokio::time::Instant,
    dir: &Path,
    keys: &SessionKeys,
    secret: Option<&str>,
) -> Result<Stored, Status> {
    let header = match tokio::time::timeout_at(header_by, read_head(rd)).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Err(Status::invalid_argument(format!("a raw push: {e}"))),
        Err(_) => {
            return Err(Status::deadline_exceeded(
                "a raw push sent no header in time",
            ))
        }
    };
    if let Some(expected) = secret {
        if !constant_time_eq(header.executor_secret.as_bytes(), expected.as_bytes()) {
            return Err(Status::unauthenticated(
                "pushing a map output takes the executor secret",
            ));
        }
    }
    let pieces = Box::pin(pieces(rd, header));
    crate::replica_store::receive(dir, keys, pieces).await
}

/// The push as `MapOutputPiece`s: the header alone first (so it is checked before any
/// data is read), then the data in pieces of at most [`RECV_PIECE_BYTES`], the crc on
/// the last.
fn pieces<R: AsyncRead + Unpin>(
    rd: &mut R,
    header: RawPushHeader,
) -> impl tokio_stream::Stream<Item = Result<MapOutputPiece, Status>> + '_ {
    struct State<'a, R> {
        rd: &'a mut R,
        header: RawPushHeader,
        sent_header: bool,
        remaining: u64,
        done: bool,
    }
    let state = State {
        rd,
        remaining: header.file_len,
        header,
        sent_header: false,
        done: false,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let mut piece = MapOutputPiece {
            shuffle_id: s.header.shuffle_id,
            map_partition: s.header.map_partition,
            file_len: s.header.file_len,
            ..Default::default()
        };
        if !s.sent_header {
            s.sent_header = true;
            piece.session_key = std::mem::take(&mut s.header.session_key);
            if s.remaining > 0 {
                return Some((Ok(piece), s));
            }
        } else {
            let want = s.remaining.min(RECV_PIECE_BYTES as u64) as usize;
            let mut data = BytesMut::with_capacity(want);
            while data.len() < want {
                let left = (want - data.len()) as u64;
                let mut limited = (&mut *s.rd).take(left);
                let cause =
                    match tokio::time::timeout(READ_TIMEOUT, limited.read_buf(&mut data)).await {
                        Ok(Ok(n)) if n > 0 => continue,
                        Ok(Ok(_)) => "the connection closed".to_string(),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => format!("nothing came for {} s", READ_TIMEOUT.as_secs()),
                    };
                s.done = true;
                let got = s.header.file_len - s.remaining + data.len() as u64;
                let why = Status::invalid_argument(format!(
                    "a raw push of map output {} of shuffle {} ended after {got} of the {} \
                     bytes it announced: {cause}",
                    s.header.map_partition, s.header.shuffle_id, s.header.file_len
                ));
                return Some((Err(why), s));
            }
            s.remaining -= want as u64;
            piece.data = data.freeze();
        }
        if s.remaining == 0 {
            s.done = true;
            piece.last = true;
            let cause = match tokio::time::timeout(READ_TIMEOUT, s.rd.read_u32()).await {
                Ok(Ok(crc)) => {
                    piece.crc32 = crc;
                    return Some((Ok(piece), s));
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("nothing came for {} s", READ_TIMEOUT.as_secs()),
            };
            let why = Status::invalid_argument(format!(
                "a raw push of map output {} of shuffle {} ended without its crc32: {cause}",
                s.header.map_partition, s.header.shuffle_id
            ));
            return Some((Err(why), s));
        }
        Some((Ok(piece), s))
    })
}

/// Pushes the file whose pieces arrive on `pieces` to the shuffle port at `address`
/// (`http://host:port`, as executors advertise it) under `header`. `Ok` once the peer
/// confirmed a checked copy.
pub async fn push(
    address: &str,
    header: RawPushHeader,
    mut pieces: mpsc::Receiver<PushPiece>,
) -> Result<(), String> {
    let (host, port) = host_port(address)?;
    let stream = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("unreachable: {e}")),
        Err(_) => {
            return Err(format!(
                "unreachable: no connection within {CONNECT_TIMEOUT:?}"
            ))
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let sending = async {
        write_head(&mut wr, &header)
            .await
            .map_err(|e| e.to_string())?;
        while let Some(piece) = pieces.recv().await {
            wr.write_all(&piece.data).await.map_err(|e| e.to_string())?;
            if piece.last {
                wr.write_all(&piece.crc32.to_be_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                return wr.flush().await.map_err(|e| e.to_string());
            }
        }
        Err("the file was not read to its end".to_string())
    };
    // The reply is read while sending: a peer that refuses does so before taking the
    // data, and its reason is what the push reports.
    let reply = read_reply(&mut rd);
    tokio::pin!(sending, reply);
    let reply = tokio::select! {
        biased;
        r = &mut reply => r,
        sent = &mut sending => {
            if let Err(e) = sent {
                // A refusal may be on its way: wait for it briefly.
                return match tokio::time::timeout(Duration::from_secs(1), &mut reply).await {
                    Ok(Ok(Err(status))) => Err(refused(&status)),
                    _ => Err(format!("failed: {e}")),
                };
            }
            match tokio::time::timeout(READ_TIMEOUT, &mut reply).await {
                Ok(r) => r,
                Err(_) => return Err(format!("failed: no reply within {READ_TIMEOUT:?}")),
            }
        }
    };
    match reply {
        Ok(Ok(())) => Ok(()),
        Ok(Err(status)) => Err(refused(&status)),
        Err(e) => Err(format!("failed: no reply: {e}")),
    }
}

fn refused(status: &Status) -> String {
    format!(
        "{}: {}",
        crate::replicate::code_name(status.code()),
        status.message()
    )
}

/// The host and port of an advertised shuffle address (`http://host:port`,
/// `http://[v6]:port`).
fn host_port(address: &str) -> Result<(String, u16), String> {
    let bad = || {
        format!(
            "invalid shuffle address {:?} (expected http://host:port)",
            crate::config::bounded(address)
        )
    };
    let uri: tonic::codegen::http::Uri = address.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?;
    let port = uri.port_u16().ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
#[path = "raw_push_tests.rs"]
mod tests;
