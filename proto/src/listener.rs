//! Bounded listening sockets, one implementation for every port the daemons serve (the
//! driver's gRPC and web UI ports, the history server, the executor's shuffle service
//! and metrics port): a [`BoundedListener`] wraps a `tokio::net::TcpListener`, counts the
//! connections it handed out, and gives each a deadline for its first request
//! ([`BoundedConn`]).
//!
//! Invariants:
//! - at most [`ConnectionLimits::max_connections`] accepted connections are open at once
//!   per listener (each holds a slot, released when the connection is dropped); one
//!   accepted beyond that is closed at once, and refusals are logged at warn at most once
//!   a second per listener, with their count;
//! - a connection that has not sent its first request head (HTTP/1: up to its blank
//!   line; HTTP/2: the 24-byte connection preface) within
//!   [`ConnectionLimits::first_request_timeout`] of being accepted gets a `TimedOut`
//!   read error, so the server drops it (its slot is free again);
//! - accept errors never end the stream: running out of descriptors backs off 100 ms
//!   (logged like refusals), other errors are skipped.
//!
//! The listener is a `Stream` of connections for tonic's `serve_with_incoming*` (the
//! connection reports its peer as `TcpConnectInfo`, so `Request::remote_addr` works) and
//! an `axum::serve::Listener` for the HTTP servers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Default of `--max-connections`: open connections per listening port.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of `--first-request-timeout-ms`.
pub const DEFAULT_FIRST_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// The HTTP/2 connection preface every gRPC client sends first.
const HTTP2_PREFACE_LEN: usize = 24;
/// At most one warn line per listener this often about refused connections.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// How long to wait before accepting again when out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How many connections a port keeps and how long one may take to send its first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most (at least 1).
    pub max_connections: usize,
    /// Time from accept to the end of the first request head (or HTTP/2 preface).
    pub first_request_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            first_request_timeout: Duration::from_millis(DEFAULT_FIRST_REQUEST_TIMEOUT_MS),
        }
    }
}

/// What a connection's first request looks like, so its end can be recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRequest {
    /// HTTP/1: the request head ends with an empty line.
    Http1,
    /// HTTP/2 (gRPC): the 24-byte connection preface.
    Http2,
}

/// A listening socket that bounds its open connections and their time to a first request.
pub struct BoundedListener {
    listener: TcpListener,
    limits: ConnectionLimits,
    protocol: FirstRequest,
    /// Names the port in log lines, e.g. "ui" or "shuffle".
    name: &'static str,
    open: Arc<AtomicUsize>,
    complaints: Complaints,
    backoff: Option<Pin<Box<Sleep>>>,
}

impl BoundedListener {
    /// Wraps `listener`; `name` says which port it is in log lines.
    pub fn new(
        listener: TcpListener,
        limits: ConnectionLimits,
        protocol: FirstRequest,
        name: &'static str,
    ) -> Self {
        BoundedListener {
            listener,
            limits: ConnectionLimits {
                max_connections: limits.max_connections.max(1),
                ..limits
            },
            protocol,
            name,
            open: Arc::new(AtomicUsize::new(0)),
            complaints: Complaints::default(),
            backoff: None,
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Its connection cap and first-request deadline.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Connections handed out and still open.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// The next connection within the bound (refused ones are closed and counted).
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<(BoundedConn, SocketAddr)> {
        loop {
            if let Some(backoff) = &mut self.backoff {
                ready!(backoff.as_mut().poll(cx));
                self.backoff = None;
            }
            match ready!(self.listener.poll_accept(cx)) {
                Ok((stream, peer)) => {
                    if self.open.load(Ordering::Acquire) >= self.limits.max_connections {
                        drop(stream);
                        self.refused(peer);
                        continue;
                    }
                    self.complaints
                        .flush(self.name, &self.listener, self.limits);
                    let _ = stream.set_nodelay(true);
                    self.open.fetch_add(1, Ordering::AcqRel);
                    let slot = Slot(self.open.clone());
                    return Poll::Ready((BoundedConn::new(stream, slot, self), peer));
                }
                Err(e) if out_of_descriptors(&e) => {
                    self.complaints.accept_failed(self.name, &self.listener, &e);
                    self.backoff = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
                }
                Err(e) => tracing::debug!(port = self.name, "accept failed: {e}"),
            }
        }
    }

    /// [`poll_accept`](Self::poll_accept) as a future.
    pub async fn accept(&mut self) -> (BoundedConn, SocketAddr) {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    fn refused(&mut self, peer: SocketAddr) {
        self.complaints.refused += 1;
        if self.complaints.due() {
            self.complaints
                .flush_with(self.name, &self.listener, self.limits, Some(peer));
        }
    }
}

fn out_of_descriptors(e: &io::Error) -> bool {
    // EMFILE (24) and ENFILE (23): the process's or the system's descriptors are used up;
    // ENOBUFS (105) and ENOMEM (12): no memory for another socket.
    matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12))
}

/// Refusals and accept failures not yet logged, and when the last line went out.
#[derive(Default)]
struct Complaints {
    refused: u64,
    last: Option<Instant>,
}

impl Complaints {
    fn due(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= LOG_EVERY)
    }

