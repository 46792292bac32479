//! Checkpoints: materialising an RDD and cutting its lineage, as Spark's `checkpoint()`
//! and `localCheckpoint()` do, so that an iterative job's plans (and its recovery) stop
//! growing with the iterations.
//!
//! * [`Rdd::checkpoint`] writes every partition as an object file under the context's
//!   checkpoint directory ([`Context::set_checkpoint_dir`]; in local mode it defaults to
//!   the work dir) and returns an RDD that reads those files: the same records in the
//!   same partitions, the same partitioner, and no parents. A task that needs a
//!   partition again (after a lost executor, say) reads its file, never the old
//!   lineage; in cluster mode the directory must be one every executor sees.
//! * [`Rdd::local_checkpoint`] keeps the partitions in the executors' block stores
//!   (on disk) instead: faster, no shared storage, but a partition lost with its
//!   executor cannot be recomputed, and the job reading it fails saying so (Spark's
//!   trade-off). Tasks reading it run only where its block is (`pinned`).
//!
//! Invariants: the returned RDD holds exactly the records of the original at the time
//! of the checkpoint job; both forms return a new RDD (the original keeps its lineage,
//! unlike Spark's in-place checkpoint); a checkpoint directory is created with mode
//! 0700 and belongs to this context alone (a fresh subdirectory per context).

use std::panic::Location;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use ember_proto::{RddNode, StorageLevel as ProtoLevel};

use super::actions::SaveOptions;
use super::object_file::object_file_compute;
use super::{op_name, Rdd, StorageLevel};
use crate::context::Context;
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::io::text_input::list_input_files;
use crate::plan::op::OpRef;
use crate::plan::LineageNode;
use crate::task::{ComputeFn, Erased, TaskContext};

impl Context {
    /// Sets the directory `checkpoint()` writes into (Spark's `setCheckpointDir`): a
    /// new subdirectory of `dir` for this context, mode 0700. In cluster mode it must
    /// be a path every executor reads and writes alike (a shared file system); its
    /// files stay after the context ends, as Spark's do.
    pub fn set_checkpoint_dir(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| EmberError::io(dir, e))?;
        let own = dir.join(format!(
            "ember-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        make_private_dir(&own)?;
        *self.inner.checkpoint_dir.lock() = Some(own);
        Ok(())
    }

    /// The directory checkpoints go to: the one set, else (local mode) the work dir.
    fn checkpoint_root(&self, at: &Location<'_>) -> Result<PathBuf> {
        if let Some(dir) = self.inner.checkpoint_dir.lock().clone() {
            return Ok(dir);
        }
        match self.local_work_dir() {
            Some(work) => {
                let dir = work.join("checkpoints");
                make_private_dir(&dir)?;
                Ok(dir)
            }
            None => Err(EmberError::InvalidArgument(format!(
                "checkpoint at {}:{}: no checkpoint directory: call \
                 Context::set_checkpoint_dir with a directory every executor can reach",
                at.file(),
                at.line()
            ))),
        }
    }
}

impl Context {
    /// The checkpoint directory if there is one (set, or local mode's default), for
    /// barrier stages' superstep checkpoints; `None` in a cluster with none set.
    pub(crate) fn checkpoint_root_if_any(&self) -> Option<PathBuf> {
        let here = Location::caller();
        let has_one = self.inner.checkpoint_dir.lock().is_some() || self.local_work_dir().is_some();
        if has_one {
            self.checkpoint_root(here).ok()
        } else {
            None
        }
    }
}

/// Creates `dir` with mode 0700, or accepts it if it is already a directory.
pub(crate) fn make_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(EmberError::io(dir, e)),
    }
}

impl<T: Data> Rdd<T> {
    /// Computes this RDD now, writes its partitions into the checkpoint directory and
    /// returns an RDD reading them back, with no lineage behind it (see the module
    /// docs). Persist the RDD first if it is expensive: the checkpoint job computes it
    /// once more, as in Spark.
    #[track_caller]
    pub fn checkpoint(&self) -> Result<Rdd<T>> {
        let at = Location::caller();
        if self.node.num_partitions == 0 {
            // Nothing to write; an RDD of no partitions has no lineage worth keeping.
            return Ok(self.ctx.empty::<T>().with_partitioner(self.partitioner()));
        }
        let dir = self
            .ctx
            .checkpoint_root(at)?
            .join(format!("rdd-{}", self.node.id));
        self.save_as_object_file_with(&dir, SaveOptions { overwrite: true })?;
        let files = list_input_files(&dir.to_string_lossy())?;
        if files.len() != self.num_partitions() {
            return Err(EmberError::Plan(format!(
                "checkpoint of {} wrote {} files for {} partitions into {}",
                self.node.name,
                files.len(),
                self.num_partitions(),
                dir.display()
            )));
        }
        let compute: ComputeFn = object_file_compute::<T>;
        let name = format!("checkpoint of {}", self.node.name);
        let rdd = self.ctx.source::<T>(
            &name,
            at,
            self.node.num_partitions,
            compute,
            encode("checkpoint", &files),
        );
        Ok(rdd.with_partitioner(self.partitioner()))
    }

    /// Computes this RDD now into the executors' block stores (on disk) and returns an
    /// RDD over those blocks with no lineage behind it (Spark's `localCheckpoint`). A
    /// block lost with its executor cannot be recomputed: a job that needs it fails,
    /// saying so. Use [`checkpoint`](Self::checkpoint) where that matters.
    #[track_caller]
    pub fn local_checkpoint(&self) -> Result<Rdd<T>> {
        let at = Location::caller();
        let pass: ComputeFn = pass_through::<T>;
        let staged: Rdd<T> = self
            .narrow_child(
                "local_checkpoint",
                at,
                vec![self.node.clone()],
                true,
                self.node.num_partitions,
                pass,
                Vec::new(),
            )
            .with_partitioner(self.partitioner());
        staged.persist(StorageLevel::Disk);
        staged.count()?;
        // The same id (so the blocks just written are this node's), no parents.
        let lost: ComputeFn = lost_local_checkpoint;
        let (captures, scope_invalid) = crate::plan::node_captures();
        let node = LineageNode {
            id: staged.node.id,
            num_partitions: staged.node.num_partitions,
            deps: Vec::new(),
            compute_fn: lost.to_offset(),
            payload: encode("local_checkpoint", &self.node.name),
            name: op_name("local_checkpoint", at),
            storage: AtomicI32::new(ProtoLevel::StorageDisk as i32),
            invalid: scope_invalid,
            partitioner: self.partitioner(),
            pinned: true,
            captures,
            barrier: false,
        };
        let rdd = Rdd::from_node(self.ctx.clone(), Arc::new(node));
        // Tracked by the cleaner under the id in place of `staged` (dropped below), so
        // the blocks live exactly as long as handles on the checkpoint do.
        rdd.persist(StorageLevel::Disk);
        Ok(rdd)
    }
}

fn pass_through<T: Data>(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let parent = TaskContext::dep_parent(node, 0)?;
    Ok(Box::new(tc.compute::<T>(parent, part)?))
}

/// What runs when a local checkpoint's block is not where the task runs.
fn lost_local_checkpoint(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let of: String = decode("local_checkpoint", &node.payload)?;
    Err(EmberError::Plan(format!(
        "partition {part} of the local checkpoint of {of} (rdd {}) is not on executor {}: \
         the executor that held it was lost or the block was removed; a local checkpoint \
         cannot be recomputed (use checkpoint() for one that can)",
        node.id, tc.env.executor_id
    )))
}
