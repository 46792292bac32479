//! Job configuration: which master to use and how much memory an executor may use,
//! from the command line (`--master`) and the environment (`EMBER_MASTER`,
//! `EMBER_EXECUTOR_MEMORY`, `EMBER_LOCAL_DIR`, `EMBER_PROGRESS`,
//! `EMBER_DEFAULT_PARALLELISM`, `EMBER_SHUFFLE_DURABILITY`, `EMBER_SCHEDULING_MODE`,
//! `EMBER_POOL_FILE`).

use crate::io::text_input::{Packing, DEFAULT_PACKING};
use ember_scheduler::pools::SchedulingMode;
use std::path::PathBuf;

use crate::error::{EmberError, Result};
use crate::memory::parse_memory_size;

/// Where jobs run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Master {
    /// In-process: `threads` task slots, `max_failures` attempts per task
    /// (`local[N]` is `max_failures` 1, as in Spark; `local[N,F]` sets it).
    Local { threads: usize, max_failures: u32 },
    /// A cluster driver at this URL (`http://host:7077`).
    Cluster(String),
}

impl Master {
    /// Parses `local`, `local[N]`, `local[*]`, `local[N,F]` or `http(s)://host:port`.
    pub fn parse(s: &str) -> Result<Master> {
        let cores = || {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        };
        let bad = || {
            EmberError::Config(format!(
                "unknown master {s:?}: expected local, local[N], local[*], local[N,F] or http://host:port"
            ))
        };
        if s == "local" {
            return Ok(Master::Local {
                threads: 1,
                max_failures: 1,
            });
        }
        if let Some(inner) = s.strip_prefix("local[").and_then(|r| r.strip_suffix(']')) {
            let mut parts = inner.split(',');
            let n = parts.next().ok_or_else(bad)?.trim();
            let threads = if n == "*" {
                cores()
            } else {
                n.parse().map_err(|_| bad())?
            };
            let max_failures = match parts.next() {
                Some(f) => f.trim().parse().map_err(|_| bad())?,
                None => 1,
            };
            if threads == 0 || max_failures == 0 || parts.next().is_some() {
                return Err(bad());
            }
            return Ok(Master::Local {
                threads,
                max_failures,
            });
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Ok(Master::Cluster(s.to_string()));
        }
        Err(bad())
    }
}

/// What happens to a map output when the executor that wrote it goes
/// (`EMBER_SHUFFLE_DURABILITY`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ShuffleDurability {
    /// `local`: the output lives on its executor only; if that executor is lost, lineage
    /// recomputes it (Spark's behaviour).
    #[default]
    Local,
    /// `storage:DIR`: each map output is also committed to a directory every executor
    /// sees (a shared file system) or an `s3://` prefix, under a directory (prefix) of
    /// this application's own; when
    /// its executor is lost, reducers read it from there and no map task runs again.
    /// Lineage stays the fallback for a stored copy that is missing or damaged. A map
    /// task counts as finished only once its copy is stored. Local mode ignores it (it
    /// has no executor to lose).
    Storage(PathBuf),
    /// `replicated:N`: each map output is also pushed to N other executors' shuffle
    /// services (on other hosts where there are any), which serve it like their own;
    /// when its executor is lost, reducers read a replica and no map task runs again.
    /// A map task counts as finished once its pushes are confirmed; a copy that could
    /// not be pushed (too few executors, a peer gone) leaves lineage as the fallback.
    /// Local mode ignores it.
    Replicated(u32),
}

impl ShuffleDurability {
    /// Parses `local`, `replicated:N` (1 to `MAX_SHUFFLE_REPLICAS`), `storage:DIR` (an
    /// absolute directory) or `storage:s3://BUCKET/PREFIX` (with the `s3` feature).
    pub fn parse(s: &str) -> Result<ShuffleDurability> {
        let bad = |why: &str| {
            EmberError::Config(format!(
                "EMBER_SHUFFLE_DURABILITY: {why}, got {:?}",
                crate::io::excerpt(s)
            ))
        };
        let s = s.trim();
        if s == "local" {
            return Ok(ShuffleDurability::Local);
        }
        if let Some(n) = s.strip_prefix("replicated:") {
            let max = ember_proto::limits::MAX_SHUFFLE_REPLICAS;
            return match n.parse::<u32>() {
                Ok(n) if (1..=max as u32).contains(&n) => Ok(ShuffleDurability::Replicated(n)),
                _ => Err(bad(&format!(
                    "replicated:N takes a number of replicas from 1 to {max}"
                ))),
            };
        }
        let Some(dir) = s.strip_prefix("storage:") else {
            return Err(bad("expected local, replicated:N or storage:DIR"));
        };
        if crate::io::storage::is_remote(dir) {
            if !cfg!(feature = "s3") {
                return Err(crate::io::storage::s3_disabled(dir));
            }
            crate::io::storage::ObjectUrl::parse(dir)?;
            return Ok(ShuffleDurability::Storage(PathBuf::from(dir)));
        }
        if dir.contains("://") {
            return Err(bad(
                "storage: takes a directory every executor sees or an s3:// prefix",
            ));
        }
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            return Err(bad("storage: needs an absolute directory"));
        }
        Ok(ShuffleDurability::Storage(dir))
    }
}

