//! Server-rendered pages: jobs, one job (its stages and an SVG of their DAG), one stage
//! (its tasks, summary quantiles and a timeline) and executors; the page frame, with
//! the navigation to `pages`' Storage and Environment. Plain HTML that works without JavaScript;
//! a page of a running application refreshes itself every two seconds (`<meta
//! http-equiv="refresh">`). Everything interpolated is HTML-escaped.

use std::fmt::Write as _;

use crate::nav;
use crate::pages::{dag_ops, summary};
use crate::store::{AppStatus, ExecutorInfo, JobInfo, StageInfo, Status, TaskInfo};

/// `s` with `& < > " '` escaped.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
th{background:#f3f3f3}td.n{text-align:right}nav a{margin-right:1em}\
.succeeded{color:#1a7f37}.failed{color:#c62828}.running{color:#1565c0}.skipped{color:#888}.pending{color:#888}\
pre{white-space:pre-wrap;max-width:60em;background:#fafafa;border:1px solid #eee;padding:.4em}";

/// A whole page: `base` prefixes every link (empty for a live application).
pub(crate) fn page(app: &AppStatus, base: &str, title: &str, body: &str) -> String {
    let refresh = if app.busy() {
        "<meta http-equiv=\"refresh\" content=\"2\">"
    } else {
        ""
    };
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">{refresh}<title>{t} - ember</title>\
         <style>{STYLE}</style></head><body><nav><b>ember</b> {app_name} \
         <a href=\"{base}/jobs\">Jobs</a><a href=\"{base}/storage\">Storage</a>\
         <a href=\"{base}/environment\">Environment</a><a href=\"{base}/executors\">Executors</a></nav>\
         <h1>{t}</h1>{body}</body></html>",
        t = esc(title),
        app_name = esc(&app.name),
    )
}

fn status(s: Status) -> String {
    format!("<span class=\"{0}\">{0}</span>", s.as_str())
}

fn duration(from: u64, to: Option<u64>) -> String {
    match to {
        Some(t) => format!("{:.3} s", t.saturating_sub(from) as f64 / 1000.0),
        None => "…".into(),
    }
}

pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub(crate) fn jobs_page(app: &AppStatus, base: &str) -> String {
    let jobs = app.jobs();
    let mut body = crate::timeline::event_timeline(app, base);
    body.push_str(&crate::pages::pools::table(app));
    for (label, want) in [
        ("Running", Status::Running),
        ("Succeeded", Status::Succeeded),
        ("Failed", Status::Failed),
    ] {
        let rows: Vec<&JobInfo> = jobs.iter().filter(|j| j.status == want).collect();
        let _ = write!(
            body,
            "<h2 id=\"{}\">{label} jobs ({})</h2>",
            want.as_str(),
            rows.len()
        );
        if rows.is_empty() {
            continue;
        }
        // A driver serving several applications names each job's; local mode has one.
        let apps = rows.iter().any(|j| !j.application.is_empty());
        body.push_str(if apps {
            "<table><tr><th>Application</th><th>Job</th>"
        } else {
            "<table><tr><th>Job</th>"
        });
        body.push_str("<th>Description</th><th>Status</th><th>Stages</th><th>Duration</th><th>Failure</th></tr>");
        for j in rows {
            body.push_str("<tr>");
            if apps {
                let _ = write!(body, "<td>{}</td>", esc(&j.application));
            }
            let _ = write!(
                body,
                "<td class=\"n\"><a href=\"{href}\">{num}</a></td><td>{d}</td><td>{s}</td>\
                 <td class=\"n\">{n} ({k} skipped)</td><td class=\"n\">{t}</td><td>{f}</td></tr>",
                href = esc(&nav::job_href(base, app, j)),
                num = j.number,
                d = esc(&j.description),
                s = status(j.status),
                n = j.stage_ids.len(),
                k = j.skipped_stage_ids.len(),
                t = duration(j.submitted_ms, j.completed_ms),
                f = esc(j.failure.as_deref().unwrap_or("")),
            );
        }
        body.push_str("</table>");
    }
    page(app, base, "Jobs", &body)
}

/// A job's page; `kill`: with a button that kills it (`POST {base}/jobs/N/kill`).
pub(crate) fn job_page(
    app: &AppStatus,
    base: &str,
    job: &JobInfo,
    stages: &[StageInfo],
    kill: bool,
) -> String {
    let mut body = format!(
        "<p>{d}: {s}, {t}; pool {p}{g}</p>",
        d = esc(&job.description),
        s = status(job.status),
        t = duration(job.submitted_ms, job.completed_ms),
        p = esc(&job.pool),
        g = if job.job_group.is_empty() {
            String::new()
        } else {
            format!(", job group {}", esc(&job.job_group))
        }
    );
    if kill {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{base}/jobs/{id}/kill\" \
             onsubmit=\"return confirm('Kill job {n}?')\"><button>Kill job</button></form>",
            id = job.job_id,
            n = job.number
        );
    }
    if let Some(f) = &job.failure {
        let _ = write!(body, "<pre class=\"failed\">{}</pre>", esc(f));
    }
    // Stage links carry the application's numbers (see `nav`).
    let app_base = esc(&nav::app_base(base, app, &job.application));
    body.push_str("<h2>DAG</h2>");
    body.push_str(&dag_svg(stages, &app_base));
    body.push_str("<h2>Stages</h2>");
    stage_table(&mut body, &app_base, stages);
    let title = if job.application.is_empty() {
        format!("Job {}", job.number)
    } else {
        format!("Job {} of {}", job.number, job.application)
    };
    page(app, base, &title, &body)
}

fn stage_table(body: &mut String, base: &str, stages: &[StageInfo]) {
    body.push_str(
        "<table><tr><th>Stage</th><th>Name</th><th>Status</th><th>Tasks (done / running / failed of all)</th>\
         <th>Records in</th><th>Records out</th><th>Shuffle read</th><th>Shuffle write</th><th>Spilled</th><th>Duration</th></tr>",
    );
    for s in stages {
        let _ = write!(
            body,
            "<tr><td class=\"n\"><a href=\"{base}/stages/{num}\">{num}</a></td><td>{name}</td><td>{st}</td>\
             <td class=\"n\">{ok} / {run} / {fail} of {all}</td><td class=\"n\">{ri}</td><td class=\"n\">{ro}</td>\
             <td class=\"n\">{sr}</td><td class=\"n\">{sw}</td><td class=\"n\">{sp}</td><td class=\"n\">{t}</td></tr>",
            num = s.number,
            name = esc(&s.name),
            st = status(s.status),
            ok = s.tasks_succeeded,
            run = s.tasks_running,
            fail = s.tasks_failed,
            all = s.num_tasks,
            ri = s.metrics.records_in,
            ro = s.metrics.records_out,
            sr = bytes(s.metrics.shuffle_bytes_read),
            sw = bytes(s.metrics.shuffle_bytes_written),
            sp = bytes(s.metrics.bytes_spilled),
            t = s
                .submitted_ms
                .map_or_else(|| "-".to_string(), |at| duration(at, s.completed_ms)),
        );
    }
    body.push_str("</table>");
}

/// The job's stages as boxes in columns by depth (parents to the left), arrows from
/// each parent, coloured by status; each box links to its stage.
pub(crate) fn dag_svg(stages: &[StageInfo], base: &str) -> String {
    let mut depth: Vec<u32> = Vec::with_capacity(stages.len());
    for s in stages {
        // Parents come first in the job's list, so their depth is known.
        let d = s
            .parents
            .iter()
            .filter_map(|p| stages.iter().position(|x| x.stage_id == *p))
            .filter_map(|i| depth.get(i).copied())
            .max()
            .map_or(0, |d| d + 1);
        depth.push(d);
    }
    // The heading, a name of up to two lines, then the stage's operators.
    let ops = stages.iter().map(dag_ops::lines).max().unwrap_or(0);
    let (w, h, gap_x, gap_y) = (190u32, 56 + ops * dag_ops::LINE_H, 60u32, 18u32);
    let mut row_of_depth: std::collections::HashMap<u32, u32> = Default::default();
    let mut pos = Vec::with_capacity(stages.len());
    for d in &depth {
        let r = row_of_depth.entry(*d).or_insert(0);
        pos.push((10 + d * (w + gap_x), 10 + *r * (h + gap_y)));
        *r += 1;
    }
    let width = pos.iter().map(|p| p.0 + w + 10).max().unwrap_or(20);
    let height = pos.iter().map(|p| p.1 + h + 10).max().unwrap_or(20);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" class=\"dag\">\
         <defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" refX=\"8\" refY=\"4\" orient=\"auto\">\
         <path d=\"M0,0 L8,4 L0,8 z\" fill=\"#666\"/></marker></defs>"
    );
    for (i, s) in stages.iter().enumerate() {
        for p in &s.parents {
            if let Some(j) = stages.iter().position(|x| x.stage_id == *p) {
                let (x1, y1) = (pos[j].0 + w, pos[j].1 + h / 2);
                let (x2, y2) = (pos[i].0, pos[i].1 + h / 2);
                let _ = write!(
                    svg,
                    "<line x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y2}\" stroke=\"#666\" marker-end=\"url(#arrow)\"/>"
                );
            }
        }
    }
    for (i, s) in stages.iter().enumerate() {
        let fill = match s.status {
            Status::Succeeded => "#e6f4ea",
            Status::Failed => "#fdecea",
            Status::Running => "#e3f2fd",
            Status::Skipped | Status::Pending => "#f5f5f5",
        };
        let (x, y) = pos[i];
        let _ = write!(
            svg,
            "<a href=\"{base}/stages/{num}\"><g class=\"stage {st}\"><title>{full}</title><rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" rx=\"5\" \
             fill=\"{fill}\" stroke=\"#888\"/><text x=\"{tx}\" y=\"{ty1}\" font-size=\"12\">Stage {num} ({st})</text>\
             <text x=\"{tx}\" y=\"{ty2}\" font-size=\"11\" fill=\"#555\">{name}</text>{ops}</g></a>",
            num = s.number,
            st = s.status.as_str(),
            tx = x + 8,
            ty1 = y + 18,
            ty2 = y + 33,
            full = esc(&s.name),
            name = crate::label::tspans(&s.name, 30, 2, x + 8, 13),
            ops = dag_ops::operator_lines(s, x + 8, y + 62),
        );
    }
    svg.push_str("</svg>");
    svg
}

