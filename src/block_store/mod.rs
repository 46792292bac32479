//! An executor's cached RDD partitions (persist / cache / unpersist), keyed by
//! (rdd id, partition): in memory as the deserialised batches, or on disk as a
//! compressed run file under the store's directory.
//!
//! A leaf the executor environment owns: it stores and drops blocks and knows nothing
//! of tasks; reading a persisted partition through it (or computing and storing it)
//! is the task's business (`crate::task::read_through`).
//!
//! A block can also move between executors (`moved`): a decommissioning executor's
//! worker writes its blocks as files into its session's shuffle directory, the executor
//! daemon pushes them to peers, and a peer's worker adopts such a file (as a disk block)
//! the first time a task asks for that partition.
//!
//! Invariant: a block is replaced or removed whole; a reader holding a block (an `Arc`)
//! keeps it readable after it is removed from the store.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dashmap::DashMap;

use crate::data::Data;
use crate::error::Result;
use crate::spill::run::{RunFile, RunWriter};

pub(crate) mod moved;

/// One cached partition.
#[derive(Clone)]
pub(crate) enum Block {
    /// The partition's batches, as a `Vec<Vec<T>>` of its record type.
    Memory(Arc<dyn MemoryBlock>),
    /// The partition's batches in a run file.
    Disk(Arc<RunFile>),
}

/// A partition's batches in memory (a `Vec<Vec<T>>`), typed only where it was made:
/// read back by downcasting, written out (to move it) through the writer of its type.
pub(crate) trait MemoryBlock: Send + Sync {
    /// The batches, for a downcast to `Vec<Vec<T>>`.
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// The batches as a run file of `Vec<T>` records in `dir`.
    fn write_run(&self, dir: &Path) -> Result<RunFile>;
}

impl<T: Data> MemoryBlock for Vec<Vec<T>> {
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn write_run(&self, dir: &Path) -> Result<RunFile> {
        let mut w = RunWriter::<Vec<T>>::create(dir)?;
        for b in self {
            w.push(b)?;
        }
        w.finish()
    }
}

/// An executor's cached partitions.
pub(crate) struct BlockStore {
    dir: PathBuf,
    /// Where blocks moved here from other executors arrive (`moved`), if anywhere.
    arrivals: Option<PathBuf>,
    /// Moved files found damaged: not looked at again (their partitions are computed).
    rejected: dashmap::DashSet<(u32, u32)>,
    blocks: DashMap<(u32, u32), Block>,
}

impl BlockStore {
    pub(crate) fn new(dir: PathBuf) -> Self {
        BlockStore {
            dir,
            arrivals: None,
            rejected: dashmap::DashSet::new(),
            blocks: DashMap::new(),
        }
    }

    /// A store that also adopts blocks moved into `arrivals` (a worker's session
    /// shuffle directory).
    pub(crate) fn with_arrivals(dir: PathBuf, arrivals: PathBuf) -> Self {
        BlockStore {
            arrivals: Some(arrivals),
            ..BlockStore::new(dir)
        }
    }

    /// Where disk blocks are written.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cached block of `(rdd_id, partition)`, if any: one stored here, or one moved
    /// here from another executor (adopted now; a moved file that cannot be adopted is
    /// logged and ignored, so the partition is computed).
    pub(crate) fn get(&self, rdd_id: u32, partition: u32) -> Option<Block> {
        if let Some(b) = self.blocks.get(&(rdd_id, partition)) {
            return Some(b.value().clone());
        }
        let arrivals = self.arrivals.as_deref()?;
        if self.rejected.contains(&(rdd_id, partition)) {
            return None;
        }
        let path = ember_shuffle::cached_block_path(arrivals, rdd_id, partition);
        match moved::adopt(&path) {
            Ok(Some(run)) => {
                let block = Block::Disk(Arc::new(run));
                tracing::debug!(rdd_id, partition, "adopted a cached block moved here");
                self.blocks.insert((rdd_id, partition), block.clone());
                Some(block)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(
                    rdd_id,
                    partition,
                    "ignoring a moved cached block (the partition is computed): {e}"
                );
                self.rejected.insert((rdd_id, partition));
                None
            }
        }
    }

    /// Writes the blocks of `wanted` this store holds to `dir` (each as
    /// [`ember_shuffle::cached_block_path`]) for moving them to another executor;
    /// the blocks written and their file sizes. A block that cannot be written is
    /// logged and left out (it is recomputed where it is needed).
    pub(crate) fn export(&self, wanted: &[(u32, u32)], dir: &Path) -> Vec<((u32, u32), u64)> {
        let mut out = Vec::new();
        for &(rdd_id, partition) in wanted {
            let to = ember_shuffle::cached_block_path(dir, rdd_id, partition);
            // A block moved here and not read yet is adopted now: it moves on too.
            let Some(block) = self.get(rdd_id, partition) else {
                continue;
            };
            if let Block::Disk(run) = &block {
                if run.path() == to {
                    // Adopted from that very file: it is already what a move sends.
                    if let Ok(meta) = std::fs::metadata(&to) {
                        out.push(((rdd_id, partition), meta.len()));
                    }
                    continue;
                }
            }
            // A memory block is written as a run first (deleted when `written` drops).
            let written;
            let run: &RunFile = match &block {
                Block::Memory(batches) => match batches.write_run(&self.dir) {
                    Ok(r) => {
                        written = r;
                        &written
                    }
                    Err(e) => {
                        tracing::warn!(
                            rdd_id,
                            partition,
                            "cannot write a cached block to move it: {e}"
                        );
                        continue;
                    }
                },
                Block::Disk(run) => run,
            };
            match moved::export(run, &to) {
                Ok(bytes) => out.push(((rdd_id, partition), bytes)),
                Err(e) => tracing::warn!(
                    rdd_id,
                    partition,
                    "cannot write a cached block to move it: {e}"
                ),
            }
        }
        out
    }

    /// Stores a completely computed partition.
    pub(crate) fn insert(&self, rdd_id: u32, partition: u32, block: Block) {
        self.blocks.insert((rdd_id, partition), block);
    }

    /// Drops every cached partition of an RDD.
    pub(crate) fn remove_rdd(&self, rdd_id: u32) {
        self.blocks.retain(|(r, _), _| *r != rdd_id);
        self.rejected.retain(|(r, _)| *r != rdd_id);
    }

    /// Drops every cached partition of the RDDs with ids in `[lo, hi)` (a client
    /// session's ids, when it ends).
    pub(crate) fn remove_rdd_range(&self, lo: u32, hi: u32) {
        self.blocks.retain(|(r, _), _| *r < lo || *r >= hi);
        self.rejected.retain(|(r, _)| *r < lo || *r >= hi);
    }
}
