//! [`Call`]: one collective call's view of the mesh, through which the algorithms in
//! `ops` send and receive: it stamps every frame with the call's number, collective,
//! detail and step, builds what each receive expects, names failures, and counts bytes.
//!
//! Invariants: an algorithm only names ranks other than its own; every frame of one call
//! carries the same `seq`, `op` and `detail`; byte-value receives are bounded by
//! `max_message_bytes`, slice receives are exact; a wire failure is `Aborted` when the
//! abort handle fired, else `PeerLost` naming the rank.

use std::time::{Duration, Instant};

use crate::abort::AbortHandle;
use crate::conn::Conn;
use crate::error::{CollectiveError, Result};
use crate::frame::{Expect, Header, LenRule, OpCode};
use crate::sendrecv::{transfer, Consumer, Dest, Failure, Incoming, Outgoing, Received};

/// Bytes moved by a communicator, cumulative (frames' headers included): the layer above
/// reads them around a call to report what each collective moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Collective calls made.
    pub calls: u64,
    /// Bytes written to peers.
    pub bytes_sent: u64,
    /// Bytes read from peers.
    pub bytes_received: u64,
}

pub(crate) struct Call<'a> {
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) max_message: u64,
    pub(crate) conns: &'a [Option<Conn>],
    pub(crate) abort: &'a AbortHandle,
    pub(crate) seq: u32,
    pub(crate) op: OpCode,
    pub(crate) detail: u8,
    pub(crate) deadline: Option<Instant>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) stats: &'a mut CommStats,
    /// The communicator's scratch store, kept across calls (see [`Call::with_scratch`]).
    pub(crate) scratch: &'a mut Vec<u64>,
}

/// A receive's size: exact (slices) or bounded (byte values).
#[derive(Clone, Copy)]
pub(crate) enum Size {
    Exact(usize),
    Bounded,
}

