//! The pages and REST answers addressed by application (see [`crate::nav`]):
//! `/apps/{app}/jobs`, `/apps/{app}/jobs/{n}`, `/apps/{app}/stages/{n}` and under
//! `/api/v1/apps/{app}/` the same nouns as `/api/v1/` (`jobs`, `jobs/{n}`,
//! `jobs/{n}/stages`, `stages/{n}`, `stages/{n}/tasks`), with `{n}` the application's
//! own job or stage number; `/api/v1/apps` lists the applications' ids. A history
//! server serves them under `/history/{log}/` and `/api/v1/applications/{log}/`.
//!
//! Invariants: an address is resolved against the store the viewer may see (scoped to a
//! session's application), so another application's job or stage is a 404 exactly as
//! an unknown one; the JSON is the driver-wide one (`job_id`, `stage_id`) that
//! `/api/v1/jobs/{id}` also gives.

use std::sync::Arc;

use axum::extract::Path as UrlPath;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use crate::api::{answer, Query};
use crate::html;
use crate::nav;
use crate::server::{
    html_ok, json_ok, live_page, live_status, not_found, num, stage_num, Page, Seen, Shared, St,
};
use crate::store::{AppStatus, Status};

/// A page of one application, by its own numbers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AppPage {
    Jobs,
    Job(u64),
    Stage(u32),
}

/// A REST answer about one application, by its own numbers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AppQuery {
    Jobs,
    Job(u64),
    JobStages(u64),
    Stage(u32),
    StageTasks(u32),
}

/// The page `rest` (`jobs`, `jobs/N`, `stages/N`) names, if any.
pub(crate) fn parse_page(rest: &str) -> Option<AppPage> {
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Some(AppPage::Jobs),
        ["jobs", n] => num(n).map(AppPage::Job),
        ["stages", n] => stage_num(n).map(AppPage::Stage),
        _ => None,
    }
}

/// The answer `rest` (`jobs`, `jobs/N`, `jobs/N/stages`, `stages/N`, `stages/N/tasks`)
/// names, if any.
pub(crate) fn parse_query(rest: &str) -> Option<AppQuery> {
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Some(AppQuery::Jobs),
        ["jobs", n] => num(n).map(AppQuery::Job),
        ["jobs", n, "stages"] => num(n).map(AppQuery::JobStages),
        ["stages", n] => stage_num(n).map(AppQuery::Stage),
        ["stages", n, "tasks"] => stage_num(n).map(AppQuery::StageTasks),
        _ => None,
    }
}

/// An application in `/api/v1/apps`: its id in addresses and its jobs kept.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct AppRef {
    pub id: String,
    pub jobs: usize,
}

/// The applications of `store`'s jobs, in the order of their first job.
pub(crate) fn apps(store: &AppStatus) -> Vec<AppRef> {
    let mut out: Vec<AppRef> = Vec::new();
    for j in store.jobs_iter() {
        let id = nav::app_id(store, &j.application);
        match out.iter_mut().find(|a| a.id == id) {
            Some(a) => a.jobs += 1,
            None => out.push(AppRef {
                id: id.to_string(),
                jobs: 1,
            }),
        }
    }
    out
}

/// `/api/v1/apps` (or a history log's `.../apps`): [`apps`] as JSON.
pub(crate) fn apps_json(store: &AppStatus) -> Response {
    serde_json::to_string(&apps(store)).map_or_else(|_| not_found(), json_ok)
}

