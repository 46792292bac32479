//! A barrier task joining its gang before any of its operators run: bind an endpoint,
//! report its address (rendezvous), wait for every rank's, and connect the
//! authenticated mesh; then the communicator the task's barrier operators call
//! collectives on, with what each call moved and waited for (`BarrierMetrics`, for the
//! web UI: at most `MAX_SUPERSTEPS` calls listed, the rest counted).
//!
//! Invariants: a task of a barrier stage joins exactly once, before user code, so every
//! rank of an attempt reports whatever its operators do (a cached input, an empty
//! partition); the stage key is never logged nor put in an error; the peers' addresses
//! are parsed ([`PeerAddr::parse`] bounds them) and checked (one per rank, this rank's
//! own at its index) before anything connects; a kill aborts the wait or the
//! collective in progress (`env/rendezvous.rs`).

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use ember_collective::{CommOptions, Communicator, Endpoint, PeerAddr, StageKey};
use ember_proto::limits::MAX_SUPERSTEPS;
use ember_proto::{BarrierMetrics, BarrierTask, Superstep};

use crate::env::{ExecutorEnv, Registration, WaitEnd};
use crate::error::{EmberError, Result};

/// How long a rank waits for the others' addresses: a backstop only, since a rank
/// whose executor died is noticed by the scheduler, which kills the others.
const PEERS_TIMEOUT: Duration = Duration::from_secs(300);

/// A barrier task's membership of its gang.
pub(crate) struct TaskBarrier {
    pub rank: u32,
    pub world: u32,
    pub stage_attempt: u32,
    comm: RefCell<Communicator>,
    last_end: Cell<Instant>,
    /// What its collectives did, for the UI (at most `MAX_SUPERSTEPS` listed).
    report: RefCell<BarrierMetrics>,
    _registration: Registration,
}

