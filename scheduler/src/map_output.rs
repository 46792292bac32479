//! The map-output tracker: for each shuffle, where each map partition's output lives.
//!
//! Invariant: an entry exists only for a map task that finished successfully on an
//! executor that has not been declared lost since. Outputs survive across jobs, which
//! is what lets a later job skip a stage whose shuffle output still exists.

use std::collections::HashMap;

use ember_proto::MapLocation;

/// Shuffle id -> one entry per map partition (its output, once registered).
#[derive(Debug, Default)]
pub struct MapOutputTracker {
    shuffles: HashMap<u32, Vec<Option<MapLocation>>>,
}

impl MapOutputTracker {
    /// Makes sure the shuffle is known with `num_maps` map partitions.
    pub fn register_shuffle(&mut self, shuffle_id: u32, num_maps: u32) {
        self.shuffles
            .entry(shuffle_id)
            .or_insert_with(|| vec![None; num_maps as usize]);
    }

    /// Records a finished map task's output.
    pub fn register_output(&mut self, shuffle_id: u32, loc: MapLocation) {
        if let Some(outputs) = self.shuffles.get_mut(&shuffle_id) {
            if let Some(entry) = outputs.get_mut(loc.map_partition as usize) {
                *entry = Some(loc);
            }
        }
    }

    /// Forgets every output held by `executor_id` (it was lost, or a fetch from it
    /// failed); returns the shuffles that lost any.
    pub fn remove_executor(&mut self, executor_id: &str) -> Vec<u32> {
        let mut hit = Vec::new();
        for (sid, outputs) in &mut self.shuffles {
            for entry in outputs.iter_mut() {
                if entry.as_ref().is_some_and(|l| l.executor_id == executor_id) {
                    *entry = None;
                    if !hit.contains(sid) {
                        hit.push(*sid);
                    }
                }
            }
        }
        hit
    }

    /// Shuffles with an output on `executor_id`.
    pub fn shuffles_on(&self, executor_id: &str) -> Vec<u32> {
        let mut hit: Vec<u32> = self
            .shuffles
            .iter()
            .filter(|(_, outputs)| {
                outputs
                    .iter()
                    .any(|o| o.as_ref().is_some_and(|l| l.executor_id == executor_id))
            })
            .map(|(sid, _)| *sid)
            .collect();
        hit.sort_unstable();
        hit
    }

    /// Map partitions of the shuffle that have no output.
    pub fn missing(&self, shuffle_id: u32) -> Vec<u32> {
        match self.shuffles.get(&shuffle_id) {
            Some(outputs) => (0..outputs.len() as u32)
                .filter(|&i| outputs[i as usize].is_none())
                .collect(),
            None => Vec::new(),
        }
    }

    /// True when the shuffle is known and every map output exists.
    pub fn is_available(&self, shuffle_id: u32) -> bool {
        self.shuffles
            .get(&shuffle_id)
            .is_some_and(|s| s.iter().all(Option::is_some))
    }

    /// The known outputs of a shuffle with every block size.
    pub fn locations(&self, shuffle_id: u32) -> Vec<MapLocation> {
        self.locations_for(shuffle_id, None)
    }

    /// The known outputs of a shuffle for a reducer's task description: with only the
    /// size of block `reduce` when the task reads just that one (so a description
    /// grows with the map count, not maps x reducers), else with every size.
    pub fn locations_for(&self, shuffle_id: u32, reduce: Option<u32>) -> Vec<MapLocation> {
        let Some(outputs) = self.shuffles.get(&shuffle_id) else {
            return Vec::new();
        };
        outputs
            .iter()
            .flatten()
            .map(
                |loc| match reduce.and_then(|r| Some((r, *loc.block_sizes.get(r as usize)?))) {
                    Some((r, size)) => MapLocation {
                        map_partition: loc.map_partition,
                        executor_id: loc.executor_id.clone(),
                        shuffle_address: loc.shuffle_address.clone(),
                        block_sizes: vec![size],
                        first_reduce: r,
                    },
                    None => loc.clone(),
                },
            )
            .collect()
    }

    /// Forgets a shuffle entirely.
    pub fn remove_shuffle(&mut self, shuffle_id: u32) {
        self.shuffles.remove(&shuffle_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(m: u32, e: &str) -> MapLocation {
        MapLocation {
            map_partition: m,
            executor_id: e.into(),
            ..Default::default()
        }
    }

    #[test]
    fn tracks_missing_outputs_and_executor_loss() {
        let mut t = MapOutputTracker::default();
        t.register_shuffle(7, 3);
        assert_eq!(t.missing(7), vec![0, 1, 2]);
        t.register_output(7, loc(0, "a"));
        t.register_output(7, loc(1, "b"));
        t.register_output(7, loc(2, "a"));
        assert!(t.is_available(7));
        assert_eq!(t.remove_executor("a"), vec![7]);
        assert_eq!(t.missing(7), vec![0, 2]);
        assert_eq!(
            t.remove_executor("a"),
            Vec::<u32>::new(),
            "a holds nothing now"
        );
        assert_eq!(t.missing(7), vec![0, 2], "output 1 lives on b");
        assert_eq!(t.remove_executor("b"), vec![7]);
        assert_eq!(t.missing(7), vec![0, 1, 2]);
    }
}
