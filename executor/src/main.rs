//! `ember-executor`: the executor daemon's command line and startup.
//!
//! Startup order: parse and check the settings (exit 2 on any bad setting, including a
//! non-loopback `--host` without an executor secret or with a secret under
//! [`ember_proto::auth::MIN_SECRET_CHARS`] characters), prepare the work dir, start the
//! Shuffle service and print `ember-executor shuffle service on http://HOST:PORT` as
//! the first line on stdout (with `--metrics-port`, then `ember-executor metrics on
//! http://HOST:PORT`), then register with the driver until told to stop.
//!
//! Exit codes: 0 after SIGINT/SIGTERM (workers killed, temporary work dir removed);
//! 1 if the driver refuses the executor secret or the shuffle service cannot run;
//! 2 for bad settings.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use ember_executor::binaries::BinaryStore;
use ember_executor::blocks::{self, ShuffleService};
use ember_executor::config::Config;
use ember_executor::driver_conn;
use ember_executor::registration::{self, Registration};
use ember_executor::worker_users::WorkerUsers;
use ember_proto::listener::ConnectionLimits;
use tokio_util::sync::CancellationToken;

/// ember's executor daemon: registers with a driver, runs job binaries' tasks in
/// worker processes, and serves their shuffle files.
#[derive(Parser, Debug)]
#[command(
    name = "ember-executor",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The driver's URL, e.g. http://10.0.0.1:7077.
    #[arg(long, required = true)]
    driver: Option<String>,
    /// Cores to offer (default: the available parallelism).
    #[arg(long)]
    cores: Option<u32>,
    /// Threads of the executor's own async runtime: the driver channel, the shuffle
    /// service and the worker sockets; tasks run in worker processes, not on these
    /// (default: --cores, at most the available parallelism). More threads than the
    /// cores offered only hand wake-ups from one thread to another: on a 2-core
    /// machine, two 1-core executors ran 50,000 tiny tasks 15-20 % faster with one.
    #[arg(long)]
    io_threads: Option<usize>,
    /// Memory to offer, e.g. 4g, 512m, or a byte count.
    #[arg(long, default_value = "4g", value_parser = ember_proto::units::parse_memory_size)]
    memory: u64,
    /// Work directory for binaries, shuffle files and worker sockets (default: a
    /// temporary directory removed at exit). Created if missing; an existing directory
    /// must be empty or an earlier executor's (it holds `.ember-executor`), else the
    /// executor refuses to start and changes nothing in it.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// File holding the cluster secret (default: the EMBER_SECRET environment variable);
    /// protects the metrics port only. Never sent to the driver nor given to workers.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// File holding the executor secret, this daemon's credential for the driver's
    /// `ExecutorChannel` and `FetchBinary` (default: the file
    /// EMBER_EXECUTOR_SECRET_FILE names); required off loopback.
    #[arg(long)]
    executor_secret_file: Option<PathBuf>,
    /// Address the shuffle service binds to (and advertises, unless --advertise-host).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Host name or address other executors reach the shuffle service at (default:
    /// --host, or this machine's hostname if --host is 0.0.0.0 or ::, as in a
    /// container).
    #[arg(long)]
    advertise_host: Option<String>,
    /// Port of the shuffle service (0: any free port).
    #[arg(long, default_value_t = 0)]
    shuffle_port: u16,
    /// Serve Prometheus metrics on `GET /metrics` at this port (0 picks a free one);
    /// prints `ember-executor metrics on http://HOST:PORT` after the shuffle line.
    #[arg(long)]
    metrics_port: Option<u16>,
    /// File holding the operator secret scrapes of --metrics-port must carry (else the
    /// file EMBER_OPERATOR_SECRET_FILE names); required for --metrics-port when the
    /// cluster has a secret.
    #[arg(long)]
    operator_secret_file: Option<PathBuf>,
    /// Open connections per listening port (shuffle service, metrics); past it a new
    /// connection is closed at once (logged at warn, at most once a second with a count).
    #[arg(long, default_value_t = ember_proto::listener::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Milliseconds a new connection may take to send its HTTP/2 preface (shuffle
    /// service) or first request (metrics) before it is closed.
    #[arg(long, default_value_t = ember_proto::listener::DEFAULT_FIRST_REQUEST_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    first_request_timeout_ms: u64,
    /// Seconds a worker process may sit without tasks before it is stopped.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    worker_idle_secs: u64,
    /// Seconds a decommissioning executor (SIGTERM, or the driver's request) lets its
    /// running tasks finish before killing them; then it moves its map outputs to other
    /// executors and exits 0. 0: SIGTERM stops at once, as SIGINT does. Give the
    /// container's grace period (compose `stop_grace_period`, Kubernetes
    /// `terminationGracePeriodSeconds`) this plus time to move the outputs.
    #[arg(long, default_value_t = 60)]
    decommission_timeout: u64,
    /// Seconds the executor keeps its map outputs (shuffle files) after its channel to
    /// the driver breaks, registering again meanwhile: a driver restarted on the same
    /// address within this time is told which outputs it holds, so finished stages are
    /// not run again. 0: they are deleted at once.
    #[arg(long, default_value_t = 60)]
    driver_reconnect_secs: u64,
    /// Seconds a stored job binary may go unused (no worker of it running) before it
    /// is deleted.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    binary_max_age_secs: u64,
    /// Run each client session's worker processes as a uid of its own from this range,
    /// e.g. 20000-20999 (the executor must run as root): job code then cannot read the
    /// daemons' secret files nor another session's shuffle files. Needs --worker-gid.
    #[arg(long, requires = "worker_gid")]
    worker_uids: Option<String>,
    /// The group worker processes run with under --worker-uids (not 0): files jobs
    /// write (their output) are group-owned by it.
    #[arg(long, requires = "worker_uids")]
    worker_gid: Option<u32>,
}

