//! What the Storage page shows: the cached partitions of persisted RDDs (local
//! checkpoints among them), per RDD and executor, built from `block_cached`,
//! `blocks_removed` and `executor_lost` events (Spark's `RDDStorageInfo`).
//!
//! Invariants: a block is counted once per (partition, executor) however often it is
//! reported; a partition is cached while any executor holds it; a partition number at
//! or past the RDD's partition count is ignored (the scheduler already drops those);
//! sizes add saturating. Memory is bounded: at most [`MAX_RDDS`] RDDs (a new one past
//! that is not tracked, counted in `untracked_blocks`) and [`MAX_BLOCKS`] blocks over
//! all of them (further blocks are counted there too, never stored).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::event::AppEvent;

/// RDDs tracked at most.
pub const MAX_RDDS: usize = 1000;
/// Blocks (partition, executor) tracked at most over all RDDs.
pub const MAX_BLOCKS: usize = 100_000;

/// One cached RDD, as the Storage page and `/api/v1/storage/rdd` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RddStorageInfo {
    pub rdd_id: u32,
    pub name: String,
    pub application: String,
    /// `memory`, `disk` or `memory and disk`.
    pub storage_level: &'static str,
    pub num_partitions: u32,
    /// Partitions held by at least one executor.
    pub partitions_cached: u32,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Per executor: the blocks it holds and their sizes.
    pub executors: Vec<RddExecutorInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RddExecutorInfo {
    pub executor_id: String,
    pub blocks: u32,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

#[derive(Debug, Clone, Default)]
struct Rdd {
    name: String,
    application: String,
    storage: i32,
    num_partitions: u32,
    /// (partition, executor) → (memory, disk) bytes.
    blocks: BTreeMap<(u32, String), (u64, u64)>,
}

/// The cached RDDs of an application (or a driver's applications).
#[derive(Debug, Clone, Default)]
pub struct Storage {
    rdds: BTreeMap<u32, Rdd>,
    blocks: usize,
    /// Blocks reported but not tracked (over the bounds).
    pub untracked_blocks: u64,
}

/// A cached block as `block_cached` reports it.
pub(crate) struct Cached<'a> {
    pub application: &'a str,
    pub rdd_id: u32,
    pub rdd_name: &'a str,
    pub num_partitions: u32,
    pub storage: i32,
    pub partition: u32,
    pub executor_id: &'a str,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

fn level_name(storage: i32) -> &'static str {
    match storage {
        1 => "memory",
        2 => "disk",
        3 => "memory and disk",
        _ => "none",
    }
}

impl Storage {
    /// Applies a `block_cached` or `blocks_removed` event (others are not its).
    pub(crate) fn apply(&mut self, e: &AppEvent) {
        match e {
            AppEvent::BlockCached {
                application,
                rdd_id,
                rdd_name,
                num_partitions,
                storage,
                partition,
                executor_id,
                memory_bytes,
                disk_bytes,
                ..
            } => self.cached(Cached {
                application,
                rdd_id: *rdd_id,
                rdd_name,
                num_partitions: *num_partitions,
                storage: *storage,
                partition: *partition,
                executor_id,
                memory_bytes: *memory_bytes,
                disk_bytes: *disk_bytes,
            }),
            AppEvent::BlocksRemoved { rdd_lo, rdd_hi, .. } => self.removed(*rdd_lo, *rdd_hi),
            _ => {}
        }
    }

    pub(crate) fn cached(&mut self, b: Cached<'_>) {
        if b.partition >= b.num_partitions {
            return;
        }
        if !self.rdds.contains_key(&b.rdd_id) && self.rdds.len() >= MAX_RDDS {
            self.untracked_blocks += 1;
            return;
        }
        let rdd = self.rdds.entry(b.rdd_id).or_insert_with(|| Rdd {
            name: b.rdd_name.to_string(),
            application: b.application.to_string(),
            storage: b.storage,
            num_partitions: b.num_partitions,
            blocks: BTreeMap::new(),
        });
        let key = (b.partition, b.executor_id.to_string());
        if let Some(sizes) = rdd.blocks.get_mut(&key) {
            *sizes = (b.memory_bytes, b.disk_bytes);
            return;
        }
        if self.blocks >= MAX_BLOCKS {
            self.untracked_blocks += 1;
            if rdd.blocks.is_empty() {
                self.rdds.remove(&b.rdd_id);
            }
            return;
        }
        rdd.blocks.insert(key, (b.memory_bytes, b.disk_bytes));
        self.blocks += 1;
    }

