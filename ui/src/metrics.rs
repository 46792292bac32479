//! `/metrics`: the live application in Prometheus' text format (OpenMetrics), built with
//! `prometheus-client` from one read of the status store: jobs, stages and executors by
//! status, tasks running, task attempts ended by outcome and a task run-time histogram.
//! Names are prefixed `ember_`; counters end in `_total`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::{AppStatus, Status};

type Labels = Vec<(String, String)>;

fn by_status<'a>(statuses: impl Iterator<Item = Status> + 'a) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    for s in statuses {
        family
            .get_or_create(&vec![("status".to_string(), s.as_str().to_string())])
            .inc();
    }
    family
}

/// The text a Prometheus scrape gets.
pub(crate) fn render(app: &AppStatus) -> String {
    let mut r = Registry::with_prefix("ember");
    let jobs = app.jobs();
    let all = [Status::Running, Status::Succeeded, Status::Failed];
    let job_family = by_status(jobs.iter().map(|j| j.status));
    for s in all {
        // Every status appears, zero or not, so rates and alerts have a series.
        let _ = job_family.get_or_create(&vec![("status".into(), s.as_str().into())]);
    }
    r.register("jobs", "Jobs of the application by status", job_family);
    let stages: Vec<Status> = jobs
        .iter()
        .flat_map(|j| app.job_stages(j.job_id).unwrap_or_default())
        .map(|s| s.status)
        .collect();
    r.register(
        "stages",
        "Stages of the application's jobs by status (a stage counted per job listing it)",
        by_status(stages.into_iter()),
    );
    let running = Gauge::<i64>::default();
    running.set(
        app.executors()
            .iter()
            .map(|e| i64::from(e.tasks_running))
            .sum(),
    );
    r.register("tasks_running", "Task attempts running now", running);
    let ended = Family::<Labels, Counter>::default();
    ended
        .get_or_create(&vec![("outcome".into(), "succeeded".into())])
        .inc_by(app.tasks_succeeded_total);
    ended
        .get_or_create(&vec![("outcome".into(), "failed".into())])
        .inc_by(app.tasks_failed_total);
    r.register("tasks", "Task attempts ended, by outcome", ended);
    r.register(
        "task_duration_seconds",
        "Run time of ended task attempts",
        app.task_seconds.0.clone(),
    );
    let executors = Family::<Labels, Gauge>::default();
    let cores = Gauge::<i64>::default();
    for state in ["active", "lost"] {
        let _ = executors.get_or_create(&vec![("state".into(), state.into())]);
    }
    for e in app.executors() {
        let state = if e.lost_ms.is_some() {
            "lost"
        } else {
            "active"
        };
        executors
            .get_or_create(&vec![("state".into(), state.into())])
            .inc();
        if e.lost_ms.is_none() {
            cores.inc_by(i64::from(e.slots));
        }
    }
    r.register("executors", "Executors by state", executors);
    r.register(
        "executor_cores",
        "Task slots of the active executors",
        cores,
    );
    let mut out = String::new();
    if encode(&mut out, &r).is_err() {
        return String::new();
    }
    out
}
