//! The operators inside each stage's box of the job's DAG (as Spark's DAG shows the
//! RDDs of a stage): one line per RDD, parents first, a cached one marked.
//!
//! Invariant: lines are cut to fit the box and escaped; a stage with more operators
//! than listed ends with a line counting the rest.

use std::fmt::Write as _;

use crate::html::esc;
use crate::store::StageInfo;

/// Height of one operator line.
pub(crate) const LINE_H: u32 = 13;
/// Characters of an operator's name that fit a box's width.
const CHARS: usize = 30;

/// How many lines the stage's operators take.
pub(crate) fn lines(s: &StageInfo) -> u32 {
    s.operators.len() as u32 + u32::from(s.more_operators > 0)
}

/// The operator lines of `s`, the first at baseline `y`, from `x`.
pub(crate) fn operator_lines(s: &StageInfo, x: u32, y: u32) -> String {
    let mut out = String::new();
    let mut y = y;
    for o in &s.operators {
        let mut name: String = o.name.chars().take(CHARS).collect();
        if o.name.chars().nth(CHARS).is_some() {
            name.push('…');
        }
        let _ = write!(
            out,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"10\" class=\"operator{c}\"{fill}><title>{full}</title>{mark}{name}</text>",
            c = if o.cached { " cached" } else { "" },
            fill = if o.cached { " fill=\"#1a7f37\"" } else { "" },
            full = esc(&format!("RDD {}: {}", o.rdd_id, o.name)),
            mark = if o.cached { "● " } else { "" },
            name = esc(&name),
        );
        y += LINE_H;
    }
    if s.more_operators > 0 {
        let _ = write!(
            out,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"10\" fill=\"#555\">… {} more</text>",
            s.more_operators
        );
    }
    out
}
