//! The pool file (`--pool-file PATH`, `EMBER_POOL_FILE` in local mode): TOML naming
//! the share of each session by application name and of each pool inside a session.
//!
//! ```toml
//! [applications."nightly-etl"]  # a session of this application name
//! weight = 2                     # its share against other sessions (default 1)
//! min_share = 4                  # slots it gets before weights count (default 0)
//!
//! [pools.etl]                    # the pool `ctx.set_pool("etl")` names, in any session
//! weight = 3
//! min_share = 1
//! mode = "fair"                  # how the pool's jobs share it: "fifo" (default) or "fair"
//! ```
//!
//! Invariants: the file is read only up to [`MAX_POOL_FILE_BYTES`] and holds at most
//! [`MAX_POOL_ENTRIES`] entries; an unknown key, a weight of 0 or a name longer than a
//! job's pool name may be is an error naming the file and the entry, never a default
//! silently applied.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{PoolSettings, SchedulingMode};

/// Largest pool file read.
pub const MAX_POOL_FILE_BYTES: u64 = 1 << 20;
/// Most applications and pools one file may name, together.
pub const MAX_POOL_ENTRIES: usize = 4096;

/// Why a pool file was not taken.
#[derive(Debug, thiserror::Error)]
pub enum PoolFileError {
    #[error("cannot read the pool file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the pool file {path} is over {MAX_POOL_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the pool file {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    applications: HashMap<String, RawPool>,
    #[serde(default)]
    pools: HashMap<String, RawPool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    weight: Option<u32>,
    min_share: Option<u32>,
    mode: Option<String>,
}

/// The file's settings.
pub(super) struct Parsed {
    pub applications: HashMap<String, PoolSettings>,
    pub pools: HashMap<String, PoolSettings>,
}

/// Reads and checks the pool file at `path`.
pub(super) fn read(path: &Path) -> Result<Parsed, PoolFileError> {
    let read_err = |source| PoolFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(MAX_POOL_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_POOL_FILE_BYTES {
        return Err(PoolFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    parse(&text).map_err(|message| PoolFileError::Invalid {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses a pool file's text.
pub(super) fn parse(text: &str) -> Result<Parsed, String> {
    let raw: Raw = toml::from_str(text).map_err(|e| e.to_string())?;
    if raw.applications.len() + raw.pools.len() > MAX_POOL_ENTRIES {
        return Err(format!(
            "it names {} applications and pools, over the limit of {MAX_POOL_ENTRIES}",
            raw.applications.len() + raw.pools.len()
        ));
    }
    if let Some((name, _)) = raw.applications.iter().find(|(_, p)| p.mode.is_some()) {
        return Err(format!(
            "[applications.\"{}\"]: mode is not a setting of a session (its pools always \
             share it fairly); set it per pool, under [pools.NAME]",
            crate::limits::bounded(name)
        ));
    }
    let applications = settle(raw.applications, "applications", SchedulingMode::Fair)?;
    let pools = settle(raw.pools, "pools", SchedulingMode::Fifo)?;
    Ok(Parsed {
        applications,
        pools,
    })
}

fn settle(
    raw: HashMap<String, RawPool>,
    table: &str,
    default_mode: SchedulingMode,
) -> Result<HashMap<String, PoolSettings>, String> {
    let max_name = ember_proto::limits::MAX_JOB_PROPERTY_BYTES;
    let mut out = HashMap::with_capacity(raw.len());
    for (name, p) in raw {
        let shown = crate::limits::bounded(&name);
        if name.len() > max_name {
            return Err(format!(
                "[{table}.\"{shown}\"]: the name is {} bytes, over the limit of {max_name}",
                name.len()
            ));
        }
        let weight = p.weight.unwrap_or(1);
        if weight == 0 {
            return Err(format!("[{table}.\"{shown}\"]: weight must be at least 1"));
        }
        let mode = match p.mode {
            Some(m) => m
                .parse()
                .map_err(|e| format!("[{table}.\"{shown}\"]: {e}"))?,
            None => default_mode,
        };
        out.insert(
            name,
            PoolSettings {
                weight,
                min_share: p.min_share.unwrap_or(0),
                mode,
            },
        );
    }
    Ok(out)
}
