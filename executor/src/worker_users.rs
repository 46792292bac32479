//! Running job code as other OS users: the pool of worker uids (`--worker-uids
//! FIRST-LAST --worker-gid GID`).
//!
//! A worker process runs job code. Run as the executor's own user, that code could read
//! whatever the executor can: the executor secret's file, every session's shuffle files,
//! other workers' scratch dirs. With a pool of worker uids, the executor (started as
//! root) runs each client session's workers as a uid of its own, taken from the pool
//! when the session's first worker starts on this executor and given back when the
//! session is over here, with the group `GID` (so output files they write are
//! group-owned by one group). The session's shuffle directory, its workers' sockets
//! and scratch dirs belong to that uid with mode 0700 (0600 for sockets); everything
//! else of the work dir stays root's, and the directories a worker must pass through
//! are 0711 (enter, not list). So job code can read neither the daemons' secrets
//! (root's, 0400) nor another session's shuffle files, sockets or scratch.
//!
//! Invariants:
//! * A uid serves at most one session at a time: a [`UidLease`] is shared by the
//!   session's entry in [`crate::workers::Workers`] and by each of its worker actors,
//!   and the uid returns to the pool only when the last of them is dropped — after the
//!   session's workers have ended.
//! * Before a uid returns to the pool, every process still running as it (a job could
//!   have forked one that outlived its worker) is killed with SIGKILL, so nothing of
//!   one session survives into the next session given that uid; at start, the processes
//!   of every uid of the range (an earlier run's) are killed too.
//! * The pool hands out the uid given back longest ago first, then ones never used.
//! * Only the executor's own process changes owners and modes; nothing from the wire
//!   becomes a uid (uids come from the pool only).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Most uids a pool may hold.
pub const MAX_POOL: u32 = 65_536;

/// Why `--worker-uids`/`--worker-gid` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkerUsersError {
    #[error("--worker-uids {0:?} is not FIRST-LAST (two user ids, e.g. 20000-20999)")]
    Syntax(String),
    #[error(
        "--worker-uids {first}-{last} must be a range of non-root uids (0 < FIRST <= LAST) \
         of at most {MAX_POOL} uids"
    )]
    Range { first: u32, last: u32 },
    #[error("--worker-gid must not be 0 (root's group)")]
    RootGroup,
    #[error(
        "--worker-uids needs the executor to run as root (effective uid 0, here {0}): it \
         starts worker processes as other users and gives them their files"
    )]
    NotRoot(u32),
    #[error(
        "the worker uids cannot reach work dir {work_dir}: {blocking} has mode {mode:o}, \
         without the execute bit for others; make every directory above the work dir \
         enterable (chmod o+x) or choose another --work-dir"
    )]
    Unreachable {
        work_dir: String,
        blocking: String,
        mode: u32,
    },
    #[error(
        "with --worker-uids, secret file {path} must be readable by its owner only and \
         not owned by a worker uid (mode {mode:o}, owner uid {owner}): job code runs as \
         the worker uids; chmod 600 it (or 400) and give it to root"
    )]
    ReadableSecret { path: String, mode: u32, owner: u32 },
    #[error("cannot check whether the worker uids reach {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The uids not in use, longest-returned first, then the ones never used.
#[derive(Debug)]
struct Pool {
    returned: VecDeque<u32>,
    next_unused: u64,
    last: u32,
}

/// The pool of worker uids and their group; cheap to clone (clones share the pool).
#[derive(Debug, Clone)]
pub struct WorkerUsers {
    first: u32,
    last: u32,
    gid: u32,
    pool: Arc<Mutex<Pool>>,
}

/// One session's uid on this executor, given back to the pool when the last holder
/// drops it.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    gid: u32,
    pool: Arc<Mutex<Pool>>,
}

impl UidLease {
    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// Gives `path` to this uid and the worker group.
    pub fn chown(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        let killed = kill_processes_of(self.uid);
        if killed > 0 {
            tracing::warn!(
                uid = self.uid,
                killed,
                "killed processes a session's job code left running as its worker uid"
            );
        }
        lock(&self.pool).returned.push_back(self.uid);
    }
}

