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

/// What a kill is of: a job or a stage, by the driver's id.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    Job(u64),
    Stage(u32),
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Job(_) => "job",
            Target::Stage(_) => "stage",
        }
    }

    fn id(self) -> u64 {
        match self {
            Target::Job(id) => id,
            Target::Stage(id) => u64::from(id),
        }
    }
}

/// Kills `target` for viewer `v`; then its page (`form`) or
/// `{"job_id":N,"killed":true}` (`stage_id` for a stage).
pub(crate) fn kill(
    status: &SharedStatus,
    sessions: &dyn Sessions,
    v: &Viewer,
    headers: &HeaderMap,
    target: Target,
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
        let app = scoped.as_ref().unwrap_or(&all);
        let seen = match target {
            Target::Job(id) => app.job(id).map(|j| j.status),
            Target::Stage(id) => app.stage(id).map(|s| s.status),
        };
        match seen {
            Some(s) => s == Status::Running,
            None => return not_found(),
        }
    };
    let (what, id) = (target.name(), target.id());
    let killed = running
        && match target {
            Target::Job(job) => sessions.kill_job(job, v.application(), KILLED_REASON),
            Target::Stage(stage) => sessions.kill_stage(stage, v.application(), KILLED_REASON),
        };
    if !killed {
        return (
            StatusCode::CONFLICT,
            format!("{what} {id} is not running\n"),
        )
            .into_response();
    }
    tracing::info!(
        what,
        id,
        by = v.application().unwrap_or("the operator"),
        "killed from the web UI"
    );
    if form {
        Redirect::to(&format!("/{what}s/{id}")).into_response()
    } else {
        json_ok(format!("{{\"{what}_id\":{id},\"killed\":true}}"))
    }
}
