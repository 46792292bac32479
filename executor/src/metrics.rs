//! The executor's Prometheus metrics (`--metrics-port`): tasks running and ended by
//! outcome, shuffle bytes written and fetched by its tasks, shuffle bytes its service
//! served to other executors, bytes spilled, worker processes alive, and its memory and
//! core offer; OpenMetrics text built with `prometheus-client`, names prefixed
//! `ember_executor_`.
//!
//! Invariants: one set of metrics per process (an executor daemon is one process), kept
//! across re-registrations; updating a metric never blocks or fails the task path;
//! with an operator secret (`--operator-secret-file`) every scrape needs
//! `Authorization: Bearer <secret>` (compared in constant time), else 401, logged with
//! the peer and path at most once a second ([`RefusalLog`]).

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use ember_proto::refusal_log::RefusalLog;
use ember_proto::TaskMetrics;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The metrics of this executor process.
pub struct ExecutorMetrics {
    registry: Registry,
    tasks_running: Gauge,
    tasks: Family<Labels, Counter>,
    shuffle_written: Counter,
    shuffle_fetched: Counter,
    shuffle_served: Counter,
    spilled: Counter,
    workers: Gauge,
    memory: Gauge<u64, AtomicU64>,
    memory_reserved: Gauge<u64, AtomicU64>,
    cores: Gauge,
}

/// This process's metrics.
pub fn metrics() -> &'static ExecutorMetrics {
    static METRICS: OnceLock<ExecutorMetrics> = OnceLock::new();
    METRICS.get_or_init(ExecutorMetrics::new)
}

impl ExecutorMetrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("ember_executor");
        let m = ExecutorMetrics {
            tasks_running: Gauge::default(),
            tasks: Family::default(),
            shuffle_written: Counter::default(),
            shuffle_fetched: Counter::default(),
            shuffle_served: Counter::default(),
            spilled: Counter::default(),
            workers: Gauge::default(),
            memory: Gauge::default(),
            memory_reserved: Gauge::default(),
            cores: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "tasks_running",
            "Tasks running on this executor",
            m.tasks_running.clone(),
        );
        for outcome in ["succeeded", "failed"] {
            let _ = m
                .tasks
                .get_or_create(&vec![("outcome".into(), outcome.into())]);
        }
        registry.register(
            "tasks",
            "Tasks ended on this executor, by outcome",
            m.tasks.clone(),
        );
        registry.register(
            "shuffle_written_bytes",
            "Shuffle bytes written by this executor's tasks",
            m.shuffle_written.clone(),
        );
        registry.register(
            "shuffle_fetched_bytes",
            "Shuffle bytes read by this executor's tasks (local and remote blocks)",
            m.shuffle_fetched.clone(),
        );
        registry.register(
            "shuffle_served_bytes",
            "Shuffle bytes this executor's shuffle service sent to other executors",
            m.shuffle_served.clone(),
        );
        registry.register(
            "spilled_bytes",
            "Bytes this executor's tasks spilled to disk",
            m.spilled.clone(),
        );
        registry.register(
            "workers",
            "Worker processes alive (one per job binary)",
            m.workers.clone(),
        );
        registry.register(
            "memory_limit_bytes",
            "Memory this executor offers its tasks",
            m.memory.clone(),
        );
        registry.register(
            "memory_reserved_bytes",
            "Memory this executor's running tasks reserve (as its workers last reported)",
            m.memory_reserved.clone(),
        );
        registry.register("cores", "Task slots this executor offers", m.cores.clone());
        ExecutorMetrics { registry, ..m }
    }

    /// The executor's offer (set once at startup).
    pub fn set_offer(&self, cores: u32, memory_bytes: u64) {
        self.cores.set(i64::from(cores));
        self.memory.set(memory_bytes);
    }

    pub fn set_memory_reserved(&self, bytes: u64) {
        self.memory_reserved.set(bytes);
    }

    pub fn task_started(&self) {
        self.tasks_running.inc();
    }

    /// A task's one status went to the driver.
    pub fn task_ended(&self, succeeded: bool, m: Option<&TaskMetrics>) {
        self.tasks_running.dec();
        let outcome = if succeeded { "succeeded" } else { "failed" };
        self.tasks
            .get_or_create(&vec![("outcome".into(), outcome.into())])
            .inc();
        if let Some(m) = m {
            self.shuffle_written.inc_by(m.shuffle_bytes_written);
            self.shuffle_fetched.inc_by(m.shuffle_bytes_read);
            self.spilled.inc_by(m.bytes_spilled);
        }
    }

    /// A task left without a status (its registration ended).
    pub fn task_abandoned(&self) {
        self.tasks_running.dec();
    }

    pub fn served(&self, bytes: u64) {
        self.shuffle_served.inc_by(bytes);
    }

    /// The text a scrape gets.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Counts one live worker process for as long as it is held.
pub struct WorkerAlive(());

impl WorkerAlive {
    pub fn new() -> Self {
        metrics().workers.inc();
        WorkerAlive(())
    }
}

impl Default for WorkerAlive {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for WorkerAlive {
    fn drop(&mut self) {
        metrics().workers.dec();
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` resolves; at most
/// `limits.max_connections` open, each with `limits.first_request_timeout` to send its
/// first request.
pub async fn serve(
    listener: tokio::net::TcpListener,
    limits: ember_proto::listener::ConnectionLimits,
    secret: Option<Arc<str>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let refusals = Arc::new(RefusalLog::new("executor metrics"));
    let app = Router::new().route(
        "/metrics",
        get(
            move |ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
                  uri: Uri,
                  headers: HeaderMap| {
                let secret = secret.clone();
                let refusals = refusals.clone();
                async move {
                    if !authorized(&headers, secret.as_deref()) {
                        refusals.refused(Some(peer), uri.path(), 401);
                        return (
                            StatusCode::UNAUTHORIZED,
                            "the operator secret is required\n",
                        )
                            .into_response();
                    }
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics().render(),
                    )
                        .into_response()
                }
            },
        ),
    );
    let listener = ember_proto::listener::BoundedListener::new(
        listener,
        limits,
        ember_proto::listener::FirstRequest::Http1,
        "metrics",
    );
    // tap_io: axum gives the peer address (ConnectInfo) only for its own listener
    // types, and for any listener wrapped this way.
    axum::serve(
        axum::serve::ListenerExt::tap_io(listener, |_| {}),
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

fn authorized(headers: &HeaderMap, secret: Option<&str>) -> bool {
    let Some(secret) = secret else {
        return true;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| {
            ember_proto::auth::constant_time_eq(given.trim().as_bytes(), secret.as_bytes())
        })
}
