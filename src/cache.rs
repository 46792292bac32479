//! Cached RDD partitions (persist / cache / unpersist).
//!
//! A persisted node's partition is computed once per executor, stored in the
//! executor's [`BlockStore`] (in memory as the deserialised batches, or on disk as a
//! compressed run file), reported to the driver as a cached block so later jobs
//! schedule onto it and skip the stages behind it, and read back instead of recomputed.
//!
//! Invariant: a block is stored only after its partition was computed completely, so a
//! reader never sees a partial partition.

use std::any::Any;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use dashmap::DashMap;
use ember_proto::{RddNode, StorageLevel};

use crate::data::Data;
use crate::error::Result;
use crate::spill::run::{RunReader, RunWriter};
use crate::task::{Batches, TaskContext};

enum Block {
    Memory(Arc<dyn Any + Send + Sync>),
    Disk(Arc<crate::spill::run::RunFile>),
}

/// An executor's cached partitions, keyed by (rdd id, partition).
pub(crate) struct BlockStore {
    dir: PathBuf,
    blocks: DashMap<(u32, u32), Block>,
}

impl BlockStore {
    pub(crate) fn new(dir: PathBuf) -> Self {
        BlockStore {
            dir,
            blocks: DashMap::new(),
        }
    }

    /// Drops every cached partition of an RDD.
    pub(crate) fn remove_rdd(&self, rdd_id: u32) {
        self.blocks.retain(|(r, _), _| *r != rdd_id);
    }

    /// Drops every cached partition of the RDDs with ids in `[lo, hi)` (a client
    /// session's ids, when it ends).
    pub(crate) fn remove_rdd_range(&self, lo: u32, hi: u32) {
        self.blocks.retain(|(r, _), _| *r < lo || *r >= hi);
    }
}

/// Reads a persisted partition from the block store, or computes and stores it.
pub(crate) fn compute_cached<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Batches<T>> {
    let key = (node.id, part);
    let store = &tc.env.blocks;
    let found = store.blocks.get(&key).map(|b| match b.value() {
        Block::Memory(a) => Block::Memory(a.clone()),
        Block::Disk(f) => Block::Disk(f.clone()),
    });
    match found {
        Some(Block::Memory(any)) => {
            if let Ok(batches) = any.downcast::<Vec<Vec<T>>>() {
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
        let arc: Arc<Vec<Vec<T>>> = Arc::new(batches);
        store.blocks.insert(key, Block::Memory(arc.clone()));
        tc.note_cached(node.id, part);
        Ok(replay(arc))
    } else {
        let mut w = RunWriter::<Vec<T>>::create(&store.dir)?;
        for b in &batches {
            w.push(b)?;
        }
        let file = Arc::new(w.finish()?);
        store.blocks.insert(key, Block::Disk(file));
        tc.note_cached(node.id, part);
        Ok(Box::new(batches.into_iter().map(Ok)))
    }
}

fn replay<T: Data>(batches: Arc<Vec<Vec<T>>>) -> Batches<T> {
    let n = batches.len();
    Box::new((0..n).map(move |i| Ok(batches[i].clone())))
}
