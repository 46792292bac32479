//! What an executor provides to the tasks it runs: its identity, its shuffle directory
//! and scratch directory (spills, disk-cached blocks), its memory pool, its block store
//! for cached partitions, its broadcast values, and (in a cluster worker) connections to
//! other executors' shuffle services, and the rendezvous of its barrier tasks.
//!
//! Invariants: one `ExecutorEnv` per executor process (one in local mode, one per
//! worker in cluster mode); map outputs go to `shuffle_dir`, which in cluster mode is the
//! executor daemon's directory that it serves and that outlives the worker; everything
//! else under `work_dir` belongs to this env and is removed with it.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use dashmap::DashMap;

use crate::block_store::BlockStore;
use crate::memory::MemoryPool;

mod remote_blocks;
mod rendezvous;

pub(crate) use remote_blocks::{RemoteBlockSource, RemoteBlockStream};
pub(crate) use rendezvous::{AddressReporter, BarrierListen, Registration, Rendezvous, WaitEnd};

/// Shared state of one executor.
pub(crate) struct ExecutorEnv {
    pub executor_id: String,
    /// Identity of the binary whose plans this executor may run.
    pub binary_id: String,
    /// Spills under `spill/`, disk-cached blocks under `blocks/`.
    pub work_dir: PathBuf,
    shuffle_dir: PathBuf,
    pub memory: Arc<MemoryPool>,
    pub blocks: BlockStore,
    /// Broadcast id -> deserialised value (an `Arc<T>` behind `Any`).
    pub broadcasts: DashMap<u64, Arc<dyn Any + Send + Sync>>,
    /// Broadcast id -> serialised value, for broadcasts shipped to the executor once
    /// rather than with each task (cluster mode).
    pub broadcast_bytes: DashMap<u64, Arc<Vec<u8>>>,
    /// Tasks asked to stop; a running task checks once per batch at its sources.
    pub killed: dashmap::DashSet<u64>,
    /// Reads of map outputs held by other executors (cluster workers only).
    pub remote: Option<Arc<dyn RemoteBlockSource>>,
    /// Barrier tasks' addresses out, their peers in (see `rendezvous.rs`).
    pub rendezvous: Rendezvous,
}

impl ExecutorEnv {
    /// A local-mode executor: shuffle files under `work_dir/shuffle`.
    pub(crate) fn new(
        executor_id: String,
        binary_id: String,
        work_dir: PathBuf,
        memory_limit: u64,
    ) -> std::io::Result<Self> {
        let shuffle_dir = work_dir.join("shuffle");
        Self::with_dirs(
            executor_id,
            binary_id,
            shuffle_dir,
            work_dir,
            memory_limit,
            None,
        )
    }

    /// An executor whose map outputs go to `shuffle_dir` and scratch files to
    /// `work_dir`, reading remote map outputs through `remote`.
    pub(crate) fn with_dirs(
        executor_id: String,
        binary_id: String,
        shuffle_dir: PathBuf,
        work_dir: PathBuf,
        memory_limit: u64,
        remote: Option<Arc<dyn RemoteBlockSource>>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&shuffle_dir)?;
        std::fs::create_dir_all(work_dir.join("spill"))?;
        std::fs::create_dir_all(work_dir.join("blocks"))?;
        Ok(ExecutorEnv {
            executor_id,
            binary_id,
            // A cluster worker's session directory is where blocks moved here arrive.
            blocks: match remote {
                Some(_) => BlockStore::with_arrivals(work_dir.join("blocks"), shuffle_dir.clone()),
                None => BlockStore::new(work_dir.join("blocks")),
            },
            work_dir,
            shuffle_dir,
            memory: MemoryPool::new(memory_limit),
            broadcasts: DashMap::new(),
            broadcast_bytes: DashMap::new(),
            killed: dashmap::DashSet::new(),
            remote,
            rendezvous: Rendezvous::new(),
        })
    }

    pub(crate) fn shuffle_dir(&self) -> PathBuf {
        self.shuffle_dir.clone()
    }

    /// Asks task `task_id` to stop: a running task stops at its next batch (or its
    /// next collective, which fails at once), a queued one does not start.
    pub(crate) fn kill_task(&self, task_id: u64) {
        self.killed.insert(task_id);
        self.rendezvous.kill(task_id);
    }

    pub(crate) fn spill_dir(&self) -> PathBuf {
        self.work_dir.join("spill")
    }
}