    /// Drops every block of RDDs `lo..hi`.
    pub(crate) fn removed(&mut self, lo: u32, hi: u32) {
        let gone: Vec<u32> = self.rdds.range(lo..hi.max(lo)).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some(r) = self.rdds.remove(&id) {
                self.blocks -= r.blocks.len();
            }
        }
    }

    /// Drops the blocks an executor held (they went with it).
    pub(crate) fn executor_lost(&mut self, executor_id: &str) {
        for r in self.rdds.values_mut() {
            let before = r.blocks.len();
            r.blocks.retain(|(_, ex), _| ex != executor_id);
            self.blocks -= before - r.blocks.len();
        }
        self.rdds.retain(|_, r| !r.blocks.is_empty());
    }

    /// The RDDs of `application` only.
    pub(crate) fn scoped(&self, application: &str) -> Storage {
        let rdds: BTreeMap<u32, Rdd> = (self.rdds.iter())
            .filter(|(_, r)| r.application == application)
            .map(|(id, r)| (*id, r.clone()))
            .collect();
        Storage {
            blocks: rdds.values().map(|r| r.blocks.len()).sum(),
            rdds,
            untracked_blocks: 0,
        }
    }

    /// Every cached RDD, by id.
    pub fn rdds(&self) -> Vec<RddStorageInfo> {
        self.rdds.iter().map(|(id, r)| info(*id, r)).collect()
    }

    pub fn rdd(&self, rdd_id: u32) -> Option<RddStorageInfo> {
        self.rdds.get(&rdd_id).map(|r| info(rdd_id, r))
    }
}

fn info(rdd_id: u32, r: &Rdd) -> RddStorageInfo {
    let mut executors: BTreeMap<&str, RddExecutorInfo> = BTreeMap::new();
    let mut partitions = std::collections::BTreeSet::new();
    let (mut memory, mut disk) = (0u64, 0u64);
    for ((p, ex), (m, d)) in &r.blocks {
        partitions.insert(*p);
        memory = memory.saturating_add(*m);
        disk = disk.saturating_add(*d);
        let e = executors.entry(ex).or_insert_with(|| RddExecutorInfo {
            executor_id: ex.clone(),
            blocks: 0,
            memory_bytes: 0,
            disk_bytes: 0,
        });
        e.blocks += 1;
        e.memory_bytes = e.memory_bytes.saturating_add(*m);
        e.disk_bytes = e.disk_bytes.saturating_add(*d);
    }
    RddStorageInfo {
        rdd_id,
        name: r.name.clone(),
        application: r.application.clone(),
        storage_level: level_name(r.storage),
        num_partitions: r.num_partitions,
        partitions_cached: partitions.len() as u32,
        memory_bytes: memory,
        disk_bytes: disk,
        executors: executors.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(rdd_id: u32, partition: u32, ex: &str, m: u64) -> Cached<'_> {
        Cached {
            application: "",
            rdd_id,
            rdd_name: "cache at src/main.rs:3",
            num_partitions: 4,
            storage: 1,
            partition,
            executor_id: ex,
            memory_bytes: m,
            disk_bytes: 0,
        }
    }

    #[test]
    fn blocks_are_bounded_and_counted_once() {
        let mut s = Storage::default();
        s.cached(block(1, 0, "e1", 10));
        s.cached(block(1, 0, "e1", 10)); // a repeat replaces
        s.cached(block(1, 9, "e1", 10)); // past the partition count: ignored
        assert_eq!(
            s.rdd(1).map(|r| (r.partitions_cached, r.memory_bytes)),
            Some((1, 10))
        );
        for id in 0..(MAX_RDDS as u32 + 5) {
            s.cached(block(100 + id, 0, "e1", 1));
        }
        assert_eq!(s.rdds().len(), MAX_RDDS);
        assert_eq!(s.untracked_blocks, 6);
        s.removed(0, u32::MAX);
        assert!(s.rdds().is_empty());
        assert_eq!(s.blocks, 0);
    }
}
