//! The map-output tracker: for each shuffle, where each map partition's output lives.
//!
//! Invariants: an entry exists only for a map task that finished successfully on an
//! executor that has not been declared lost since. Outputs survive across jobs, which
//! is what lets a later job skip a stage whose shuffle output still exists. Each
//! shuffle counts its missing outputs, so asking whether it is complete (after every
//! map task's status) costs O(1), not a scan of every map partition.
//!
//! A reduce task's compact input needs one block size from every map's status: a
//! strided gather that misses the cache once per map. So the block sizes of
//! [`COLUMN_BLOCK`] consecutive reduce partitions (an aligned run) are gathered together
//! (each map's sizes for them share cache lines) and handed out as their reducers
//! launch, a reducer whose column was handed out already getting its input alone; the
//! gathered block is dropped whenever an output is registered or removed, so an input
//! always reflects the tracker as it is when the input is made.
//!
//! The sizes themselves live in a [`BlockSizes`] matrix: a status of the shuffle's
//! width (the first status's block count) is stored there and its vector dropped; a
//! status of another width is kept as it came, and read as such.

use std::collections::HashMap;

use ember_proto::bytes::Bytes;
use ember_proto::shuffle_input::{pack_size, pack_u32s};
use ember_proto::{MapHost, MapLocation, ShuffleInput};

use crate::block_sizes::{BlockSizes, BLOCK_COLUMNS};

mod replicas;

/// Reduce partitions whose block sizes are gathered in one pass over the map statuses.
pub const COLUMN_BLOCK: u32 = BLOCK_COLUMNS as u32;

/// Most bytes one gathered block of sizes may take: a shuffle with more maps than
/// this allows at [`COLUMN_BLOCK`] columns gathers fewer at once.
const COLUMN_BLOCK_BYTES: usize = 64 << 20;

/// Maps whose sizes one step of a gather moves onto the columns together.
const TILE: usize = 16;

/// How many of a lost executor's map outputs stay available, and how.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Served by a replica on another executor from now on (`replicated:N`).
    pub from_replicas: usize,
    /// Read from the shuffle's stored copy from now on (`storage:`).
    pub from_storage: usize,
}

/// Shuffle id -> one entry per map partition (its output, once registered).
#[derive(Debug, Default)]
pub struct MapOutputTracker {
    shuffles: HashMap<u32, Outputs>,
}

/// The block sizes of reduce partitions `first..first + taken.len()` for every map that
/// has an output (the `present` maps `maps`, packed, on hosts `hosts_of`), packed one
/// column per reducer in one buffer; each column is handed out once, as its input is
/// made, and shares the buffer and the two map arrays with the others.
#[derive(Debug)]
struct Columns {
    first: u32,
    present: usize,
    maps: Bytes,
    hosts_of: Bytes,
    sizes: Bytes,
    /// Bytes per packed size in `sizes` (1, 2 or 4).
    bytes: usize,
    /// Per column, the exact sizes of its blocks packed as large, in map order.
    large: Vec<Vec<u64>>,
    taken: Vec<bool>,
}

/// One shuffle's map outputs, how many of them are `None`, and the executors that
/// registered any (each once, in order of first output), with each output's index
/// into them: what a compact task input needs, kept as outputs arrive.
#[derive(Debug)]
struct Outputs {
    by_map: Vec<Option<MapLocation>>,
    missing: usize,
    hosts: Vec<MapHost>,
    host_index: HashMap<String, u32>,
    host_of: Vec<u32>,
    /// The sizes of the statuses of the shuffle's width (made with the first output);
    /// `in_matrix[m]` says map `m`'s are there (its location's own vector is empty).
    sizes: Option<BlockSizes>,
    in_matrix: Vec<bool>,
    /// Gathered block sizes; `None` whenever an output changed since.
    gathered: Option<Columns>,
    /// Passes `gather` made over the statuses (what the tests count).
    gather_passes: u64,
}

impl MapOutputTracker {
    /// Makes sure the shuffle is known with `num_maps` map partitions.
    pub fn register_shuffle(&mut self, shuffle_id: u32, num_maps: u32) {
        self.shuffles.entry(shuffle_id).or_insert_with(|| Outputs {
            by_map: vec![None; num_maps as usize],
            missing: num_maps as usize,
            hosts: Vec::new(),
            host_index: HashMap::new(),
            host_of: vec![0; num_maps as usize],
            sizes: None,
            in_matrix: vec![false; num_maps as usize],
            gathered: None,
            gather_passes: 0,
        });
    }

