//! The driver's flags for sharing slots between sessions (see
//! `ember_scheduler::pools`): the scheduling mode, the pool file and the per-session
//! bound on slots.
//!
//! `fair` is the daemon's default: a driver is a shared service, and under `fifo` one
//! client's long job holds every slot until its queue drains, so a colleague's
//! one-second job waits behind all of it. Local mode (one client) keeps `fifo`.

use std::path::PathBuf;

use anyhow::Context;
use ember_scheduler::pools::{FairConfig, SchedulingMode};

#[derive(clap::Args, Debug)]
pub struct SchedulingArgs {
    /// How slots are shared: `fair` (sessions share the cluster by weight, and each
    /// session's pools share its part; Spark's FAIR) or `fifo` (one queue, oldest job
    /// first).
    #[arg(long, default_value = "fair", value_parser = parse_mode)]
    pub scheduling_mode: SchedulingMode,
    /// TOML file setting weight and min_share of sessions (by application name,
    /// `[applications."NAME"]`), and weight, min_share and mode of the pools inside
    /// them (`[pools.NAME]`).
    #[arg(long)]
    pub pool_file: Option<PathBuf>,
    /// Most tasks one session has in flight at once (pipelined brief tasks included); a
    /// session at it waits for its own tasks (no bound if not given).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_cores_per_session: Option<u32>,
}

fn parse_mode(s: &str) -> Result<SchedulingMode, String> {
    s.parse()
}

impl SchedulingArgs {
    /// The scheduler's sharing settings, the pool file read and checked.
    pub fn fair_config(&self) -> anyhow::Result<FairConfig> {
        let mut config = FairConfig {
            mode: self.scheduling_mode,
            max_cores_per_session: self.max_cores_per_session,
            ..FairConfig::default()
        };
        if let Some(path) = &self.pool_file {
            config
                .load_pool_file(path)
                .context("cannot use --pool-file")?;
        }
        Ok(config)
    }
}
