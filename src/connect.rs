//! Connecting a context to where its jobs run: `Context::from_env`, `Context::local` and
//! `Context::with_conf` pick local mode (an in-process scheduler and executor,
//! `local.rs`) or a session with a cluster's driver (`cluster/`) from the master, and
//! hand the context its [`Backend`](crate::backend::Backend). The one file of the job
//! library that names both; it sits above them.
//!
//! Invariant: a job binary started by an executor daemon as a worker process never
//! returns from here (it serves tasks until told to stop), so a job's `main` runs
//! only in the client process.

use ember_scheduler::{SchedulerConfig, SchedulerHandle};

use crate::cluster::client::ClusterClient;
use crate::conf::{Conf, Master};
use crate::context::Context;
use crate::error::Result;
use crate::local::{LocalBackend, LocalCluster};

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
                let mut fair = ember_scheduler::pools::FairConfig {
                    mode: conf.scheduling_mode,
                    ..Default::default()
                };
                if let Some(path) = &conf.pool_file {
                    fair.load_pool_file(path).map_err(|e| {
                        crate::error::EmberError::Config(format!("EMBER_POOL_FILE: {e}"))
                    })?;
                }
                // After the checks above: a refused pool file leaves no work dir.
                let (local, launcher) = LocalCluster::create(&conf, &binary_id, threads)?;
                let scheduler = SchedulerHandle::start(
                    SchedulerConfig {
                        max_task_attempts: max_failures.max(1),
                        fair,
                        ..SchedulerConfig::default()
                    },
                    launcher,
                );
                // The UI listens before the task threads are offered, so it sees the
                // local executor added (its event timeline).
                #[cfg(feature = "ui")]
                let ui = crate::local_ui::start(&scheduler, &app_name(), &conf)?;
                local.start_workers(&scheduler, threads);
                let backend = LocalBackend {
                    scheduler,
                    cluster: Some(local),
                    #[cfg(feature = "ui")]
                    ui,
                };
                Ok(Context::new(
                    conf,
                    Box::new(backend),
                    binary_id,
                    threads,
                    0,
                    0,
                ))
            }
            Master::Cluster(url) => {
                let client = ClusterClient::connect(&url, &app_name(), conf.entries())?;
                let binary_id = crate::cluster::binary::current()?.1.clone();
                let parallelism = (client.session.total_cores as usize).max(2);
                let (id_base, broadcast_base) =
                    (client.session.id_base, client.session.broadcast_base);
                let backend = Box::new(client);
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
