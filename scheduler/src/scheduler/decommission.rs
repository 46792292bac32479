//! Decommissioning executors: an executor leaving gracefully takes no more tasks, lets
//! its running ones end, pushes its map outputs and the cached blocks it holds alone to
//! peers the scheduler names, and exits; its outputs are then served by those peers and
//! its blocks read there, and no task runs again for them.
//!
//! Invariants: a decommissioning executor offers no slot from its first message on (its
//! `slots` is 0, so it is never filed in `room`); the plan names, for each output it
//! serves that has no other copy (no replica, not stored), one live executor still
//! offering slots (other hosts first, spread round robin), or nothing when there is none (lineage stays the
//! fallback); a moved output is recorded as a replica only if the executor still serves
//! it, so when the executor's channel closes the usual loss promotes it
//! (`MapOutputTracker::executor_lost`). Cached blocks are planned the same way (those
//! no other executor still taking tasks caches, round robin over the same peers, in
//! (rdd, partition) order); a moved block is recorded as cached on its target only if the target is
//! live and the block is still cached on the decommissioning executor (not unpersisted
//! meanwhile), and the listeners hear of it as cached there, moved from the executor.

use ember_proto::{MapHost, MigratedBlock, MigratedOutput};
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
        let (plan, blocks) = self.migration_plan(executor_id);
        info!(
            executor = %executor_id,
            outputs = plan.len(),
            blocks = blocks.len(),
            "decommissioning executor drained: moving its map outputs and cached blocks to other executors"
        );
        self.launcher.migrate_outputs(executor_id, plan, blocks);
    }

    /// Where each output of `executor_id` with no other copy goes, and each cached
    /// block only it holds.
    fn migration_plan(&self, executor_id: &str) -> (Vec<MigratedOutput>, Vec<MigratedBlock>) {
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
            return (Vec::new(), Vec::new());
        }
        let outputs: Vec<MigratedOutput> = self
            .tracker
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
            .collect();
        // Blocks no other executor still taking tasks holds (one leaving too moves its
        // copy only if it is the last).
        let kept_elsewhere =
            |h: &String| h != executor_id && self.executors.get(h).is_some_and(|x| x.slots > 0);
        let mut alone: Vec<(u32, u32)> = self
            .cache
            .iter()
            .filter(|(_, holders)| {
                holders.iter().any(|h| h == executor_id) && !holders.iter().any(kept_elsewhere)
            })
            .map(|(block, _)| *block)
            .collect();
        alone.sort_unstable();
        // Continuing the round robin where the outputs left it.
        let blocks = alone
            .into_iter()
            .enumerate()
            .map(|(i, (rdd_id, partition))| {
                let (id, e, _) = pool[(outputs.len() + i) % pool.len()];
                MigratedBlock {
                    rdd_id,
                    partition,
                    target: Some(super::dispatch::copy_host(id, e)),
                    bytes: 0,
                }
            })
            .collect();
        (outputs, blocks)
    }

    /// A decommissioning executor moved cached `blocks` (rdd, partition, target,
    /// bytes stored) to the peers named.
    pub(super) fn blocks_migrated(
        &mut self,
        executor_id: &str,
        blocks: Vec<(u32, u32, MapHost, u64)>,
    ) {
        let mut recorded = 0usize;
        for (rdd_id, partition, target, bytes) in blocks {
            let target_id = String::from_utf8_lossy(&target.executor_id).into_owned();
            if !self.executors.contains_key(&target_id) {
                continue;
            }
            let Some(holders) = self.cache.get_mut(&(rdd_id, partition)) else {
                continue; // unpersisted meanwhile
            };
            if !holders.iter().any(|h| h == executor_id) || holders.contains(&target_id) {
                continue;
            }
            holders.push(target_id.clone());
            recorded += 1;
            if let Some(rdd) = self.cached_rdds.get(&rdd_id) {
                self.listeners.emit(|| {
                    rdd.block_cached(
                        rdd_id,
                        partition,
                        target_id.clone(),
                        (0, bytes),
                        executor_id.to_string(),
                    )
                });
            }
        }
        info!(executor = %executor_id, blocks = recorded, "cached blocks moved off a decommissioning executor");
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
