//! `TaskContext::compute`, the entry every compute function pulls its parents by:
//! reading a persisted partition through the executor's block store: the cached
//! block if there is one, else the partition computed, stored, and replayed.
//!
//! A persisted node's partition is computed once per executor, reported to the driver
//! as a cached block (so later jobs schedule onto it and skip the stages behind it),
//! and read back instead of recomputed.
//!
//! Invariant: a block is stored only after its partition was computed completely, so a
//! reader never sees a partial partition; a sampling task (which may see part of its
//! input) never stores one.

use std::rc::Rc;
use std::sync::Arc;

use ember_proto::{RddNode, StorageLevel};

use super::{Batches, TaskContext};
use crate::block_store::{Block, MemoryBlock};
use crate::data::Data;
use crate::error::Result;
use crate::spill::run::RunReader;
use crate::spill::size::SizeEstimator;

impl TaskContext {
    /// Computes partition `part` of node `id` as batches of `T`, reading the cache when
    /// the node is persisted (the one entry a compute function pulls its parents by).
    pub(crate) fn compute<T: Data>(self: &Rc<Self>, id: u32, part: u32) -> Result<Batches<T>> {
        let node = self.node(id)?;
        if node.storage != StorageLevel::StorageNone as i32 {
            return compute_cached::<T>(self, node, part);
        }
        self.compute_uncached(node, part)
    }
}

/// Reads a persisted partition from the block store, or computes and stores it.
fn compute_cached<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Batches<T>> {
    let store = &tc.env.blocks;
    match store.get(node.id, part) {
        Some(Block::Memory(block)) => {
            if let Ok(batches) = block.as_any().downcast::<Vec<Vec<T>>>() {
                return Ok(replay(batches));
            }
        }
        Some(Block::Disk(file)) => {
            // The reader holds the run file alive while it reads.
            return Ok(Box::new(RunReader::<Vec<T>>::open_shared(file)?));
        }
        None => {}
    }
    if tc.sampling() {
        // A sampling task may see part of its input: never cache that.
        return tc.compute_uncached(node, part);
    }
    // Compute the whole partition, store it, then replay it.
    let mut batches: Vec<Vec<T>> = Vec::new();
    for b in tc.compute_uncached::<T>(node, part)? {
        batches.push(b?);
    }
    let level = node.storage;
    if level == StorageLevel::StorageMemory as i32 {
        let memory = estimated_bytes(&batches);
        let arc: Arc<Vec<Vec<T>>> = Arc::new(batches);
        store.insert(node.id, part, Block::Memory(arc.clone()));
        tc.note_cached(node.id, part, (memory, 0));
        Ok(replay(arc))
    } else {
        let file = Arc::new(batches.write_run(store.dir())?);
        let disk = file.bytes();
        store.insert(node.id, part, Block::Disk(file));
        tc.note_cached(node.id, part, (0, disk));
        Ok(Box::new(batches.into_iter().map(Ok)))
    }
}

/// The estimated bytes the batches hold in memory (sampled record sizes, as the
/// spilling structures estimate theirs), for the web UI's Storage page.
fn estimated_bytes<T: Data>(batches: &[Vec<T>]) -> u64 {
    let mut sizes = SizeEstimator::new::<T>(0);
    let mut n = 0u64;
    for r in batches.iter().flatten() {
        sizes.update(r);
        n += 1;
    }
    let vecs = batches.len() as u64 * std::mem::size_of::<Vec<T>>() as u64;
    sizes.estimate(n).saturating_add(vecs)
}

fn replay<T: Data>(batches: Arc<Vec<Vec<T>>>) -> Batches<T> {
    let n = batches.len();
    Box::new((0..n).map(move |i| Ok(batches[i].clone())))
}