pub(crate) fn stage_page(
    app: &AppStatus,
    base: &str,
    stage: &StageInfo,
    jobs: &[&JobInfo],
    tasks: &[TaskInfo],
    kill: bool,
) -> String {
    let mut body = String::new();
    if kill {
        // Spark's kill link of an active stage: every job that needs it fails.
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{base}/stages/{id}/kill\" \
             onsubmit=\"return confirm('Kill stage {n} and the jobs that need it?')\">\
             <button>Kill stage</button></form>",
            id = stage.stage_id,
            n = stage.number
        );
    }
    let _ = write!(body, "<p>{}: {}", esc(&stage.name), status(stage.status));
    for j in jobs {
        let _ = write!(
            body,
            " <a href=\"{href}\">job {n}</a>",
            href = esc(&nav::job_href(base, app, j)),
            n = j.number
        );
    }
    body.push_str("</p>");
    if let Some(f) = &stage.failure {
        let _ = write!(body, "<pre class=\"failed\">{}</pre>", esc(f));
    }
    if stage.recovered_outputs > 0 {
        let _ = write!(
            body,
            "<p class=\"recovered\">{n} of its map outputs were recovered from the executors \
             holding them after a driver restart (not run again)</p>",
            n = stage.recovered_outputs
        );
    }
    let application = jobs.first().map_or("", |j| j.application.as_str());
    let app_base = esc(&nav::app_base(base, app, application));
    stage_table(&mut body, &app_base, std::slice::from_ref(stage));
    if let Some(summary) = app.task_summary(stage.stage_id) {
        body.push_str(&summary::table(&summary));
    }
    body.push_str("<h2>Timeline</h2>");
    body.push_str(&crate::timeline::stage_timeline(tasks));
    body.push_str(&crate::pages::supersteps::section(tasks));
    let _ = write!(body, "<h2>Tasks ({})</h2>", tasks.len());
    body.push_str(
        "<table><tr><th>Task</th><th>Partition</th><th>Attempt</th><th>Executor</th><th>Status</th><th>Duration</th>\
         <th>Records in</th><th>Records out</th><th>Shuffle read</th><th>Shuffle write</th><th>Spilled</th><th>Error</th></tr>",
    );
    for t in tasks {
        let _ = write!(
            body,
            "<tr><td class=\"n\">{id}</td><td class=\"n\">{p}</td><td class=\"n\">{a}{spec}</td><td>{ex}</td><td>{st}</td>\
             <td class=\"n\">{d}</td><td class=\"n\">{ri}</td><td class=\"n\">{ro}</td><td class=\"n\">{sr}</td>\
             <td class=\"n\">{sw}</td><td class=\"n\">{sp}</td><td>{err}</td></tr>",
            id = t.task_id,
            p = t.partition,
            a = t.attempt,
            spec = if t.speculative { " (speculative)" } else { "" },
            ex = esc(&t.executor_id),
            st = status(t.status),
            d = duration(t.launched_ms, t.finished_ms),
            ri = t.metrics.records_in,
            ro = t.metrics.records_out,
            sr = bytes(t.metrics.shuffle_bytes_read),
            sw = bytes(t.metrics.shuffle_bytes_written),
            sp = bytes(t.metrics.bytes_spilled),
            err = t
                .error
                .as_deref()
                .map(|e| format!("<pre>{}</pre>", esc(e)))
                .unwrap_or_default(),
        );
    }
    body.push_str("</table>");
    let title = match jobs.first() {
        Some(j) if !j.application.is_empty() => {
            format!("Stage {} of {}", stage.number, j.application)
        }
        _ => format!("Stage {}", stage.number),
    };
    page(app, base, &title, &body)
}

