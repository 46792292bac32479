//! One connection to a peer ([`Conn`]): socket options, dialing with a deadline, and the
//! non-blocking send and receive calls the frame engine and the handshake build on.
//!
//! Invariants: every connection socket is non-blocking and close-on-exec; sends use
//! `MSG_NOSIGNAL`, so a peer gone never raises `SIGPIPE`; TCP connections have
//! `TCP_NODELAY`, keepalive and `TCP_USER_TIMEOUT` set before the handshake.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, TcpKeepalive, Type};

use crate::abort::AbortHandle;
use crate::addr::PeerAddr;
use crate::options::CommOptions;
use crate::poll;

/// An established, authenticated connection to rank `rank`.
pub(crate) struct Conn {
    pub(crate) socket: Arc<Socket>,
    pub(crate) rank: usize,
}

impl Conn {
    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// One non-blocking `sendmsg` of `bufs`.
    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        send(&self.socket, bufs)
    }

    /// One non-blocking `recvmsg` into `bufs`; `Ok(0)` is EOF.
    pub(crate) fn recv(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self.socket).read_vectored(bufs)
    }
}

fn send(socket: &Socket, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    socket.send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
}

/// Sets what every connection needs; `tcp` adds `TCP_NODELAY`, keepalive and
/// `TCP_USER_TIMEOUT`, Unix sockets get `opts.socket_buffer_bytes`.
pub(crate) fn configure(socket: &Socket, tcp: bool, opts: &CommOptions) -> io::Result<()> {
    socket.set_nonblocking(true)?;
    if tcp {
        socket.set_tcp_nodelay(true)?;
        let k = &opts.keepalive;
        let params = TcpKeepalive::new()
            .with_time(k.idle)
            .with_interval(k.interval)
            .with_retries(k.retries);
        socket.set_tcp_keepalive(&params)?;
        socket.set_tcp_user_timeout(Some(k.dead_after()))?;
    } else if let Some(bytes) = opts.socket_buffer_bytes {
        // The kernel caps these at wmem_max / rmem_max; a refusal is not an error.
        let _ = socket.set_send_buffer_size(bytes);
        let _ = socket.set_recv_buffer_size(bytes);
    }
    Ok(())
}

/// Why a wait on the wire ended without its bytes.
#[derive(Debug)]
pub(crate) enum WireError {
    Eof,
    Io(io::Error),
    Timeout,
    Aborted,
}

/// Writes all of `buf` before `deadline` (for the handshake's small messages).
pub(crate) fn write_all(
    socket: &Socket,
    mut buf: &[u8],
    deadline: Instant,
    abort: &AbortHandle,
) -> Result<(), WireError> {
    while !buf.is_empty() {
        match send(socket, &[IoSlice::new(buf)]) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_for(socket, poll::POLLOUT, deadline, abort)?
            }
            Err(e) => return Err(WireError::Io(e)),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes before `deadline` (for the handshake's messages).
pub(crate) fn read_exact(
    socket: &Socket,
    mut buf: &mut [u8],
    deadline: Instant,
    abort: &AbortHandle,
) -> Result<(), WireError> {
    while !buf.is_empty() {
        match (&*socket).read(buf) {
            Ok(0) => return Err(WireError::Eof),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_for(socket, poll::POLLIN, deadline, abort)?
            }
            Err(e) => return Err(WireError::Io(e)),
        }
    }
    Ok(())
}

fn wait_for(
    socket: &Socket,
    events: i16,
    deadline: Instant,
    abort: &AbortHandle,
) -> Result<(), WireError> {
    let mut fds = [
        poll::entry(socket.as_raw_fd(), events),
        poll::entry(abort.wake_fd(), poll::POLLIN),
    ];
    let ready = poll::wait(&mut fds, Some(deadline)).map_err(WireError::Io)?;
    if abort.is_aborted() {
        return Err(WireError::Aborted);
    }
    if !ready {
        return Err(WireError::Timeout);
    }
    Ok(())
}

/// Connection attempts refused outright (nothing listens) before dialing gives up: the
/// address was reported after the peer bound it, so a refusal means the peer is gone.
const REFUSED_ATTEMPTS: u32 = 3;
/// The pause between attempts while a listener's queue is full or the peer refuses.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Connects to `addr` before `deadline`, retrying while the listener's queue is full.
pub(crate) fn dial(
    addr: &PeerAddr,
    deadline: Instant,
    abort: &AbortHandle,
) -> Result<Socket, WireError> {
    let (domain, target) = match addr {
        PeerAddr::Unix(path) => (Domain::UNIX, SockAddr::unix(path).map_err(WireError::Io)?),
        PeerAddr::Tcp(sa) => (Domain::for_address(*sa), SockAddr::from(*sa)),
    };
    let mut refused = 0;
    loop {
        if abort.is_aborted() {
            return Err(WireError::Aborted);
        }
        let socket = Socket::new(domain, Type::STREAM, None).map_err(WireError::Io)?;
        socket.set_nonblocking(true).map_err(WireError::Io)?;
        let outcome = match socket.connect(&target) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                wait_for(&socket, poll::POLLOUT, deadline, abort)?;
                match socket.take_error().map_err(WireError::Io)? {
                    None => Ok(()),
                    Some(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => return Ok(socket),
            Err(e) => {
                let queue_full = matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR));
                let gone = matches!(
                    e.raw_os_error(),
                    Some(libc::ECONNREFUSED) | Some(libc::ENOENT)
                );
                if gone {
                    refused += 1;
                }
                if !(queue_full || gone && refused < REFUSED_ATTEMPTS) {
                    return Err(WireError::Io(e));
                }
                if Instant::now() + RETRY_PAUSE >= deadline {
                    return Err(WireError::Timeout);
                }
                std::thread::sleep(RETRY_PAUSE);
            }
        }
    }
}
