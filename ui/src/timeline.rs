//! The UI's timelines (SVG, as Spark's vis.js timelines show them):
//! - [`stage_timeline`]: a stage's task attempts, one bar each from launch to end, in
//!   rows grouped by executor (Spark's executor lanes);
//! - [`event_timeline`]: the jobs page's event timeline, executors added and lost and
//!   jobs from submission to end.
//!
//! Both have a time axis with labelled ticks. Invariants: every task attempt kept (up to
//! [`MAX_TASK_BARS`]), every job (the newest [`MAX_JOB_BARS`]) and every executor (the
//! latest [`MAX_EXECUTOR_ROWS`] added) has exactly one row of its own, so bars never
//! hide each other, and a page says when some were left out; every text is
//! HTML-escaped.

use std::fmt::Write as _;

use crate::html::esc;
use crate::nav;
use crate::store::{AppStatus, Status, TaskInfo};

/// Task attempts drawn at most (Spark's `spark.ui.timeline.tasks.maximum`).
pub(crate) const MAX_TASK_BARS: usize = 1000;
/// Jobs drawn at most, the newest (as Spark's `spark.ui.timeline.jobs.maximum`, lower:
/// a row each, above the jobs' tables).
pub(crate) const MAX_JOB_BARS: usize = 100;
/// Executors drawn at most, the latest added (as `spark.ui.timeline.executors.maximum`).
pub(crate) const MAX_EXECUTOR_ROWS: usize = 100;

/// Left margin for row labels, width of the time scale and height of a row.
const LABEL: f64 = 170.0;
const WIDTH: f64 = 700.0;
const ROW: u32 = 16;
/// Room for the axis under the rows: ticks, their labels and the axis title.
const AXIS: u32 = 40;

/// A duration in ms as an axis label.
fn ms_label(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// A tick step of 1, 2 or 5 times a power of ten giving at most 8 ticks over `span` ms.
fn tick_step(span: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if span / (step * m) <= 8 {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// The time axis under rows ending at `y`: `span` ms over [`WIDTH`], ticks labelled
/// with the time since the left edge, and `title` under them.
fn axis(svg: &mut String, y: u32, span: u64, title: &str) {
    let scale = WIDTH / span as f64;
    let _ = write!(
        svg,
        "<g class=\"axis\"><line x1=\"{LABEL}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#444\"/>",
        x2 = LABEL + WIDTH
    );
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let x = LABEL + t as f64 * scale;
        let _ = write!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{y}\" x2=\"{x:.1}\" y2=\"{y2}\" stroke=\"#444\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"{ty}\" font-size=\"10\" text-anchor=\"middle\">{l}</text>",
            y2 = y + 4,
            ty = y + 15,
            l = ms_label(t)
        );
        t += step;
    }
    let _ = write!(
        svg,
        "<text x=\"{x:.1}\" y=\"{ty}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">{t}</text></g>",
        x = LABEL + WIDTH / 2.0,
        ty = y + 32,
        t = esc(title)
    );
}

fn open_svg(class: &str, height: u32) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" class=\"{class}\">",
        w = LABEL + WIDTH + 40.0
    )
}

fn colour(s: Status) -> &'static str {
    match s {
        Status::Succeeded => "#81c784",
        Status::Failed => "#e57373",
        _ => "#64b5f6",
    }
}

