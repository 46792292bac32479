//! The UI's HTTP server (axum): the pages and the REST API of a live application
//! ([`Source::Live`], at `/`), or of every application whose event log is in a
//! directory ([`Source::History`], each under `/history/{app}/` and
//! `/api/v1/applications/{app}/`). A job's and a stage's pages are addressed by their
//! application and its own numbers ([`crate::nav`], [`crate::app_pages`]); the
//! driver's ids redirect there. The history server's handlers are in
//! [`crate::history_routes`]; this file holds the router, access and the live UI.
//!
//! Invariants: unless the UI is open ([`Auth::Open`]), every request needs a
//! credential (see [`crate::access`]): the operator secret sees everything, a driver's
//! session token only its own application; a request without one gets 401 and nothing
//! else, logged (bounded) with its peer and path. A session token asking a cluster-wide
//! page (executors, metrics) gets 403. Only `POST` kills a job (`/api/v1/jobs/N/kill`,
//! or the job page's form), never from another site. Credentials are never part of a
//! page. Path parameters are parsed as numbers or matched against the log files
//! listed, never used as paths. Connections are bounded in number and in time to their
//! first request ([`bounded`], `ember_proto::listener`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path as UrlPath, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use ember_proto::listener::{BoundedListener, ConnectionLimits, FirstRequest};
use ember_proto::refusal_log::RefusalLog;

use crate::access::{self, Viewer};
pub use crate::access::{Auth, Sessions};
use crate::api::{answer, Query};
use crate::app_pages::AppPage;
use crate::history::History;
use crate::history_routes;
use crate::nav;
use crate::store::AppStatus;
use crate::SharedStatus;
use crate::{html, pages};

/// What the server shows.
#[derive(Clone)]
pub enum Source {
    /// One running application (local mode).
    Live(SharedStatus),
    /// A driver's applications, one per client session: each session's token sees its
    /// own, and jobs can be killed.
    Driver {
        status: SharedStatus,
        sessions: Arc<dyn Sessions>,
    },
    /// The event logs in a directory (a history server).
    History(PathBuf),
}

pub use crate::kill::KILLED_REASON;

/// More metrics a daemon appends to `/metrics` (OpenMetrics text ending in `# EOF`).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

pub(crate) struct Shared {
    source: Source,
    auth: Auth,
    refusals: RefusalLog,
    extra: Option<ExtraMetrics>,
    /// History: the logs of the directory as far as they have been read.
    history: Option<History>,
}

impl Shared {
    /// A history server's logs (`None` for a live UI).
    pub(crate) fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }
}

pub(crate) type St = State<Arc<Shared>>;

/// The router of `source` behind `auth`.
pub fn router(source: Source, auth: Auth) -> Router {
    router_with(source, auth, None)
}

