//! Fair sharing of slots (Spark's FAIR scheduler, in two levels): which queued task set
//! the next free slot goes to.
//!
//! In `fair` mode the tree is: the cluster, then one pool per client session
//! (application), then the session's own named pools (`Context::set_pool`), then the
//! task sets (stage attempts) queued in a pool. At each level the child with the
//! smallest [`FairKey`] goes first: one under its `min_share` before any that has it,
//! then the lowest running tasks per min share (while below it) or per weight (after);
//! ties go to the lower name. Inside a pool its own [`SchedulingMode`] orders the task
//! sets: `fifo` by job (the earliest job needing the stage), then stage; `fair` by the
//! same key with weight 1. In `fifo` mode every stage is in one order: by job (the
//! earliest job needing the stage when its attempt was submitted), then stage id, as
//! Spark's FIFO orders task sets (before pools, ember queued tasks in the order they
//! were queued, so a retry went behind every other job's tasks).
//!
//! Invariants: a key depends only on running counts, weight and min share, so the
//! order is recomputed from the counts the scheduler keeps, never cached across
//! launches; weights are at least 1 (the pool file refuses 0), so no ratio divides by
//! zero; a pool or application the file does not name gets Spark's defaults (weight 1,
//! min share 0, `fifo` inside).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

mod file;

pub use file::{PoolFileError, MAX_POOL_ENTRIES, MAX_POOL_FILE_BYTES};

/// How the children of one pool share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulingMode {
    /// In order of the jobs (then stages) they belong to.
    #[default]
    Fifo,
    /// By [`FairKey`]: min share first, then running tasks per weight.
    Fair,
}

impl std::str::FromStr for SchedulingMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fifo" => Ok(SchedulingMode::Fifo),
            "fair" => Ok(SchedulingMode::Fair),
            _ => Err(format!(
                "scheduling mode {:?} is neither \"fifo\" nor \"fair\"",
                crate::limits::bounded(s)
            )),
        }
    }
}

impl std::fmt::Display for SchedulingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SchedulingMode::Fifo => "fifo",
            SchedulingMode::Fair => "fair",
        })
    }
}

/// One pool's share: its weight, the slots it gets before weights count, and how its
/// own children share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    pub weight: u32,
    pub min_share: u32,
    pub mode: SchedulingMode,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            weight: 1,
            min_share: 0,
            mode: SchedulingMode::Fifo,
        }
    }
}

/// The pool a job's stages queue in when it names none (Spark's).
pub const DEFAULT_POOL: &str = "default";

/// How the scheduler shares slots: the mode, the pool file's settings, and the
/// per-session bound on slots.
#[derive(Debug, Clone, Default)]
pub struct FairConfig {
    pub mode: SchedulingMode,
    /// Sessions' shares by application name (the name the client chose, without the
    /// driver's ` #N`); the pools inside a session always share it fairly.
    pub applications: HashMap<String, PoolSettings>,
    /// Pools inside every session, by pool name.
    pub pools: HashMap<String, PoolSettings>,
    /// Most tasks of one session in flight per slot level (`--max-cores-per-session`):
    /// a session at it waits for its own tasks to end; `None`: no bound.
    pub max_cores_per_session: Option<u32>,
}

impl FairConfig {
    /// Reads a pool file (TOML; see [`file`]) into `applications` and `pools`.
    pub fn load_pool_file(&mut self, path: &std::path::Path) -> Result<(), PoolFileError> {
        let parsed = file::read(path)?;
        self.applications = parsed.applications;
        self.pools = parsed.pools;
        Ok(())
    }

    /// The settings of the session of `application` (`"name #N"` from the driver, or
    /// `""` in local mode).
    pub fn application(&self, application: &str) -> PoolSettings {
        self.applications
            .get(application_name(application))
            .copied()
            .unwrap_or(PoolSettings {
                // A session's pools share it fairly (Spark's root pool in FAIR mode).
                mode: SchedulingMode::Fair,
                ..PoolSettings::default()
            })
    }

    /// The settings of pool `pool` (in any session).
    pub fn pool(&self, pool: &str) -> PoolSettings {
        self.pools.get(pool).copied().unwrap_or_default()
    }
}

/// The name the client gave its application: `application` without the ` #N` the
/// driver appends to tell sessions of one name apart.
pub fn application_name(application: &str) -> &str {
    match application.rsplit_once(" #") {
        Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => application,
    }
}

/// Where a task set queues: its session's application and the pool within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub application: Arc<str>,
    pub pool: Arc<str>,
}

impl PoolKey {
    pub fn new(application: &str, pool: &str) -> Self {
        let pool = if pool.is_empty() { DEFAULT_POOL } else { pool };
        PoolKey {
            application: Arc::from(application),
            pool: Arc::from(pool),
        }
    }
}

/// The order of one schedulable among its siblings under Spark's fair comparator:
/// smaller goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairKey {
    /// Has reached its min share (those below it go first).
    satisfied: bool,
    /// Running tasks over the divisor: the min share while below it, else the weight.
    running: u64,
    divisor: u64,
}

impl FairKey {
    pub fn new(running: u32, weight: u32, min_share: u32) -> Self {
        let needy = running < min_share;
        FairKey {
            satisfied: !needy,
            running: u64::from(running),
            divisor: u64::from(if needy { min_share } else { weight.max(1) }),
        }
    }
}

impl Ord for FairKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.satisfied.cmp(&other.satisfied).then_with(|| {
            // running / divisor, compared exactly by cross-multiplying.
            (self.running * other.divisor).cmp(&(other.running * self.divisor))
        })
    }
}

impl PartialOrd for FairKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests;