/// The Executors page; `can_decommission`: a live executor's row has a button that asks
/// it to decommission (`POST {base}/executors/ID/decommission`).
pub(crate) fn executors_page(
    app: &AppStatus,
    base: &str,
    executors: &[ExecutorInfo],
    can_decommission: bool,
) -> String {
    let mut body = String::from(
        "<table><tr><th>Executor</th><th>Host</th><th>Cores</th><th>Memory used / limit</th><th>Status</th><th>Tasks running</th><th>Tasks done</th>\
         <th>Tasks failed</th><th>Shuffle written</th><th>Shuffle read</th><th>Lost because</th></tr>",
    );
    for x in executors {
        let (st, class) = if x.lost_ms.is_some() {
            ("lost", "failed")
        } else {
            ("active", "succeeded")
        };
        let button = if can_decommission && x.lost_ms.is_none() {
            format!(
                " <form method=\"post\" action=\"{base}/executors/{id}/decommission\" \
                 style=\"display:inline\"><button type=\"submit\">decommission</button></form>",
                id = esc(&x.executor_id)
            )
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td>{id}</td><td>{host}</td><td class=\"n\">{c}</td><td class=\"n\">{mu} / {ml}</td><td><span class=\"{class}\">{st}</span>{button}</td><td class=\"n\">{r}</td>\
             <td class=\"n\">{ok}</td><td class=\"n\">{f}</td><td class=\"n\">{sw}</td><td class=\"n\">{sr}</td><td>{why}</td></tr>",
            id = esc(&x.executor_id),
            host = esc(&x.host),
            mu = bytes(x.memory_used_bytes),
            ml = bytes(x.memory_limit_bytes),
            c = x.slots,
            r = x.tasks_running,
            ok = x.tasks_succeeded,
            f = x.tasks_failed,
            sw = bytes(x.shuffle_bytes_written),
            sr = bytes(x.shuffle_bytes_read),
            why = esc(x.lost_reason.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</table>");
    page(app, base, "Executors", &body)
}

pub(crate) fn not_found(app: &AppStatus, base: &str, what: &str) -> String {
    page(app, base, "Not found", &format!("<p>{}</p>", esc(what)))
}