fn init_logging() {
    let spec = std::env::var("EMBER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();
}

/// The host to advertise: `--advertise-host`, else `--host`, else (for an unspecified
/// bind address) this machine's hostname.
fn advertise_host(cli: &Cli) -> Result<String, String> {
    if let Some(h) = &cli.advertise_host {
        return Ok(h.clone());
    }
    let unspecified = cli
        .host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|a| a.is_unspecified());
    if !unspecified {
        return Ok(cli.host.clone());
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            format!(
                "--host {} does not say where other executors reach this one, and the                  hostname cannot be read: give --advertise-host",
                cli.host
            )
        })
}

/// The secret files this daemon reads, from flags or their environment variables.
fn secret_files(cli: &Cli) -> Vec<PathBuf> {
    use ember_proto::auth;
    let pick = |flag: &Option<PathBuf>, env: &str| {
        flag.clone()
            .or_else(|| std::env::var_os(env).map(PathBuf::from))
    };
    [
        pick(&cli.secret_file, auth::SECRET_FILE_ENV),
        pick(&cli.executor_secret_file, auth::EXECUTOR_SECRET_FILE_ENV),
        pick(&cli.operator_secret_file, "EMBER_OPERATOR_SECRET_FILE"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Checks the settings; the error is the message for a refusal to start.
fn configure(cli: &Cli) -> Result<(Config, Option<tempfile::TempDir>), String> {
    use ember_proto::auth;
    let secret = auth::load_cluster_secret(cli.secret_file.as_deref(), &cli.host)?;
    const FLAG: &str = auth::EXECUTOR_SECRET_FLAG;
    let executor_secret =
        auth::load_executor_secret(cli.executor_secret_file.as_deref(), &cli.host)?;
    match &executor_secret {
        Some(_) => {}
        None if !auth::is_loopback_host(&cli.host) => {
            return Err(format!(
                "refusing to serve on non-loopback host {} without an executor secret: the \
                 driver accepts executors only with it; give {FLAG} or set {}",
                cli.host,
                auth::EXECUTOR_SECRET_FILE_ENV
            ))
        }
        None if secret.is_some() => {
            return Err(format!(
                "a cluster secret is given but no executor secret: executors register with \
                 the executor secret ({FLAG} or {}), never the cluster secret",
                auth::EXECUTOR_SECRET_FILE_ENV
            ))
        }
        None => {}
    }
    auth::AddSecret::new(executor_secret.as_deref())?;
    // Required by clap unless a subcommand was given (then this is not reached).
    let given = cli.driver.as_deref().unwrap_or_default();
    let driver = if given.contains("://") {
        given.to_string()
    } else {
        format!("http://{given}")
    };
    driver_conn::driver_endpoint(&driver)?;
    let cores = match cli.cores {
        Some(0) => return Err("--cores must be at least 1".into()),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    };
    if cli.memory == 0 {
        return Err("--memory must be more than 0 bytes".into());
    }
    let worker_users = match (&cli.worker_uids, cli.worker_gid) {
        (Some(range), Some(gid)) => {
            let users = WorkerUsers::parse(range, gid).map_err(|e| e.to_string())?;
            users.check_privileges().map_err(|e| e.to_string())?;
            for file in secret_files(cli) {
                users.check_secret_file(&file).map_err(|e| e.to_string())?;
            }
            Some(users)
        }
        _ => None,
    };
    let (work_dir, temp) = match &cli.work_dir {
        Some(dir) => (
            ember_executor::config::claim_work_dir(dir).map_err(|e| e.to_string())?,
            None,
        ),
        None => {
            let t = tempfile::Builder::new()
                .prefix("ember-executor-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary work dir: {e}"))?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let config = Config {
        driver,
        cores,
        memory_bytes: cli.memory,
        work_dir,
        secret,
        executor_secret,
        host: cli.host.clone(),
        advertise_host: advertise_host(cli)?,
        worker_idle: std::time::Duration::from_secs(cli.worker_idle_secs),
        binary_max_age: std::time::Duration::from_secs(cli.binary_max_age_secs),
        decommission_timeout: std::time::Duration::from_secs(cli.decommission_timeout),
        driver_reconnect: std::time::Duration::from_secs(cli.driver_reconnect_secs),
        worker_users,
    };
    config.prepare_work_dir().map_err(|e| e.to_string())?;
    if let Some(users) = &config.worker_users {
        users
            .check_reachable(&config.work_dir)
            .map_err(|e| e.to_string())?;
        let killed = users.kill_leftovers();
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed processes an earlier run left running as worker uids"
            );
        }
        tracing::info!(
            uids = users.describe(),
            gid = users.gid(),
            "worker processes run as a uid of their session's own"
        );
    }
    Ok((config, temp))
}

/// `metrics`: the metrics port and the secret its scrapes need.
async fn run(
    config: Config,
    shuffle_port: u16,
    metrics: Option<(u16, Option<Arc<str>>)>,
    limits: ConnectionLimits,
) -> ExitCode {
    let config = Arc::new(config);
    let shutdown = CancellationToken::new();
    let listener = match tokio::net::TcpListener::bind((config.host.as_str(), shuffle_port)).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(
                "cannot bind the shuffle service to {}:{shuffle_port}: {e}",
                config.host
            );
            return ExitCode::from(1);
        }
    };
    let port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => {
            tracing::error!("cannot read the shuffle service's address: {e}");
            return ExitCode::from(1);
        }
    };
    let shuffle_address = blocks::advertised_address(&config.advertise_host, port);
    let executor_id = blocks::SharedExecutorId::default();
    let service = ShuffleService::new(config.shuffle_dir(), executor_id.clone())
        .with_executor_secret(config.executor_secret.as_deref());
    let session_keys = service.session_keys();
    let stop = shutdown.clone();
    let registered = registration::RegisteredFlag::default();
    let registered_rx = registered.subscribe();
    let server = tokio::spawn(async move {
        blocks::serve_bounded(
            blocks::bounded(listener, limits),
            service,
            registered_rx,
            stop.cancelled_owned(),
        )
        .await
    });
    // Watch the signals before printing the address: a SIGTERM sent as soon as the
    // address is out must be a clean shutdown, not the default kill.
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    let int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    println!("ember-executor shuffle service on {shuffle_address}");
    ember_executor::metrics::metrics().set_offer(config.cores, config.memory_bytes);
    if let Some((port, secret)) = metrics {
        let listener = match tokio::net::TcpListener::bind((config.host.as_str(), port)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("cannot bind the metrics port {}:{port}: {e}", config.host);
                return ExitCode::from(1);
            }
        };
        if let Ok(addr) = listener.local_addr() {
            println!("ember-executor metrics on http://{addr}");
        }
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) =
                ember_executor::metrics::serve(listener, limits, secret, stop.cancelled_owned())
                    .await
            {
                tracing::warn!("metrics endpoint stopped: {e}");
            }
        });
    }
    let _ = std::io::stdout().flush();
    tracing::info!(
        work_dir = %config.work_dir.display(),
        cores = config.cores,
        memory_bytes = config.memory_bytes,
        "executor started"
    );

    let signals = shutdown.clone();
    let decommission = CancellationToken::new();
    let leave = decommission.clone();
    let graceful = !config.decommission_timeout.is_zero();
    let registered_now = registered.subscribe();
    tokio::spawn(async move {
        let (mut term, mut int) = (term, int);
        let first = wait_for_signal(&mut term, &mut int).await;
        if first == Signal::Term && graceful && *registered_now.borrow() {
            tracing::info!("SIGTERM: decommissioning (a second SIGTERM or SIGINT stops at once)");
            leave.cancel();
            wait_for_signal(&mut term, &mut int).await;
        }
        tracing::info!("stopping: killing workers");
        signals.cancel();
    });
    // If the shuffle service dies, stop too (after killing the workers), with code 1.
    let stop = shutdown.clone();
    let watcher = tokio::spawn(async move {
        let failed = match server.await {
            Ok(Ok(())) if stop.is_cancelled() => return false,
            Ok(Ok(())) => "stopped".to_string(),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(e) => format!("task failed: {e}"),
        };
        tracing::error!("the shuffle service {failed}; stopping");
        stop.cancel();
        true
    });

    let binaries =
        Arc::new(BinaryStore::new(config.binaries_dir()).with_mode(config.binary_mode()));
    tokio::spawn(collect_binaries(
        binaries.clone(),
        config.binary_max_age,
        shutdown.clone(),
    ));
    let reg = Registration {
        config: config.clone(),
        binaries,
        shuffle_address,
        executor_id,
        session_keys,
        shutdown: shutdown.clone(),
        decommission: decommission.clone(),
        registered,
    };
    let result = registration::run(&reg).await;
    shutdown.cancel();
    let server_failed = tokio::time::timeout(std::time::Duration::from_secs(2), watcher)
        .await
        .is_ok_and(|r| r.unwrap_or(false));
    match result {
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("ember-executor: {e}");
            ExitCode::from(1)
        }
        Ok(()) if server_failed => ExitCode::from(1),
        Ok(()) => ExitCode::SUCCESS,
    }
}