    /// Logs refusals still unreported once a second has passed since the last line.
    fn flush(&mut self, name: &str, listener: &TcpListener, limits: ConnectionLimits) {
        if self.refused > 0 && self.due() {
            self.flush_with(name, listener, limits, None);
        }
    }

    fn flush_with(
        &mut self,
        name: &str,
        listener: &TcpListener,
        limits: ConnectionLimits,
        latest: Option<SocketAddr>,
    ) {
        let addr = listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        let latest = latest.map_or_else(String::new, |p| format!(", the latest from {p}"));
        tracing::warn!(
            "{name} port {addr}: refused {} connection(s) since the last report: {} are open, \
             the most allowed (--max-connections){latest}",
            self.refused,
            limits.max_connections,
        );
        self.refused = 0;
        self.last = Some(Instant::now());
    }

    fn accept_failed(&mut self, name: &str, listener: &TcpListener, e: &io::Error) {
        if self.due() {
            let addr = listener
                .local_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            tracing::warn!(
                "{name} port {addr}: cannot accept connections: {e} (waiting {} ms; raise the \
                 open-files limit or lower --max-connections)",
                ACCEPT_BACKOFF.as_millis()
            );
            self.last = Some(Instant::now());
        }
    }
}

impl tokio_stream::Stream for BoundedListener {
    type Item = io::Result<BoundedConn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_accept(cx)
            .map(|(conn, _)| Some(Ok(conn)))
    }
}

impl axum::serve::Listener for BoundedListener {
    type Io = BoundedConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (BoundedConn, SocketAddr) {
        BoundedListener::accept(self).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        BoundedListener::local_addr(self)
    }
}

/// Holds one of a listener's connection slots until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An accepted connection: the stream, its slot, and (until its first request head has
/// arrived) the deadline for it.
pub struct BoundedConn {
    stream: TcpStream,
    _slot: Slot,
    first: Option<FirstRequestWait>,
}

/// The deadline of a connection's first request and how far its head has come.
struct FirstRequestWait {
    deadline: Pin<Box<Sleep>>,
    protocol: FirstRequest,
    /// HTTP/1: line feeds in a row so far (a `\r` does not break a row).
    line_feeds: u8,
    /// HTTP/2: preface bytes read so far.
    read: usize,
}

impl FirstRequestWait {
    /// Takes in bytes just read; true once the first request head is complete.
    fn complete_after(&mut self, bytes: &[u8]) -> bool {
        match self.protocol {
            FirstRequest::Http2 => {
                self.read += bytes.len();
                self.read >= HTTP2_PREFACE_LEN
            }
            FirstRequest::Http1 => {
                for &b in bytes {
                    match b {
                        b'\n' => {
                            self.line_feeds += 1;
                            if self.line_feeds == 2 {
                                return true;
                            }
                        }
                        b'\r' => {}
                        _ => self.line_feeds = 0,
                    }
                }
                false
            }
        }
    }
}

impl BoundedConn {
    fn new(stream: TcpStream, slot: Slot, listener: &BoundedListener) -> Self {
        BoundedConn {
            stream,
            _slot: slot,
            first: Some(FirstRequestWait {
                deadline: Box::pin(tokio::time::sleep(listener.limits.first_request_timeout)),
                protocol: listener.protocol,
                line_feeds: 0,
                read: 0,
            }),
        }
    }