/// [`router`] whose `/metrics` also has `extra`'s metrics.
pub fn router_with(source: Source, auth: Auth, extra: Option<ExtraMetrics>) -> Router {
    let what = match source {
        Source::History(_) => "history server",
        _ => "web UI",
    };
    let history = match &source {
        Source::History(dir) => Some(History::new(dir.clone())),
        _ => None,
    };
    let shared = Arc::new(Shared {
        source,
        auth,
        refusals: RefusalLog::new(what),
        extra,
        history,
    });
    let live = Router::new()
        .route("/", get(|| async { Redirect::to("/jobs") }))
        .route(
            "/jobs",
            get(|s: St, v: Seen| async move { live_page(&s, &v, Page::Jobs) }),
        )
        .route(
            "/jobs/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_page(&s, &v, Page::MovedJob(id)))
            }),
        )
        .route(
            "/jobs/{id}/kill",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    kill(&s, &v, &h, &id, true)
                },
            ),
        )
        .route(
            "/stages/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id).map_or_else(not_found, |id| live_page(&s, &v, Page::MovedStage(id)))
            }),
        )
        .route(
            "/executors",
            get(|s: St, v: Seen| async move { live_page(&s, &v, Page::Executors) }),
        )
        .route(
            "/storage",
            get(|s: St, v: Seen| async move { live_page(&s, &v, Page::Storage) }),
        )
        .route(
            "/storage/rdd/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id).map_or_else(not_found, |id| live_page(&s, &v, Page::StorageRdd(id)))
            }),
        )
        .route(
            "/environment",
            get(|s: St, v: Seen| async move { live_page(&s, &v, Page::Environment) }),
        )
        .route(
            "/api/v1/storage/rdd",
            get(|s: St, v: Seen| async move { live_api(&s, &v, Query::Storage) }),
        )
        .route(
            "/api/v1/storage/rdd/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id).map_or_else(not_found, |id| live_api(&s, &v, Query::StorageRdd(id)))
            }),
        )
        .route(
            "/api/v1/environment",
            get(|s: St, v: Seen| async move { live_api(&s, &v, Query::Environment) }),
        )
        .route(
            "/api/v1/stages/{id}/summary",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id)
                    .map_or_else(not_found, |id| live_api(&s, &v, Query::StageSummary(id)))
            }),
        )
        .route(
            "/api/v1/jobs",
            get(|s: St, v: Seen| async move { live_api(&s, &v, Query::Jobs) }),
        )
        .route(
            "/api/v1/jobs/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, &v, Query::Job(id)))
            }),
        )
        .route(
            "/api/v1/executors/{id}/decommission",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    decommission(&s, &v, &h, &id, false)
                },
            ),
        )
        .route(
            "/executors/{id}/decommission",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    decommission(&s, &v, &h, &id, true)
                },
            ),
        )
        .route(
            "/api/v1/jobs/{id}/kill",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    kill(&s, &v, &h, &id, false)
                },
            ),
        )
        .route(
            "/api/v1/stages/{id}/kill",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    kill_stage(&s, &v, &h, &id, false)
                },
            ),
        )
        .route(
            "/stages/{id}/kill",
            post(
                |s: St, v: Seen, h: HeaderMap, UrlPath(id): UrlPath<String>| async move {
                    kill_stage(&s, &v, &h, &id, true)
                },
            ),
        )
        .route(
            "/api/v1/jobs/{id}/stages",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                num(&id).map_or_else(not_found, |id| live_api(&s, &v, Query::JobStages(id)))
            }),
        )
        .route(
            "/api/v1/stages/{id}",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id).map_or_else(not_found, |id| live_api(&s, &v, Query::Stage(id)))
            }),
        )
        .route(
            "/api/v1/stages/{id}/tasks",
            get(|s: St, v: Seen, UrlPath(id): UrlPath<String>| async move {
                stage_num(&id).map_or_else(not_found, |id| live_api(&s, &v, Query::StageTasks(id)))
            }),
        )
        .route(
            "/api/v1/executors",
            get(|s: St, v: Seen| async move { live_api(&s, &v, Query::Executors) }),
        )
        .route(
            "/metrics",
            get(|s: St, v: Seen| async move { live_metrics(&s, &v) }),
        )
        .merge(crate::app_pages::live_routes());
    let history = Router::new()
        .route("/history", get(|s: St| async move { history_routes::history_index(&s) }))
        .route(
            "/api/v1/applications",
            get(|s: St| async move { history_routes::history_apps_json(&s) }),
        )
        .route(
            "/history/{app}/apps/{application}/{*rest}",
            get(
                |s: St, UrlPath((app, application, rest)): UrlPath<(String, String, String)>| async move {
                    history_routes::history_app_page(&s, &app, &application, &rest)
                },
            ),
        )
        .route(
            "/api/v1/applications/{app}/apps/{application}/{*rest}",
            get(
                |s: St, UrlPath((app, application, rest)): UrlPath<(String, String, String)>| async move {
                    history_routes::history_app_api(&s, &app, &application, &rest)
                },
            ),
        )
        .route(
            "/history/{app}/{*rest}",
            get(
                |s: St, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    history_routes::history_page(&s, &app, &rest)
                },
            ),
        )
        .route(
            "/api/v1/applications/{app}/{*rest}",
            get(
                |s: St, UrlPath((app, rest)): UrlPath<(String, String)>| async move {
                    history_routes::history_api(&s, &app, &rest)
                },
            ),
        );
    let app = match &shared.source {
        Source::Live(_) | Source::Driver { .. } => live,
        Source::History(_) => history.route("/", get(|| async { Redirect::to("/history") })),
    };
    let guard = shared.clone();
    app.with_state(shared).layer(axum::middleware::from_fn(
        move |mut req: Request, next: Next| {
            let s = guard.clone();
            async move {
                let sessions = match &s.source {
                    Source::Driver { sessions, .. } => Some(sessions.as_ref()),
                    _ => None,
                };
                match access::viewer(&s.auth, sessions, req.headers()) {
                    Some(v) => {
                        req.extensions_mut().insert(v);
                        let peer = req
                            .extensions()
                            .get::<ConnectInfo<std::net::SocketAddr>>()
                            .map(|c| c.0);
                        let path = req.uri().path().to_string();
                        let response = next.run(req).await;
                        // A 403 (a session's token asking a cluster-wide page, a
                        // cross-site kill) is logged like a 401.
                        if response.status() == StatusCode::FORBIDDEN {
                            s.refusals
                                .refused(peer, &path, StatusCode::FORBIDDEN.as_u16());
                        }
                        response
                    }
                    None => {
                        refused(&s, &req, StatusCode::UNAUTHORIZED);
                        unauthorized()
                    }
                }
            }
        },
    ))
}