/// Deletes binaries unused for `max_age`, checking every `max_age / 4` (1 s to 60 s),
/// until shutdown.
async fn collect_binaries(store: Arc<BinaryStore>, max_age: Duration, shutdown: CancellationToken) {
    let period = (max_age / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.cancelled() => return,
        }
        let store = store.clone();
        let _ = tokio::task::spawn_blocking(move || store.collect_garbage(max_age)).await;
    }
}

/// Which stop signal came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Term,
    Int,
}

/// Resolves on the next SIGTERM or SIGINT among the handlers that could be installed.
async fn wait_for_signal(
    term: &mut std::io::Result<tokio::signal::unix::Signal>,
    int: &mut std::io::Result<tokio::signal::unix::Signal>,
) -> Signal {
    async fn recv(s: &mut std::io::Result<tokio::signal::unix::Signal>, name: &str) {
        match s {
            Ok(s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for {name}: {e}");
                std::future::pending::<()>().await;
            }
        }
    }
    tokio::select! {
        _ = recv(term, "SIGTERM") => Signal::Term,
        _ = recv(int, "SIGINT") => Signal::Int,
    }
}

/// Subcommands (without one, the daemon runs).
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Asks a running executor (registered with its driver) whether it is serving: exit 0 if so, 1 (with the reason on
    /// stderr) if not. For compose health checks and Kubernetes probes (images have no
    /// shell); needs no secret.
    Health {
        /// The daemon's gRPC address.
        #[arg(long, default_value = "http://127.0.0.1:7078")]
        addr: String,
        /// Give up after this long.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
}

/// The `health` subcommand.
fn health(addr: &str, timeout_ms: u64) -> ExitCode {
    let timeout = Duration::from_millis(timeout_ms);
    match ember_proto::health::probe("ember-executor", addr, timeout) {
        (true, line) => println!("{line}"),
        (false, line) => {
            eprintln!("{line}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// The secret `--metrics-port` scrapes need: the operator secret; none only when the
/// executor has no secret at all (loopback). Neither the cluster secret (every client
/// holds it) nor the executor secret (it registers executors) opens metrics.
fn metrics_secret(
    cli: &Cli,
    cluster: Option<&str>,
    executor: Option<&str>,
) -> Result<Option<Arc<str>>, String> {
    use ember_proto::operator_secret;
    let operator = operator_secret::load_distinct(
        cli.operator_secret_file.as_deref(),
        &cli.host,
        &[("cluster", cluster), ("executor", executor)],
    )?;
    let secured = cluster.is_some() || executor.is_some();
    if operator.is_none() && secured && cli.metrics_port.is_some() {
        return Err(format!(
            "--metrics-port on an executor with a secret needs {} (or {}): metrics are the \
             operator's, and neither the cluster secret nor the executor secret opens them",
            operator_secret::FLAG,
            operator_secret::FILE_ENV
        ));
    }
    Ok(operator.map(Arc::from))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Health { addr, timeout_ms }) = &cli.command {
        return health(addr, *timeout_ms);
    }
    init_logging();
    // Connections are files: raise the soft open-files limit to the hard one, saying so.
    match ember_proto::listener::raise_open_files_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!("raised the open-files limit from {before} to {after} (the hard limit)")
        }
        Ok((_, now)) => tracing::info!("open-files limit {now}"),
        Err(e) => tracing::warn!("cannot read or raise the open-files limit: {e}"),
    }
    let (config, temp_dir) = match configure(&cli) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("ember-executor: {msg}");
            return ExitCode::from(2);
        }
    };
    let metrics_secret = match metrics_secret(
        &cli,
        config.secret.as_deref(),
        config.executor_secret.as_deref(),
    ) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("ember-executor: {msg}");
            return ExitCode::from(2);
        }
    };
    let io_threads = match cli.io_threads {
        Some(0) => {
            eprintln!("ember-executor: --io-threads must be at least 1");
            return ExitCode::from(2);
        }
        Some(n) => n,
        None => {
            let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
            (config.cores as usize).clamp(1, parallelism)
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ember-executor: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let limits = ConnectionLimits {
        max_connections: cli.max_connections,
        first_request_timeout: Duration::from_millis(cli.first_request_timeout_ms),
    };
    let ports = 1 + usize::from(cli.metrics_port.is_some());
    ember_proto::listener::warn_if_caps_exceed_open_files(limits, ports);
    let metrics = cli.metrics_port.map(|port| (port, metrics_secret));
    let code = runtime.block_on(run(config, cli.shuffle_port, metrics, limits));
    // Dropping the runtime drops any worker left (kill_on_drop) before the dir goes.
    drop(runtime);
    drop(temp_dir);
    code
}