    /// Records a finished map task's output.
    pub fn register_output(&mut self, shuffle_id: u32, loc: MapLocation) {
        let Some(outputs) = self.shuffles.get_mut(&shuffle_id) else {
            return;
        };
        let m = loc.map_partition as usize;
        if m >= outputs.by_map.len() {
            return;
        }
        let host = outputs.host(&loc.executor_id, &loc.shuffle_address);
        if outputs.by_map[m].is_none() {
            outputs.missing -= 1;
        }
        outputs.gathered = None;
        let mut loc = loc;
        let width = loc.block_sizes.len();
        let sizes = outputs
            .sizes
            .get_or_insert_with(|| BlockSizes::new(outputs.by_map.len(), width));
        outputs.in_matrix[m] = sizes.width() == width;
        if outputs.in_matrix[m] {
            sizes.store(m as u32, &loc.block_sizes);
            loc.block_sizes = Vec::new();
        }
        outputs.by_map[m] = Some(loc);
        outputs.host_of[m] = host;
    }

    /// `executor_id` is gone. Each of its outputs with a replica on a live executor
    /// (`MapLocation::replicas`) is served by the first replica from now on; each of its
    /// other outputs that was also stored (`MapLocation::stored`) is read from storage
    /// (its host becomes a storage host of the same executor id, so a fetch failure
    /// there still names it); the rest are forgotten. Replicas it held of other
    /// executors' outputs are dropped. Returns the shuffles that lost any output and
    /// how many outputs were kept (from replicas and from storage).
    pub fn executor_lost(&mut self, executor_id: &str) -> (Vec<u32>, Kept) {
        let mut hit = Vec::new();
        let mut kept = Kept::default();
        for (sid, outputs) in &mut self.shuffles {
            kept.from_replicas += outputs.promote_replicas(executor_id);
            let mut storage_host = None;
            for m in 0..outputs.by_map.len() {
                let Some(loc) = outputs.by_map[m].as_mut() else {
                    continue;
                };
                if loc.executor_id != executor_id || loc.from_storage || !loc.stored {
                    continue;
                }
                loc.from_storage = true;
                loc.shuffle_address.clear();
                let host = *storage_host.get_or_insert_with(|| {
                    outputs.hosts.push(MapHost {
                        executor_id: executor_id.to_string().into(),
                        shuffle_address: Default::default(),
                        from_storage: true,
                    });
                    outputs.hosts.len() as u32 - 1
                });
                outputs.host_of[m] = host;
                outputs.gathered = None;
                kept.from_storage += 1;
            }
            if outputs.forget_where(|l| l.executor_id == executor_id && !l.from_storage) {
                hit.push(*sid);
            }
        }
        (hit, kept)
    }

    /// A reducer could not read a map output of `shuffle_id` of `executor_id`. If it
    /// read the stored copy (`from_storage`), the stored copies of that executor's
    /// outputs of the shuffle are all presumed bad (a store gone or unmounted would
    /// otherwise cost one stage attempt per copy) and forgotten; lineage recomputes
    /// them. Otherwise the executor is presumed to have lost every output it holds, as Spark presumes without an external shuffle service: its
    /// stored outputs are read from storage from now on, the rest are forgotten
    /// ([`executor_lost`](Self::executor_lost)); a reducer that read the executor after
    /// its outputs moved to storage (launched before the loss was known) changes
    /// nothing. Returns the shuffles that lost any output.
    pub fn fetch_failed(
        &mut self,
        executor_id: &str,
        shuffle_id: u32,
        from_storage: bool,
    ) -> Vec<u32> {
        if from_storage {
            let dropped = self.shuffles.get_mut(&shuffle_id).is_some_and(|outputs| {
                outputs.forget_where(|l| l.from_storage && l.executor_id == executor_id)
            });
            return if dropped {
                vec![shuffle_id]
            } else {
                Vec::new()
            };
        }
        self.executor_lost(executor_id).0
    }

    /// What [`executor_lost`](Self::executor_lost) would keep of the outputs read from
    /// `executor_id`: those with a replica elsewhere, and the others that are stored.
    pub fn kept_if_lost(&self, executor_id: &str) -> Kept {
        let mut kept = Kept::default();
        for l in self
            .shuffles
            .values()
            .flat_map(|o| o.by_map.iter().flatten())
        {
            if l.executor_id != executor_id || l.from_storage {
                continue;
            }
            if l.replicas
                .iter()
                .any(|r| r.executor_id != executor_id.as_bytes())
            {
                kept.from_replicas += 1;
            } else if l.stored {
                kept.from_storage += 1;
            }
        }
        kept
    }

