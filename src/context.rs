//! `Context`: the entry point of a job (Spark's `SparkContext`). It owns the
//! connection to the scheduler (an in-process local cluster, or a remote driver in
//! cluster mode), hands out RDD, shuffle, broadcast and accumulator ids, creates source
//! RDDs, and runs jobs for actions.
//!
//! Invariant: ids are unique for the context's lifetime; dropping the last handle
//! stops the context's [`cleaner`](crate::cleaner), shuts the local cluster down and
//! removes its work directory. While the context lives, the cleaner forgets the
//! shuffles and cached blocks no live RDD reaches any more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use ember_scheduler::{SchedulerConfig, SchedulerEvent, SchedulerHandle};
use parking_lot::Mutex;

use crate::accumulator::{Accumulator, AccumulatorValue, ClientAccumulator};
use crate::broadcast::Broadcast;
use crate::cleaner::{Cleaner, Target};
use crate::cluster::client::ClusterClient;
use crate::conf::{Conf, Master};
use crate::data::{encode, Data};
use crate::error::Result;
use crate::local::LocalCluster;

/// The handle through which a job creates RDDs and runs actions. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// Where a context's jobs run.
pub(crate) enum Backend {
    /// Local mode: an in-process scheduler and executor.
    Local {
        scheduler: SchedulerHandle,
        cluster: Option<LocalCluster>,
    },
    /// Cluster mode: a session with a driver daemon.
    Cluster(Box<ClusterClient>),
}

impl Backend {
    /// Submits a plan; its events arrive on the returned channel, ending in success or
    /// failure.
    pub(crate) fn submit(
        &self,
        plan: ember_proto::Plan,
        broadcasts: &Mutex<HashMap<u64, Vec<u8>>>,
    ) -> crossbeam_channel::Receiver<ember_scheduler::JobEvent> {
        match self {
            Backend::Local { scheduler, .. } => scheduler.submit(plan, broadcasts.lock().clone()),
            Backend::Cluster(client) => client.submit(plan, &broadcasts.lock()),
        }
    }

    /// Gives up on a running job.
    pub(crate) fn cancel(&self, job_id: u64, reason: &str) {
        match self {
            Backend::Local { scheduler, .. } => scheduler.send(SchedulerEvent::CancelJob {
                job_id,
                reason: reason.to_string(),
            }),
            Backend::Cluster(client) => client.cancel(job_id),
        }
    }
}

pub(crate) struct ContextInner {
    pub conf: Conf,
    pub backend: Backend,
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
    /// Local mode's web UI and event log, if asked for (see `local_ui`).
    #[cfg(feature = "ui")]
    pub local_ui: Mutex<Option<crate::local_ui::LocalUi>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.cleaner.stop();
        if let Backend::Local { scheduler, cluster } = &mut self.backend {
            scheduler.send(SchedulerEvent::Shutdown);
            if let Some(local) = cluster.take() {
                local.shutdown();
            }
        }
    }
}

impl Context {
    /// A context configured from the command line (`--master M`) and the environment
    /// (`EMBER_MASTER`, `EMBER_EXECUTOR_MEMORY`); the default master is `local[N]` with N
    /// the number of available cores.
    pub fn from_env() -> Result<Context> {
        Context::with_conf(Conf::from_env()?)
    }

    /// A local-mode context with `threads` task slots.
    pub fn local(threads: usize) -> Result<Context> {
        let mut conf = Conf::from_env_vars()?;
        conf.master = Master::Local {
            threads: threads.max(1),
            max_failures: 1,
        };
        Context::with_conf(conf)
    }

