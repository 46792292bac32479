//! The UI's addresses, scoped by application as Spark's history server scopes by
//! application id: a job is `{base}/apps/{app}/jobs/{n}` and a stage
//! `{base}/apps/{app}/stages/{n}`, where `{app}` is the application's id and `{n}` the
//! number the application itself gives the job or stage (what its console, its errors
//! and the pages show). The driver-wide ids stay in the JSON (`job_id`, `stage_id`) and
//! in the older addresses (`/jobs/{id}`, `/stages/{id}`), which redirect here.
//!
//! An application's id is its name as the events carry it (a client session's
//! `wordcount #3`); a job of local mode has none, and its id is the store's
//! application name ([`LOCAL`] when that is empty too). In an address the id is one
//! percent-encoded path segment.
//!
//! Invariants: [`app_id`] and [`application`] are inverse on every application of a
//! store, so an address built from a job or stage leads back to it; resolving an
//! address reads only the (possibly scoped) store it is given, so a viewer never
//! reaches a job or stage its store does not hold.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::store::{AppStatus, JobInfo};

/// The application id of local-mode jobs when the store has no name.
pub(crate) const LOCAL: &str = "local";

/// Characters left as they are in a path segment (RFC 3986's unreserved set).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The id in addresses of `application` (a job's `application` field) in `store`.
pub(crate) fn app_id<'a>(store: &'a AppStatus, application: &'a str) -> &'a str {
    match (application.is_empty(), store.name.is_empty()) {
        (false, _) => application,
        (true, false) => &store.name,
        (true, true) => LOCAL,
    }
}

/// The `application` field of the jobs whose address id is `id`, if `store` holds such
/// an application (local mode's, even before its first job).
pub(crate) fn application(store: &AppStatus, id: &str) -> Option<String> {
    let mut local_seen = false;
    for j in store.jobs_iter() {
        if j.application == id {
            return Some(id.to_string());
        }
        local_seen |= j.application.is_empty();
    }
    let local_id = app_id(store, "");
    let no_jobs = store.jobs_iter().next().is_none();
    (id == local_id && (local_seen || no_jobs)).then(String::new)
}

/// `id` as one path segment.
pub(crate) fn segment(id: &str) -> String {
    utf8_percent_encode(id, SEGMENT).to_string()
}

/// `{base}/apps/{app}` of the jobs of `application` in `store`.
pub(crate) fn app_base(base: &str, store: &AppStatus, application: &str) -> String {
    format!("{base}/apps/{}", segment(app_id(store, application)))
}

/// The address of `job`'s page.
pub(crate) fn job_href(base: &str, store: &AppStatus, job: &JobInfo) -> String {
    format!(
        "{}/jobs/{}",
        app_base(base, store, &job.application),
        job.number
    )
}

/// The driver's id of job number `number` of application `id`.
pub(crate) fn job_id(store: &AppStatus, id: &str, number: u64) -> Option<u64> {
    let application = application(store, id)?;
    store
        .jobs_iter()
        .filter(|j| j.application == application && j.number == number)
        .map(|j| j.job_id)
        .max()
}

/// The driver's id of stage number `number` of application `id`.
pub(crate) fn stage_id(store: &AppStatus, id: &str, number: u32) -> Option<u32> {
    let application = application(store, id)?;
    store
        .jobs_iter()
        .filter(|j| j.application == application)
        .flat_map(|j| j.stage_ids.iter())
        .filter_map(|s| store.stage(*s))
        .find(|s| s.number == number)
        .map(|s| s.stage_id)
}

/// The application (its `application` field) of the jobs that list stage `stage_id`.
pub(crate) fn stage_application(store: &AppStatus, stage_id: u32) -> Option<&str> {
    store
        .jobs_iter()
        .find(|j| j.stage_ids.contains(&stage_id))
        .map(|j| j.application.as_str())
}

/// The address of stage `stage_id`'s page (its application's number in it).
pub(crate) fn stage_href(base: &str, store: &AppStatus, stage_id: u32) -> Option<String> {
    let stage = store.stage(stage_id)?;
    let application = stage_application(store, stage_id)?;
    Some(format!(
        "{}/stages/{}",
        app_base(base, store, application),
        stage.number
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AppEvent, StageRef};

    fn job(job_id: u64, application: &str, number: u64, stage_id: u32) -> AppEvent {
        AppEvent::JobSubmitted {
            pool_share: Default::default(),
            job_group: Default::default(),
            pool: Default::default(),
            job_id,
            application: application.into(),
            number: Some(number),
            description: "collect at a.rs:1".into(),
            stages: vec![StageRef {
                stage_id,
                number: Some(number as u32),
                name: "map at a.rs:1".into(),
                num_tasks: 1,
                parents: vec![],
                shuffle_id: None,
                operators: vec![],
                more_operators: 0,
            }],
            time_ms: 1,
        }
    }

    #[test]
    fn addresses_lead_back_to_their_job_and_stage() {
        let mut s = AppStatus::new("driver", 0);
        s.apply(&job(3, "etl #1", 0, 7));
        s.apply(&job(4, "report/x #2", 0, 8));
        s.apply(&job(5, "etl #1", 1, 9));
        for j in s.jobs() {
            let href = job_href("", &s, &j);
            let (app, n) = href
                .strip_prefix("/apps/")
                .and_then(|r| r.split_once("/jobs/"))
                .unwrap();
            assert!(!app.contains('/') && !app.contains(' '), "{href}");
            let app = percent_encoding::percent_decode_str(app)
                .decode_utf8()
                .unwrap();
            assert_eq!(job_id(&s, &app, n.parse().unwrap()), Some(j.job_id));
        }
        assert_eq!(
            stage_href("", &s, 9).as_deref(),
            Some("/apps/etl%20%231/stages/1")
        );
        assert_eq!(stage_id(&s, "etl #1", 1), Some(9));
        assert_eq!(stage_id(&s, "report/x #2", 1), None);
        assert_eq!(job_id(&s, "driver", 0), None, "no local jobs on a driver");
    }

    #[test]
    fn local_jobs_take_the_store_name() {
        let mut s = AppStatus::new("word count", 0);
        assert_eq!(application(&s, "word count").as_deref(), Some(""));
        s.apply(&job(0, "", 0, 0));
        let j = s.job(0).unwrap().clone();
        assert_eq!(
            job_href("/history/x", &s, &j),
            "/history/x/apps/word%20count/jobs/0"
        );
        assert_eq!(job_id(&s, "word count", 0), Some(0));
        assert_eq!(job_id(&s, "other", 0), None);
        s.name.clear();
        assert_eq!(job_href("", &s, &j), "/apps/local/jobs/0");
    }
}
