//! The operator's decommission of an executor: `POST /api/v1/executors/ID/decommission`,
//! or the button on the Executors page, asks the executor to leave gracefully (it takes
//! no more tasks, lets running ones end, moves its map outputs to peers, and exits), as
//! SIGTERM does.
//!
//! Invariants: only `POST`, never one another site sent ([`access::same_site`]: 403);
//! only the operator (a session token gets 403: executors are the whole cluster's); an
//! executor the driver does not know is a 404; the id is used only to look the executor
//! up, and quoted bounded.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use crate::access::{self, Sessions, Viewer};
use crate::server::json_ok;

/// Longest executor id looked up.
const MAX_ID_BYTES: usize = 128;

/// Asks executor `id` to decommission for viewer `v`; then the Executors page (`form`)
/// or `{"executor_id":"ID","decommissioning":true}`.
pub(crate) fn decommission(
    sessions: &dyn Sessions,
    v: &Viewer,
    headers: &HeaderMap,
    id: &str,
    form: bool,
) -> Response {
    if !access::same_site(headers) {
        return (
            StatusCode::FORBIDDEN,
            "refused: a decommission must come from the UI's own pages (cross-site request)\n",
        )
            .into_response();
    }
    if *v != Viewer::Operator {
        return (
            StatusCode::FORBIDDEN,
            "decommissioning an executor needs the operator secret, not a session token\n",
        )
            .into_response();
    }
    let known = id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && sessions.decommission_executor(id);
    if !known {
        let shown: String = id.chars().take(64).collect();
        return (
            StatusCode::NOT_FOUND,
            format!("no executor {shown:?} is registered\n"),
        )
            .into_response();
    }
    tracing::info!(executor = %id, "executor decommission asked from the web UI");
    if form {
        Redirect::to("/executors").into_response()
    } else {
        json_ok(format!(
            "{{\"executor_id\":\"{id}\",\"decommissioning\":true}}"
        ))
    }
}