fn lock(pool: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    pool.lock().unwrap_or_else(|p| p.into_inner())
}

impl WorkerUsers {
    /// The pool of `range` ("FIRST-LAST") with group `gid`, checked (not yet whether
    /// this process may use it: see [`WorkerUsers::check_privileges`]).
    pub fn parse(range: &str, gid: u32) -> Result<WorkerUsers, WorkerUsersError> {
        let syntax = || WorkerUsersError::Syntax(crate::config::bounded(range));
        let (a, b) = range.split_once('-').ok_or_else(syntax)?;
        let first: u32 = a.trim().parse().map_err(|_| syntax())?;
        let last: u32 = b.trim().parse().map_err(|_| syntax())?;
        if first == 0 || last < first || last - first >= MAX_POOL {
            return Err(WorkerUsersError::Range { first, last });
        }
        if gid == 0 {
            return Err(WorkerUsersError::RootGroup);
        }
        Ok(WorkerUsers {
            first,
            last,
            gid,
            pool: Arc::new(Mutex::new(Pool {
                returned: VecDeque::new(),
                next_unused: u64::from(first),
                last,
            })),
        })
    }

    /// `Err` unless this process runs as root (needed to start processes as other
    /// users and to give them files).
    pub fn check_privileges(&self) -> Result<(), WorkerUsersError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(WorkerUsersError::NotRoot(euid));
        }
        Ok(())
    }

    /// `Err` naming the first directory from `/` down to `work_dir` (itself included)
    /// that a worker uid could not enter.
    pub fn check_reachable(&self, work_dir: &Path) -> Result<(), WorkerUsersError> {
        use std::os::unix::fs::PermissionsExt;
        for dir in work_dir.ancestors().collect::<Vec<_>>().into_iter().rev() {
            let meta = std::fs::metadata(dir).map_err(|source| WorkerUsersError::Io {
                path: dir.display().to_string(),
                source,
            })?;
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o001 == 0 {
                return Err(WorkerUsersError::Unreachable {
                    work_dir: work_dir.display().to_string(),
                    blocking: dir.display().to_string(),
                    mode,
                });
            }
        }
        Ok(())
    }

    /// `Err` if a worker uid could read secret file `path`: it has group or other
    /// permission bits, or belongs to a worker uid.
    pub fn check_secret_file(&self, path: &Path) -> Result<(), WorkerUsersError> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(path).map_err(|source| WorkerUsersError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o7777;
        let worker_owned = (self.first..=self.last).contains(&meta.uid());
        if mode & 0o077 != 0 || worker_owned {
            return Err(WorkerUsersError::ReadableSecret {
                path: path.display().to_string(),
                mode,
                owner: meta.uid(),
            });
        }
        Ok(())
    }

    /// Kills every process running as a uid of the range (left by an earlier run of
    /// this executor, which leased uids from a pool this run knows nothing of); returns
    /// how many. Called once at start, before any uid is leased.
    pub fn kill_leftovers(&self) -> usize {
        let (first, last) = (self.first, self.last);
        kill_processes_where(|uid| (first..=last).contains(&uid))
    }

    /// The group worker processes run with.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// "FIRST-LAST", for messages.
    pub fn describe(&self) -> String {
        format!("{}-{}", self.first, self.last)
    }

    /// A uid for a new session, or `None` when every uid of the pool serves a session.
    pub fn lease(&self) -> Option<Arc<UidLease>> {
        let mut pool = lock(&self.pool);
        let uid = match pool.returned.pop_front() {
            Some(uid) => uid,
            None if pool.next_unused <= u64::from(pool.last) => {
                let uid = pool.next_unused as u32;
                pool.next_unused += 1;
                uid
            }
            None => return None,
        };
        Some(Arc::new(UidLease {
            uid,
            gid: self.gid,
            pool: self.pool.clone(),
        }))
    }
}