impl TaskBarrier {
    /// Joins the gang `desc` describes as task `task_id`.
    pub(crate) fn join(env: &ExecutorEnv, task_id: u64, desc: &BarrierTask) -> Result<TaskBarrier> {
        let (rank, world) = (desc.rank, desc.world);
        if world == 0 || rank >= world {
            return Err(EmberError::Plan(format!(
                "barrier task {task_id}: rank {rank} in a world of {world}"
            )));
        }
        let key: [u8; StageKey::LEN] = desc.key.as_slice().try_into().map_err(|_| {
            EmberError::Plan(format!(
                "barrier task {task_id}: a stage key of {} bytes (expected {})",
                desc.key.len(),
                StageKey::LEN
            ))
        })?;
        let key = StageKey::from_bytes(key);
        let failed = |what: &str, e: ember_collective::CollectiveError| EmberError::Collective {
            rank,
            world,
            op: what.to_string(),
            source: e,
        };
        let endpoint = bind(env, desc.one_host).map_err(|e| failed("listening for peers", e))?;
        let me = endpoint.addr().clone();
        let registration =
            env.rendezvous
                .register(task_id, desc.stage_attempt, endpoint.abort_handle());
        if env.killed.contains(&task_id) {
            registration.kill();
        }
        if !env.rendezvous.report(task_id, me.to_string()) {
            return Err(EmberError::Plan(
                "this executor cannot run barrier tasks: it has no way to report their addresses"
                    .into(),
            ));
        }
        let started = Instant::now();
        let addresses = match registration.wait_peers(PEERS_TIMEOUT) {
            Ok(a) => a,
            Err(WaitEnd::Killed) => {
                return Err(EmberError::Cancelled(format!(
                    "barrier task rank {rank} of {world} killed while waiting for its peers"
                )))
            }
            Err(WaitEnd::TimedOut(t)) => {
                return Err(EmberError::Cluster(format!(
                    "barrier task rank {rank} of {world}: the peers' addresses did not arrive within {t:?}"
                )))
            }
        };
        if addresses.len() != world as usize {
            return Err(EmberError::Plan(format!(
                "barrier task rank {rank}: {} peer addresses for a world of {world}",
                addresses.len()
            )));
        }
        let peers = addresses
            .iter()
            .map(|a| PeerAddr::parse(a))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| failed("reading the peers' addresses", e))?;
        if peers[rank as usize] != me {
            return Err(EmberError::Plan(format!(
                "barrier task rank {rank}: the peers name another address for this rank"
            )));
        }
        let comm = Communicator::connect(
            endpoint,
            rank as usize,
            &peers,
            &key,
            CommOptions::default(),
        )
        .map_err(|e| match e {
            ember_collective::CollectiveError::Aborted => EmberError::Cancelled(format!(
                "barrier task rank {rank} of {world} killed while connecting to its peers"
            )),
            e => failed("connecting to the peers", e),
        })?;
        tracing::debug!(
            rank,
            world,
            waited_ms = started.elapsed().as_millis() as u64,
            "barrier task joined its gang"
        );
        // Kept registered while the communicator lives: a kill aborts its collectives.
        Ok(TaskBarrier {
            _registration: registration,
            rank,
            world,
            stage_attempt: desc.stage_attempt,
            comm: RefCell::new(comm),
            last_end: Cell::new(Instant::now()),
            report: RefCell::new(BarrierMetrics {
                rank,
                stage_attempt: desc.stage_attempt,
                ..Default::default()
            }),
        })
    }

    /// Runs one collective `op` on the communicator, recording its times and bytes;
    /// a failure names the collective and this rank (an abort is the task's kill).
    pub(crate) fn call<R>(
        &self,
        op: &str,
        body: impl FnOnce(&mut Communicator) -> ember_collective::Result<R>,
    ) -> Result<R> {
        let mut comm = self.comm.try_borrow_mut().map_err(|_| {
            EmberError::InvalidArgument(format!(
                "barrier {op}: a collective called from inside another's combine function"
            ))
        })?;
        let start = Instant::now();
        let before = comm.stats();
        let result = body(&mut comm);
        let after = comm.stats();
        let end = Instant::now();
        {
            let mut report = self.report.borrow_mut();
            if report.supersteps.len() < MAX_SUPERSTEPS {
                report.supersteps.push(Superstep {
                    op: op.to_string(),
                    compute_micros: start.duration_since(self.last_end.get()).as_micros() as u64,
                    wait_micros: end.duration_since(start).as_micros() as u64,
                    bytes_sent: after.bytes_sent - before.bytes_sent,
                    bytes_received: after.bytes_received - before.bytes_received,
                });
            } else {
                report.dropped += 1;
            }
        }
        self.last_end.set(end);
        result.map_err(|e| match e {
            ember_collective::CollectiveError::Aborted => EmberError::Cancelled(format!(
                "barrier task rank {} of {} killed during {op}",
                self.rank, self.world
            )),
            e => EmberError::Collective {
                rank: self.rank,
                world: self.world,
                op: op.to_string(),
                source: e,
            },
        })
    }
}

impl TaskBarrier {
    /// Notes that the task resumed from the checkpoint of superstep `step`.
    pub(crate) fn note_resumed(&self, step: u64) {
        let mut report = self.report.borrow_mut();
        report.resumed = true;
        report.resumed_after = step;
    }

    /// What its collectives did so far, for the task's status.
    pub(crate) fn report(&self) -> BarrierMetrics {
        self.report.borrow().clone()
    }
}

/// Binds this rank's endpoint: a Unix socket when every rank is on this host (and the
/// executor allows it), else TCP on the executor's advertised IP.
fn bind(env: &ExecutorEnv, one_host: bool) -> ember_collective::Result<Endpoint> {
    let listen = env.rendezvous.listen.get();
    if one_host && !listen.is_some_and(|l| l.force_tcp) {
        // `ec-<16 hex>/s` follows the work dir; fall back to the system's temp dir when
        // the work dir is too deep for `sun_path`.
        let dir = if env.work_dir.as_os_str().len() + 22 <= ember_collective::MAX_UNIX_PATH {
            env.work_dir.clone()
        } else {
            std::env::temp_dir()
        };
        return Endpoint::bind_unix(&dir);
    }
    let ip = listen.and_then(|l| l.tcp_ip);
    Endpoint::bind_tcp(ip.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])))
}
