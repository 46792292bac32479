//! What an executor provides to the tasks it runs: its identity, its work directory
//! (shuffle files and spills), its memory pool, its block store for cached partitions,
//! and its cache of deserialised broadcast values.
//!
//! Invariant: one `ExecutorEnv` per executor (one in local mode); everything under
//! `work_dir` belongs to it and is removed with it.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use dashmap::DashMap;

use crate::cache::BlockStore;
use crate::memory::MemoryPool;

/// Shared state of one executor.
pub(crate) struct ExecutorEnv {
    pub executor_id: String,
    /// Identity of the binary whose plans this executor may run.
    pub binary_id: String,
    /// Shuffle files live here (`shuffle/`), spills under `spill/`.
    pub work_dir: PathBuf,
    pub memory: Arc<MemoryPool>,
    pub blocks: BlockStore,
    /// Broadcast id -> deserialised value (an `Arc<T>` behind `Any`).
    pub broadcasts: DashMap<u64, Arc<dyn Any + Send + Sync>>,
}

impl ExecutorEnv {
    pub(crate) fn new(
        executor_id: String,
        binary_id: String,
        work_dir: PathBuf,
        memory_limit: u64,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(work_dir.join("shuffle"))?;
        std::fs::create_dir_all(work_dir.join("spill"))?;
        std::fs::create_dir_all(work_dir.join("blocks"))?;
        Ok(ExecutorEnv {
            executor_id,
            binary_id,
            blocks: BlockStore::new(work_dir.join("blocks")),
            work_dir,
            memory: MemoryPool::new(memory_limit),
            broadcasts: DashMap::new(),
        })
    }

    pub(crate) fn shuffle_dir(&self) -> PathBuf {
        self.work_dir.join("shuffle")
    }

    pub(crate) fn spill_dir(&self) -> PathBuf {
        self.work_dir.join("spill")
    }
}
