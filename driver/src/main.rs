//! `ember-driver`: the cluster's driver daemon. Executors register with it, job
//! clients upload binaries and submit plans to it, and it schedules their tasks.
//!
//! Prints exactly `ember-driver listening on http://HOST:PORT` on stdout once the gRPC
//! port is bound (and `ember-driver ui on http://HOST:PORT` with `--ui-port`); logs go
//! to stderr. Exits 2 on a configuration error, such as a non-loopback `--host`
//! without a cluster secret.

mod credentials;
mod flags;
mod scheduling;
mod signals;
mod subcommands;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use ember_driver::server::{DriverConfig, DriverDaemon, ServerLimits};
use ember_proto::listener::ConnectionLimits;
use ember_proto::operator_secret;
use ember_scheduler::PlanLimits;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

use signals::ShutdownSignals;

/// The driver's allocator. Its scheduler thread takes in a map status (a vector of
/// block sizes a network thread decoded) and frees it per task; with glibc malloc that
/// free contends for the decoding thread's arena lock and fresh pages come back zeroed
/// by the kernel. On the scheduler alone (`scheduler/examples/decisions.rs`, 50,000
/// maps x 1,000 reducers on 1,000 executors): 84-92k decisions/s with glibc, 102-112k
/// with mimalloc (2026-12-03).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for the whole process: mimalloc asks for them on its
/// arenas, and where the kernel's THP `defrag` is `madvise` (Debian's default) a fault
/// there may compact memory first. With THP the decisions benchmark ran at 125-130k/s
/// but one run in four or five stalled to 55-65k; without, 102-112k every time.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and touches no memory of
    // ours; it fails harmlessly on kernels without it.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Gives the pages mimalloc holds free back to the OS (the calling thread's heap and