/// The viewer the access check found.
pub(crate) type Seen = Extension<Viewer>;

/// Logs a refused request (bounded: see [`RefusalLog`]).
fn refused(s: &Shared, req: &Request, status: StatusCode) {
    let peer = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    s.refusals.refused(peer, req.uri().path(), status.as_u16());
}

/// Serves `source` on `listener` until `shutdown` resolves, with the default
/// [`ConnectionLimits`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    source: Source,
    auth: Auth,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        bounded(listener, ConnectionLimits::default()),
        source,
        auth,
        None,
        shutdown,
    )
    .await
}

/// `listener` as the UI's port: at most `limits.max_connections` open, each with
/// `limits.first_request_timeout` to send its first request head.
pub fn bounded(listener: tokio::net::TcpListener, limits: ConnectionLimits) -> BoundedListener {
    BoundedListener::new(listener, limits, FirstRequest::Http1, "ui")
}

/// [`serve`] on a [`bounded`] listener, with `extra` metrics on `/metrics`.
pub async fn serve_with(
    listener: BoundedListener,
    source: Source,
    auth: Auth,
    extra: Option<ExtraMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router_with(source, auth, extra);
    // tap_io: axum gives the peer address (ConnectInfo) only for its own listener
    // types, and for any listener wrapped this way.
    axum::serve(
        axum::serve::ListenerExt::tap_io(listener, |_| {}),
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"ember\"")],
        "the operator secret or a session token is required (bearer token or basic-auth \
         password)\n",
    )
        .into_response()
}