/// The live routes under `/apps/{app}/` and `/api/v1/apps/{app}/`, and `/api/v1/apps`.
pub(crate) fn live_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/api/v1/apps",
            get(|s: St, v: Seen| async move {
                let Some(st) = live_status(&s) else {
                    return not_found();
                };
                let all = st.read();
                let scoped = v.view(&all);
                apps_json(scoped.as_ref().unwrap_or(&all))
            }),
        )
        .route(
            "/apps/{app}/{*rest}",
            get(
                |s: St, v: Seen, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    match parse_page(&rest) {
                        Some(p) => live_page(&s, &v, Page::App(app, p)),
                        None => not_found(),
                    }
                },
            ),
        )
        .route(
            "/api/v1/apps/{app}/{*rest}",
            get(
                |s: St, v: Seen, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    let Some(q) = parse_query(&rest) else {
                        return not_found();
                    };
                    let Some(st) = live_status(&s) else {
                        return not_found();
                    };
                    let all = st.read();
                    let scoped = v.view(&all);
                    app_answer(scoped.as_ref().unwrap_or(&all), &app, q)
                },
            ),
        )
}

/// `store`'s part that application `id` owns (its jobs, their stages and tasks, and
/// the executors `store` shows, none when it is a session's scoped view), named as
/// `store` names it so addresses built from it are the same.
fn app_view(store: &AppStatus, id: &str) -> Option<AppStatus> {
    let application = nav::application(store, id)?;
    let mut view = store.scoped(&application).with_executors_of(store);
    view.name = store.name.clone();
    Some(view)
}

/// The JSON of `q` about application `id` of `store`; 404 when it has no such job or
/// stage.
pub(crate) fn app_answer(store: &AppStatus, id: &str, q: AppQuery) -> Response {
    let query = match q {
        AppQuery::Jobs => {
            return app_view(store, id)
                .and_then(|v| answer(&v, Query::Jobs))
                .map_or_else(not_found, json_ok)
        }
        AppQuery::Job(n) => nav::job_id(store, id, n).map(Query::Job),
        AppQuery::JobStages(n) => nav::job_id(store, id, n).map(Query::JobStages),
        AppQuery::Stage(n) => nav::stage_id(store, id, n).map(Query::Stage),
        AppQuery::StageTasks(n) => nav::stage_id(store, id, n).map(Query::StageTasks),
    };
    query
        .and_then(|q| answer(store, q))
        .map_or_else(not_found, json_ok)
}

/// An application id from an address as a 404 quotes it: its first 64 characters.
fn quoted(id: &str) -> String {
    match id.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", &id[..at]),
        None => id.to_string(),
    }
}

fn missing(app: &AppStatus, base: &str, what: String) -> Response {
    (
        StatusCode::NOT_FOUND,
        html_ok(html::not_found(app, base, &what)),
    )
        .into_response()
}

/// Page `p` of application `id` of `app`; `can_kill`: the viewer may kill its running
/// jobs.
pub(crate) fn render(
    app: &AppStatus,
    base: &str,
    id: &str,
    p: AppPage,
    can_kill: bool,
) -> Response {
    match p {
        AppPage::Jobs => match app_view(app, id) {
            Some(view) => html_ok(html::jobs_page(&view, base)),
            None => missing(app, base, format!("No application {}.", quoted(id))),
        },
        AppPage::Job(n) => {
            let found =
                nav::job_id(app, id, n).and_then(|j| Some((app.job(j)?, app.job_stages(j)?)));
            match found {
                Some((job, stages)) => {
                    let kill = can_kill && job.status == Status::Running;
                    html_ok(html::job_page(app, base, job, &stages, kill))
                }
                None => missing(
                    app,
                    base,
                    format!("No job {n} in application {}.", quoted(id)),
                ),
            }
        }
        AppPage::Stage(n) => {
            let found =
                nav::stage_id(app, id, n).and_then(|s| Some((app.stage(s)?, app.stage_tasks(s)?)));
            match found {
                Some((stage, tasks)) => html_ok(html::stage_page(
                    app,
                    base,
                    stage,
                    &app.stage_jobs(stage.stage_id),
                    &tasks,
                    can_kill && stage.status == Status::Running,
                )),
                None => missing(
                    app,
                    base,
                    format!("No stage {n} in application {}.", quoted(id)),
                ),
            }
        }
    }
}
