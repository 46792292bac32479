//! [`CommOptions`]: deadlines, the bound on byte-vector messages, TCP keepalive and socket
//! buffer sizes of one communicator. Algorithm switch points are not options: they are
//! constants (`crate::ops`), so results never depend on configuration.

use std::time::Duration;

/// How a communicator connects and how long it waits.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CommOptions {
    /// The deadline for building the whole mesh (connects, accepts and handshakes).
    /// Default 30 s.
    pub connect_timeout: Duration,
    /// The longest one incoming connection may take to complete its handshake, so a
    /// stray connection cannot hold the accept loop. Default 10 s (capped by the connect
    /// deadline).
    pub handshake_timeout: Duration,
    /// The longest one collective call may take, waits for slow peers included; `None`
    /// (the default) waits as long as the peers live, since a peer may compute for long
    /// between supersteps. A dead peer is noticed without it: by EOF on one host, by TCP
    /// keepalive and `TCP_USER_TIMEOUT` across hosts.
    pub op_timeout: Option<Duration>,
    /// The largest message a peer may send in a byte-vector collective (`broadcast`,
    /// `reduce`, `all_reduce`, `all_gather`, `all_to_all`: each value, and each partial
    /// reduction); larger announced frames are refused before allocation. Slice
    /// collectives need no bound: the receiver knows the exact sizes. Default 1 GiB.
    pub max_message_bytes: usize,
    /// TCP keepalive: how soon a silent dead host is noticed.
    pub keepalive: Keepalive,
    /// `SO_SNDBUF` and `SO_RCVBUF` of each Unix-socket connection; `None` keeps the
    /// system's. TCP connections keep the kernel's autotuning (setting these would turn
    /// it off). Default 128 KiB: measured with `examples/coll_bench.rs` on one host, a
    /// small buffer keeps the data in flight in cache and beats both the default
    /// (208 KiB) and 4 MiB from 4 MiB messages up (2 ranks, 16 MiB all-reduce: 7.9 ms with
    /// 128 KiB, 10.3 ms with 4 MiB).
    pub socket_buffer_bytes: Option<usize>,
}

/// TCP keepalive parameters: a dead peer host is noticed after about
/// `idle + interval * retries` of silence (8 s by default); `TCP_USER_TIMEOUT` is set to
/// the same, so data left unacknowledged fails as soon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub retries: u32,
}

impl Keepalive {
    /// `idle + interval * retries`: how long a dead host may stay unnoticed.
    pub fn dead_after(&self) -> Duration {
        self.idle + self.interval * self.retries
    }
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            idle: Duration::from_secs(5),
            interval: Duration::from_secs(1),
            retries: 3,
        }
    }
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            op_timeout: None,
            max_message_bytes: 1 << 30,
            keepalive: Keepalive::default(),
            socket_buffer_bytes: Some(128 << 10),
        }
    }
}

impl CommOptions {
    /// Sets [`CommOptions::connect_timeout`].
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`CommOptions::op_timeout`].
    pub fn with_op_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Sets [`CommOptions::max_message_bytes`].
    pub fn with_max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// Sets [`CommOptions::keepalive`].
    pub fn with_keepalive(mut self, keepalive: Keepalive) -> Self {
        self.keepalive = keepalive;
        self
    }
}
