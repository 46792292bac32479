//! Starting one worker process: its socket, scratch dir, environment, and the `Ready`
//! handshake.
//!
//! The executor binds `<work_dir>/workers/<sha16>-<n>.sock`, then runs the job binary
//! with no arguments, stdin from /dev/null, stdout/stderr inherited, `EMBER_MASTER`
//! removed and:
//!
//! | variable                   | value                                                |
//! |----------------------------|------------------------------------------------------|
//! | `EMBER_WORKER_SOCKET`      | the socket path to connect to                        |
//! | `EMBER_EXECUTOR_ID`        | this executor's id from the driver's `Registered`    |
//! | `EMBER_WORKER_CORES`       | the executor's cores                                 |
//! | `EMBER_EXECUTOR_MEMORY`    | the executor's memory in bytes (plain integer)       |
//! | `EMBER_WORKER_SHUFFLE_DIR` | `<work_dir>/shuffle/session-<i>`, the session's      |
//! | `EMBER_WORKER_DIR`         | `<work_dir>/workers/<sha16>-<n>/`, private scratch   |
//! | `EMBER_BINARY_SHA256`      | the binary's hash                                    |
//! | `EMBER_WORKER_HOST`        | the executor's advertised host (barrier peers' TCP)  |
//! | `EMBER_WORKER_BARRIER_TCP` | `1` with worker uids: barrier ranks use TCP only     |
//!
//! A worker runs job code, so it gets no credential of the executor's: `EMBER_SECRET`,
//! `EMBER_SECRET_FILE`, `EMBER_EXECUTOR_SECRET_FILE` and `EMBER_OPERATOR_SECRET_FILE`
//! are removed from its environment ([`WITHHELD_ENV`]). What it needs of its session
//! (the shuffle key) comes with that session's tasks, and one worker serves one
//! session ([`crate::workers`]).
//!
//! The worker must connect and send `FromWorker{ready{pid, binary_sha256}}` within
//! [`READY_TIMEOUT`], naming its own hash. Only a connection whose peer credentials
//! (`SO_PEERCRED`) show the child's pid is taken: another process of the same user
//! racing to connect first is dropped (logged at warn) and the executor keeps waiting
//! for the child until the deadline. The executor's own pid is also accepted: it runs
//! no job code (the daemon tests play the worker from it).
//!
//! The socket is bound inside the 0700 workers dir and chmod-ed to 0600, the scratch
//! dir and the session's shuffle dir created 0700, whatever the umask.
//!
//! With worker uids ([`crate::worker_users`]) the worker runs as its session's uid and
//! the worker group (no supplementary groups), in its scratch dir, with `HOME` and
//! `TMPDIR` set to it; its socket, scratch dir and the session's shuffle dir belong to
//! that uid, in directories of mode 0711 it may enter but not list.
//!
//! Invariants: a [`WorkerProcess`] owns its child (killed when dropped) and its socket
//! and scratch dir (removed when dropped); a failed start leaves no process or file
//! behind and returns the message its waiting tasks fail with.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ember_proto::from_worker::Msg;
use futures_util::StreamExt;
use tokio::net::UnixListener;
use tokio::process::{Child, Command};
use tokio::time::{sleep_until, timeout, Instant};

use crate::config::Config;
use crate::protocol::{decode_from_worker, framed, WorkerFramed};
use crate::worker_users::UidLease;
use ember_proto::IdRange;

/// How long a new worker has to connect and say `Ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Tells a job author why a worker never became ready.
pub const READY_HINT: &str = "a job binary must call `ember::Context::from_env()` first \
     thing in main, so that it serves tasks when started as a worker";

static NEXT_WORKER: AtomicU64 = AtomicU64::new(0);

/// Variables of the executor's environment a worker never inherits: the daemons'
/// credentials.
pub const WITHHELD_ENV: [&str; 4] = [
    ember_proto::auth::SECRET_ENV,
    ember_proto::auth::SECRET_FILE_ENV,
    ember_proto::auth::EXECUTOR_SECRET_FILE_ENV,
    "EMBER_OPERATOR_SECRET_FILE",
];

/// What to start.
pub struct WorkerSpec<'a> {
    pub config: &'a Config,
    pub binary: &'a Path,
    pub sha: &'a str,
    pub executor_id: &'a str,
    /// The session (id range) the worker serves: its shuffle files go to
    /// [`Config::session_shuffle_dir`].
    pub session: IdRange,
    /// The uid the session's workers run as, with worker uids.
    pub user: Option<&'a UidLease>,
}

/// The socket path and scratch dir of one worker, removed on drop.
struct WorkerFiles {
    socket: PathBuf,
    scratch: PathBuf,
}

impl Drop for WorkerFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A running worker process.
pub struct WorkerProcess {
    /// `<sha16>-<n>`, unique in this daemon.
    pub name: String,
    pub pid: u32,
    pub child: Child,
    files: WorkerFiles,
    /// Counted in `ember_executor_workers` while the process is held.
    _alive: crate::metrics::WorkerAlive,
}

