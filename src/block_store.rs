//! An executor's cached RDD partitions (persist / cache / unpersist), keyed by
//! (rdd id, partition): in memory as the deserialised batches, or on disk as a
//! compressed run file under the store's directory.
//!
//! A leaf the executor environment owns: it stores and drops blocks and knows nothing
//! of tasks; reading a persisted partition through it (or computing and storing it)
//! is the task's business (`crate::task::read_through`).
//!
//! Invariant: a block is replaced or removed whole; a reader holding a block (an `Arc`)
//! keeps it readable after it is removed from the store.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dashmap::DashMap;

use crate::spill::run::RunFile;

/// One cached partition.
#[derive(Clone)]
pub(crate) enum Block {
    /// The partition's batches, as a `Vec<Vec<T>>` of its record type.
    Memory(Arc<dyn Any + Send + Sync>),
    /// The partition's batches in a run file.
    Disk(Arc<RunFile>),
}

/// An executor's cached partitions.
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

    /// Where disk blocks are written.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cached block of `(rdd_id, partition)`, if any.
    pub(crate) fn get(&self, rdd_id: u32, partition: u32) -> Option<Block> {
        self.blocks
            .get(&(rdd_id, partition))
            .map(|b| b.value().clone())
    }

    /// Stores a completely computed partition.
    pub(crate) fn insert(&self, rdd_id: u32, partition: u32, block: Block) {
        self.blocks.insert((rdd_id, partition), block);
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
