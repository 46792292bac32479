//! Executors joining ([`Scheduler::executor_added`]), and the map outputs an executor
//! reports holding when it registers (again): after a driver
//! restart, the executors' shuffle files are what is left of the finished stages, and
//! the map-output tracker is rebuilt from these reports, so a resubmitted job skips
//! the stages whose outputs all exist (Spark's skipped stages).
//!
//! Invariants:
//! - An executor's report is taken in the same event as its registration
//!   ([`SchedulerEvent::ExecutorRejoined`](crate::events::SchedulerEvent::ExecutorRejoined)),
//!   so no task is placed on it before its outputs are known.
//! - An output is recorded only where it fits: its shuffle's map partition exists and
//!   its block count is the shuffle's reduce partition count. A barrier stage whose
//!   ranks were not all reported runs every rank again, as after any loss (its
//!   attempts always launch the whole gang). A shuffle no stage knows
//!   yet keeps its reports in [`Held`] (bounded by [`MAX_HELD_SIZES`] block sizes over
//!   all of them) until a job's plan creates its stage. A running attempt
//!   (the client resubmitted its job before this executor came back) takes a reported
//!   output for a partition still pending as if a task had finished it: its copies are
//!   killed and no later attempt's accumulator updates count for it (the first driver
//!   counted them); a running barrier attempt takes none.
//! - The first holder of a map output serves it; a second one (a replica pushed under
//!   `replicated:N`) is recorded as its replica.
//! - Held reports go with their executor (lost), their session (`ForgetIds`) and their
//!   shuffle (released), as recorded outputs do.

use std::collections::HashMap;

use ember_proto::{HeldOutput, MapHost, MapLocation};
use tracing::{debug, info};

use super::{Executor, Scheduler};
use crate::listener::{now_ms, ListenerEvent};

/// Most block sizes the reports of shuffles no stage knows yet may hold together (128
/// MiB of them); a report past it is dropped (its output is recomputed if needed).
pub const MAX_HELD_SIZES: usize = 16 << 20;

/// Reported outputs of shuffles no stage knows yet.
#[derive(Debug, Default)]
pub(super) struct Held {
    by_shuffle: HashMap<u32, Vec<HeldMap>>,
    sizes: usize,
}

#[derive(Debug)]
struct HeldMap {
    executor_id: String,
    map_partition: u32,
    block_sizes: Vec<u64>,
}

impl Held {
    fn add(&mut self, executor_id: &str, output: HeldOutput) -> bool {
        let n = output.block_sizes.len();
        if self.sizes + n > MAX_HELD_SIZES {
            return false;
        }
        self.sizes += n;
        self.by_shuffle
            .entry(output.shuffle_id)
            .or_default()
            .push(HeldMap {
                executor_id: executor_id.to_string(),
                map_partition: output.map_partition,
                block_sizes: output.block_sizes,
            });
        true
    }

    fn take(&mut self, shuffle_id: u32) -> Vec<HeldMap> {
        let taken = self.by_shuffle.remove(&shuffle_id).unwrap_or_default();
        self.sizes -= taken.iter().map(|h| h.block_sizes.len()).sum::<usize>();
        taken
    }

    /// Drops the reports of `executor_id`.
    pub(super) fn executor_lost(&mut self, executor_id: &str) {
        let mut dropped = 0;
        self.by_shuffle.retain(|_, maps| {
            maps.retain(|h| {
                let keep = h.executor_id != executor_id;
                if !keep {
                    dropped += h.block_sizes.len();
                }
                keep
            });
            !maps.is_empty()
        });
        self.sizes -= dropped;
    }

    /// Drops the reports of shuffles `pred` names.
    pub(super) fn forget(&mut self, pred: impl Fn(u32) -> bool) {
        let doomed: Vec<u32> = (self.by_shuffle.keys().copied())
            .filter(|s| pred(*s))
            .collect();
        for sid in doomed {
            self.take(sid);
        }
    }
}

impl Scheduler {
    /// `executor_id` offers `slots` slots from now on.
    pub(super) fn executor_added(
        &mut self,
        executor_id: String,
        slots: u32,
        shuffle_address: String,
        host: String,
    ) {
        debug!(executor = %executor_id, slots, "executor added");
        self.listeners.emit(|| ListenerEvent::ExecutorAdded {
            executor_id: executor_id.clone(),
            slots,
            time_ms: now_ms(),
        });
        if let Some(old) = self.executors.get(&executor_id) {
            self.room.remove(&(old.level, executor_id.clone()));
        }
        self.executors.insert(
            executor_id.clone(),
            Executor {
                slots,
                in_flight: 0,
                level: 0,
                shuffle_address,
                host,
            },
        );
        self.refile(&executor_id);
    }