    /// The TCP stream.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

impl AsyncRead for BoundedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let Some(wait) = &mut this.first {
                    if wait.complete_after(&buf.filled()[before..]) {
                        this.first = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let expired = this
                    .first
                    .as_mut()
                    .is_some_and(|wait| wait.deadline.as_mut().poll(cx).is_ready());
                if expired {
                    tracing::debug!(
                        peer = ?this.stream.peer_addr().ok(),
                        "closing a connection without a first request before its deadline"
                    );
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no complete first request before the first-request timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for BoundedConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(feature = "server")]
impl tonic::transport::server::Connected for BoundedConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::Connected::connect_info(&self.stream)
    }
}

/// Descriptors a daemon keeps for itself beside its listeners' connections (files,
/// channels, worker sockets) when judging whether its caps fit the open-files limit.
const OWN_DESCRIPTORS: u64 = 256;

/// Warns when `ports` listeners, each at `limits.max_connections`, could use more
/// descriptors than the open-files limit leaves: then the caps cannot keep idle
/// connections from starving the daemon's own work, and `--max-connections` should be
/// lowered (or the limit raised).
pub fn warn_if_caps_exceed_open_files(limits: ConnectionLimits, ports: usize) {
    let Ok((soft, _)) = rlimit::Resource::NOFILE.get() else {
        return;
    };
    let wanted = (limits.max_connections as u64).saturating_mul(ports as u64);
    if wanted.saturating_add(OWN_DESCRIPTORS) > soft {
        tracing::warn!(
            "--max-connections {} on {ports} port(s) allows {wanted} connections, but the \
             open-files limit is {soft} (with {OWN_DESCRIPTORS} kept for the daemon's own \
             files): lower --max-connections or raise the limit (ulimit -n)",
            limits.max_connections
        );
    }
}

/// Raises this process's soft limit of open files to its hard limit (a daemon's
/// connections are files); returns (before, after).
pub fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    let (soft, hard) = rlimit::Resource::NOFILE.get()?;
    if soft < hard {
        rlimit::Resource::NOFILE.set(hard, hard)?;
    }
    Ok((soft, rlimit::Resource::NOFILE.get()?.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn wait(protocol: FirstRequest) -> FirstRequestWait {
        FirstRequestWait {
            deadline: Box::pin(tokio::time::sleep(Duration::from_secs(60))),
            protocol,
            line_feeds: 0,
            read: 0,
        }
    }

    #[tokio::test]
    async fn the_first_request_head_ends_at_its_empty_line_or_the_whole_preface() {
        let mut h1 = wait(FirstRequest::Http1);
        assert!(!h1.complete_after(b"GET / HTTP/1.1\r\nHost: x\r"));
        assert!(!h1.complete_after(b"\n\r"));
        assert!(h1.complete_after(b"\n"));
        let mut bare = wait(FirstRequest::Http1);
        assert!(bare.complete_after(b"GET / HTTP/1.0\n\n"));
        let mut h2 = wait(FirstRequest::Http2);
        assert!(!h2.complete_after(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..23]));
        assert!(h2.complete_after(b"\n"));
    }

    async fn listener(max: usize, timeout_ms: u64) -> BoundedListener {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let limits = ConnectionLimits {
            max_connections: max,
            first_request_timeout: Duration::from_millis(timeout_ms),
        };
        BoundedListener::new(tcp, limits, FirstRequest::Http1, "test")
    }

    #[tokio::test]
    async fn past_the_cap_a_connection_is_closed_and_a_freed_slot_is_reused() {
        let mut l = listener(1, 60_000).await;
        let addr = l.local_addr().unwrap();
        let _a = TcpStream::connect(addr).await.unwrap();
        let (first, _) = l.accept().await;
        assert_eq!(l.open_connections(), 1);
        let mut refused = TcpStream::connect(addr).await.unwrap();
        let mut accept = Box::pin(l.accept());
        // The refused one is accepted and closed inside accept (which keeps waiting).
        let mut buf = [0u8; 1];
        tokio::select! {
            n = refused.read(&mut buf) => assert_eq!(n.unwrap(), 0),
            _ = &mut accept => panic!("a connection past the cap was handed out"),
        }
        drop(first);
        let _c = TcpStream::connect(addr).await.unwrap();
        let (_third, _) = tokio::time::timeout(Duration::from_secs(20), accept)
            .await
            .expect("a freed slot takes the next connection");
        assert_eq!(l.open_connections(), 1);
    }

    #[cfg(feature = "server")]
    #[tokio::test]
    async fn tonic_sees_the_peer_of_a_bounded_connection() {
        use tonic::transport::server::Connected;
        let mut l = listener(4, 60_000).await;
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (conn, peer) = l.accept().await;
        let info = conn.connect_info();
        assert_eq!(info.remote_addr, Some(client.local_addr().unwrap()));
        assert_eq!(info.remote_addr, Some(peer));
        assert_eq!(info.local_addr, Some(l.local_addr().unwrap()));
    }

    #[tokio::test]
    async fn a_silent_connection_gets_a_timeout_and_a_complete_head_does_not() {
        let mut l = listener(4, 200).await;
        let addr = l.local_addr().unwrap();
        let _silent = TcpStream::connect(addr).await.unwrap();
        let (mut conn, _) = l.accept().await;
        let mut buf = [0u8; 64];
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let mut talker = TcpStream::connect(addr).await.unwrap();
        let (mut conn, _) = l.accept().await;
        talker.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 18 {
            let n = conn.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        // Past the deadline, a connection with its head in is left alone.
        tokio::time::sleep(Duration::from_millis(400)).await;
        talker.write_all(b"x").await.unwrap();
        assert_eq!(conn.read(&mut buf).await.unwrap(), 1);
    }
}
