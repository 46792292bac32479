//! The daemon's settings and the layout of its work directory.
//!
//! ```text
//! <work_dir>/                         mode 0700 if ember created it, like every
//!                                     directory below
//! <work_dir>/.ember-executor          the marker: "created" or "adopted"
//! <work_dir>/binaries/<sha256>        verified job binaries (mode 0700), kept across
//!                                     registrations
//! <work_dir>/shuffle/session-<i>/     shuffle files of the workers of the session
//!                                     owning id range i, served by this executor;
//!                                     removed when the session ends, all emptied when
//!                                     the driver is lost
//! <work_dir>/workers/<sha16>-<n>.sock a worker's Unix socket, mode 0600 (removed once
//!                                     connected)
//! <work_dir>/workers/<sha16>-<n>/     a worker's scratch dir, removed when it exits
//! ```
//!
//! Invariants: the work dir and its three subdirectories exist once
//! [`Config::prepare_work_dir`] returned, the subdirectories with mode 0700 (0711 with
//! worker uids, which must enter but not list them; see [`crate::worker_users`]);
//! modes are set explicitly ([`private_dir`], [`dir_with_mode`]), never left to the
//! umask, so no other local user can plant a binary, read shuffle data or connect to
//! (or impersonate) a worker socket.
//!
//! The executor empties `shuffle/` and `workers/` at start, so it only works in a
//! directory that is its own ([`claim_work_dir`]): one it creates, an empty one it
//! adopts, one holding its marker from an earlier run, or one an executor from before
//! the marker existed left (its only entries are ember's `binaries/`, `shuffle/` and
//! `workers/` directories, or some of them: marked "created", since ember made them, so
//! docker-compose's anonymous volumes survive the upgrade). Any other non-empty
//! directory without the marker is refused and left untouched; a directory ember did not create (adopted)
//! keeps its mode (say a shared 1777 one), since only its subdirectories need to be
//! private.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ember_proto::IdRange;

/// The file that marks a directory as an ember executor's work dir.
pub const WORK_DIR_MARKER: &str = ".ember-executor";
/// The marker's content for a work dir ember created (and so may chmod).
const CREATED: &str = "created\n";
/// The marker's content for an empty directory ember adopted (its mode is not ember's).
const ADOPTED: &str = "adopted\n";

/// Why a work dir cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkDirError {
    /// The directory has files and no marker: someone else's.
    #[error(
        "work dir {} is not empty and was not made by ember-executor (no {WORK_DIR_MARKER} \
         in it): refusing to use it, since the executor empties its shuffle/ and workers/ \
         subdirectories; give a new or empty directory (or a new subdirectory of this one)",
        .0.display()
    )]
    Foreign(PathBuf),
    /// The path exists and is not a directory.
    #[error("work dir {} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Reading or writing it failed.
    #[error("cannot prepare work dir {}: {source}", dir.display())]
    Io {
        /// The directory (or the file in it) that failed.
        dir: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

fn io_error(dir: &Path) -> impl FnOnce(std::io::Error) -> WorkDirError + '_ {
    move |source| WorkDirError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

/// Makes `dir` this executor's work dir, or refuses it; returns its canonical path.
///
/// - missing: created (parents too) with mode 0700, marked "created";
/// - holding the marker: an earlier run's; re-chmodded to 0700 only if ember created it;
/// - empty, no marker: adopted as it is (its mode untouched), marked "adopted";
/// - no marker, only (some of) ember's `binaries/`, `shuffle/`, `workers/` directories
///   in it: an earlier ember executor's, marked "created" and re-chmodded to 0700;
/// - anything else: [`WorkDirError::Foreign`], and nothing in it is changed.
pub fn claim_work_dir(dir: &Path) -> Result<PathBuf, WorkDirError> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            private_dir(dir).map_err(io_error(dir))?;
            write_marker(dir, CREATED)?;
        }
        Err(e) => return Err(io_error(dir)(e)),
        Ok(m) if !m.is_dir() => return Err(WorkDirError::NotADirectory(dir.to_path_buf())),
        Ok(_) => {
            let marker = dir.join(WORK_DIR_MARKER);
            match std::fs::symlink_metadata(&marker) {
                Ok(m) if m.is_file() => {
                    let content = std::fs::read_to_string(&marker).map_err(io_error(&marker))?;
                    if content == CREATED {
                        private_dir(dir).map_err(io_error(dir))?;
                    }
                }
                Ok(_) => return Err(WorkDirError::Foreign(dir.to_path_buf())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let (empty, ours) = unmarked_contents(dir)?;
                    if !empty {
                        if !ours {
                            return Err(WorkDirError::Foreign(dir.to_path_buf()));
                        }
                        private_dir(dir).map_err(io_error(dir))?;
                        write_marker(dir, CREATED)?;
                        tracing::info!(
                            work_dir = %dir.display(),
                            "took back a work dir an earlier ember executor made (no marker yet)"
                        );
                        return dir.canonicalize().map_err(io_error(dir));
                    }
                    write_marker(dir, ADOPTED)?;
                    tracing::info!(
                        work_dir = %dir.display(),
                        "adopted an existing empty work dir (its mode is left as it is)"
                    );
                }
                Err(e) => return Err(io_error(&marker)(e)),
            }
        }
    }
    dir.canonicalize().map_err(io_error(dir))
}

