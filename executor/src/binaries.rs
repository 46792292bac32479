//! The content-addressed store of job binaries: `<work_dir>/binaries/<sha256>`.
//!
//! Invariants:
//! * A file under its hash's name has been verified: its SHA-256 and length matched
//!   what the driver announced. It arrives in compressed chunks, each decoded within
//!   [`ember_proto::binary_chunk`]'s bounds (a chunk that decodes to more than it
//!   declares, or past the announced length, is refused), is written to a temporary
//!   file in the same directory, hashed on the way, and renamed into place (mode 0700)
//!   only then; a binary that does not match is deleted and never run.
//! * A binary is hashed again right before each worker process is started from it
//!   ([`BinaryStore::ensure_verified`]): a stored file that changed since it was
//!   verified is deleted and fetched again, never run.
//! * At most one fetch per hash is in flight in this process; concurrent callers for
//!   the same hash wait for it and then find the file (or fetch again if it failed).
//! * Only well-formed hashes (64 lower-case hex digits) ever become paths.
//! * A binary is deleted ([`BinaryStore::collect_garbage`]) only when no worker of it
//!   runs (a binary worker holds a [`BinaryLease`] from before it fetches the binary until its
//!   worker is gone) and it was last used (lease released, or first seen by this
//!   process) longer than the max age ago; the check and the delete happen under one
//!   lock, so a worker about to start never loses its binary.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ember_proto::BinaryRef;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::driver_conn::DriverConn;

