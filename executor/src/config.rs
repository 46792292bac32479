//! The daemon's settings and the layout of its work directory.
//!
//! ```text
//! <work_dir>/                         mode 0700, like every directory below
//! <work_dir>/binaries/<sha256>        verified job binaries (mode 0700), kept across
//!                                     registrations
//! <work_dir>/shuffle/                 shuffle files of every worker, served by this
//!                                     executor; emptied when the driver is lost
//! <work_dir>/workers/<sha16>-<n>.sock a worker's Unix socket, mode 0600 (removed once
//!                                     connected)
//! <work_dir>/workers/<sha16>-<n>/     a worker's scratch dir, removed when it exits
//! ```
//!
//! Invariants: the work dir and its three subdirectories exist with mode 0700 once
//! [`Config::prepare_work_dir`] returned; modes are set explicitly ([`private_dir`]),
//! never left to the umask, so no other local user can plant a binary, read shuffle
//! data or connect to (or impersonate) a worker socket.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Creates `dir` (and missing parents) with mode 0700 and sets 0700 on `dir` itself
/// even if it existed: whatever the umask, only this user may enter it.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
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
}

impl Config {
    /// Where verified job binaries live.
    pub fn binaries_dir(&self) -> PathBuf {
        self.work_dir.join("binaries")
    }

    /// The shuffle directory shared by all workers and served by [`crate::blocks`].
    pub fn shuffle_dir(&self) -> PathBuf {
        self.work_dir.join("shuffle")
    }

    /// Where worker sockets and scratch dirs live.
    pub fn workers_dir(&self) -> PathBuf {
        self.work_dir.join("workers")
    }

    /// Creates the work dir and its subdirectories (mode 0700), and empties `shuffle/`
    /// and `workers/` of anything a previous run left (its shuffle output belonged to an
    /// executor id that is gone).
    pub fn prepare_work_dir(&self) -> std::io::Result<()> {
        private_dir(&self.work_dir)?;
        private_dir(&self.binaries_dir())?;
        for dir in [self.shuffle_dir(), self.workers_dir()] {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            private_dir(&dir)?;
        }
        Ok(())
    }
}