/// The subdirectories an ember executor makes in its work dir.
const OWN_SUBDIRS: [&str; 3] = ["binaries", "shuffle", "workers"];

/// Whether the unmarked `dir` is empty, and whether its every entry is one of
/// [`OWN_SUBDIRS`] as a real directory (not a link): the layout of an executor from
/// before the marker.
fn unmarked_contents(dir: &Path) -> Result<(bool, bool), WorkDirError> {
    let (mut empty, mut ours) = (true, true);
    for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        empty = false;
        let own_name = OWN_SUBDIRS.iter().any(|n| entry.file_name() == *n);
        let is_dir = entry.file_type().map_err(io_error(dir))?.is_dir();
        if !(own_name && is_dir) {
            ours = false;
            break;
        }
    }
    Ok((empty, ours))
}

fn write_marker(dir: &Path, content: &str) -> Result<(), WorkDirError> {
    let marker = dir.join(WORK_DIR_MARKER);
    std::fs::write(&marker, content).map_err(io_error(&marker))
}

/// Creates `dir` (and missing parents) with mode 0700 and sets 0700 on `dir` itself
/// even if it existed: whatever the umask, only this user may enter it.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    dir_with_mode(dir, 0o700)
}

/// Creates `dir` (and missing parents) with `mode` and sets `mode` on `dir` itself even
/// if it existed.
pub fn dir_with_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    set_mode(dir, mode)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// `shuffle/session-<index>/` of `shuffle_dir`: the shuffle files of the session owning
/// id range `session`.
pub fn session_shuffle_dir(shuffle_dir: &Path, session: IdRange) -> PathBuf {
    shuffle_dir.join(format!("{SESSION_DIR_PREFIX}{}", session.index()))
}

/// Names of per-session shuffle directories start with this.
pub const SESSION_DIR_PREFIX: &str = "session-";

/// The session index a shuffle subdirectory named `name` belongs to.
pub fn session_of_dir(name: &str) -> Option<u32> {
    name.strip_prefix(SESSION_DIR_PREFIX)?.parse().ok()
}

