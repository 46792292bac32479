//! The frame engine: one outgoing and one incoming frame in flight at once, on
//! non-blocking sockets driven by `poll`, so ring steps and pairwise exchanges of any size
//! never deadlock (both peers drain while they fill) and no thread is spawned.
//!
//! Invariants: a send goes out by `sendmsg` of header and payload together (no copy into
//! a staging buffer); a receive into a caller's buffer reads header and payload with one
//! `recvmsg` when it can, straight into that buffer; a receive of unknown size allocates
//! only after [`crate::frame::Expect::check`] accepted the header. A receive may carry a
//! consumer, called with the payload received so far after every read that added to it
//! (reads are then at most [`CONSUME_CHUNK`] bytes), so a reduction runs on data still in
//! cache while the rest arrives. Every wait polls the
//! abort handle's wake descriptor too, and a wait ends with `Timeout` only at the call's
//! deadline. The first attempt of each transfer is made before any poll, so data already
//! queued costs no wait.

use std::io::{self, IoSlice, IoSliceMut};
use std::time::Instant;

use crate::conn::Conn;
use crate::error::CollectiveError;
use crate::frame::{Expect, Header, LenRule, HEADER_LEN};
use crate::poll;

/// The largest read into a buffer that has a consumer: the consumer then works on
/// chunks that are still in cache.
pub(crate) const CONSUME_CHUNK: usize = 256 << 10;

/// Called with the payload received so far (a growing prefix of the buffer).
pub(crate) type Consumer<'b> = &'b mut dyn FnMut(&[u8]);

/// A frame to send: its encoded header and payload.
pub(crate) struct Outgoing<'b> {
    pub(crate) conn: &'b Conn,
    pub(crate) header: [u8; HEADER_LEN],
    pub(crate) payload: &'b [u8],
}

/// Where a received payload goes.
pub(crate) enum Dest<'b> {
    /// A caller's buffer of exactly the expected length.
    Into(&'b mut [u8]),
    /// A new vector, sized from the checked header.
    Owned,
}

/// A frame to receive.
pub(crate) struct Incoming<'b> {
    pub(crate) conn: &'b Conn,
    pub(crate) expect: Expect,
    pub(crate) dest: Dest<'b>,
    /// Only with `Dest::Into`.
    pub(crate) consumer: Option<Consumer<'b>>,
}

/// What a finished receive gives back: the header, and the payload when it was `Owned`.
pub(crate) struct Received {
    pub(crate) header: Header,
    pub(crate) payload: Vec<u8>,
}

/// How a transfer failed, before it is named for the caller.
pub(crate) enum Failure {
    /// The socket failed or hit EOF (`None`) on a send (`true`) or a receive.
    Wire {
        rank: usize,
        sending: bool,
        error: Option<io::Error>,
    },
    /// The header failed its check.
    Check(CollectiveError),
    Aborted,
    Timeout {
        waiting_for: Vec<usize>,
    },
    Poll(io::Error),
}

struct SendState<'b> {
    out: Outgoing<'b>,
    sent: usize,
}