impl std::fmt::Display for ShuffleDurability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShuffleDurability::Local => f.write_str("local"),
            ShuffleDurability::Storage(d) => write!(f, "storage:{}", d.display()),
            ShuffleDurability::Replicated(n) => write!(f, "replicated:{n}"),
        }
    }
}

/// A context's settings.
#[derive(Debug, Clone)]
pub struct Conf {
    pub master: Master,
    /// Memory shared by the running tasks of one executor, in bytes.
    pub executor_memory: u64,
    /// Parent directory of local mode's work dir (default: the system temp dir).
    pub local_dir: Option<PathBuf>,
    /// Show the console progress bar (only ever on a terminal).
    pub progress: bool,
    /// How file sources pack small files into partitions
    /// (`EMBER_FILES_OPEN_COST`, `EMBER_FILES_MAX_PARTITION_BYTES`).
    pub packing: Packing,
    /// Spark's `spark.default.parallelism` (`EMBER_DEFAULT_PARALLELISM`): when set, the
    /// partition count of sources and of shuffles given no count (instead of the task
    /// slots, and of the largest parent's count, respectively).
    pub default_parallelism: Option<usize>,
    /// Where map outputs are kept so that a lost executor loses none
    /// (`EMBER_SHUFFLE_DURABILITY`, default `local`).
    pub shuffle_durability: ShuffleDurability,
    /// Local mode: how its slots are shared between pools (`EMBER_SCHEDULING_MODE`,
    /// default `fifo`) and the pool file setting their weights (`EMBER_POOL_FILE`).
    /// In cluster mode the driver's `--scheduling-mode` and `--pool-file` decide.
    pub scheduling_mode: SchedulingMode,
    pub pool_file: Option<PathBuf>,
}

/// Default executor memory.
pub const DEFAULT_EXECUTOR_MEMORY: u64 = 1 << 30;

