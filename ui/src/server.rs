//! The UI's HTTP server (axum): the pages and the REST API of a live application
//! ([`Source::Live`], at `/`), or of every application whose event log is in a
//! directory ([`Source::History`], each under `/history/{app}/` and
//! `/api/v1/applications/{app}/`).
//!
//! Invariants: with a secret ([`Auth::Secret`]) every request needs it, as a bearer
//! token or as the password of HTTP basic auth (so a browser can log in), compared in
//! constant time; a request without it gets 401 and nothing else. The secret is never
//! part of a page. Path parameters are parsed as numbers or matched against the log
//! files listed, never used as paths.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine as _;

use crate::api::{answer, AppSummary, Query};
use crate::history::History;
use crate::html;
use crate::store::AppStatus;
use crate::SharedStatus;

/// Who may read the UI.
#[derive(Clone)]
pub enum Auth {
    /// Anyone who can connect (the caller binds to loopback only).
    Open,
    /// Requests carrying this secret (bearer token or basic-auth password).
    Secret(Arc<str>),
}

/// What the server shows.
#[derive(Clone)]
pub enum Source {
    /// One running application.
    Live(SharedStatus),
    /// The event logs in a directory (a history server).
    History(PathBuf),
}

/// More metrics a daemon appends to `/metrics` (OpenMetrics text ending in `# EOF`).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

struct Shared {
    source: Source,
    extra: Option<ExtraMetrics>,
    /// History: the logs of the directory as far as they have been read.
    history: Option<History>,
}

type St = State<Arc<Shared>>;

/// The router of `source` behind `auth`.
pub fn router(source: Source, auth: Auth) -> Router {
    router_with(source, auth, None)
}

/// [`router`] whose `/metrics` also has `extra`'s metrics.
pub fn router_with(source: Source, auth: Auth, extra: Option<ExtraMetrics>) -> Router {
    let history = match &source {
        Source::History(dir) => Some(History::new(dir.clone())),
        Source::Live(_) => None,
    };
    let shared = Arc::new(Shared {
        source,
        extra,
        history,
    });
    let live = Router::new()
        .route("/", get(|| async { Redirect::to("/jobs") }))
        .route(
            "/jobs",
            get(|s: St| async move { live_page(&s, Page::Jobs) }),
        )
        .route(
            "/jobs/{id}",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_page(&s, Page::Job(id)))
            }),
        )
        .route(
            "/stages/{id}",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_page(&s, Page::Stage(id as u32)))
            }),
        )
        .route(
            "/executors",
            get(|s: St| async move { live_page(&s, Page::Executors) }),
        )
        .route(
            "/api/v1/jobs",
            get(|s: St| async move { live_api(&s, Query::Jobs) }),
        )
        .route(
            "/api/v1/jobs/{id}",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, Query::Job(id)))
            }),
        )
        .route(
            "/api/v1/jobs/{id}/stages",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, Query::JobStages(id)))
            }),
        )
        .route(
            "/api/v1/stages/{id}",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, Query::Stage(id as u32)))
            }),
        )
        .route(
            "/api/v1/stages/{id}/tasks",
            get(|s: St, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, Query::StageTasks(id as u32)))
            }),
        )
        .route(
            "/api/v1/executors",
            get(|s: St| async move { live_api(&s, Query::Executors) }),
        )
        .route("/metrics", get(|s: St| async move { live_metrics(&s) }));
    let history = Router::new()
        .route("/history", get(|s: St| async move { history_index(&s) }))
        .route(
            "/api/v1/applications",
            get(|s: St| async move { history_apps_json(&s) }),
        )
        .route(
            "/history/{app}/{*rest}",
            get(
                |s: St, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    history_page(&s, &app, &rest)
                },
            ),
        )
        .route(
            "/api/v1/applications/{app}/{*rest}",
            get(
                |s: St, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    history_api(&s, &app, &rest)
                },
            ),
        );
    let app = match &shared.source {
        Source::Live(_) => live,
        Source::History(_) => history.route("/", get(|| async { Redirect::to("/history") })),
    };
    app.with_state(shared).layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let auth = auth.clone();
            async move {
                if allowed(&auth, req.headers()) {
                    next.run(req).await
                } else {
                    unauthorized()
                }
            }
        },
    ))
}

/// Serves `source` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    source: Source,
    auth: Auth,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, source, auth, None, shutdown).await
}

/// [`serve`] with `extra` metrics on `/metrics`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    source: Source,
    auth: Auth,
    extra: Option<ExtraMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router_with(source, auth, extra))
        .with_graceful_shutdown(shutdown)
        .await
}

