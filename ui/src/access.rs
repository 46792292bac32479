//! Who may read the UI and act through it: the operator secret sees every application
//! and may kill any job; a client session's token (as a bearer token, or a basic-auth
//! password) sees only its own application and kills only its own jobs; cluster-wide
//! pages (executors, metrics, the history list) need the operator secret.
//!
//! Invariants: credentials are compared in constant time and never logged or shown; a
//! viewer scoped to one application is answered from [`AppStatus::scoped`], a copy
//! holding nothing of any other application, so another application's job or stage
//! is a 404 for it (ids do not leak); a state-changing request from another site (by
//! `Sec-Fetch-Site` or `Origin`) is refused. Every refusal, 401 (no valid credential)
//! and 403 (a session's token on a cluster-wide page, a cross-site kill), is logged
//! through the port's bounded `RefusalLog` (see `server.rs`).

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use base64::Engine as _;

use crate::store::AppStatus;

/// Who may read the UI.
#[derive(Clone)]
pub enum Auth {
    /// Anyone who can connect (the caller binds to loopback only).
    Open,
    /// The operator secret (bearer token or basic-auth password) sees everything; on a
    /// driver ([`crate::Source::Driver`]) a session's token also sees its application.
    Secret(Arc<str>),
    /// No operator secret: only session tokens, each for its own application (a
    /// driver with a cluster secret but no operator secret).
    SessionsOnly,
}

/// The driver's client sessions, as the UI needs them.
pub trait Sessions: Send + Sync {
    /// The application of the open session whose token is `token` (compared in
    /// constant time), if any.
    fn application(&self, token: &str) -> Option<String>;

    /// Cancels running job `job_id` with `reason` (as a client disconnect does), if
    /// `application` is `None` (the operator) or the job's session's application;
    /// whether a job was cancelled.
    fn kill_job(&self, job_id: u64, application: Option<&str>, reason: &str) -> bool;

    /// Cancels every job (of `application`, unless `None`: the operator) that needs
    /// stage `stage_id`, with `reason` (Spark's kill of a stage); whether the driver
    /// took the request.
    fn kill_stage(&self, stage_id: u32, application: Option<&str>, reason: &str) -> bool {
        let _ = (stage_id, application, reason);
        false
    }

    /// Asks registered executor `executor_id` to decommission itself (the operator's
    /// action); whether it is registered.
    fn decommission_executor(&self, executor_id: &str) -> bool {
        let _ = executor_id;
        false
    }
}

/// Who a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// The operator (or anyone, when the UI is open): every application.
    Operator,
    /// A client session: only this application.
    Application(String),
}

impl Viewer {
    /// What this viewer may see of `app`: all of it, or its own application's part.
    pub(crate) fn view(&self, app: &AppStatus) -> Option<AppStatus> {
        match self {
            Viewer::Operator => None,
            Viewer::Application(name) => Some(app.scoped(name)),
        }
    }

    /// The application a kill must belong to (`None`: any).
    pub(crate) fn application(&self) -> Option<&str> {
        match self {
            Viewer::Operator => None,
            Viewer::Application(a) => Some(a),
        }
    }
}

/// The viewer `headers` authenticate as under `auth`, or `None` (a 401).
pub(crate) fn viewer(
    auth: &Auth,
    sessions: Option<&dyn Sessions>,
    headers: &HeaderMap,
) -> Option<Viewer> {
    if matches!(auth, Auth::Open) {
        return Some(Viewer::Operator);
    }
    let given = credential(headers)?;
    if let Auth::Secret(secret) = auth {
        if ember_proto::auth::constant_time_eq(&given, secret.as_bytes()) {
            return Some(Viewer::Operator);
        }
    }
    let token = std::str::from_utf8(&given).ok()?;
    sessions?.application(token).map(Viewer::Application)
}

/// The credential of an `Authorization` header: a bearer token, or the password of
/// basic auth (any user name, so a browser can log in).
fn credential(headers: &HeaderMap) -> Option<Vec<u8>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(token.trim().as_bytes().to_vec());
    }
    let basic = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some(decoded[colon + 1..].to_vec())
}

/// Whether a state-changing request comes from the UI's own pages (or a tool such as
/// curl): refused when the browser says another site sent it (`Sec-Fetch-Site`), or
/// when its `Origin` is not this server's `Host`.
pub(crate) fn same_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Ok(origin), Some(Ok(host))) = (
        origin.to_str(),
        headers.get(header::HOST).map(|h| h.to_str()),
    ) else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn cross_site_posts_are_refused() {
        assert!(same_site(&headers(&[("host", "127.0.0.1:4040")])));
        assert!(same_site(&headers(&[
            ("host", "127.0.0.1:4040"),
            ("origin", "http://127.0.0.1:4040"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(!same_site(&headers(&[
            ("host", "127.0.0.1:4040"),
            ("origin", "http://evil.example"),
        ])));
        assert!(!same_site(&headers(&[
            ("host", "127.0.0.1:4040"),
            ("sec-fetch-site", "cross-site"),
        ])));
        assert!(!same_site(&headers(&[
            ("host", "127.0.0.1:4040"),
            ("origin", "null"),
        ])));
    }

    #[test]
    fn operator_secret_and_basic_auth() {
        let auth = Auth::Secret("s3cret".into());
        let bearer = headers(&[("authorization", "Bearer s3cret")]);
        assert_eq!(viewer(&auth, None, &bearer), Some(Viewer::Operator));
        // base64("ember:s3cret")
        let basic = headers(&[("authorization", "Basic ZW1iZXI6czNjcmV0")]);
        assert_eq!(viewer(&auth, None, &basic), Some(Viewer::Operator));
        let wrong = headers(&[("authorization", "Bearer nope")]);
        assert_eq!(viewer(&auth, None, &wrong), None);
        assert_eq!(viewer(&Auth::SessionsOnly, None, &bearer), None);
        assert_eq!(
            viewer(&Auth::Open, None, &HeaderMap::new()),
            Some(Viewer::Operator)
        );
    }
}
