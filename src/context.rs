//! `Context`: the entry point of a job (Spark's `SparkContext`). It holds its
//! [`Backend`](crate::backend::Backend) (local mode or a cluster session, chosen in
//! `connect.rs`), hands out RDD, shuffle, broadcast and accumulator ids, and runs jobs
//! for actions (`job.rs`); sources are `impl Context` blocks beside their compute
//! functions (`rdd/source/`, `rdd/parquet.rs`, `rdd/csv.rs`).
//!
//! Invariant: ids are unique for the context's lifetime; dropping the last handle
//! stops the context's [`cleaner`](crate::cleaner), then shuts the backend down (local
//! mode: its task threads joined and its work directory removed). While the context lives, the cleaner forgets the
//! shuffles and cached blocks no live RDD reaches any more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::accumulator::{Accumulator, AccumulatorValue, ClientAccumulator};
use crate::backend::Backend;
use crate::broadcast::Broadcast;
use crate::cleaner::Cleaner;
use crate::conf::Conf;
use crate::data::{encode, Data};

/// The next context's [`ContextInner::id`].
static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(0);

/// The handle through which a job creates RDDs and runs actions. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub conf: Conf,
    pub backend: Box<dyn Backend>,
    pub binary_id: String,
    default_parallelism: usize,
    next_rdd: AtomicU32,
    next_shuffle: AtomicU32,
    next_broadcast: AtomicU64,
    next_accumulator: AtomicU64,
    pub broadcasts: Mutex<HashMap<u64, Vec<u8>>>,
    pub accumulators: Mutex<HashMap<u64, Box<dyn ClientAccumulator>>>,
    pub last_job: Mutex<Option<crate::job::JobMetrics>>,
    /// Where `checkpoint()` writes (set by `set_checkpoint_dir`).
    pub checkpoint_dir: Mutex<Option<std::path::PathBuf>>,
    /// Forgets what no live RDD reaches (see [`crate::cleaner`]).
    pub cleaner: Cleaner,
    /// `storage:` shuffle durability in cluster mode: this application's own directory
    /// under the configured one, where map outputs are stored (removed with the context).
    pub shuffle_store: Option<std::path::PathBuf>,
    /// Unique in the process: keys each thread's pool and job group for this context
    /// (`job_group.rs`).
    pub id: u64,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.cleaner.stop();
        self.backend.shutdown();
        if let Some(store) = &self.shuffle_store {
            crate::shuffle::stored::remove_store(store);
        }
    }
}

/// This application's directory under a `storage:` durability's directory: named by
/// process, time and session id base, so two applications never share one.
fn shuffle_store(conf: &Conf, id_base: u32) -> Option<std::path::PathBuf> {
    let (crate::conf::ShuffleDurability::Storage(root), crate::conf::Master::Cluster(_)) =
        (&conf.shuffle_durability, &conf.master)
    else {
        return None;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Some(root.join(format!(
        "ember-app-{}-{nanos}-{id_base}",
        std::process::id()
    )))
}

impl Context {
    /// A context whose jobs run on `backend` (see `connect.rs`).
    pub(crate) fn new(
        conf: Conf,
        backend: Box<dyn Backend>,
        binary_id: String,
        default_parallelism: usize,
        id_base: u32,
        broadcast_base: u64,
    ) -> Context {
        let default_parallelism = conf.default_parallelism.unwrap_or(default_parallelism);
        let shuffle_store = shuffle_store(&conf, id_base);
        let release = match &shuffle_store {
            Some(dir) => crate::cleaner::removing_stored(backend.release_target(), dir.clone()),
            None => backend.release_target(),
        };
        Context {
            inner: Arc::new(ContextInner {
                cleaner: Cleaner::start(release),
                shuffle_store,
                conf,
                backend,
                binary_id,
                default_parallelism,
                next_rdd: AtomicU32::new(id_base),
                next_shuffle: AtomicU32::new(id_base),
                next_broadcast: AtomicU64::new(broadcast_base),
                next_accumulator: AtomicU64::new(0),
                broadcasts: Mutex::new(HashMap::new()),
                accumulators: Mutex::new(HashMap::new()),
                last_job: Mutex::new(None),
                checkpoint_dir: Mutex::new(None),
                id: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    /// Where this local-mode context serves its web UI (`EMBER_UI_PORT`), as
    /// `http://127.0.0.1:PORT` (Spark's `uiWebUrl`); `None` without one (and in cluster
    /// mode, whose UI is the driver's `--ui-port`).
    pub fn ui_url(&self) -> Option<String> {
        self.inner.backend.ui_url()
    }

    /// In cluster mode, this context's session token: given to the driver's web UI as a
    /// bearer token (`Authorization: Bearer TOKEN`, or as the basic-auth password), it
    /// shows this application's jobs, stages and tasks and kills its own jobs, nothing
    /// of any other session. `None` in local mode. A credential: keep it out of logs.
    pub fn ui_token(&self) -> Option<String> {
        self.inner.backend.session_token()
    }

    /// The configuration this context runs with.
    pub fn conf(&self) -> &Conf {
        &self.inner.conf
    }

    /// Default number of partitions for sources (Spark's `sc.defaultParallelism`):
    /// [`Conf::default_parallelism`] if set, else the number of task slots.
    pub fn default_parallelism(&self) -> usize {
        self.inner.default_parallelism
    }

    /// The partition count of a shuffle given none, if the configuration fixes one
    /// (Spark's `spark.default.parallelism`); else shuffles take their largest parent's.
    pub(crate) fn configured_shuffle_partitions(&self) -> Option<usize> {
        self.inner.conf.default_parallelism
    }

    pub(crate) fn next_rdd_id(&self) -> u32 {
        self.inner.next_rdd.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_shuffle_id(&self) -> u32 {
        self.inner.next_shuffle.fetch_add(1, Ordering::Relaxed)
    }

    /// Local mode's work dir (removed with the context); `None` in cluster mode.
    pub(crate) fn local_work_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.backend.local_work_dir()
    }

    pub(crate) fn unpersist(&self, rdd_id: u32) {
        self.inner.cleaner.untrack(rdd_id);
        self.inner.backend.unpersist(rdd_id);
    }

    /// Ships `value` to every executor once per job; read it in tasks with
    /// [`Broadcast::value`].
    pub fn broadcast<T: Data>(&self, value: T) -> Broadcast<T> {
        let id = self.inner.next_broadcast.fetch_add(1, Ordering::Relaxed);
        self.inner
            .broadcasts
            .lock()
            .insert(id, encode("broadcast", &value));
        Broadcast::new(id, Arc::new(value))
    }

    /// A named accumulator starting at the value type's default (zero).
    pub fn accumulator<A: AccumulatorValue>(&self, name: &str) -> Accumulator<A> {
        let id = self.inner.next_accumulator.fetch_add(1, Ordering::Relaxed);
        let (acc, shared) = Accumulator::new(id, name);
        self.inner.accumulators.lock().insert(id, shared);
        acc
    }
}