/// A job id from an address: decimal digits of a u64, else `None` (a 404).
pub(crate) fn num(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A stage id from an address: the whole number must fit a stage id (u32); one past
/// it is no stage (a 404), never the stage its low 32 bits name.
pub(crate) fn stage_num(s: &str) -> Option<u32> {
    num(s).and_then(|n| u32::try_from(n).ok())
}

pub(crate) fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

pub(crate) fn html_ok(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

pub(crate) fn json_ok(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[derive(Clone)]
pub(crate) enum Page {
    /// Every application's jobs.
    Jobs,
    /// A page of application `.0` by its own numbers ([`crate::nav`]).
    App(String, AppPage),
    /// A job by the driver's id: redirects to its application's address.
    MovedJob(u64),
    /// A stage by the driver's id: redirects to its application's address.
    MovedStage(u32),
    Executors,
    Storage,
    StorageRdd(u32),
    Environment,
}

/// `page` of `app`; `can_kill`: the viewer may kill the app's running jobs.
pub(crate) fn render(app: &AppStatus, base: &str, page: Page, can_kill: bool) -> Response {
    match page {
        Page::Jobs => html_ok(html::jobs_page(app, base)),
        Page::App(id, p) => crate::app_pages::render(app, base, &id, p, can_kill),
        Page::MovedJob(id) => match app.job(id) {
            Some(job) => Redirect::to(&nav::job_href(base, app, job)).into_response(),
            None => moved_not_found(app, base, format!("No job {id}.")),
        },
        Page::MovedStage(id) => match nav::stage_href(base, app, id) {
            Some(to) => Redirect::to(&to).into_response(),
            None => moved_not_found(app, base, format!("No stage {id}.")),
        },
        Page::Executors => html_ok(html::executors_page(app, base, &app.executors(), can_kill)),
        Page::Storage => html_ok(pages::storage::storage_page(app, base)),
        Page::StorageRdd(id) => match app.storage.rdd(id) {
            Some(r) => html_ok(pages::storage::rdd_page(app, base, &r)),
            None => (
                StatusCode::NOT_FOUND,
                html_ok(html::not_found(app, base, &format!("No cached RDD {id}."))),
            )
                .into_response(),
        },
        Page::Environment => html_ok(pages::environment::environment_page(app, base)),
    }
}

fn moved_not_found(app: &AppStatus, base: &str, what: String) -> Response {
    (
        StatusCode::NOT_FOUND,
        html_ok(html::not_found(app, base, &what)),
    )
        .into_response()
}

pub(crate) fn live_status(s: &Shared) -> Option<&SharedStatus> {
    match &s.source {
        Source::Live(st) | Source::Driver { status: st, .. } => Some(st),
        Source::History(_) => None,
    }
}

/// 403 for a session's token asking a page about the whole cluster.
fn operator_only(v: &Viewer) -> Option<Response> {
    match v {
        Viewer::Operator => None,
        Viewer::Application(_) => Some(
            (
                StatusCode::FORBIDDEN,
                "this page is about the whole cluster: it needs the operator secret, \
                 not a session token\n",
            )
                .into_response(),
        ),
    }
}

pub(crate) fn live_page(s: &St, v: &Viewer, page: Page) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    if matches!(page, Page::Executors) {
        if let Some(refused) = operator_only(v) {
            return refused;
        }
    }
    let all = st.read();
    let scoped = v.view(&all);
    let can_kill = matches!(s.source, Source::Driver { .. });
    render(scoped.as_ref().unwrap_or(&all), "", page, can_kill)
}

fn live_api(s: &St, v: &Viewer, q: Query) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    if matches!(q, Query::Executors) {
        if let Some(refused) = operator_only(v) {
            return refused;
        }
    }
    let all = st.read();
    let scoped = v.view(&all);
    answer(scoped.as_ref().unwrap_or(&all), q).map_or_else(not_found, json_ok)
}

/// `POST .../jobs/{id}/kill` (see [`crate::kill`]); 404 unless serving a driver.
fn kill(s: &Shared, v: &Viewer, headers: &HeaderMap, id: &str, form: bool) -> Response {
    let Source::Driver { status, sessions } = &s.source else {
        return not_found();
    };
    match num(id) {
        Some(id) => {
            let target = crate::kill::Target::Job(id);
            crate::kill::kill(status, sessions.as_ref(), v, headers, target, form)
        }
        None => not_found(),
    }
}

/// `POST .../stages/{id}/kill` (see [`crate::kill`]); 404 unless serving a driver.
fn kill_stage(s: &Shared, v: &Viewer, headers: &HeaderMap, id: &str, form: bool) -> Response {
    let Source::Driver { status, sessions } = &s.source else {
        return not_found();
    };
    match stage_num(id) {
        Some(id) => {
            let target = crate::kill::Target::Stage(id);
            crate::kill::kill(status, sessions.as_ref(), v, headers, target, form)
        }
        None => not_found(),
    }
}

/// `POST .../executors/{id}/decommission` (see [`crate::decommission`]); 404 unless
/// serving a driver.
fn decommission(s: &Shared, v: &Viewer, headers: &HeaderMap, id: &str, form: bool) -> Response {
    let Source::Driver { sessions, .. } = &s.source else {
        return not_found();
    };
    crate::decommission::decommission(sessions.as_ref(), v, headers, id, form)
}

fn live_metrics(s: &St, v: &Viewer) -> Response {
    let Some(st) = live_status(s) else {
        return not_found();
    };
    if let Some(refused) = operator_only(v) {
        return refused;
    }
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

/// Whether `path` is a directory the history server can read.
pub fn check_history_dir(path: &Path) -> std::io::Result<()> {
    std::fs::read_dir(path).map(|_| ())
}