/// One bar per task attempt from launch to end (a running one to the latest time
/// known), a row each, rows grouped by executor with its id on the group's first row.
pub(crate) fn stage_timeline(tasks: &[TaskInfo]) -> String {
    let Some(start) = tasks.iter().map(|t| t.launched_ms).min() else {
        return "<p>No tasks.</p>".into();
    };
    let mut order: Vec<&TaskInfo> = tasks.iter().collect();
    order.sort_by_key(|t| (t.executor_id.as_str(), t.launched_ms, t.task_id));
    let more = order.len().saturating_sub(MAX_TASK_BARS);
    order.truncate(MAX_TASK_BARS);
    let end = order
        .iter()
        .map(|t| t.finished_ms.unwrap_or(t.launched_ms))
        .max()
        .unwrap_or(start);
    let span = (end - start).max(1);
    let scale = WIDTH / span as f64;
    let rows = order.len() as u32;
    let mut svg = open_svg("timeline", rows * ROW + AXIS + 6);
    let mut last_executor = None;
    for (r, t) in order.iter().enumerate() {
        let y = r as u32 * ROW;
        if last_executor != Some(t.executor_id.as_str()) {
            if r > 0 {
                let _ = write!(
                    svg,
                    "<line x1=\"0\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#ddd\"/>",
                    x2 = LABEL + WIDTH
                );
            }
            let _ = write!(
                svg,
                "<text class=\"lane\" x=\"2\" y=\"{}\" font-size=\"11\"><title>executor {id}</title>{short}</text>",
                y + 12,
                id = esc(&t.executor_id),
                short = crate::label::tspans(&t.executor_id, 20, 1, 2, 0),
            );
            last_executor = Some(t.executor_id.as_str());
        }
        let _ = write!(
            svg,
            "<text x=\"{x}\" y=\"{ty}\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">task {id}</text>",
            x = LABEL - 6.0,
            ty = y + 12,
            id = t.task_id,
        );
        let until = t.finished_ms.unwrap_or(end);
        let x = LABEL + (t.launched_ms - start) as f64 * scale;
        let w = ((until - t.launched_ms) as f64 * scale).max(3.0);
        let _ = write!(
            svg,
            "<rect class=\"task {st}\" x=\"{x:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{c}\" stroke=\"#555\" stroke-width=\"0.5\">\
             <title>task {id}, partition {p}, attempt {a} on executor {ex}: {st}, {d}</title></rect>",
            y + 3,
            ROW - 5,
            st = t.status.as_str(),
            c = colour(t.status),
            id = t.task_id,
            p = t.partition,
            a = t.attempt,
            ex = esc(&t.executor_id),
            d = t
                .finished_ms
                .map_or_else(|| "running".to_string(), |f| ms_label(f - t.launched_ms)),
        );
    }
    axis(
        &mut svg,
        rows * ROW + 2,
        span,
        "time since the stage's first task launched",
    );
    svg.push_str("</svg>");
    if more > 0 {
        let _ = write!(
            svg,
            "<p>The first {MAX_TASK_BARS} task attempts of {} (by executor).</p>",
            tasks.len()
        );
    }
    svg
}

