//! The executor's side of barrier rendezvous: where its barrier tasks report their
//! listening address (to the scheduler, through whatever this executor is: local mode's
//! scheduler handle, a worker's socket to its executor), where the peers' addresses
//! arrive for them, and how a kill reaches a task blocked in a collective.
//!
//! Invariants:
//! - A task registers before it reports, so the peers (sent only after every rank has
//!   reported) always find its slot; peers for a task with no slot, or for another stage
//!   attempt, are dropped.
//! - A kill sets the slot's flag and fires its abort handle (if the task has one yet):
//!   a task waiting for peers wakes at once, one blocked in a collective gets
//!   `Aborted`. A kill that arrives before the task registers is seen through
//!   `ExecutorEnv::killed` when it does.
//! - A slot lives exactly as long as its task's [`Registration`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ember_collective::AbortHandle;
use parking_lot::{Condvar, Mutex};

/// Where a barrier task's address goes: to the scheduler, by whatever way this
/// executor talks to it.
pub(crate) trait AddressReporter: Send + Sync {
    fn report(&self, task_id: u64, address: String);
}

/// Where this executor's barrier tasks listen when their gang spans hosts, or must use
/// TCP (Unix sockets go in the executor's work dir). Unset: TCP on 127.0.0.1.
#[derive(Debug)]
pub(crate) struct BarrierListen {
    /// The IP peers on other hosts reach this executor at (a worker's executor's
    /// advertised host), if known.
    pub tcp_ip: Option<IpAddr>,
    /// Listen on TCP even when every rank is on one host (workers running as separate
    /// users cannot reach each other's private socket directories).
    pub force_tcp: bool,
}

struct Slot {
    stage_attempt: u32,
    peers: Option<Vec<String>>,
    abort: AbortHandle,
    killed: bool,
}

/// Why waiting for the peers ended without them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    Killed,
    TimedOut(Duration),
}

/// The rendezvous state of one executor.
pub(crate) struct Rendezvous {
    reporter: OnceLock<Box<dyn AddressReporter>>,
    shared: Arc<Slots>,
    pub listen: OnceLock<BarrierListen>,
}

/// The registered tasks, shared with their registrations.
struct Slots {
    slots: Mutex<HashMap<u64, Slot>>,
    arrived: Condvar,
}

impl Slots {
    fn kill(&self, task_id: u64) {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get_mut(&task_id) {
            slot.killed = true;
            slot.abort.abort();
        }
        self.arrived.notify_all();
    }
}

impl Rendezvous {
    pub(crate) fn new() -> Self {
        Rendezvous {
            reporter: OnceLock::new(),
            shared: Arc::new(Slots {
                slots: Mutex::new(HashMap::new()),
                arrived: Condvar::new(),
            }),
            listen: OnceLock::new(),
        }
    }

    /// Sets where addresses go (once, when the executor starts).
    pub(crate) fn set_reporter(&self, reporter: Box<dyn AddressReporter>) {
        let _ = self.reporter.set(reporter);
    }

    /// Registers task `task_id` of `stage_attempt`, whose endpoint `abort` fires.
    pub(crate) fn register(
        &self,
        task_id: u64,
        stage_attempt: u32,
        abort: AbortHandle,
    ) -> Registration {
        self.shared.slots.lock().insert(
            task_id,
            Slot {
                stage_attempt,
                peers: None,
                abort,
                killed: false,
            },
        );
        Registration {
            shared: self.shared.clone(),
            task_id,
        }
    }

    /// Sends `address` on its way to the scheduler; false if this executor has no
    /// way to (a bug: it was never given a reporter).
    pub(crate) fn report(&self, task_id: u64, address: String) -> bool {
        match self.reporter.get() {
            Some(r) => {
                r.report(task_id, address);
                true
            }
            None => false,
        }
    }

    /// The peers of `stage_attempt` arrived for its ranks `task_ids` here.
    pub(crate) fn deliver(&self, stage_attempt: u32, task_ids: &[u64], addresses: &[String]) {
        let mut slots = self.shared.slots.lock();
        for id in task_ids {
            match slots.get_mut(id) {
                Some(slot) if slot.stage_attempt == stage_attempt => {
                    slot.peers = Some(addresses.to_vec());
                }
                _ => tracing::debug!(task_id = id, "barrier peers for no waiting rank; dropped"),
            }
        }
        self.shared.arrived.notify_all();
    }

    /// Stops task `task_id` if it is a barrier rank here: wakes its wait for peers,
    /// aborts its collectives.
    pub(crate) fn kill(&self, task_id: u64) {
        self.shared.kill(task_id);
    }
}

/// A registered barrier task; its slot goes when this drops (held for the task's
/// whole run, so a kill reaches its collectives too).
pub(crate) struct Registration {
    shared: Arc<Slots>,
    task_id: u64,
}

impl Registration {
    /// Waits until the peers arrive (every rank's address, index = rank), the task is
    /// killed, or `timeout` passes.
    pub(crate) fn wait_peers(&self, timeout: Duration) -> Result<Vec<String>, WaitEnd> {
        let deadline = Instant::now() + timeout;
        let mut slots = self.shared.slots.lock();
        loop {
            let Some(slot) = slots.get_mut(&self.task_id) else {
                return Err(WaitEnd::Killed);
            };
            if slot.killed {
                return Err(WaitEnd::Killed);
            }
            if let Some(peers) = slot.peers.take() {
                return Ok(peers);
            }
            if self
                .shared
                .arrived
                .wait_until(&mut slots, deadline)
                .timed_out()
            {
                return Err(WaitEnd::TimedOut(timeout));
            }
        }
    }

    /// Marks the task killed (its kill came before it registered).
    pub(crate) fn kill(&self) {
        self.shared.kill(self.task_id);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.slots.lock().remove(&self.task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn peers_reach_the_right_attempt_and_a_kill_wakes_the_wait() {
        let r = Arc::new(Rendezvous::new());
        let dir = tempfile::tempdir().unwrap();
        let endpoint = ember_collective::Endpoint::bind_unix(dir.path()).unwrap();
        let abort = endpoint.abort_handle();
        let reg = r.register(7, 2, abort.clone());
        // Another attempt's peers and another task's are not this rank's.
        r.deliver(1, &[7], &["old".into()]);
        r.deliver(2, &[8], &["other".into()]);
        assert_eq!(
            reg.wait_peers(Duration::from_millis(30)),
            Err(WaitEnd::TimedOut(Duration::from_millis(30)))
        );
        r.deliver(2, &[7], &["a".into(), "b".into()]);
        assert_eq!(
            reg.wait_peers(Duration::from_secs(5)),
            Ok(vec!["a".to_string(), "b".to_string()])
        );
        let r2 = r.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            r2.kill(7);
        });
        assert_eq!(
            reg.wait_peers(Duration::from_secs(30)),
            Err(WaitEnd::Killed)
        );
        assert!(abort.is_aborted(), "the kill fired the endpoint's abort");
        killer.join().unwrap();
        drop(reg);
        assert!(
            r.shared.slots.lock().is_empty(),
            "the slot goes with its registration"
        );
    }
}