impl Conf {
    /// Settings from the environment only; master defaults to `local[cores]`.
    pub fn from_env_vars() -> Result<Conf> {
        let master = match std::env::var("EMBER_MASTER") {
            Ok(m) if !m.is_empty() => Master::parse(&m)?,
            _ => Master::parse("local[*]")?,
        };
        let executor_memory = match std::env::var("EMBER_EXECUTOR_MEMORY") {
            Ok(m) if !m.is_empty() => parse_memory_size(&m)
                .map_err(|e| EmberError::Config(format!("EMBER_EXECUTOR_MEMORY: {e}")))?,
            _ => DEFAULT_EXECUTOR_MEMORY,
        };
        let size = |var: &str, default: u64| -> Result<u64> {
            match std::env::var(var) {
                Ok(m) if !m.is_empty() => {
                    parse_memory_size(&m).map_err(|e| EmberError::Config(format!("{var}: {e}")))
                }
                _ => Ok(default),
            }
        };
        let packing = Packing {
            open_cost: size("EMBER_FILES_OPEN_COST", DEFAULT_PACKING.open_cost)?,
            max_partition_bytes: size(
                "EMBER_FILES_MAX_PARTITION_BYTES",
                DEFAULT_PACKING.max_partition_bytes,
            )?,
        };
        let default_parallelism = match std::env::var("EMBER_DEFAULT_PARALLELISM") {
            Ok(v) if !v.is_empty() => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(EmberError::Config(format!(
                        "EMBER_DEFAULT_PARALLELISM: expected a positive integer, got {:?}",
                        crate::io::excerpt(&v)
                    )))
                }
            },
            _ => None,
        };
        let shuffle_durability = match std::env::var("EMBER_SHUFFLE_DURABILITY") {
            Ok(v) if !v.is_empty() => ShuffleDurability::parse(&v)?,
            _ => ShuffleDurability::Local,
        };
        let scheduling_mode = match std::env::var("EMBER_SCHEDULING_MODE") {
            Ok(v) if !v.is_empty() => v
                .parse()
                .map_err(|e| EmberError::Config(format!("EMBER_SCHEDULING_MODE: {e}")))?,
            _ => SchedulingMode::Fifo,
        };
        Ok(Conf {
            scheduling_mode,
            pool_file: std::env::var_os("EMBER_POOL_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            master,
            packing,
            default_parallelism,
            shuffle_durability,
            executor_memory,
            local_dir: std::env::var_os("EMBER_LOCAL_DIR").map(PathBuf::from),
            progress: std::env::var("EMBER_PROGRESS")
                .map(|v| v != "0")
                .unwrap_or(true),
        })
    }

    /// Settings from the environment, with `--master M` / `--master=M` on the command
    /// line taking precedence over `EMBER_MASTER`.
    pub fn from_env() -> Result<Conf> {
        let mut conf = Conf::from_env_vars()?;
        let args: Vec<String> = std::env::args().collect();
        if let Some(m) = master_from_args(&args) {
            conf.master = Master::parse(&m)?;
        }
        Ok(conf)
    }

    /// Local mode with `threads` slots and an explicit memory limit (handy in tests).
    pub fn local(threads: usize, executor_memory: u64) -> Conf {
        Conf {
            master: Master::Local {
                threads,
                max_failures: 1,
            },
            executor_memory,
            local_dir: None,
            progress: true,
            packing: DEFAULT_PACKING,
            default_parallelism: None,
            shuffle_durability: ShuffleDurability::Local,
            scheduling_mode: SchedulingMode::Fifo,
            pool_file: None,
        }
    }

    /// The same settings with local mode's slots shared by `mode` (what
    /// `EMBER_SCHEDULING_MODE` sets) and, if given, the pools' weights from `pool_file`
    /// (`EMBER_POOL_FILE`; TOML, as the driver's `--pool-file`).
    pub fn with_scheduling(mut self, mode: SchedulingMode, pool_file: Option<PathBuf>) -> Conf {
        self.scheduling_mode = mode;
        self.pool_file = pool_file;
        self
    }

    /// The same settings with `durability` for the context's shuffles (what
    /// `EMBER_SHUFFLE_DURABILITY` sets), e.g.
    /// `Conf::from_env()?.with_shuffle_durability(ShuffleDurability::Replicated(1))`.
    pub fn with_shuffle_durability(mut self, durability: ShuffleDurability) -> Conf {
        self.shuffle_durability = durability;
        self
    }
}