/// At most 64 characters of `s`, for quoting user input in messages.
pub fn bounded(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Settings shared by every part of the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    /// Driver URL, e.g. `http://127.0.0.1:7077`.
    pub driver: String,
    /// Cores offered to the driver (and told to each worker).
    pub cores: u32,
    /// Memory offered to the driver (and told to each worker), in bytes.
    pub memory_bytes: u64,
    /// Root of the work directory (see module docs).
    pub work_dir: PathBuf,
    /// The cluster secret, if the cluster has one (the metrics port's credential; never
    /// sent to the driver nor given to a worker).
    pub secret: Option<String>,
    /// The executor secret: the credential of this daemon's calls to the driver
    /// (`ExecutorChannel`, `FetchBinary`); never given to a worker.
    pub executor_secret: Option<String>,
    /// Host the shuffle service binds to.
    pub host: String,
    /// Host other executors reach this one's shuffle service at (and the driver shows):
    /// `host`, or this machine's hostname when `host` is an unspecified address
    /// (`0.0.0.0`, `::`), as in a container.
    pub advertise_host: String,
    /// A worker with no task for this long is stopped (it restarts on the next task
    /// for its binary), so binaries nobody uses any more do not keep processes alive.
    pub worker_idle: std::time::Duration,
    /// A stored binary no worker runs is deleted once unused for this long.
    pub binary_max_age: std::time::Duration,
    /// On SIGTERM (or the driver's `Decommission`) running tasks get this long to end
    /// before they are killed and the executor moves its map outputs to peers and
    /// exits; zero: SIGTERM stops at once, as SIGINT does.
    pub decommission_timeout: std::time::Duration,
    /// When the channel to the driver breaks, the shuffle files and session keys stay
    /// this long for a driver that comes back (restarted on the same address) to take
    /// over; zero: deleted at once.
    pub driver_reconnect: std::time::Duration,
    /// The uids worker processes run as, one per session (`--worker-uids`); `None`:
    /// workers run as the executor's own user.
    pub worker_users: Option<crate::worker_users::WorkerUsers>,
}

impl Config {
    /// Where verified job binaries live.
    pub fn binaries_dir(&self) -> PathBuf {
        self.work_dir.join("binaries")
    }

    /// The shuffle directory served by [`crate::blocks`]: one subdirectory per session
    /// ([`Config::session_shuffle_dir`]).
    pub fn shuffle_dir(&self) -> PathBuf {
        self.work_dir.join("shuffle")
    }

    /// Where the workers of the session owning id range `session` write their shuffle
    /// files: `shuffle/session-<index>/`.
    pub fn session_shuffle_dir(&self, session: IdRange) -> PathBuf {
        session_shuffle_dir(&self.shuffle_dir(), session)
    }

    /// Where worker sockets and scratch dirs live.
    pub fn workers_dir(&self) -> PathBuf {
        self.work_dir.join("workers")
    }

    /// Claims the work dir ([`claim_work_dir`]: refused if it is someone else's),
    /// creates its subdirectories (mode 0700), and empties `shuffle/` and `workers/` of
    /// anything a previous run left (its shuffle output belonged to an executor id that
    /// is gone).
    ///
    /// With worker uids ([`crate::worker_users`]) the work dir (if ember created it) and
    /// its subdirectories get mode 0711 instead: worker uids may enter them (to run a
    /// binary, reach their socket, scratch and shuffle dirs) but not list them; the
    /// binaries in `binaries/` are 0755 then.
    pub fn prepare_work_dir(&self) -> Result<(), WorkDirError> {
        claim_work_dir(&self.work_dir)?;
        let mode = self.dir_mode();
        let marker = std::fs::read_to_string(self.work_dir.join(WORK_DIR_MARKER)).ok();
        if marker.as_deref() == Some(CREATED) {
            set_mode(&self.work_dir, mode).map_err(io_error(&self.work_dir))?;
        }
        let binaries = self.binaries_dir();
        dir_with_mode(&binaries, mode).map_err(io_error(&binaries))?;
        for entry in std::fs::read_dir(&binaries).map_err(io_error(&binaries))? {
            let path = entry.map_err(io_error(&binaries))?.path();
            if path.is_file() {
                set_mode(&path, self.binary_mode()).map_err(io_error(&path))?;
            }
        }
        for dir in [self.shuffle_dir(), self.workers_dir()] {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
            }
            dir_with_mode(&dir, mode).map_err(io_error(&dir))?;
        }
        Ok(())
    }

    /// The mode of the work dir and its subdirectories: 0711 with worker uids, else
    /// 0700.
    pub fn dir_mode(&self) -> u32 {
        if self.worker_users.is_some() {
            0o711
        } else {
            0o700
        }
    }

    /// The mode of a stored binary: 0755 with worker uids (they run it), else 0700.
    pub fn binary_mode(&self) -> u32 {
        if self.worker_users.is_some() {
            0o755
        } else {
            0o700
        }
    }
}
