//! Replicated map outputs (`replicated:N` shuffle durability) in the tracker: the
//! executors holding a pushed copy of an output, and the promotion of a copy when the
//! executor serving the output is lost.
//!
//! Invariants: an output's `replicas` name only executors other than the one serving it
//! and never a lost executor (a loss drops it from every list, and the scheduler
//! registers only replicas on live executors); a promoted replica leaves the list, so
//! each copy is served at most once in turn and an output with no replica left falls to
//! storage or lineage as under `local`. The serving executor's host entry is the one
//! every other output of that executor uses (`Outputs::host`), so a reducer's compact
//! input names each executor once however its outputs came to it.

use ember_proto::MapHost;

use super::{MapOutputTracker, Outputs};

impl MapOutputTracker {
    /// The executors holding a replica of map `map` of `shuffle_id`, in promotion order.
    pub fn replicas_of(&self, shuffle_id: u32, map: u32) -> Vec<String> {
        self.shuffles
            .get(&shuffle_id)
            .and_then(|o| o.by_map.get(map as usize))
            .and_then(Option::as_ref)
            .map(|l| {
                l.replicas
                    .iter()
                    .map(|r| String::from_utf8_lossy(&r.executor_id).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl MapOutputTracker {
    /// The outputs `executor_id` serves that have no other copy (no replica, not stored):
    /// what a decommissioning executor must move, as (shuffle, map) in shuffle and map
    /// order.
    pub fn unreplicated_on(&self, executor_id: &str) -> Vec<(u32, u32)> {
        let mut found: Vec<(u32, u32)> = self
            .shuffles
            .iter()
            .flat_map(|(sid, o)| {
                o.by_map.iter().flatten().filter_map(move |l| {
                    (l.executor_id == executor_id
                        && !l.from_storage
                        && !l.stored
                        && l.replicas.is_empty())
                    .then_some((*sid, l.map_partition))
                })
            })
            .collect();
        found.sort_unstable();
        found
    }

    /// `replica` now holds a copy of map `map` of `shuffle_id` (a decommissioning
    /// executor moved it there): recorded if the output is still served by `from` and
    /// the copy is not there already. True if recorded.
    pub fn add_replica(&mut self, shuffle_id: u32, map: u32, from: &str, replica: MapHost) -> bool {
        let Some(loc) = self
            .shuffles
            .get_mut(&shuffle_id)
            .and_then(|o| o.by_map.get_mut(map as usize))
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if loc.executor_id != from
            || loc.from_storage
            || replica.executor_id == from.as_bytes()
            || loc
                .replicas
                .iter()
                .any(|r| r.executor_id == replica.executor_id)
        {
            return false;
        }
        loc.replicas.push(replica);
        true
    }
}

impl Outputs {
    /// The index in `hosts` of `executor_id` serving at `address`, added if new (or if
    /// the executor came back at another address).
    pub(super) fn host(&mut self, executor_id: &str, address: &str) -> u32 {
        match self.host_index.get(executor_id) {
            Some(&h) if self.hosts[h as usize].shuffle_address == address.as_bytes() => h,
            _ => {
                self.hosts.push(MapHost {
                    executor_id: executor_id.to_string().into(),
                    shuffle_address: address.to_string().into(),
                    from_storage: false,
                });
                let h = self.hosts.len() as u32 - 1;
                self.host_index.insert(executor_id.to_string(), h);
                h
            }
        }
    }

    /// `lost` is gone: every output it served that has a replica is served by its first
    /// replica from now on, and every replica it held is dropped. Returns how many
    /// outputs moved to a replica.
    pub(super) fn promote_replicas(&mut self, lost: &str) -> usize {
        let mut moved = 0;
        for m in 0..self.by_map.len() {
            let Some(loc) = self.by_map[m].as_mut() else {
                continue;
            };
            loc.replicas.retain(|r| r.executor_id != lost.as_bytes());
            if loc.executor_id != lost || loc.from_storage || loc.replicas.is_empty() {
                continue;
            }
            let next = loc.replicas.remove(0);
            loc.executor_id = String::from_utf8_lossy(&next.executor_id).into_owned();
            loc.shuffle_address = String::from_utf8_lossy(&next.shuffle_address).into_owned();
            let (executor_id, address) = (loc.executor_id.clone(), loc.shuffle_address.clone());
            self.host_of[m] = self.host(&executor_id, &address);
            self.gathered = None;
            moved += 1;
        }
        moved
    }
}