impl WorkerProcess {
    /// Kills the process (if still running) and waits for it; returns how it ended.
    pub async fn kill(&mut self) -> String {
        let _ = self.child.start_kill();
        match timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(status) => describe_exit(&status),
            Err(_) => "did not die within 5 s of SIGKILL".to_string(),
        }
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub async fn wait_for_exit(&mut self, limit: Duration) -> Option<String> {
        timeout(limit, self.child.wait())
            .await
            .ok()
            .map(|s| describe_exit(&s))
    }

    /// The worker's scratch dir.
    pub fn scratch_dir(&self) -> &Path {
        &self.files.scratch
    }
}

/// "exit status: 3", "signal: 9 (SIGKILL)", ...
pub fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("unknown status: {e}"),
    }
}

/// Replicas (and cached blocks) peers pushed before this session had a worker here were
/// stored as the daemon's (`crate::replica_store`): they become the session's uid's, so
/// its reducers (and its worker) read them. Only regular shuffle or cached-block files of
/// one link that the daemon owns, opened
/// without following a symlink and changed through that handle: whatever the session's
/// job code put in its directory cannot make the daemon hand over another file. Errors
/// are logged, never fatal (the file stays the daemon's; a reducer falls back to
/// lineage).
fn give_replicas(dir: &Path, user: &UidLease) {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ember_shuffle::parse_file_name(&name).is_none()
            && ember_shuffle::parse_cached_block_name(&name).is_none()
        {
            continue;
        }
        let path = entry.path();
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(_) => continue, // a symlink, or gone meanwhile
        };
        let Ok(meta) = file.metadata() else { continue };
        if !meta.file_type().is_file() || meta.nlink() != 1 || meta.uid() != me {
            continue;
        }
        if let Err(e) = std::os::unix::fs::fchown(&file, Some(user.uid()), Some(user.gid())) {
            tracing::warn!(path = %path.display(), "cannot give a replica to its session's uid: {e}");
        }
    }
}

