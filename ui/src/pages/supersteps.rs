//! The supersteps of a barrier stage, on its stage page: for the newest attempt whose
//! tasks reported collectives, one row per collective call (superstep) and, per rank,
//! the compute before the call, the time in it (moving data and waiting for slower
//! ranks: a straggler shows as the one rank that waits least) and the bytes it moved.
//!
//! Invariant: at most [`MAX_ROWS`] rows are drawn (the API has every call reported).

use std::fmt::Write;

use crate::html::{bytes, esc};
use crate::store::TaskInfo;

/// Rows drawn at most.
pub(crate) const MAX_ROWS: usize = 1000;

/// The section, or nothing when no task of the stage reported collectives.
pub(crate) fn section(tasks: &[TaskInfo]) -> String {
    let Some(attempt) = tasks
        .iter()
        .filter(|t| t.barrier.is_some())
        .map(|t| t.stage_attempt)
        .max()
    else {
        return String::new();
    };
    // One task per rank of that attempt (the last reported, if a rank ran twice).
    let mut ranks: Vec<&TaskInfo> = Vec::new();
    for t in tasks
        .iter()
        .filter(|t| t.stage_attempt == attempt && t.barrier.is_some())
    {
        match ranks.iter_mut().find(|r| r.partition == t.partition) {
            Some(r) => *r = t,
            None => ranks.push(t),
        }
    }
    ranks.sort_by_key(|t| t.partition);
    let mut out = format!("<h2>Supersteps (attempt {attempt})</h2>");
    for t in &ranks {
        if let Some(step) = t.barrier.as_ref().and_then(|b| b.resumed_after) {
            let _ = write!(
                out,
                "<p>rank {} resumed from the checkpoint of superstep {step}</p>",
                t.partition
            );
        }
    }
    let rows = ranks
        .iter()
        .filter_map(|t| t.barrier.as_ref().map(|b| b.supersteps.len()))
        .max()
        .unwrap_or(0);
    out.push_str("<table class=\"supersteps\"><tr><th>Superstep</th><th>Collective</th>");
    for t in &ranks {
        let _ = write!(
            out,
            "<th>rank {r} compute</th><th>rank {r} in collective</th><th>rank {r} bytes</th>",
            r = t.partition
        );
    }
    out.push_str("</tr>");
    for i in 0..rows.min(MAX_ROWS) {
        let op = ranks
            .iter()
            .find_map(|t| t.barrier.as_ref()?.supersteps.get(i))
            .map_or("", |s| s.op.as_str());
        let _ = write!(out, "<tr><td class=\"n\">{i}</td><td>{}</td>", esc(op));
        for t in &ranks {
            match t.barrier.as_ref().and_then(|b| b.supersteps.get(i)) {
                Some(s) => {
                    let _ = write!(
                        out,
                        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
                        micros(s.compute_micros),
                        micros(s.wait_micros),
                        bytes(s.bytes_sent + s.bytes_received)
                    );
                }
                None => out.push_str("<td></td><td></td><td></td>"),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    let dropped: u64 = ranks
        .iter()
        .filter_map(|t| t.barrier.as_ref().map(|b| b.dropped))
        .max()
        .unwrap_or(0);
    if rows > MAX_ROWS || dropped > 0 {
        let _ = write!(
            out,
            "<p>{} more supersteps not drawn ({} not reported by the tasks)</p>",
            rows.saturating_sub(MAX_ROWS) as u64 + dropped,
            dropped
        );
    }
    out
}

/// Microseconds as the page shows them.
fn micros(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}