impl SendState<'_> {
    fn total(&self) -> usize {
        HEADER_LEN + self.out.payload.len()
    }

    /// Sends until done (`Ok(true)`) or the socket is full (`Ok(false)`).
    fn progress(&mut self) -> io::Result<bool> {
        while self.sent < self.total() {
            let (header, payload) = (&self.out.header, self.out.payload);
            let result = if self.sent < HEADER_LEN {
                self.out
                    .conn
                    .send(&[IoSlice::new(&header[self.sent..]), IoSlice::new(payload)])
            } else {
                self.out
                    .conn
                    .send(&[IoSlice::new(&payload[self.sent - HEADER_LEN..])])
            };
            match result {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

struct RecvState<'b> {
    conn: &'b Conn,
    expect: Expect,
    header: [u8; HEADER_LEN],
    header_got: usize,
    checked: Option<Header>,
    dest: Dest<'b>,
    consumer: Option<Consumer<'b>>,
    owned: Vec<u8>,
    got: usize,
}

enum RecvError {
    Eof,
    Io(io::Error),
    Check(CollectiveError),
}

impl RecvState<'_> {
    /// Receives until done (`Ok(true)`) or nothing is queued (`Ok(false)`).
    fn progress(&mut self) -> Result<bool, RecvError> {
        loop {
            let result = match (&self.checked, &mut self.dest) {
                (None, Dest::Into(buf)) => self.conn.recv(&mut [
                    IoSliceMut::new(&mut self.header[self.header_got..]),
                    IoSliceMut::new(buf),
                ]),
                (None, Dest::Owned) => self
                    .conn
                    .recv(&mut [IoSliceMut::new(&mut self.header[self.header_got..])]),
                (Some(h), dest) => {
                    let len = h.len as usize;
                    if self.got == len {
                        return Ok(true);
                    }
                    let buf = match dest {
                        Dest::Into(buf) if self.consumer.is_some() => {
                            let end = len.min(self.got + CONSUME_CHUNK);
                            &mut buf[self.got..end]
                        }
                        Dest::Into(buf) => &mut buf[self.got..],
                        Dest::Owned => &mut self.owned[self.got..],
                    };
                    self.conn.recv(&mut [IoSliceMut::new(buf)])
                }
            };
            let n = match result {
                Ok(0) => return Err(RecvError::Eof),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(RecvError::Io(e)),
            };
            if self.checked.is_some() {
                self.got += n;
                self.consume();
                continue;
            }
            let header_part = n.min(HEADER_LEN - self.header_got);
            self.header_got += header_part;
            // Bytes past the header landed in the caller's buffer (Into only).
            self.got = n - header_part;
            if self.header_got == HEADER_LEN {
                let header = Header::decode(&self.header);
                self.expect
                    .check(self.conn.rank, &header)
                    .map_err(RecvError::Check)?;
                if let Dest::Owned = self.dest {
                    self.owned = vec![0u8; header.len as usize];
                }
                self.checked = Some(header);
                self.consume();
            }
        }
    }

    /// Hands the payload received so far to the consumer, if any.
    fn consume(&mut self) {
        if let (Some(consumer), Dest::Into(buf)) = (&mut self.consumer, &self.dest) {
            if self.got > 0 {
                consumer(&buf[..self.got]);
            }
        }
    }
}

/// How long a wait polls without blocking (yielding the core between polls) before it
/// sleeps in `poll(2)`. A peer on the same host usually answers within microseconds,
/// and waking a blocked thread costs more than that: measured with
/// `examples/collectives.rs`, 2 ranks in local mode, a barrier took 35 us with no spin and
/// a few with it. Yielding keeps an oversubscribed host (more ranks than cores) moving.
/// Only latency depends on it, never a result.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Runs one send and one receive (either may be absent) to completion.
pub(crate) fn transfer(
    out: Option<Outgoing<'_>>,
    inc: Option<Incoming<'_>>,
    wake_fd: std::os::fd::RawFd,
    deadline: Option<Instant>,
) -> Result<Option<Received>, Failure> {
    if let Some(inc) = &inc {
        if let Dest::Into(buf) = &inc.dest {
            debug_assert_eq!(inc.expect.len, LenRule::Exact(buf.len() as u64));
        }
    }
    let mut send = out.map(|out| SendState { out, sent: 0 });
    let mut recv = inc.map(|inc| RecvState {
        conn: inc.conn,
        expect: inc.expect,
        header: [0u8; HEADER_LEN],
        header_got: 0,
        checked: None,
        dest: inc.dest,
        consumer: inc.consumer,
        owned: Vec::new(),
        got: 0,
    });
    let (mut send_done, mut recv_done) = (send.is_none(), recv.is_none());
    let (mut send_ready, mut recv_ready) = (true, true);
    loop {
        if let (Some(s), false, true) = (&mut send, send_done, send_ready) {
            send_done = s.progress().map_err(|e| Failure::Wire {
                rank: s.out.conn.rank,
                sending: true,
                error: Some(e),
            })?;
        }
        if let (Some(r), false, true) = (&mut recv, recv_done, recv_ready) {
            recv_done = r.progress().map_err(|e| match e {
                RecvError::Eof => Failure::Wire {
                    rank: r.conn.rank,
                    sending: false,
                    error: None,
                },
                RecvError::Io(e) => Failure::Wire {
                    rank: r.conn.rank,
                    sending: false,
                    error: Some(e),
                },
                RecvError::Check(e) => Failure::Check(e),
            })?;
        }
        if send_done && recv_done {
            break;
        }
        let mut fds = [poll::entry(wake_fd, poll::POLLIN); 3];
        let mut n = 1;
        let (mut send_at, mut recv_at) = (None, None);
        if let (Some(s), false) = (&send, send_done) {
            fds[n] = poll::entry(s.out.conn.fd(), poll::POLLOUT);
            send_at = Some(n);
            n += 1;
        }
        if let (Some(r), false) = (&recv, recv_done) {
            fds[n] = poll::entry(r.conn.fd(), poll::POLLIN);
            recv_at = Some(n);
            n += 1;
        }
        if !poll::wait_spinning(&mut fds[..n], deadline, SPIN).map_err(Failure::Poll)? {
            let mut waiting_for = Vec::new();
            if let (Some(s), false) = (&send, send_done) {
                waiting_for.push(s.out.conn.rank);
            }
            if let (Some(r), false) = (&recv, recv_done) {
                waiting_for.push(r.conn.rank);
            }
            return Err(Failure::Timeout { waiting_for });
        }
        if poll::ready(&fds[0]) {
            return Err(Failure::Aborted);
        }
        send_ready = send_at.is_some_and(|i| poll::ready(&fds[i]));
        recv_ready = recv_at.is_some_and(|i| poll::ready(&fds[i]));
    }
    Ok(recv.map(|r| Received {
        header: r.checked.expect("a finished receive has a checked header"),
        payload: r.owned,
    }))
}
