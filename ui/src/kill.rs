//! The UI's kill (Spark's kill links): `POST /api/v1/jobs/N/kill`, or the form on a
//! running job's page, cancels the job through the driver's client-disconnect path, so
//! its tasks are killed and its client's action fails with [`KILLED_REASON`];
//! `POST /api/v1/stages/N/kill`, or the form on a running stage's page, cancels every
//! job that needs the stage (Spark's `cancelStage`).
//!
//! Invariants: only `POST` reaches here, and never one another site sent
//! ([`access::same_site`]: a 403, which the server's refusal log records as it does a
//! 401); a viewer may kill only a job it can see (the operator any,
//! a session token its own application's): any other job is a 404, as if it did not
//! exist; a job (or stage) that is not running is a 409 and nothing is cancelled.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use crate::access::{self, Sessions, Viewer};
use crate::server::{json_ok, not_found};
use crate::store::Status;
use crate::SharedStatus;

/// What a killed job's client is told.
pub const KILLED_REASON: &str = "killed from the web UI";

/// Kills job `id` for viewer `v`; then the job's page (`form`) or
/// `{"job_id":N,"killed":true}`.
pub(crate) fn kill(
    status: &SharedStatus,
    sessions: &dyn Sessions,
    v: &Viewer,
    headers: &HeaderMap,
    id: u64,
    form: bool,
) -> Response {
    if !access::same_site(headers) {
        return (
            StatusCode::FORBIDDEN,
            "refused: a kill must come from the UI's own pages (cross-site request)\n",
        )
            .into_response();
    }
    let running = {
        let all = status.read();
        let scoped = v.view(&all);
        match scoped.as_ref().unwrap_or(&all).job(id) {
            Some(job) => job.status == Status::Running,
            None => return not_found(),
        }
    };
    if !running || !sessions.kill_job(id, v.application(), KILLED_REASON) {
        return (StatusCode::CONFLICT, format!("job {id} is not running\n")).into_response();
    }
    tracing::info!(
        job = id,
        by = v.application().unwrap_or("the operator"),
        "job killed from the web UI"
    );
    if form {
        Redirect::to(&format!("/jobs/{id}")).into_response()
    } else {
        json_ok(format!("{{\"job_id\":{id},\"killed\":true}}"))
    }
}

/// Kills stage `id` (the jobs that need it) for viewer `v`; then the stage's page
/// (`form`) or `{"stage_id":N,"killed":true}`.
pub(crate) fn kill_stage(
    status: &SharedStatus,
    sessions: &dyn Sessions,
    v: &Viewer,
    headers: &HeaderMap,
    id: u32,
    form: bool,
) -> Response {
    if !access::same_site(headers) {
        return (
            StatusCode::FORBIDDEN,
            "refused: a kill must come from the UI's own pages (cross-site request)\n",
        )
            .into_response();
    }
    let running = {
        let all = status.read();
        let scoped = v.view(&all);
        match scoped.as_ref().unwrap_or(&all).stage(id) {
            Some(stage) => stage.status == Status::Running,
            None => return not_found(),
        }
    };
    if !running || !sessions.kill_stage(id, v.application(), KILLED_REASON) {
        return (StatusCode::CONFLICT, format!("stage {id} is not running\n")).into_response();
    }
    tracing::info!(
        stage = id,
        by = v.application().unwrap_or("the operator"),
        "stage killed from the web UI"
    );
    if form {
        Redirect::to(&format!("/stages/{id}")).into_response()
    } else {
        json_ok(format!("{{\"stage_id\":{id},\"killed\":true}}"))
    }
}