/// Why a binary is not available to run.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    #[error("task names binary {0:?}, which is not a SHA-256 (64 lower-case hex digits)")]
    BadHash(String),
    #[error(
        "binary {sha} fetched from the driver does not match its hash (content hashes to \
         {actual}); refusing to run it"
    )]
    HashMismatch { sha: String, actual: String },
    #[error(
        "binary {sha} fetched from the driver is {got} bytes but the driver announced \
         {expected}; refusing to run it"
    )]
    LengthMismatch {
        sha: String,
        got: u64,
        expected: u64,
    },
    #[error(
        "stored binary {sha} changed on disk after it was verified (its {len} bytes hash to \
         {actual}); deleted it, refusing to run it{refetch}"
    )]
    Changed {
        sha: String,
        actual: String,
        len: u64,
        /// How fetching it again went, if that failed too ("" if not tried).
        refetch: String,
    },
    #[error("cannot fetch binary {sha} from the driver: {message}")]
    Fetch { sha: String, message: String },
    #[error("binary {sha} fetched from the driver: {source}")]
    Decode {
        sha: String,
        #[source]
        source: ember_proto::binary_chunk::BinaryChunkError,
    },
    #[error("cannot store binary {sha} in {}: {source}", dir.display())]
    Io {
        sha: String,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether `s` is a SHA-256 in the form binaries are named by.
pub fn is_valid_sha(s: &str) -> bool {
    ember_proto::digest::is_sha256_hex(s)
}

/// The binaries directory and the fetches in flight.
pub struct BinaryStore {
    dir: PathBuf,
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    usage: Mutex<HashMap<String, Usage>>,
    /// The mode a stored binary gets (0700; 0755 when worker uids run it).
    file_mode: u32,
}

/// Live workers of one binary and when it was last used.
struct Usage {
    workers: usize,
    last_used: std::time::Instant,
}

/// Keeps a binary from being collected while held (a worker of it starts or runs).
pub struct BinaryLease {
    store: Arc<BinaryStore>,
    sha: String,
}

impl Drop for BinaryLease {
    fn drop(&mut self) {
        let mut usage = self.store.usage();
        if let Some(u) = usage.get_mut(&self.sha) {
            u.workers = u.workers.saturating_sub(1);
            u.last_used = std::time::Instant::now();
        }
    }
}

impl BinaryStore {
    /// A store in `dir` (which must exist).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BinaryStore {
            dir: dir.into(),
            fetching: Mutex::new(HashMap::new()),
            usage: Mutex::new(HashMap::new()),
            file_mode: 0o700,
        }
    }

    /// The same store giving stored binaries `mode` (see `Config::binary_mode`).
    pub fn with_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
        self
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, HashMap<String, Usage>> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks binary `sha` in use until the lease drops.
    pub fn acquire(self: &Arc<Self>, sha: &str) -> BinaryLease {
        let mut usage = self.usage();
        let u = usage.entry(sha.to_string()).or_insert(Usage {
            workers: 0,
            last_used: std::time::Instant::now(),
        });
        u.workers += 1;
        u.last_used = std::time::Instant::now();
        BinaryLease {
            store: self.clone(),
            sha: sha.to_string(),
        }
    }

    /// Deletes every stored binary with no live worker that was last used (or first
    /// seen) at least `max_age` ago; returns their hashes. Blocking file I/O.
    pub fn collect_garbage(&self, max_age: std::time::Duration) -> Vec<String> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "cannot list the binaries: {e}");
                return Vec::new();
            }
        };
        let now = std::time::Instant::now();
        let mut usage = self.usage();
        let mut deleted = Vec::new();
        for entry in entries.flatten() {
            let Some(sha) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !is_valid_sha(&sha) {
                continue;
            }
            let u = usage.entry(sha.clone()).or_insert(Usage {
                workers: 0,
                last_used: now,
            });
            if u.workers > 0 || now.duration_since(u.last_used) < max_age {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    usage.remove(&sha);
                    tracing::info!(
                        sha,
                        "deleted a job binary unused for {} s",
                        max_age.as_secs()
                    );
                    deleted.push(sha);
                }
                Err(e) => tracing::warn!(sha, "cannot delete an unused job binary: {e}"),
            }
        }
        deleted.sort();
        deleted
    }

    /// Where binary `sha` lives once verified.
    pub fn path_of(&self, sha: &str) -> PathBuf {
        self.dir.join(sha)
    }

    /// The path of verified binary `sha`, fetching it from the driver first if absent.
    pub async fn ensure(&self, sha: &str, driver: &DriverConn) -> Result<PathBuf, BinaryError> {
        self.ensure_fetched(sha, driver).await.map(|(path, _)| path)
    }

    /// [`ensure`](Self::ensure), also saying whether this call fetched the binary (and
    /// so hashed it as it was written, just now).
    async fn ensure_fetched(
        &self,
        sha: &str,
        driver: &DriverConn,
    ) -> Result<(PathBuf, bool), BinaryError> {
        if !is_valid_sha(sha) {
            return Err(BinaryError::BadHash(sha.to_string()));
        }
        let path = self.path_of(sha);
        if path.is_file() {
            return Ok((path, false));
        }
        let lock = {
            let mut map = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(sha.to_string()).or_default().clone()
        };
        let result = {
            let _guard = lock.lock().await;
            if path.is_file() {
                Ok((path, false))
            } else {
                self.fetch(sha, driver).await.map(|p| (p, true))
            }
        };
        let mut map = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&lock) == 2 {
            // Nobody else waits on this hash: forget its lock.
            map.remove(sha);
        }
        result
    }

    /// [`ensure`](Self::ensure), then hashes the stored file again: what is about to be
    /// run must be what was verified. A file that changed is deleted and fetched
    /// again (once); if that fails, or the new copy does not hash right either, the
    /// error names the mismatch. A binary this very call fetched is not hashed a second
    /// time: it was hashed as it was written and renamed into the private store just
    /// now (a first job on a fresh executor saves one pass over the binary).
    pub async fn ensure_verified(
        &self,
        sha: &str,
        driver: &DriverConn,
    ) -> Result<PathBuf, BinaryError> {
        let (path, fetched) = self.ensure_fetched(sha, driver).await?;
        if fetched {
            return Ok(path);
        }
        let Err(changed) = self.verify_stored(sha).await else {
            return Ok(path);
        };
        tracing::error!("{changed}; fetching it again");
        let again = match self.ensure(sha, driver).await {
            Ok(_) => self.verify_stored(sha).await,
            Err(e) => Err(e),
        };
        match (changed, again) {
            (_, Ok(())) => Ok(path),
            (
                BinaryError::Changed {
                    sha, actual, len, ..
                },
                Err(e),
            ) => {
                let refetch = match e {
                    BinaryError::Changed { .. } => "; the fetched copy changed too".to_string(),
                    other => format!("; fetching it again failed: {other}"),
                };
                Err(BinaryError::Changed {
                    sha,
                    actual,
                    len,
                    refetch,
                })
            }
            (other, _) => Err(other),
        }
    }

    /// Hashes stored binary `sha`; deletes it and returns `Changed` if it no longer
    /// matches its name.
    async fn verify_stored(&self, sha: &str) -> Result<(), BinaryError> {
        let path = self.path_of(sha);
        let io_err = |source| BinaryError::Io {
            sha: sha.to_string(),
            dir: self.dir.clone(),
            source,
        };
        let hashing = path.clone();
        let (actual, len) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let mut file = std::fs::File::open(&hashing)?;
            let mut hasher = Sha256::new();
            let len = std::io::copy(&mut file, &mut hasher)?;
            Ok((format!("{:x}", hasher.finalize()), len))
        })
        .await
        .map_err(|e| io_err(std::io::Error::other(e.to_string())))?
        .map_err(io_err)?;
        if actual == sha {
            return Ok(());
        }
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), "cannot delete a changed binary: {e}");
        }
        Err(BinaryError::Changed {
            sha: sha.to_string(),
            actual,
            len,
            refetch: String::new(),
        })
    }

    async fn fetch(&self, sha: &str, driver: &DriverConn) -> Result<PathBuf, BinaryError> {
        let fetch_err = |message: String| BinaryError::Fetch {
            sha: sha.to_string(),
            message,
        };
        let io_err = |source| BinaryError::Io {
            sha: sha.to_string(),
            dir: self.dir.clone(),
            source,
        };
        tracing::info!(sha, "fetching job binary from the driver");
        let started = std::time::Instant::now();
        let mut stream = driver
            .clone()
            .fetch_binary(BinaryRef {
                sha256: sha.to_string(),
            })
            .await
            .map_err(|s| fetch_err(format!("{:?}: {}", s.code(), s.message())))?
            .into_inner();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", &sha[..16]))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(io_err)?;
        let mut file = tokio::io::BufWriter::new(tokio::fs::File::from_std(
            tmp.as_file().try_clone().map_err(io_err)?,
        ));
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        let mut decoder: Option<ember_proto::binary_chunk::Decoder> = None;
        loop {
            let chunk = match stream.message().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(s) => {
                    let written = decoder.as_ref().map_or(0, |d| d.decoded());
                    return Err(fetch_err(format!(
                        "stream broke after {written} bytes: {:?}: {}",
                        s.code(),
                        s.message()
                    )));
                }
            };
            received += chunk.data.len() as u64;
            let decoder = decoder
                .get_or_insert_with(|| ember_proto::binary_chunk::Decoder::new(chunk.total_len));
            // More than announced, or a chunk decoding past its size: refused without
            // reading (and storing) the rest.
            let data = decoder.decode(&chunk).map_err(|source| {
                let err = BinaryError::Decode {
                    sha: sha.to_string(),
                    source,
                };
                tracing::error!("{err}");
                err
            })?;
            hasher.update(data);
            file.write_all(data).await.map_err(io_err)?;
        }
        file.flush().await.map_err(io_err)?;
        drop(file);
        let actual = format!("{:x}", hasher.finalize());
        let written = decoder.as_ref().map_or(0, |d| d.decoded());
        let total = decoder.as_ref().map_or(0, |d| d.total_len());
        if actual != sha || written != total {
            return Err(self.mismatch(sha, actual, written, total));
        }
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(self.file_mode))
            .map_err(io_err)?;
        let path = self.path_of(sha);
        tmp.persist(&path).map_err(|e| io_err(e.error))?;
        tracing::info!(
            sha,
            bytes = written,
            received,
            millis = started.elapsed().as_millis() as u64,
            "stored job binary"
        );
        Ok(path)
    }

    fn mismatch(&self, sha: &str, actual: String, got: u64, expected: u64) -> BinaryError {
        let err = if actual != sha {
            BinaryError::HashMismatch {
                sha: sha.to_string(),
                actual,
            }
        } else {
            BinaryError::LengthMismatch {
                sha: sha.to_string(),
                got,
                expected,
            }
        };
        tracing::error!("{err}");
        err
    }

    /// The directory binaries are stored in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
