//! The jobs page's "Scheduler pools" table (Spark's "Fair Scheduler Pools"): per
//! application and pool with running jobs, how the pool shares slots (weight, min share
//! and mode, as the scheduler reported them), its running jobs, active stages and
//! running tasks, so an operator sees how the driver's slots are shared.
//!
//! Invariant: counts come from the running jobs' own stages in the store; a stage two
//! running jobs of one pool share counts once there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::html::esc;
use crate::store::{AppStatus, Status};

/// The table, or nothing when no job runs.
pub(crate) fn table(app: &AppStatus) -> String {
    // (application, pool) -> (running jobs, their running stages, how it shares).
    let jobs = app.jobs();
    type Pool<'a> = (u32, BTreeSet<u32>, &'a str);
    let mut pools: BTreeMap<(&str, &str), Pool> = BTreeMap::new();
    for job in jobs.iter().filter(|j| j.status == Status::Running) {
        let entry = pools
            .entry((job.application.as_str(), job.pool.as_str()))
            .or_default();
        entry.0 += 1;
        entry.2 = job.pool_share.as_str();
        entry.1.extend(
            job.stage_ids
                .iter()
                .copied()
                .filter(|s| app.stage(*s).is_some_and(|st| st.status == Status::Running)),
        );
    }
    if pools.is_empty() {
        return String::new();
    }
    let apps = pools.keys().any(|(a, _)| !a.is_empty());
    let mut out = String::from("<h2 id=\"pools\">Scheduler pools</h2><table><tr>");
    if apps {
        out.push_str("<th>Application</th>");
    }
    out.push_str(
        "<th>Pool</th><th>Share</th><th>Running jobs</th><th>Active stages</th>\
         <th>Running tasks</th></tr>",
    );
    for ((application, pool), (jobs, stages, share)) in &pools {
        let tasks: u32 = stages
            .iter()
            .filter_map(|s| app.stage(*s))
            .map(|s| s.tasks_running)
            .sum();
        out.push_str("<tr>");
        if apps {
            let _ = write!(out, "<td>{}</td>", esc(application));
        }
        let _ = write!(
            out,
            "<td>{}</td><td>{}</td><td class=\"n\">{jobs}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{tasks}</td></tr>",
            esc(pool),
            esc(share),
            stages.len()
        );
    }
    out.push_str("</table>");
    out
}