/// SIGKILLs every process whose real, effective or saved uid is `uid` (read from
/// `/proc/<pid>/status`), repeating while new ones appear (a process forking as it
/// dies), at most 10 rounds; returns how many were signalled.
pub fn kill_processes_of(uid: u32) -> usize {
    kill_processes_where(|id| id == uid)
}

/// [`kill_processes_of`] for every uid `runs_as` accepts.
fn kill_processes_where(runs_as: impl Fn(u32) -> bool) -> usize {
    let mut killed = 0;
    for _ in 0..10 {
        let pids = processes_where(&runs_as);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill has no memory preconditions; a pid gone meanwhile gives ESRCH.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    killed
}

/// The pids of the live processes whose real, effective or saved uid `runs_as` accepts.
fn processes_where(runs_as: &impl Fn(u32) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let zombie = status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'));
        let matches = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|ids| {
                ids.split_whitespace()
                    .take(3)
                    .any(|id| id.parse::<u32>().is_ok_and(runs_as))
            });
        if matches && !zombie {
            pids.push(pid);
        }
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        assert!(matches!(
            WorkerUsers::parse("20000", 1000),
            Err(WorkerUsersError::Syntax(_))
        ));
        assert!(matches!(
            WorkerUsers::parse("0-10", 1000),
            Err(WorkerUsersError::Range { .. })
        ));
        assert!(matches!(
            WorkerUsers::parse("10-9", 1000),
            Err(WorkerUsersError::Range { .. })
        ));
        assert!(matches!(
            WorkerUsers::parse("1-70000", 1000),
            Err(WorkerUsersError::Range { .. })
        ));
        assert!(matches!(
            WorkerUsers::parse("20000-20001", 0),
            Err(WorkerUsersError::RootGroup)
        ));
        let err = WorkerUsers::parse(&"9".repeat(10_000), 1)
            .unwrap_err()
            .to_string();
        assert!(err.len() < 400, "{err}");
    }

    #[test]
    fn a_uid_serves_one_session_at_a_time_and_comes_back_longest_returned_first() {
        // Uids no process on this machine runs as (killing their processes is a no-op).
        let users = WorkerUsers::parse("3999000-3999002", 3999000).unwrap();
        let a = users.lease().unwrap();
        let b = users.lease().unwrap();
        let c = users.lease().unwrap();
        assert_eq!((a.uid(), b.uid(), c.uid()), (3999000, 3999001, 3999002));
        assert_eq!(a.gid(), 3999000);
        assert!(users.lease().is_none(), "the pool has three uids");
        let b2 = b.clone();
        drop(b);
        assert!(users.lease().is_none(), "b is still held by its clone");
        drop(c);
        drop(b2);
        assert_eq!(users.lease().unwrap().uid(), 3999002);
        // The one just leased was dropped at once (it came back last), so b's is next.
        assert_eq!(users.lease().unwrap().uid(), 3999001);
    }

    #[test]
    fn a_secret_file_a_worker_uid_could_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("executor-secret");
        std::fs::write(&file, "s").unwrap();
        let users = WorkerUsers::parse("3999000-3999002", 3999000).unwrap();
        for mode in [0o644, 0o640, 0o604] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = users.check_secret_file(&file).unwrap_err().to_string();
            assert!(
                err.contains(&file.display().to_string())
                    && err.contains(&format!("mode {mode:o}")),
                "{err}"
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            users.check_secret_file(&file).unwrap();
        }
        // Owned by a worker uid: refused whatever its mode (only root can chown).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&file, Some(3999001), None).unwrap();
            assert!(users.check_secret_file(&file).is_err());
        }
    }

    #[test]
    fn a_work_dir_under_a_private_directory_is_unreachable() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().unwrap();
        let work = top.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let users = WorkerUsers::parse("3999000-3999002", 3999000).unwrap();
        let err = users.check_reachable(&work).unwrap_err().to_string();
        assert!(
            err.contains(&top.path().display().to_string()) && err.contains("mode 700"),
            "{err}"
        );
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        // /tmp and above are enterable on any sane machine.
        users.check_reachable(&work).unwrap();
    }
}
