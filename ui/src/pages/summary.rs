//! The stage page's "Summary metrics" table: one row per metric, one column per
//! quantile of [`TaskSummary`].
//!
//! Invariant: every number shown is the summary's, formatted (times in seconds, sizes
//! in binary units); nothing is recomputed here.

use std::fmt::Write as _;

use crate::html::bytes;
use crate::store::quantiles::{Five, TaskSummary};

/// A metric's name, its quantiles and how to show one.
type Row<'a> = (&'a str, &'a Five, &'a dyn Fn(u64) -> String);

/// The summary table, or a line saying no task has succeeded yet.
pub(crate) fn table(s: &TaskSummary) -> String {
    let mut out = format!(
        "<h2 id=\"summary\">Summary metrics for {} completed tasks</h2>",
        s.tasks
    );
    if s.tasks == 0 {
        out.push_str("<p>No task has succeeded yet.</p>");
        return out;
    }
    out.push_str(
        "<table class=\"summary\"><tr><th>Metric</th><th>Min</th><th>25th percentile</th>\
         <th>Median</th><th>75th percentile</th><th>Max</th></tr>",
    );
    let secs = |ms: u64| format!("{:.3} s", ms as f64 / 1000.0);
    let count = |n: u64| n.to_string();
    let rows: [Row; 9] = [
        ("Duration", &s.duration_ms, &secs),
        ("Run time", &s.run_time_micros, &|us| {
            format!("{:.3} s", us as f64 / 1e6)
        }),
        ("Records in", &s.records_in, &count),
        ("Records out", &s.records_out, &count),
        ("Shuffle read", &s.shuffle_read_bytes, &bytes),
        ("Shuffle read records", &s.shuffle_read_records, &count),
        ("Shuffle write", &s.shuffle_write_bytes, &bytes),
        ("Shuffle write records", &s.shuffle_write_records, &count),
        ("Spilled", &s.spilled_bytes, &bytes),
    ];
    for (name, five, show) in rows {
        let _ = write!(out, "<tr><td>{name}</td>");
        for v in five {
            let _ = write!(out, "<td class=\"n\">{}</td>", show(*v));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}