/// abandoned ones). The scheduler calls it on its thread once its last job of many
/// tasks has ended: an idle thread's heap otherwise keeps its freed pages.
fn release_freed_pages() {
    // SAFETY: mi_collect takes a plain flag and only walks mimalloc's own heaps.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// How long in-flight calls get to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(5);

/// ember's driver daemon.
#[derive(Parser, Debug)]
#[command(
    name = "ember-driver",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    version,
    about
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// gRPC port (0 picks a free one).
    #[arg(long, default_value_t = 7077)]
    port: u16,
    /// Port of the web UI and REST API (none if not given).
    #[arg(long)]
    ui_port: Option<u16>,
    /// Write the event log (one JSON line per job, stage, task and executor event) into
    /// this directory, for `ember-driver history`.
    #[arg(long)]
    event_log_dir: Option<PathBuf>,
    /// File holding the cluster secret (else the EMBER_SECRET environment variable).
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// File holding the operator secret, which opens the web UI, REST API and /metrics
    /// across all applications and kills any job (else the file EMBER_OPERATOR_SECRET_FILE
    /// names). Without it, a driver with a cluster secret serves the UI to session
    /// tokens only, each seeing its own application.
    #[arg(long)]
    operator_secret_file: Option<PathBuf>,
    /// File holding the executor secret, the only credential `ExecutorChannel` and
    /// `FetchBinary` accept (else the file EMBER_EXECUTOR_SECRET_FILE names); required
    /// with a cluster secret and different from it.
    #[arg(long)]
    executor_secret_file: Option<PathBuf>,
    /// An executor silent for longer than this is lost.
    #[arg(long, default_value_t = 10_000)]
    heartbeat_timeout_ms: u64,
    /// Attempts per task before its job fails.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_task_attempts: u32,
    /// Times one task may be lost with its executor before its job fails.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_executor_losses_per_task: u32,
    /// Failed tasks of one stage on one executor before that executor gets no more
    /// tasks of the stage.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    max_failures_per_executor: u32,
    /// Launch a second copy of a task far slower than its stage's median (off by
    /// default); the first copy to finish wins.
    #[arg(long)]
    speculation: bool,
    /// Speculation: "far slower" is this many times the median of finished tasks...
    #[arg(long, default_value_t = 1.5)]
    speculation_multiplier: f64,
    /// ...once this fraction of the stage's tasks has finished...
    #[arg(long, default_value_t = 0.75)]
    speculation_quantile: f64,
    /// ...and at least this long.
    #[arg(long, default_value_t = 100)]
    speculation_min_ms: u64,
    /// How long a stage's tasks wait for a slot where their input is cached before
    /// taking any free slot (Spark's spark.locality.wait); 0 turns waiting off.
    #[arg(long, default_value_t = 3000)]
    locality_wait_ms: u64,
    /// Where uploaded job binaries and the client sessions' state files are kept
    /// (default: a temporary directory removed at exit). With a directory of its own,
    /// a driver restarted with the same flags recovers the sessions that were open, so
    /// their clients reopen them and finish their jobs.
    #[arg(long)]
    binary_dir: Option<PathBuf>,
    /// Seconds a session recovered after a restart waits for its client to reopen it
    /// before its files on the executors are deleted.
    #[arg(long, default_value_t = 60)]
    session_reconnect_secs: u64,
    /// Partitions of any one RDD of a plan.
    #[arg(long, default_value_t = 100_000)]
    max_partitions_per_node: u32,
    /// Nodes (RDDs) of one plan; it may have twice as many dependencies.
    #[arg(long, default_value_t = 10_000)]
    max_plan_nodes: u32,
    /// Tasks of one job over all its stages.
    #[arg(long, default_value_t = 1_000_000)]
    max_tasks_per_job: u64,
    /// Total bytes of one job's results; the job fails beyond it.
    #[arg(long, default_value_t = 1 << 30)]
    max_result_bytes: u64,
    /// Broadcast values one client session may hold.
    #[arg(long, default_value_t = 10_000)]
    max_broadcasts_per_session: u32,
    /// Total bytes of one client session's broadcast values.
    #[arg(long, default_value_t = 1 << 30)]
    max_broadcast_bytes_per_session: u64,
    /// Largest job binary a client may upload.
    #[arg(long, default_value_t = 2 << 30)]
    max_binary_bytes: u64,
    /// Most bytes of job binaries the driver's store holds (uploads in progress
    /// included); an upload past it is refused until unused binaries age out.
    #[arg(long, default_value_t = 8 << 30)]
    max_binary_store_bytes: u64,
    /// A binary no session uses is deleted once unused for this many seconds.
    #[arg(long, default_value_t = 3600)]
    binary_max_age_secs: u64,
    /// Jobs of one client session running at once; more wait in the session's queue.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_running_jobs_per_session: u32,
    /// Jobs running at once over all sessions; more wait in their session's queue.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_running_jobs: u32,
    /// Jobs one session may have waiting to start; a job past it is refused.
    #[arg(long, default_value_t = 64)]
    max_queued_jobs_per_session: u32,
    /// Tasks waiting for a slot over all jobs; a job that would pass it is refused.
    #[arg(long, default_value_t = 4_000_000)]
    max_queued_tasks: u64,
    /// Bytes of a job's description.
    #[arg(long, default_value_t = 64 << 10)]
    max_description_bytes: u32,
    /// Bytes of each RDD's name and each captured closure's call site in a plan.
    #[arg(long, default_value_t = 4 << 10)]
    max_node_name_bytes: u32,
    /// Client sessions one client connection (ip:port) may hold at once; each holds
    /// one of the 4,094 session id ranges until it ends.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions_per_connection: u32,
    #[command(flatten)]
    connections: ConnectionArgs,
    #[command(flatten)]
    scheduling: scheduling::SchedulingArgs,
}

/// Bounds of every listening port (gRPC, web UI, history server).
#[derive(clap::Args, Debug, Clone, Copy)]
struct ConnectionArgs {
    /// Open connections per listening port; past it a new connection is closed at once
    /// (logged at warn, at most once a second with a count).
    #[arg(long, default_value_t = ember_proto::listener::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Milliseconds a new connection may take to send its first request (HTTP) or its
    /// HTTP/2 preface (gRPC) before it is closed.
    #[arg(long, default_value_t = ember_proto::listener::DEFAULT_FIRST_REQUEST_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    first_request_timeout_ms: u64,
}

impl ConnectionArgs {
    fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            first_request_timeout: Duration::from_millis(self.first_request_timeout_ms),
        }
    }
}

/// Raises the open-files limit to its hard limit (connections are files), saying so.
fn raise_open_files_limit() {
    match ember_proto::listener::raise_open_files_limit() {
        Ok((before, after)) if after > before => {
            info!("raised the open-files limit from {before} to {after} (the hard limit)")
        }
        Ok((_, now)) => info!("open-files limit {now}"),
        Err(e) => warn!("cannot read or raise the open-files limit: {e}"),
    }
}