    /// `executor_id` (just added) holds `outputs` from before its registration.
    pub(super) fn outputs_held(&mut self, executor_id: &str, outputs: Vec<HeldOutput>) {
        let mut by_shuffle: HashMap<u32, Vec<HeldMap>> = HashMap::new();
        let mut dropped = 0usize;
        for o in outputs {
            match self.shuffle_stage.get(&o.shuffle_id) {
                None => {
                    if !self.held.add(executor_id, o) {
                        dropped += 1;
                    }
                }
                Some(_) => by_shuffle.entry(o.shuffle_id).or_default().push(HeldMap {
                    executor_id: executor_id.to_string(),
                    map_partition: o.map_partition,
                    block_sizes: o.block_sizes,
                }),
            }
        }
        if dropped > 0 {
            info!(
                executor = %executor_id,
                dropped,
                "more held map outputs reported than the driver keeps; those are recomputed if needed"
            );
        }
        let mut sids: Vec<u32> = by_shuffle.keys().copied().collect();
        sids.sort_unstable();
        for sid in sids {
            let maps = by_shuffle.remove(&sid).unwrap_or_default();
            self.record_held(sid, maps);
        }
    }

    /// A stage for shuffle `shuffle_id` was just created: records the outputs
    /// executors reported holding for it.
    pub(super) fn adopt_held(&mut self, shuffle_id: u32) {
        let maps = self.held.take(shuffle_id);
        if !maps.is_empty() {
            self.record_held(shuffle_id, maps);
        }
    }

    /// Records `maps` as outputs of `shuffle_id` where they fit its stage, tells the
    /// listeners how many, and brings the stage's state in line. In a running attempt
    /// (a job resubmitted before this executor came back) a reported output finishes
    /// its partition as a task would: its running copies are killed, its queued task is
    /// dropped at launch, and no later attempt's accumulator updates count for it (the
    /// first driver counted them). A running barrier attempt takes none.
    fn record_held(&mut self, shuffle_id: u32, maps: Vec<HeldMap>) {
        let Some(st) = self
            .shuffle_stage
            .get(&shuffle_id)
            .and_then(|s| self.stages.get(s))
        else {
            return;
        };
        let running = match (st.is_running(), st.barrier) {
            (false, _) => None,
            (true, false) => Some(st.attempts),
            (true, true) => return,
        };
        let Some(reducers) = st
            .index
            .shuffle(shuffle_id)
            .map(|d| d.num_reduce_partitions as usize)
        else {
            return;
        };
        let (stage_id, num_maps) = (st.id, st.num_partitions);
        // Outputs recorded (a second holder's copy is a replica, not counted).
        let mut recorded = 0u32;
        let mut finished = false;
        let mut executors: Vec<String> = Vec::new();
        for h in maps {
            let Some(address) =
                (self.executors.get(&h.executor_id)).map(|e| e.shuffle_address.clone())
            else {
                continue;
            };
            if h.map_partition >= num_maps || h.block_sizes.len() != reducers {
                continue;
            }
            let held_here = match self.tracker.executor_of(shuffle_id, h.map_partition) {
                None => {
                    if let Some(attempt) = running {
                        match self.finish_held_partition(stage_id, attempt, h.map_partition) {
                            None => continue, // done already (a task finished it)
                            Some(last) => finished |= last,
                        }
                    }
                    recorded += 1;
                    self.tracker.register_output(
                        shuffle_id,
                        MapLocation {
                            map_partition: h.map_partition,
                            executor_id: h.executor_id.clone(),
                            shuffle_address: address,
                            block_sizes: h.block_sizes,
                            ..Default::default()
                        },
                    );
                    true
                }
                Some(primary) => {
                    let host = MapHost {
                        executor_id: h.executor_id.clone().into_bytes().into(),
                        shuffle_address: address.into_bytes().into(),
                        from_storage: false,
                    };
                    self.tracker
                        .add_replica(shuffle_id, h.map_partition, &primary, host)
                }
            };
            if held_here && !executors.contains(&h.executor_id) {
                executors.push(h.executor_id);
            }
        }
        if recorded == 0 {
            return;
        }
        info!(
            shuffle = shuffle_id,
            stage = stage_id,
            outputs = recorded,
            executors = ?executors,
            "map outputs recovered from executors' reports"
        );
        self.listeners.emit(|| ListenerEvent::OutputsRecovered {
            stage_id,
            shuffle_id,
            outputs: recorded,
            executors,
            time_ms: now_ms(),
        });
        if finished {
            self.map_stage_finished(stage_id, shuffle_id);
        } else {
            self.refresh_map_stage(shuffle_id);
        }
    }

    /// Partition `partition` of running attempt `attempt` of map stage `stage_id` is
    /// done by a reported output: no later attempt's accumulator updates count for it,
    /// its running copies are killed (its queued task is dropped at launch). `None` if
    /// it was not pending; else whether it was the attempt's last.
    fn finish_held_partition(
        &mut self,
        stage_id: u32,
        attempt: u32,
        partition: u32,
    ) -> Option<bool> {
        let st = self.stages.get_mut(&stage_id)?;
        if !st.is_pending(attempt, partition) {
            return None;
        }
        let last = st.finish_partition(partition);
        for job in self.jobs.values_mut() {
            if job.stages.contains(&stage_id) {
                job.counted.insert((stage_id, partition));
            }
        }
        self.abandon_running(|r| r.stage_id == stage_id && r.partition == partition);
        Some(last)
    }
}