impl<'a> Call<'a> {
    fn conn(&self, rank: usize) -> &'a Conn {
        self.conns[rank]
            .as_ref()
            .expect("an algorithm named its own rank as a peer")
    }

    fn outgoing<'b>(&self, to: usize, step: usize, payload: &'b [u8], aux: u64) -> Outgoing<'b>
    where
        'a: 'b,
    {
        let header = Header {
            seq: self.seq,
            op: self.op as u8,
            detail: self.detail,
            step: step as u16,
            len: payload.len() as u64,
            aux,
        };
        Outgoing {
            conn: self.conn(to),
            header: header.encode(),
            payload,
        }
    }

    fn expect(&self, step: usize, size: Size, aux: Option<u64>) -> Expect {
        Expect {
            seq: self.seq,
            op: self.op,
            detail: self.detail,
            step: step as u16,
            len: match size {
                Size::Exact(n) => LenRule::Exact(n as u64),
                Size::Bounded => LenRule::AtMost(self.max_message),
            },
            aux,
        }
    }

    fn run(
        &mut self,
        out: Option<Outgoing<'_>>,
        inc: Option<Incoming<'_>>,
    ) -> Result<Option<Received>> {
        let sent = out.as_ref().map_or(0, |o| o.header.len() + o.payload.len());
        let received =
            transfer(out, inc, self.abort.wake_fd(), self.deadline).map_err(|f| self.name(f))?;
        self.stats.bytes_sent += sent as u64;
        if let Some(r) = &received {
            self.stats.bytes_received += crate::frame::HEADER_LEN as u64 + r.header.len;
        }
        Ok(received)
    }

    fn name(&self, failure: Failure) -> CollectiveError {
        if self.abort.is_aborted() {
            return CollectiveError::Aborted;
        }
        let op = self.op.name();
        match failure {
            Failure::Aborted => CollectiveError::Aborted,
            Failure::Check(e) => e,
            Failure::Wire {
                rank,
                sending,
                error,
            } => CollectiveError::PeerLost {
                rank,
                during: format!(
                    "{} {op} (call #{})",
                    if sending { "sending" } else { "receiving" },
                    self.seq
                ),
                cause: error
                    .map_or_else(|| "connection closed (EOF)".to_string(), |e| e.to_string()),
            },
            Failure::Timeout { waiting_for } => CollectiveError::Timeout {
                after: self.timeout.unwrap_or_default(),
                waiting_for: format!(
                    "in {op} (call #{}) waiting for rank(s) {waiting_for:?}",
                    self.seq
                ),
            },
            Failure::Poll(e) => CollectiveError::io(format!("polling in {op}"), e),
        }
    }

    /// Sends `payload` to `to`.
    pub(crate) fn send(&mut self, to: usize, step: usize, payload: &[u8], aux: u64) -> Result<()> {
        let out = self.outgoing(to, step, payload, aux);
        self.run(Some(out), None).map(|_| ())
    }

    /// Receives exactly `buf.len()` bytes from `from` into `buf`.
    pub(crate) fn recv_into(
        &mut self,
        from: usize,
        step: usize,
        buf: &mut [u8],
        aux: u64,
    ) -> Result<()> {
        let inc = Incoming {
            conn: self.conn(from),
            expect: self.expect(step, Size::Exact(buf.len()), Some(aux)),
            dest: Dest::Into(buf),
            consumer: None,
        };
        self.run(None, Some(inc)).map(|_| ())
    }

    /// Receives a byte value (at most `max_message_bytes`) from `from`; `aux`, when
    /// given, must match.
    pub(crate) fn recv_owned(
        &mut self,
        from: usize,
        step: usize,
        aux: Option<u64>,
    ) -> Result<Received> {
        let inc = Incoming {
            conn: self.conn(from),
            expect: self.expect(step, Size::Bounded, aux),
            dest: Dest::Owned,
            consumer: None,
        };
        Ok(self
            .run(None, Some(inc))?
            .expect("a receive returns its frame"))
    }

    /// Sends `payload` to `to` while receiving exactly `buf.len()` bytes from `from`.
    pub(crate) fn sendrecv_into(
        &mut self,
        to: usize,
        payload: &[u8],
        from: usize,
        buf: &mut [u8],
        step: usize,
        aux: u64,
    ) -> Result<()> {
        self.sendrecv_consume(to, payload, from, buf, None, step, aux)
    }

    /// As [`Call::sendrecv_into`], calling `consumer` with the payload received so far
    /// after every read (see `sendrecv.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sendrecv_consume<'c>(
        &mut self,
        to: usize,
        payload: &[u8],
        from: usize,
        buf: &'c mut [u8],
        consumer: Option<Consumer<'c>>,
        step: usize,
        aux: u64,
    ) -> Result<()>
    where
        'a: 'c,
    {
        let out = self.outgoing(to, step, payload, aux);
        let inc = Incoming {
            conn: self.conn(from),
            expect: self.expect(step, Size::Exact(buf.len()), Some(aux)),
            dest: Dest::Into(buf),
            consumer,
        };
        self.run(Some(out), Some(inc)).map(|_| ())
    }

    /// Sends `payload` (stamped `send_aux`) to `to` while receiving a byte value stamped
    /// `recv_aux` from `from`.
    pub(crate) fn sendrecv_owned(
        &mut self,
        to: usize,
        payload: &[u8],
        send_aux: u64,
        from: usize,
        recv_aux: u64,
        step: usize,
    ) -> Result<Vec<u8>> {
        let out = self.outgoing(to, step, payload, send_aux);
        let inc = Incoming {
            conn: self.conn(from),
            expect: self.expect(step, Size::Bounded, Some(recv_aux)),
            dest: Dest::Owned,
            consumer: None,
        };
        Ok(self
            .run(Some(out), Some(inc))?
            .expect("a receive returns its frame")
            .payload)
    }

    /// Runs `body` with `len` elements of scratch space. The store behind it is the
    /// communicator's and outlives the call, so a large collective does not fault in
    /// fresh pages every time (it keeps the largest size asked for; contents are
    /// whatever the last call left).
    pub(crate) fn with_scratch<T: bytemuck::Pod, R>(
        &mut self,
        len: usize,
        body: impl FnOnce(&mut Self, &mut [T]) -> R,
    ) -> R {
        let mut store = std::mem::take(&mut *self.scratch);
        let words = (len * size_of::<T>()).div_ceil(8);
        if store.len() < words {
            store.resize(words, 0);
        }
        let result = body(
            self,
            &mut bytemuck::cast_slice_mut::<u64, T>(&mut store[..words])[..len],
        );
        *self.scratch = store;
        result
    }

    /// Fails with `MessageTooLarge` (naming this rank) when this rank's own byte value is
    /// above the bound its peers apply, so the error is the same on every side.
    pub(crate) fn check_own_size(&self, len: usize) -> Result<()> {
        if len as u64 > self.max_message {
            return Err(CollectiveError::MessageTooLarge {
                rank: self.rank,
                len: len as u64,
                max: self.max_message,
            });
        }
        Ok(())
    }
}