impl Conf {
    /// The settings as `(name, value)` lines for the web UI's Environment page, each
    /// named by the environment variable that sets it. No credential is among them.
    pub fn entries(&self) -> Vec<(String, String)> {
        let master = match &self.master {
            Master::Local {
                threads,
                max_failures,
            } => format!("local[{threads},{max_failures}]"),
            Master::Cluster(url) => url.clone(),
        };
        [
            ("EMBER_MASTER", master),
            ("EMBER_EXECUTOR_MEMORY", self.executor_memory.to_string()),
            (
                "EMBER_LOCAL_DIR",
                self.local_dir.as_ref().map_or_else(
                    || "(the system temp dir)".into(),
                    |d| d.display().to_string(),
                ),
            ),
            ("EMBER_PROGRESS", self.progress.to_string()),
            ("EMBER_FILES_OPEN_COST", self.packing.open_cost.to_string()),
            (
                "EMBER_FILES_MAX_PARTITION_BYTES",
                self.packing.max_partition_bytes.to_string(),
            ),
            (
                "EMBER_DEFAULT_PARALLELISM",
                self.default_parallelism
                    .map_or_else(|| "(the task slots)".into(), |n| n.to_string()),
            ),
            (
                "EMBER_SHUFFLE_DURABILITY",
                self.shuffle_durability.to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The process's command line (program name first, like [`std::env::args`]) without the
/// `--master M` / `--master=M` that [`Context::from_env`](crate::Context::from_env)
/// reads: what a job hands its own argument parser (`clap`'s `parse_from`, say).
pub fn job_args() -> Vec<String> {
    strip_master(std::env::args().collect())
}

fn strip_master(args: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    if let Some(program) = it.next() {
        out.push(program);
    }
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a);
            out.extend(it);
            break;
        }
        if a == "--master" {
            it.next();
            continue;
        }
        if a.starts_with("--master=") {
            continue;
        }
        out.push(a);
    }
    out
}

fn master_from_args(args: &[String]) -> Option<String> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            return None;
        }
        if a == "--master" {
            return it.next().cloned();
        }
        if let Some(m) = a.strip_prefix("--master=") {
            return Some(m.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_masters() {
        assert_eq!(
            Master::parse("local[3]").unwrap(),
            Master::Local {
                threads: 3,
                max_failures: 1
            }
        );
        assert_eq!(
            Master::parse("local[2,4]").unwrap(),
            Master::Local {
                threads: 2,
                max_failures: 4
            }
        );
        assert!(matches!(
            Master::parse("local[*]").unwrap(),
            Master::Local { .. }
        ));
        assert_eq!(
            Master::parse("http://h:7077").unwrap(),
            Master::Cluster("http://h:7077".into())
        );
        let e = Master::parse("yarn").unwrap_err().to_string();
        assert!(e.contains("\"yarn\""), "{e}");
        assert!(Master::parse("local[0]").is_err());
    }

    #[test]
    fn job_args_drop_the_master_flag_and_keep_everything_else() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            strip_master(a(&[
                "prog",
                "--master",
                "local[2]",
                "in",
                "--partitions",
                "4",
                "out"
            ])),
            a(&["prog", "in", "--partitions", "4", "out"])
        );
        assert_eq!(
            strip_master(a(&["prog", "--master=local", "in"])),
            a(&["prog", "in"])
        );
        // After `--` everything is the job's, a `--master` too.
        assert_eq!(
            strip_master(a(&["prog", "x", "--", "--master", "y"])),
            a(&["prog", "x", "--", "--master", "y"])
        );
        assert_eq!(master_from_args(&a(&["prog", "--", "--master", "y"])), None);
        assert_eq!(strip_master(Vec::new()), Vec::<String>::new());
    }

    #[test]
    fn master_flag_forms() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            master_from_args(&a(&["prog", "--master", "local[2]", "x"])),
            Some("local[2]".into())
        );
        assert_eq!(
            master_from_args(&a(&["prog", "--master=local"])),
            Some("local".into())
        );
        assert_eq!(master_from_args(&a(&["prog", "in", "out"])), None);
    }

    #[test]
    fn shuffle_durability_forms() {
        assert_eq!(
            ShuffleDurability::parse("local").unwrap(),
            ShuffleDurability::Local
        );
        assert_eq!(
            ShuffleDurability::parse("storage:/mnt/shared/ember").unwrap(),
            ShuffleDurability::Storage("/mnt/shared/ember".into())
        );
        let s3 = ShuffleDurability::parse("storage:s3://bucket/shuffles");
        if cfg!(feature = "s3") {
            assert_eq!(
                s3.unwrap(),
                ShuffleDurability::Storage("s3://bucket/shuffles".into())
            );
        } else {
            let e = s3.unwrap_err().to_string();
            assert!(e.contains("`s3` feature"), "{e}");
        }
        let conf =
            Conf::local(1, 1 << 20).with_shuffle_durability(ShuffleDurability::Replicated(2));
        assert!(conf
            .entries()
            .iter()
            .any(|(k, v)| k == "EMBER_SHUFFLE_DURABILITY" && v == "replicated:2"));
        for n in 1..=4 {
            let d = ShuffleDurability::parse(&format!("replicated:{n}")).unwrap();
            assert_eq!(d, ShuffleDurability::Replicated(n));
            assert_eq!(d.to_string(), format!("replicated:{n}"));
        }
        for (bad, says) in [
            ("storage:relative/dir", "absolute"),
            ("storage:gs://bucket/prefix", "or an s3:// prefix"),
            ("replicated:0", "from 1 to 4"),
            ("replicated:5", "from 1 to 4"),
            ("replicated:two", "from 1 to 4"),
            ("durable", "expected local, replicated:N or storage:DIR"),
        ] {
            let e = ShuffleDurability::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("EMBER_SHUFFLE_DURABILITY") && e.contains(says),
                "{bad}: {e}"
            );
        }
        let long = format!("storage:{}", "x".repeat(10_000));
        let e = ShuffleDurability::parse(&long).unwrap_err().to_string();
        assert!(
            e.len() < 1000,
            "the bad value is quoted bounded: {}",
            e.len()
        );
    }
}