/// Subcommands (without one, the daemon runs).
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Asks a running driver whether it is serving: exit 0 if so, 1 (with the reason on
    /// stderr) if not. For compose health checks and Kubernetes probes (images have no
    /// shell); needs no secret.
    Health {
        /// The daemon's gRPC address.
        #[arg(long, default_value = "http://127.0.0.1:7077")]
        addr: String,
        /// Give up after this long.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
    /// Serves the web UI and REST API of applications from the event logs in DIR (a
    /// history server, as Spark's): prints `ember-driver history on http://HOST:PORT`.
    History {
        /// The directory the daemons wrote their event logs into (`--event-log-dir`).
        dir: PathBuf,
        /// Address to listen on (not loopback: needs a cluster secret).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 18080)]
        ui_port: u16,
        /// File holding the operator secret readers must give (else the file
        /// EMBER_OPERATOR_SECRET_FILE names).
        #[arg(long)]
        operator_secret_file: Option<PathBuf>,
        #[command(flatten)]
        connections: ConnectionArgs,
    },
}

/// Logs to stderr, at the level EMBER_LOG (else RUST_LOG, else info) says.
fn init_logging() {
    let filter = std::env::var("EMBER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
}

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let flags = flags::entries::<Args>(&matches);
    match args.command {
        Some(Command::Health { addr, timeout_ms }) => {
            return subcommands::health(&addr, timeout_ms)
        }
        Some(Command::History {
            dir,
            host,
            ui_port,
            operator_secret_file,
            connections,
        }) => {
            return subcommands::history(
                dir,
                &host,
                ui_port,
                operator_secret_file.as_deref(),
                connections.limits(),
            )
        }
        None => {}
    }
    let quantile_ok = args.speculation_quantile > 0.0 && args.speculation_quantile <= 1.0;
    if !quantile_ok || args.speculation_multiplier < 1.0 || args.speculation_multiplier.is_nan() {
        eprintln!(
            "ember-driver: --speculation-quantile must be in (0, 1] and --speculation-multiplier at least 1 (got {} and {})",
            args.speculation_quantile, args.speculation_multiplier
        );
        return ExitCode::from(2);
    }
    let fair = match args.scheduling.fair_config() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ember-driver: {e:#}");
            return ExitCode::from(2);
        }
    };
    init_logging();

    raise_open_files_limit();
    let creds = credentials::load(&credentials::Sources {
        host: &args.host,
        secret_file: args.secret_file.as_deref(),
        executor_secret_file: args.executor_secret_file.as_deref(),
        operator_secret_file: args.operator_secret_file.as_deref(),
    });
    let credentials::Credentials {
        cluster: secret,
        executor: executor_secret,
        operator,
    } = match creds {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ember-driver: {e}");
            return ExitCode::from(2);
        }
    };
    if secret.is_none() {
        warn!("no cluster secret: accepting unauthenticated calls (loopback only)");
    }
    if args.ui_port.is_some() {
        match (&operator, &secret) {
            (None, Some(_)) => warn!(
                "no operator secret ({}): the web UI serves session tokens only, each \
                 seeing its own application; executors, metrics and other sessions' jobs \
                 are closed",
                operator_secret::FLAG
            ),
            (None, None) => warn!("no secret: the web UI is open (loopback only)"),
            _ => {}
        }
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ember-driver: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args, flags, fair, secret, executor_secret, operator));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            eprintln!("ember-driver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    args: Args,
    flags: Vec<(String, String)>,
    fair: ember_scheduler::pools::FairConfig,
    secret: Option<String>,
    executor_secret: Option<String>,
    operator: Option<String>,
) -> anyhow::Result<()> {
    // Watch the signals before creating anything to clean up, so a SIGTERM or SIGINT
    // is a clean shutdown (which removes the temporary binary directory), never the
    // default kill.
    let signals = ShutdownSignals::install();
    // Kept alive until the end of `run`, then removed with its contents.
    let mut temp_dir = None;
    let binary_dir = match &args.binary_dir {
        Some(d) => d.clone(),
        None => {
            let t = tempfile::Builder::new()
                .prefix("ember-driver-binaries-")
                .tempdir()
                .context("cannot create a temporary binary directory")?;
            let p = t.path().to_path_buf();
            temp_dir = Some(t);
            p
        }
    };
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr().context("listener address")?;
    let ui_listener = match args.ui_port {
        Some(p) => Some(
            TcpListener::bind((args.host.as_str(), p))
                .await
                .with_context(|| format!("cannot listen on {}:{p} for the web UI", args.host))?,
        ),
        None => None,
    };

    let daemon = DriverDaemon::start(DriverConfig {
        heartbeat_timeout: Duration::from_millis(args.heartbeat_timeout_ms),
        scheduler: ember_scheduler::SchedulerConfig {
            max_task_attempts: args.max_task_attempts,
            max_executor_losses_per_task: args.max_executor_losses_per_task,
            max_failures_per_executor_per_stage: args.max_failures_per_executor,
            speculation: args.speculation,
            speculation_multiplier: args.speculation_multiplier,
            speculation_quantile: args.speculation_quantile,
            speculation_min: Duration::from_millis(args.speculation_min_ms),
            release_memory: Some(release_freed_pages),
            limits: PlanLimits {
                max_partitions_per_node: args.max_partitions_per_node,
                max_plan_nodes: args.max_plan_nodes,
                max_tasks_per_job: args.max_tasks_per_job,
                max_result_bytes: args.max_result_bytes,
                max_description_bytes: args.max_description_bytes,
                max_node_name_bytes: args.max_node_name_bytes,
            },
            fair,
            locality_wait: Duration::from_millis(args.locality_wait_ms),
            ..Default::default()
        },
        binary_dir: binary_dir.clone(),
        secret,
        operator_secret: operator,
        executor_secret,
        limits: ServerLimits {
            max_running_jobs_per_session: args.max_running_jobs_per_session,
            max_running_jobs: args.max_running_jobs,
            max_queued_jobs_per_session: args.max_queued_jobs_per_session,
            max_queued_tasks: args.max_queued_tasks,
            max_broadcasts_per_session: args.max_broadcasts_per_session,
            max_broadcast_bytes_per_session: args.max_broadcast_bytes_per_session,
            max_binary_bytes: args.max_binary_bytes,
            max_binary_store_bytes: args.max_binary_store_bytes,
            binary_max_age: Duration::from_secs(args.binary_max_age_secs),
            max_sessions_per_connection: args.max_sessions_per_connection,
        },
        event_log_dir: args.event_log_dir.clone(),
        session_state_dir: args.binary_dir.as_ref().map(|d| d.join("sessions")),
        session_reconnect: Duration::from_secs(args.session_reconnect_secs),
        flags,
    })?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ember-driver listening on http://{addr}")?;
        if let Some(l) = &ui_listener {
            writeln!(out, "ember-driver ui on http://{}", l.local_addr()?)?;
        }
        out.flush()?;
    }
    info!(%addr, binary_dir = %binary_dir.display(), "driver started");

    tokio::spawn(async move {
        signals.wait().await;
        let _ = stop_tx.send(true);
    });

    let limits = args.connections.limits();
    let ports = 1 + usize::from(ui_listener.is_some());
    ember_proto::listener::warn_if_caps_exceed_open_files(limits, ports);
    let grpc = daemon.serve_bounded(
        ember_driver::server::grpc_listener(listener, limits),
        stopped(stop_rx.clone()),
    );
    let ui = async {
        match ui_listener {
            Some(l) => {
                let l = ember_ui::server::bounded(l, limits);
                daemon.serve_ui_bounded(l, stopped(stop_rx.clone())).await
            }
            None => Ok(()),
        }
    };
    let served = async { tokio::try_join!(grpc, ui).map(|_| ()) };
    tokio::pin!(served);
    tokio::select! {
        r = &mut served => r?,
        reason = daemon.scheduler_failed() => {
            // Every later job would fail: exit non-zero so that a supervisor restarts us.
            daemon.shutdown();
            drop(temp_dir);
            anyhow::bail!("{reason}; exiting");
        }
        _ = async {
            stopped(stop_rx.clone()).await;
            tokio::time::sleep(GRACE).await;
        } => warn!("calls still open {} s after the shutdown signal; exiting anyway", GRACE.as_secs()),
    }
    daemon.shutdown();
    info!("driver stopped");
    drop(temp_dir);
    Ok(())
}