    /// Shuffles with an output on `executor_id`.
    pub fn shuffles_on(&self, executor_id: &str) -> Vec<u32> {
        let mut hit: Vec<u32> = self
            .shuffles
            .iter()
            .filter(|(_, outputs)| {
                outputs
                    .by_map
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
            Some(outputs) => (0..outputs.by_map.len() as u32)
                .filter(|&i| outputs.by_map[i as usize].is_none())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The executor serving map `map`'s output of the shuffle, if it has one.
    pub fn executor_of(&self, shuffle_id: u32, map: u32) -> Option<String> {
        let outputs = self.shuffles.get(&shuffle_id)?;
        let loc = outputs.by_map.get(map as usize)?.as_ref()?;
        Some(loc.executor_id.clone())
    }

    /// True when the shuffle is known and every map output exists.
    pub fn is_available(&self, shuffle_id: u32) -> bool {
        self.shuffles
            .get(&shuffle_id)
            .is_some_and(|s| s.missing == 0)
    }

    /// The known outputs of a shuffle with every block size.
    pub fn locations(&self, shuffle_id: u32) -> Vec<MapLocation> {
        match self.shuffles.get(&shuffle_id) {
            Some(outputs) => (0..outputs.by_map.len() as u32)
                .filter_map(|m| outputs.location(m))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The shuffle input of a task description: for a task reading one reduce partition
    /// the compact form (each executor named once, one block size per map, so a
    /// description grows with the map count, not maps x reducers), else every location
    /// with every block size.
    pub fn input_for(&mut self, shuffle_id: u32, reduce: Option<u32>) -> ShuffleInput {
        let (Some(r), Some(outputs)) = (reduce, self.shuffles.get_mut(&shuffle_id)) else {
            return ShuffleInput {
                shuffle_id,
                maps: self.locations(shuffle_id),
                ..Default::default()
            };
        };
        if let Some(input) = outputs.gathered_input(shuffle_id, r) {
            return input;
        }
        // A column already handed out (a retry, a speculative copy) is made alone rather
        // than gathering its whole block again.
        if !outputs.gathered_spans(r) {
            outputs.gather(r);
            if let Some(input) = outputs.gathered_input(shuffle_id, r) {
                return input;
            }
        }
        outputs.input_one(shuffle_id, r)
    }

    /// Forgets a shuffle entirely.
    pub fn remove_shuffle(&mut self, shuffle_id: u32) {
        self.shuffles.remove(&shuffle_id);
    }
}

impl Outputs {
    /// Forgets every output `which` picks; true if there was any.
    fn forget_where(&mut self, which: impl Fn(&MapLocation) -> bool) -> bool {
        let mut any = false;
        for entry in self.by_map.iter_mut() {
            if entry.as_ref().is_some_and(&which) {
                *entry = None;
                self.missing += 1;
                any = true;
            }
        }
        if any {
            self.gathered = None;
        }
        any
    }

    /// Map `m`'s output with every block size, if it has one (without its replicas: a
    /// task reads the copy the tracker names, see [`MapOutputTracker::replicas_of`]).
    fn location(&self, m: u32) -> Option<MapLocation> {
        let loc = self.by_map[m as usize].as_ref()?;
        let mut loc = MapLocation {
            replicas: Vec::new(),
            ..loc.clone()
        };
        if let Some(sizes) = self.matrix_of(m as usize) {
            loc.block_sizes = sizes.sizes(m);
        }
        Some(loc)
    }

    /// The matrix, when it holds map `m`'s sizes.
    fn matrix_of(&self, m: usize) -> Option<&BlockSizes> {
        self.sizes.as_ref().filter(|_| self.in_matrix[m])
    }

    /// How many block sizes map `m`'s status has (it has an output).
    fn blocks_of(&self, m: usize, loc: &MapLocation) -> usize {
        self.matrix_of(m)
            .map_or(loc.block_sizes.len(), BlockSizes::width)
    }

    /// The size of block `r` of map `m`'s status, if it has that block.
    fn size_of(&self, m: usize, loc: &MapLocation, r: usize) -> Option<u64> {
        match self.matrix_of(m) {
            Some(sizes) => (r < sizes.width()).then(|| sizes.get(m as u32, r)),
            None => loc.block_sizes.get(r).copied(),
        }
    }

    /// Reducer `r`'s compact input from the gathered block, if it holds `r`'s column
    /// (not yet handed out).
    fn gathered_input(&mut self, shuffle_id: u32, r: u32) -> Option<ShuffleInput> {
        let g = self.gathered.as_mut()?;
        let c = r.checked_sub(g.first)? as usize;
        if std::mem::replace(g.taken.get_mut(c)?, true) {
            return None;
        }
        let column = g.present * g.bytes;
        Some(ShuffleInput {
            shuffle_id,
            hosts: self.hosts.clone(),
            map_partitions: g.maps.clone(),
            map_hosts: g.hosts_of.clone(),
            map_block_sizes: g.sizes.slice(c * column..(c + 1) * column),
            block_size_bytes: g.bytes as u32,
            large_block_sizes: std::mem::take(&mut g.large[c]),
            reduce: r,
            ..Default::default()
        })
    }

    /// True when the gathered block spans reducer `r` (its column may be handed out).
    fn gathered_spans(&self, r: u32) -> bool {
        self.gathered
            .as_ref()
            .is_some_and(|g| r >= g.first && ((r - g.first) as usize) < g.taken.len())
    }

    /// Gathers, in one pass over the statuses, the block sizes of the aligned run of
    /// reducers that holds `r`: at most [`COLUMN_BLOCK`] of them, fewer if more would
    /// pass [`COLUMN_BLOCK_BYTES`], starting at a multiple of that width (so reducers
    /// launched in any order share a block). Gathers nothing if some status lacks block
    /// `r` (the inputs are then made one by one, with such a status as it is).
    fn gather(&mut self, r: u32) {
        self.gathered = None;
        let present = self.by_map.len() - self.missing;
        let by_bytes = COLUMN_BLOCK_BYTES / (present.max(1) * 4);
        let most = (COLUMN_BLOCK as usize).min(by_bytes);
        let Some(reduces) = self
            .by_map
            .iter()
            .enumerate()
            .filter_map(|(m, l)| Some(self.blocks_of(m, l.as_ref()?)))
            .min()
        else {
            return; // no outputs
        };
        if most == 0 || r as usize >= reduces {
            return;
        }
        let first = r as usize - r as usize % most;
        // `first <= r < reduces` and `r < first + most`, so `r` is in the block.
        let width = most.min(reduces - first);
        self.gather_passes += 1;
        // As narrow as the matrix's sizes allow when every output's sizes are there
        // (a status of another width is packed as it came, four bytes each).
        let all_in_matrix = self
            .by_map
            .iter()
            .zip(&self.in_matrix)
            .all(|(l, &m)| l.is_none() || m);
        let bytes = match &self.sizes {
            Some(matrix) if all_in_matrix => matrix.packed_bytes(),
            _ => 4,
        };
        let mut maps = Vec::with_capacity(present);
        let mut hosts_of = Vec::with_capacity(present);
        let mut sizes = vec![0u8; width * present * bytes];
        let mut large = vec![Vec::new(); width];
        // Maps whose sizes are in the matrix, not yet packed onto the columns, and the
        // position in each column of the first of them.
        let mut tile: Vec<u32> = Vec::with_capacity(TILE);
        let mut tile_at = 0;
        let flush = |tile: &mut Vec<u32>, at: usize, sizes: &mut [u8], large: &mut [Vec<u64>]| {
            if let (Some(matrix), false) = (&self.sizes, tile.is_empty()) {
                matrix.pack_tile(tile, first, width, sizes, present, at, bytes, large);
            }
            tile.clear();
        };
        for (m, (loc, &host)) in self.by_map.iter().zip(&self.host_of).enumerate() {
            let Some(loc) = loc else { continue };
            let at = maps.len();
            maps.push(loc.map_partition);
            hosts_of.push(host);
            if self.matrix_of(m).is_some() {
                if tile.is_empty() {
                    tile_at = at;
                }
                tile.push(m as u32);
                if tile.len() == TILE {
                    flush(&mut tile, tile_at, &mut sizes, &mut large);
                }
                continue;
            }
            flush(&mut tile, tile_at, &mut sizes, &mut large);
            for (c, &size) in loc.block_sizes[first..first + width].iter().enumerate() {
                let v = pack_size(size, &mut large[c]);
                let start = (c * present + at) * 4;
                sizes[start..start + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        flush(&mut tile, tile_at, &mut sizes, &mut large);
        self.gathered = Some(Columns {
            first: first as u32,
            present,
            maps: pack_u32s(maps),
            hosts_of: pack_u32s(hosts_of),
            sizes: sizes.into(),
            bytes,
            large,
            taken: vec![false; width],
        });
    }

    /// Reducer `r`'s input made alone: a status without block `r` goes as it is.
    fn input_one(&self, shuffle_id: u32, r: u32) -> ShuffleInput {
        // Triples first, then the three arrays: about 13 % faster on 50,000 maps x
        // 1,000 reducers than pushing into the arrays inside this loop.
        let mut general = Vec::new();
        let mut compact = Vec::with_capacity(self.by_map.len() - self.missing);
        for (m, (loc, &host)) in self.by_map.iter().zip(&self.host_of).enumerate() {
            let Some(loc) = loc else { continue };
            let Some(size) = self.size_of(m, loc, r as usize) else {
                // A status without that block: sent as it is.
                general.extend(self.location(m as u32));
                continue;
            };
            compact.push((loc.map_partition, host, size));
        }
        let hosts = self.hosts.clone();
        let mut input = ShuffleInput::compact(shuffle_id, r, hosts, compact.into_iter());
        input.maps = general;
        input
    }
}

#[cfg(test)]
mod tests;
