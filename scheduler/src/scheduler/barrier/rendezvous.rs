//! Rendezvous of a barrier stage attempt (as NCCL's bootstrap): each running rank
//! reports where it listens ([`SchedulerEvent::BarrierAddress`]); once every rank of the
//! attempt has, each executor hosting a running rank gets every address in rank order
//! ([`TaskLauncher::barrier_peers`]). The tasks then connect to each other directly,
//! authenticating with the attempt's key; nothing else goes through the scheduler.
//!
//! Invariants: an address counts only from a running task of the stage's current
//! attempt, relayed by the executor it runs on, once per rank, when not empty and at most [`MAX_BARRIER_ADDRESS_BYTES`]; the
//! peers go out at most once per attempt, to each hosting executor once, with that
//! executor's running ranks in rank order. Anything else is ignored with a log line
//! (quoting at most a bounded prefix of the address), never a panic.
//!
//! [`SchedulerEvent::BarrierAddress`]: crate::SchedulerEvent::BarrierAddress
//! [`TaskLauncher::barrier_peers`]: crate::TaskLauncher::barrier_peers

use std::collections::BTreeMap;

use ember_proto::limits::MAX_BARRIER_ADDRESS_BYTES;
use ember_proto::BarrierPeers;
use tracing::{debug, warn};

use super::super::Scheduler;
use crate::limits::for_log;

impl Scheduler {
    /// Task `task_id` reports its rendezvous address.
    pub(in crate::scheduler) fn barrier_address(
        &mut self,
        task_id: u64,
        executor_id: &str,
        address: String,
    ) {
        if address.is_empty() || address.len() > MAX_BARRIER_ADDRESS_BYTES {
            warn!(
                task = task_id,
                bytes = address.len(),
                "refusing a barrier address of {} bytes (one of 1 to {MAX_BARRIER_ADDRESS_BYTES} is expected): {}",
                address.len(),
                for_log(&address)
            );
            return;
        }
        let Some(run) = self.running.get(&task_id) else {
            if self.abandoned.contains_key(&task_id) {
                debug!(
                    task = task_id,
                    "ignoring the barrier address of an attempt given up on"
                );
            } else {
                debug!(
                    task = task_id,
                    "ignoring the barrier address of an unknown or finished task"
                );
            }
            return;
        };
        if run.executor_id != executor_id {
            warn!(
                task = task_id,
                executor = %executor_id,
                runs_on = %run.executor_id,
                "refusing a barrier address relayed by an executor the task does not run on"
            );
            return;
        }
        let (stage_id, stage_attempt, rank) = (run.stage_id, run.stage_attempt, run.partition);
        let Some(st) = self.stages.get_mut(&stage_id) else {
            return;
        };
        let number = st.number;
        let Some(gang) = st.gang.as_mut().filter(|g| g.attempt == stage_attempt) else {
            warn!(
                task = task_id,
                stage = number,
                stage_id,
                stage_attempt,
                "ignoring a barrier address: the task is not of a running barrier stage attempt"
            );
            return;
        };
        let Some(entry) = gang.addresses.get_mut(rank as usize) else {
            return; // rank < world: every partition of the stage is a rank
        };
        if let Some(first) = entry {
            warn!(
                task = task_id,
                stage = number,
                stage_id,
                stage_attempt,
                rank,
                "refusing a second barrier address from one rank ({} after {})",
                for_log(&address),
                for_log(first)
            );
            return;
        }
        *entry = Some(address);
        gang.reported += 1;
        if gang.reported < gang.world || gang.peers_sent {
            return;
        }
        gang.peers_sent = true;
        let peers = BarrierPeers {
            stage_id,
            stage_attempt,
            addresses: gang
                .addresses
                .iter()
                .map(|a| a.clone().unwrap_or_default())
                .collect(),
            task_ids: Vec::new(),
        };
        // The executors hosting a rank still running, each with its ranks in order.
        let mut hosts: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (task_id, executor_id) in &gang.ranks {
            if self.running.contains_key(task_id) {
                hosts.entry(executor_id).or_default().push(*task_id);
            }
        }
        debug!(
            stage = number,
            stage_id,
            stage_attempt,
            executors = hosts.len(),
            "every rank of the barrier stage reported: sending the peers"
        );
        for (executor_id, task_ids) in hosts {
            self.launcher.barrier_peers(executor_id, &task_ids, &peers);
        }
    }
}
