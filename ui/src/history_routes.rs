//! The history server's handlers: its index of applications and each logged
//! application's pages and REST answers (`/history/{log}/...`,
//! `/api/v1/applications/{log}/...`), rendered as the live UI renders them
//! ([`crate::server::render`]).
//!
//! Invariants: `{log}` is matched against the logs the history has listed, never used as
//! a path; numbers are parsed ([`num`], [`stage_num`]); an unknown log, page or number is
//! 404.

use axum::response::Response;

use crate::api::{answer, AppSummary, Query};
use crate::history::History;
use crate::html;
use crate::server::{html_ok, json_ok, not_found, num, render, stage_num, Page, Shared, St};
use crate::SharedStatus;

/// The replayed status of application `id` (its log read up to date).
fn history_app(s: &Shared, id: &str) -> Option<SharedStatus> {
    s.history()?.app(id)
}

fn summaries(s: &Shared) -> Vec<AppSummary> {
    s.history().map(History::summaries).unwrap_or_default()
}

pub(crate) fn history_index(s: &St) -> Response {
    let mut body = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>ember history</title></head><body>\
         <h1>Applications</h1><table><tr><th>Application</th><th>Name</th><th>Started (ms since epoch)</th><th>Jobs</th></tr>",
    );
    for a in summaries(s) {
        body.push_str(&format!(
            "<tr><td><a href=\"/history/{id}/jobs\">{id}</a></td><td>{name}</td><td>{t}</td><td>{j}</td></tr>",
            id = html::esc(&a.id),
            name = html::esc(&a.name),
            t = a.started_ms,
            j = a.jobs
        ));
    }
    body.push_str("</table></body></html>");
    html_ok(body)
}

pub(crate) fn history_apps_json(s: &St) -> Response {
    json_ok(serde_json::to_string(&summaries(s)).unwrap_or_else(|_| "[]".into()))
}

/// `rest` of `/history/{app}/...`: jobs, jobs/N, stages/N, executors.
pub(crate) fn history_page(s: &St, id: &str, rest: &str) -> Response {
    let Some(app) = history_app(s, id) else {
        return not_found();
    };
    let app = app.read();
    let base = format!("/history/{id}");
    let page = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Page::Jobs,
        ["jobs", n] => match num(n) {
            Some(n) => Page::MovedJob(n),
            None => return not_found(),
        },
        ["stages", n] => match stage_num(n) {
            Some(n) => Page::MovedStage(n),
            None => return not_found(),
        },
        ["executors"] => Page::Executors,
        ["storage"] => Page::Storage,
        ["storage", "rdd", n] => match stage_num(n) {
            Some(n) => Page::StorageRdd(n),
            None => return not_found(),
        },
        ["environment"] => Page::Environment,
        _ => return not_found(),
    };
    render(&app, &base, page, false)
}

/// `rest` of `/api/v1/applications/{app}/...`: the live API's nouns.
pub(crate) fn history_api(s: &St, id: &str, rest: &str) -> Response {
    let Some(app) = history_app(s, id) else {
        return not_found();
    };
    let q = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Some(Query::Jobs),
        ["jobs", n] => num(n).map(Query::Job),
        ["jobs", n, "stages"] => num(n).map(Query::JobStages),
        ["stages", n] => stage_num(n).map(Query::Stage),
        ["stages", n, "tasks"] => stage_num(n).map(Query::StageTasks),
        ["stages", n, "summary"] => stage_num(n).map(Query::StageSummary),
        ["executors"] => Some(Query::Executors),
        ["apps"] => return crate::app_pages::apps_json(&app.read()),
        ["storage", "rdd"] => Some(Query::Storage),
        ["storage", "rdd", n] => stage_num(n).map(Query::StorageRdd),
        ["environment"] => Some(Query::Environment),
        _ => None,
    };
    let Some(q) = q else {
        return not_found();
    };
    let app = app.read();
    answer(&app, q).map_or_else(not_found, json_ok)
}

/// Page `rest` of application `application` in log `id` (see [`crate::app_pages`]).
pub(crate) fn history_app_page(s: &St, id: &str, application: &str, rest: &str) -> Response {
    let (Some(app), Some(p)) = (history_app(s, id), crate::app_pages::parse_page(rest)) else {
        return not_found();
    };
    let app = app.read();
    let base = format!("/history/{id}");
    render(&app, &base, Page::App(application.to_string(), p), false)
}

/// Answer `rest` about application `application` in log `id`.
pub(crate) fn history_app_api(s: &St, id: &str, application: &str, rest: &str) -> Response {
    let (Some(app), Some(q)) = (history_app(s, id), crate::app_pages::parse_query(rest)) else {
        return not_found();
    };
    let app = app.read();
    crate::app_pages::app_answer(&app, application, q)
}