fn allowed(auth: &Auth, headers: &HeaderMap) -> bool {
    let Auth::Secret(secret) = auth else {
        return true;
    };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let given: Vec<u8> = if let Some(token) = value.strip_prefix("Bearer ") {
        token.trim().as_bytes().to_vec()
    } else if let Some(basic) = value.strip_prefix("Basic ") {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else {
            return false;
        };
        // user:password; any user name, the password is the secret.
        match decoded.iter().position(|&b| b == b':') {
            Some(i) => decoded[i + 1..].to_vec(),
            None => return false,
        }
    } else {
        return false;
    };
    ember_proto::auth::constant_time_eq(&given, secret.as_bytes())
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"ember\"")],
        "the cluster secret is required (bearer token or basic-auth password)\n",
    )
        .into_response()
}

fn num(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

fn html_ok(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn json_ok(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[derive(Clone, Copy)]
enum Page {
    Jobs,
    Job(u64),
    Stage(u32),
    Executors,
}

fn render(app: &AppStatus, base: &str, page: Page) -> Response {
    match page {
        Page::Jobs => html_ok(html::jobs_page(app, base)),
        Page::Job(id) => match (app.job(id), app.job_stages(id)) {
            (Some(job), Some(stages)) => html_ok(html::job_page(app, base, job, &stages)),
            _ => (
                StatusCode::NOT_FOUND,
                html_ok(html::not_found(app, base, &format!("No job {id}."))),
            )
                .into_response(),
        },
        Page::Stage(id) => match (app.stage(id), app.stage_tasks(id)) {
            (Some(stage), Some(tasks)) => html_ok(html::stage_page(
                app,
                base,
                stage,
                &app.stage_jobs(id),
                &tasks,
            )),
            _ => (
                StatusCode::NOT_FOUND,
                html_ok(html::not_found(app, base, &format!("No stage {id}."))),
            )
                .into_response(),
        },
        Page::Executors => html_ok(html::executors_page(app, base, &app.executors())),
    }
}

fn live_status(s: &Shared) -> Option<&SharedStatus> {
    match &s.source {
        Source::Live(st) => Some(st),
        Source::History(_) => None,
    }
}

fn live_page(s: &St, page: Page) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    let app = st.read();
    render(&app, "", page)
}

fn live_api(s: &St, q: Query) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    let app = st.read();
    answer(&app, q).map_or_else(not_found, json_ok)
}

fn live_metrics(s: &St) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    let mut text = crate::metrics::render(&st.read());
    if let Some(extra) = &s.extra {
        // One exposition: the store's `# EOF` goes, the daemon's ends it.
        if let Some(body) = text.strip_suffix("# EOF\n") {
            text = body.to_string();
        }
        text.push_str(&extra());
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The replayed status of application `id` (its log read up to date).
fn history_app(s: &Shared, id: &str) -> Option<SharedStatus> {
    s.history.as_ref()?.app(id)
}

fn summaries(s: &Shared) -> Vec<AppSummary> {
    s.history
        .as_ref()
        .map(History::summaries)
        .unwrap_or_default()
}

fn history_index(s: &St) -> Response {
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

fn history_apps_json(s: &St) -> Response {
    json_ok(serde_json::to_string(&summaries(s)).unwrap_or_else(|_| "[]".into()))
}

/// `rest` of `/history/{app}/...`: jobs, jobs/N, stages/N, executors.
fn history_page(s: &St, id: &str, rest: &str) -> Response {
    let Some(app) = history_app(s, id) else {
        return not_found();
    };
    let app = app.read();
    let base = format!("/history/{id}");
    let page = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Page::Jobs,
        ["jobs", n] => match num(n) {
            Some(n) => Page::Job(n),
            None => return not_found(),
        },
        ["stages", n] => match num(n) {
            Some(n) => Page::Stage(n as u32),
            None => return not_found(),
        },
        ["executors"] => Page::Executors,
        _ => return not_found(),
    };
    render(&app, &base, page)
}

/// `rest` of `/api/v1/applications/{app}/...`: the live API's nouns.
fn history_api(s: &St, id: &str, rest: &str) -> Response {
    let Some(app) = history_app(s, id) else {
        return not_found();
    };
    let q = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["jobs"] => Some(Query::Jobs),
        ["jobs", n] => num(n).map(Query::Job),
        ["jobs", n, "stages"] => num(n).map(Query::JobStages),
        ["stages", n] => num(n).map(|n| Query::Stage(n as u32)),
        ["stages", n, "tasks"] => num(n).map(|n| Query::StageTasks(n as u32)),
        ["executors"] => Some(Query::Executors),
        _ => None,
    };
    let Some(q) = q else {
        return not_found();
    };
    let app = app.read();
    answer(&app, q).map_or_else(not_found, json_ok)
}

/// Whether `path` is a directory the history server can read.
pub fn check_history_dir(path: &Path) -> std::io::Result<()> {
    std::fs::read_dir(path).map(|_| ())
}