/// Starts a worker for `spec` and completes its handshake; the error is the message
/// for the tasks that were waiting for it.
pub async fn start(spec: &WorkerSpec<'_>) -> Result<(WorkerProcess, WorkerFramed), String> {
    let sha16 = &spec.sha[..16.min(spec.sha.len())];
    let name = format!("{sha16}-{}", NEXT_WORKER.fetch_add(1, Ordering::Relaxed));
    let dir = spec.config.workers_dir();
    let files = WorkerFiles {
        socket: dir.join(format!("{name}.sock")),
        scratch: dir.join(&name),
    };
    let _ = std::fs::remove_file(&files.socket);
    let owned = |path: &Path| match spec.user {
        Some(user) => user.chown(path),
        None => Ok(()),
    };
    // Both live in the workers dir (0700, or 0711 with worker uids); their own modes
    // are set explicitly too, and with worker uids they belong to the session's uid.
    let scratch_err =
        |e: std::io::Error| format!("cannot create worker dir {}: {e}", files.scratch.display());
    crate::config::private_dir(&files.scratch).map_err(scratch_err)?;
    owned(&files.scratch).map_err(scratch_err)?;
    let shuffle_dir = spec.config.session_shuffle_dir(spec.session);
    let shuffle_err = |e: std::io::Error| {
        format!(
            "cannot create the session's shuffle dir {}: {e}",
            shuffle_dir.display()
        )
    };
    crate::config::private_dir(&shuffle_dir).map_err(shuffle_err)?;
    owned(&shuffle_dir).map_err(shuffle_err)?;
    if let Some(user) = spec.user {
        give_replicas(&shuffle_dir, user);
    }
    let socket_err = |e: std::io::Error| {
        format!(
            "cannot create worker socket {}: {e}",
            files.socket.display()
        )
    };
    let listener = UnixListener::bind(&files.socket).map_err(socket_err)?;
    std::fs::set_permissions(&files.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(socket_err)?;
    owned(&files.socket).map_err(socket_err)?;
    let mut cmd = Command::new(spec.binary);
    if let Some(user) = spec.user {
        // std drops the supplementary groups (setgroups(0)) before setuid.
        cmd.uid(user.uid())
            .gid(user.gid())
            .current_dir(&files.scratch)
            .env("HOME", &files.scratch)
            .env("TMPDIR", &files.scratch);
    }
    cmd.env_remove("EMBER_MASTER")
        .env("EMBER_WORKER_SOCKET", &files.socket)
        .env("EMBER_EXECUTOR_ID", spec.executor_id)
        .env("EMBER_WORKER_CORES", spec.config.cores.to_string())
        .env(
            "EMBER_EXECUTOR_MEMORY",
            spec.config.memory_bytes.to_string(),
        )
        .env("EMBER_WORKER_SHUFFLE_DIR", &shuffle_dir)
        .env("EMBER_WORKER_DIR", &files.scratch)
        .env("EMBER_BINARY_SHA256", spec.sha)
        .env("EMBER_WORKER_HOST", &spec.config.advertise_host)
        .env(
            "EMBER_WORKER_BARRIER_TCP",
            if spec.config.worker_users.is_some() {
                "1"
            } else {
                "0"
            },
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for name in WITHHELD_ENV {
        cmd.env_remove(name);
    }
    let child = spawn(&mut cmd).await.map_err(|e| {
        format!(
            "cannot start worker process for binary {sha16} ({}): {e}",
            spec.binary.display()
        )
    })?;
    let pid = child.id().unwrap_or(0);
    let mut proc = WorkerProcess {
        name,
        pid,
        child,
        files,
        _alive: crate::metrics::WorkerAlive::new(),
    };
    match handshake(&mut proc, listener, spec.sha).await {
        Ok(framed) => {
            tracing::info!(worker = %proc.name, pid, "worker process ready");
            Ok((proc, framed))
        }
        Err(msg) => {
            proc.kill().await;
            tracing::warn!(worker = %proc.name, pid, "{msg}");
            Err(msg)
        }
    }
}

/// Spawns `cmd`, retrying briefly on ETXTBSY (a binary just written can still be open
/// for writing in a process forked meanwhile).
async fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    const ETXTBSY: i32 = 26;
    let mut delay = Duration::from_millis(10);
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && delay < Duration::from_secs(1) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
}

/// The pid of the process at the other end of `stream`, from its peer credentials.
fn peer_pid(stream: &tokio::net::UnixStream) -> std::io::Result<Option<u32>> {
    let cred = stream.peer_cred()?;
    Ok(cred.pid().and_then(|p| u32::try_from(p).ok()))
}

async fn handshake(
    proc: &mut WorkerProcess,
    listener: UnixListener,
    sha: &str,
) -> Result<WorkerFramed, String> {
    let sha16 = &sha[..16.min(sha.len())];
    let deadline = Instant::now() + READY_TIMEOUT;
    let exited = |status: String| {
        format!(
            "worker process for binary {sha16} exited ({status}) before it was ready; \
             {READY_HINT}"
        )
    };
    let silent = |what: &str| {
        format!(
            "worker process for binary {sha16} {what} within {} s, so it was killed; \
             {READY_HINT}",
            READY_TIMEOUT.as_secs()
        )
    };
    let stream = loop {
        let stream = tokio::select! {
            biased;
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => return Err(format!("cannot accept the worker's connection: {e}")),
            },
            status = proc.child.wait() => return Err(exited(describe_exit(&status))),
            _ = sleep_until(deadline) => return Err(silent("did not connect to the executor")),
        };
        match peer_pid(&stream) {
            Ok(Some(peer)) if peer == proc.pid || peer == std::process::id() => break stream,
            other => {
                let peer = match other {
                    Ok(Some(pid)) => format!("pid {pid}"),
                    Ok(None) => "an unknown pid".to_string(),
                    Err(e) => format!("unreadable credentials ({e})"),
                };
                tracing::warn!(
                    worker = %proc.name,
                    pid = proc.pid,
                    "dropped a connection to the worker socket from {peer}, not the \
                     worker process; still waiting for the worker"
                );
            }
        }
    };
    drop(listener);
    let _ = std::fs::remove_file(&proc.files.socket);
    let mut framed = framed(stream);
    let frame = tokio::select! {
        biased;
        frame = framed.next() => frame,
        status = proc.child.wait() => return Err(exited(describe_exit(&status))),
        _ = sleep_until(deadline) => return Err(silent("did not say it was ready")),
    };
    let frame = match frame {
        Some(Ok(f)) => f,
        Some(Err(e)) => return Err(format!("worker process for binary {sha16}: {e}")),
        None => {
            let status = proc.wait_for_exit(Duration::from_secs(2)).await;
            let status = status.unwrap_or_else(|| "still running".to_string());
            return Err(format!(
                "worker process for binary {sha16} closed its connection before it was \
                 ready ({status}); {READY_HINT}"
            ));
        }
    };
    match decode_from_worker(&frame) {
        Ok(Msg::Ready(ready)) if ready.binary_sha256 == sha => Ok(framed),
        Ok(Msg::Ready(ready)) => Err(format!(
            "worker process for binary {sha16} reports that it runs binary {:?}, not {sha}; \
             refusing it",
            ready.binary_sha256
        )),
        Ok(Msg::Status(_) | Msg::Memory(_) | Msg::BarrierAddress(_) | Msg::BlocksExported(_)) => {
            Err(format!(
                "worker process for binary {sha16} sent a task status or report before Ready"
            ))
        }
        Err(e) => Err(format!(
            "worker process for binary {sha16} sent {e} instead of Ready"
        )),
    }
}