/// Milliseconds since the epoch as `HH:MM:SS` UTC.
fn clock(ms: u64) -> String {
    let s = ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The jobs page's event timeline: a row per executor (added, and lost with its
/// reason) and a row per job (a bar from submission to end, linked to its page).
pub(crate) fn event_timeline(app: &AppStatus, base: &str) -> String {
    let mut executors = app.executors();
    executors.sort_by_key(|x| (x.added_ms, x.executor_id.clone()));
    let skipped_executors = executors.len().saturating_sub(MAX_EXECUTOR_ROWS);
    executors.drain(..skipped_executors);
    let mut jobs: Vec<_> = app.jobs_iter().collect();
    let skipped_jobs = jobs.len().saturating_sub(MAX_JOB_BARS);
    jobs.drain(..skipped_jobs);
    let mut times: Vec<u64> = Vec::new();
    for x in &executors {
        times.push(x.added_ms);
        times.extend(x.lost_ms);
    }
    for j in &jobs {
        times.push(j.submitted_ms);
        times.extend(j.completed_ms);
    }
    let (Some(&first), Some(&end)) = (times.iter().min(), times.iter().max()) else {
        return "<h2>Event timeline</h2><p>No executors and no jobs yet.</p>".into();
    };
    let start = if app.started_ms > 0 {
        app.started_ms.min(first)
    } else {
        first
    };
    let span = (end - start).max(1);
    let scale = WIDTH / span as f64;
    let at = |t: u64| LABEL + (t - start) as f64 * scale;
    let rows = (executors.len() + jobs.len()) as u32;
    let mut svg = String::from("<h2>Event timeline</h2>");
    svg.push_str(&open_svg("events", rows * ROW + AXIS + 6));
    for (r, x) in executors.iter().enumerate() {
        let y = r as u32 * ROW;
        // The event's text on the side of its mark with more room.
        let cx = at(x.added_ms);
        let (tx, anchor) = if cx < LABEL + WIDTH / 2.0 {
            (cx + 8.0, "start")
        } else {
            (cx - 8.0, "end")
        };
        let _ = write!(
            svg,
            "<text class=\"lane\" x=\"2\" y=\"{ty}\" font-size=\"11\">executor {short}</text>\
             <g class=\"executor-added\"><circle cx=\"{cx:.1}\" cy=\"{cy}\" r=\"5\" fill=\"#2e7d32\"/>\
             <text x=\"{tx:.1}\" y=\"{ty}\" font-size=\"10\" text-anchor=\"{anchor}\">executor {id} added</text></g>",
            ty = y + 12,
            id = esc(&x.executor_id),
            short = esc(&crate::label::wrap(&x.executor_id, 17, 1).concat()),
            cy = y + ROW / 2,
        );
        if let Some(lost) = x.lost_ms {
            let _ = write!(
                svg,
                "<g class=\"executor-lost\"><circle cx=\"{cx:.1}\" cy=\"{cy}\" r=\"5\" fill=\"#c62828\"/>\
                 <text x=\"{tx:.1}\" y=\"{ty}\" font-size=\"10\" text-anchor=\"end\">executor {id} lost: {why}</text></g>",
                cx = at(lost),
                cy = y + ROW / 2,
                tx = at(lost) - 8.0,
                ty = y + 12,
                id = esc(&x.executor_id),
                why = esc(x.lost_reason.as_deref().unwrap_or("")),
            );
        }
    }
    for (r, j) in jobs.iter().enumerate() {
        let y = (executors.len() + r) as u32 * ROW;
        let label = if j.application.is_empty() {
            format!("job {}", j.number)
        } else {
            format!("job {} of {}", j.number, j.application)
        };
        let from = at(j.submitted_ms);
        let w = (at(j.completed_ms.unwrap_or(end)) - from).max(3.0);
        let _ = write!(
            svg,
            "<a href=\"{href}\"><g class=\"job {st}\"><title>{l}: {st}, {desc}</title>\
             <text x=\"2\" y=\"{ty}\" font-size=\"11\">{short}</text>\
             <rect x=\"{from:.1}\" y=\"{ry}\" width=\"{w:.1}\" height=\"{h}\" fill=\"{c}\" stroke=\"#555\" stroke-width=\"0.5\"/></g></a>",
            href = esc(&nav::job_href(base, app, j)),
            st = j.status.as_str(),
            l = esc(&label),
            short = esc(&crate::label::wrap(&label, 26, 1).concat()),
            desc = esc(&j.description),
            ty = y + 12,
            ry = y + 3,
            h = ROW - 5,
            c = colour(j.status),
        );
    }
    axis(
        &mut svg,
        rows * ROW + 2,
        span,
        &format!("time since {} UTC", clock(start)),
    );
    svg.push_str("</svg>");
    if skipped_jobs + skipped_executors > 0 {
        let _ = write!(
            svg,
            "<p>Drawn: the newest {} of {} jobs, the latest {} of {} executors added.</p>",
            jobs.len(),
            jobs.len() + skipped_jobs,
            executors.len(),
            executors.len() + skipped_executors
        );
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(1), 1);
        assert_eq!(tick_step(30), 5);
        assert_eq!(tick_step(1234), 200);
        assert_eq!(tick_step(60_000), 10_000);
        assert_eq!(ms_label(1500), "1.5 s");
        assert_eq!(ms_label(2000), "2 s");
        assert_eq!(clock(3_723_000), "01:02:03");
    }

    #[test]
    fn the_event_timeline_draws_the_newest_jobs_and_says_so() {
        use crate::event::AppEvent;
        let mut app = AppStatus::new("app", 1);
        app.apply(&AppEvent::ExecutorAdded {
            executor_id: "e<1>".into(),
            slots: 1,
            time_ms: 2,
        });
        let n = MAX_JOB_BARS as u64 + 20;
        for job_id in 0..n {
            app.apply(&AppEvent::JobSubmitted {
                pool_share: Default::default(),
                job_group: Default::default(),
                pool: Default::default(),
                job_id,
                application: String::new(),
                number: Some(job_id),
                description: "count at a.rs:1".into(),
                stages: vec![],
                time_ms: 10 + job_id,
            });
        }
        let svg = event_timeline(&app, "");
        assert_eq!(svg.matches("<g class=\"job ").count(), MAX_JOB_BARS);
        assert!(svg.contains(">job 119</text>") && !svg.contains(">job 19</text>"));
        assert!(
            svg.contains(&format!("the newest {MAX_JOB_BARS} of {n} jobs")),
            "{svg}"
        );
        assert!(svg.contains(">executor e&lt;1&gt; added</text>"), "{svg}");
    }
}
