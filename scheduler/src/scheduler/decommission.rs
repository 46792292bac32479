//! Decommissioning executors: an executor leaving gracefully takes no more tasks, lets
//! its running ones end, pushes its map outputs to peers the scheduler names, and exits;
//! its outputs are then served by those peers and no map task runs again.
//!
//! Invariants: a decommissioning executor offers no slot from its first message on (its
//! `slots` is 0, so it is never filed in `room`); the plan names, for each output it
//! serves that has no other copy (no replica, not stored), one live executor still
//! offering slots (other hosts first, spread round robin), or nothing when there is none (lineage stays the
//! fallback); a moved output is recorded as a replica only if the executor still serves
//! it, so when the executor's channel closes the usual loss promotes it
//! (`MapOutputTracker::executor_lost`).

use ember_proto::{MapHost, MigratedOutput};
use tracing::info;

use super::Scheduler;

impl Scheduler {
    /// `executor_id` is decommissioning; `drained`: its running tasks have ended.
    pub(super) fn executor_decommissioning(&mut self, executor_id: &str, drained: bool) {
        let Some(e) = self.executors.get_mut(executor_id) else {
            return;
        };
        if e.slots != 0 {
            info!(executor = %executor_id, "decommissioning: it takes no more tasks");
            e.slots = 0;
            self.refile(executor_id);
        }
        if !drained {
            return;
        }
        let plan = self.migration_plan(executor_id);
        info!(
            executor = %executor_id,
            outputs = plan.len(),
            "decommissioning executor drained: moving its map outputs to other executors"
        );
        self.launcher.migrate_outputs(executor_id, plan);
    }

    /// Where each output of `executor_id` with no other copy goes.
    fn migration_plan(&self, executor_id: &str) -> Vec<MigratedOutput> {
        let mut peers = super::dispatch::peers(&self.executors, executor_id);
        // Stable: id order within each group, other hosts first.
        peers.sort_by_key(|(_, _, same_host)| *same_host);
        let other_hosts = peers.iter().filter(|(_, _, same_host)| !same_host).count();
        // Other hosts take the outputs when there are any, round robin among them.
        let pool = if other_hosts > 0 {
            &peers[..other_hosts]
        } else {
            &peers[..]
        };
        if pool.is_empty() {
            return Vec::new();
        }
        self.tracker
            .unreplicated_on(executor_id)
            .into_iter()
            .enumerate()
            .map(|(i, (shuffle_id, map_partition))| {
                let (id, e, _) = pool[i % pool.len()];
                MigratedOutput {
                    shuffle_id,
                    map_partition,
                    target: Some(super::dispatch::copy_host(id, e)),
                }
            })
            .collect()
    }

    /// A decommissioning executor moved `outputs` to the peers named.
    pub(super) fn outputs_migrated(
        &mut self,
        executor_id: &str,
        outputs: Vec<(u32, u32, MapHost)>,
    ) {
        let mut recorded = 0usize;
        for (shuffle_id, map, target) in outputs {
            let live = self
                .executors
                .contains_key(String::from_utf8_lossy(&target.executor_id).as_ref());
            if live
                && self
                    .tracker
                    .add_replica(shuffle_id, map, executor_id, target)
            {
                recorded += 1;
            }
        }
        info!(executor = %executor_id, outputs = recorded, "map outputs moved off a decommissioning executor");
    }
}