    /// A context from an explicit configuration. In a worker process (started by an
    /// executor daemon) this serves tasks and never returns.
    pub fn with_conf(conf: Conf) -> Result<Context> {
        crate::cluster::worker::run_if_requested();
        crate::logging::init(crate::logging::JOB_DEFAULT);
        match conf.master.clone() {
            Master::Local {
                threads,
                max_failures,
            } => {
                let binary_id = format!("local-{}-{:x}", std::process::id(), rand::random::<u64>());
                let (local, launcher) = LocalCluster::create(&conf, &binary_id, threads)?;
                let scheduler = SchedulerHandle::start(
                    SchedulerConfig {
                        max_task_attempts: max_failures.max(1),
                        ..SchedulerConfig::default()
                    },
                    launcher,
                );
                // The UI listens before the task threads are offered, so it sees the
                // local executor added (its event timeline).
                #[cfg(feature = "ui")]
                let ui = crate::local_ui::start(&scheduler, &app_name(), &conf)?;
                local.start_workers(&scheduler, threads);
                let backend = Backend::Local {
                    scheduler,
                    cluster: Some(local),
                };
                let ctx = Context::new(conf, backend, binary_id, threads, 0, 0);
                #[cfg(feature = "ui")]
                {
                    *ctx.inner.local_ui.lock() = ui;
                }
                Ok(ctx)
            }
            Master::Cluster(url) => {
                let client = ClusterClient::connect(&url, &app_name(), conf.entries())?;
                let binary_id = crate::cluster::binary::current()?.1.clone();
                let parallelism = (client.session.total_cores as usize).max(2);
                let (id_base, broadcast_base) =
                    (client.session.id_base, client.session.broadcast_base);
                let backend = Backend::Cluster(Box::new(client));
                Ok(Context::new(
                    conf,
                    backend,
                    binary_id,
                    parallelism,
                    id_base,
                    broadcast_base,
                ))
            }
        }
    }

    fn new(
        conf: Conf,
        backend: Backend,
        binary_id: String,
        default_parallelism: usize,
        id_base: u32,
        broadcast_base: u64,
    ) -> Context {
        let default_parallelism = conf.default_parallelism.unwrap_or(default_parallelism);
        let target = match &backend {
            Backend::Local { scheduler, cluster } => Target::Local {
                scheduler: scheduler.clone(),
                env: cluster.as_ref().map(|c| c.env.clone()),
            },
            Backend::Cluster(client) => Target::Cluster(Box::new(client.releaser())),
        };
        Context {
            inner: Arc::new(ContextInner {
                cleaner: Cleaner::start(target),
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
                #[cfg(feature = "ui")]
                local_ui: Mutex::new(None),
            }),
        }
    }

    /// Where this local-mode context serves its web UI (`EMBER_UI_PORT`), as
    /// `http://127.0.0.1:PORT` (Spark's `uiWebUrl`); `None` without one (and in cluster
    /// mode, whose UI is the driver's `--ui-port`).
    pub fn ui_url(&self) -> Option<String> {
        #[cfg(feature = "ui")]
        if let Some(addr) = self.inner.local_ui.lock().as_ref().and_then(|u| u.addr) {
            return Some(format!("http://{addr}"));
        }
        None
    }

    /// In cluster mode, this context's session token: given to the driver's web UI as a
    /// bearer token (`Authorization: Bearer TOKEN`, or as the basic-auth password), it
    /// shows this application's jobs, stages and tasks and kills its own jobs, nothing
    /// of any other session. `None` in local mode. A credential: keep it out of logs.
    pub fn ui_token(&self) -> Option<String> {
        match &self.inner.backend {
            Backend::Cluster(client) => Some(client.session.session_token.clone()),
            Backend::Local { .. } => None,
        }
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
        match &self.inner.backend {
            Backend::Local {
                cluster: Some(local),
                ..
            } => Some(local.env.work_dir.clone()),
            _ => None,
        }
    }

    pub(crate) fn unpersist(&self, rdd_id: u32) {
        self.inner.cleaner.untrack(rdd_id);
        match &self.inner.backend {
            Backend::Local { scheduler, cluster } => {
                scheduler.send(SchedulerEvent::Unpersist { rdd_id });
                if let Some(local) = cluster {
                    local.env.blocks.remove_rdd(rdd_id);
                }
            }
            Backend::Cluster(client) => client.unpersist(rdd_id),
        }
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

/// The job's name: its binary's file name.
fn app_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "ember-job".into())
}
