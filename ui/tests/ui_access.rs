//! Who sees what in the UI and what an address may name: stage ids in addresses are
//! full 64-bit numbers (2^32 + 1 is no stage, not stage 1).

mod common;

use std::sync::Arc;

use common::{get, location, request, serve};

use ember_ui::event::StageRef;
use ember_ui::{AppEvent, AppStatus, Auth, Source};
use parking_lot::RwLock;

/// A job of one stage (stage 1) in application `app`, job id `job`.
fn job_events(job: u64, stage: u32, app: &str) -> Vec<AppEvent> {
    vec![
        AppEvent::JobSubmitted {
            pool_share: Default::default(),
            job_group: Default::default(),
            pool: Default::default(),
            job_id: job,
            application: app.into(),
            number: Some(job),
            description: format!("count at {app}.rs:{job}"),
            stages: vec![StageRef {
                stage_id: stage,
                number: Some(stage),
                name: format!("map at {app}.rs:{stage}"),
                num_tasks: 1,
                parents: vec![],
                shuffle_id: None,
                operators: Vec::new(),
                more_operators: 0,
            }],
            time_ms: 10,
        },
        AppEvent::StageSubmitted {
            stage_id: stage,
            attempt: 1,
            tasks: 1,
            time_ms: 11,
        },
    ]
}

fn store(events: &[AppEvent]) -> Arc<RwLock<AppStatus>> {
    let mut s = AppStatus::new("ember-driver", 0);
    for e in events {
        s.apply(e);
    }
    Arc::new(RwLock::new(s))
}

#[test]
fn stage_ids_in_addresses_are_not_cut_to_32_bits() {
    let (addr, stop, thread) = serve(Source::Live(store(&job_events(0, 1, ""))), Auth::Open);
    assert_eq!(get(&addr, "/api/v1/stages/1").0, 200);
    // The driver's id redirects to the application's number (local mode: the store's
    // name is the application's id).
    assert_eq!(
        location(&addr, "/stages/1", &[]),
        (303, Some("/apps/ember-driver/stages/1".to_string()))
    );
    let (code, page) = get(&addr, "/apps/ember-driver/stages/1");
    assert!(code == 200 && page.contains("<h1>Stage 1</h1>"), "{page}");
    let wrapped = 4_294_967_297u64; // 2^32 + 1
    for path in [
        format!("/api/v1/stages/{wrapped}"),
        format!("/api/v1/stages/{wrapped}/tasks"),
        format!("/stages/{wrapped}"),
        format!("/apps/ember-driver/stages/{wrapped}"),
        format!("/api/v1/apps/ember-driver/stages/{wrapped}/tasks"),
        format!("/api/v1/stages/{}", u64::MAX),
        // Past u64: still 404, never an error page or a panic.
        "/api/v1/stages/18446744073709551617".to_string(),
        "/api/v1/jobs/18446744073709551616".to_string(),
    ] {
        let (code, body) = get(&addr, &path);
        assert_eq!(code, 404, "{path}: {body}");
        assert!(!body.contains("map at"), "{path} showed a stage: {body}");
    }
    stop.send(()).unwrap();
    thread.join().unwrap();
}

/// Two sessions' tokens ("token-a", "token-b") and the kills asked of them (and the
/// executors asked to decommission, as kills of job `u64::MAX`).
struct FakeSessions(parking_lot::Mutex<Vec<(u64, Option<String>)>>);

impl ember_ui::Sessions for FakeSessions {
    fn application(&self, token: &str) -> Option<String> {
        match token {
            "token-a" => Some("a #1".into()),
            "token-b" => Some("b #2".into()),
            _ => None,
        }
    }

    fn kill_job(&self, job_id: u64, application: Option<&str>, _reason: &str) -> bool {
        self.0
            .lock()
            .push((job_id, application.map(str::to_string)));
        true
    }

    /// Recorded as a kill of job `1_000_000 + stage_id`.
    fn kill_stage(&self, stage_id: u32, application: Option<&str>, _reason: &str) -> bool {
        self.0.lock().push((
            1_000_000 + u64::from(stage_id),
            application.map(str::to_string),
        ));
        true
    }

    fn decommission_executor(&self, executor_id: &str) -> bool {
        if executor_id != "exec-b" {
            return false;
        }
        self.0
            .lock()
            .push((u64::MAX, Some(executor_id.to_string())));
        true
    }
}

/// A driver's UI over `events` with the operator secret `the-operator` and the fake
/// sessions (which record kills).
fn serve_driver(
    events: &[AppEvent],
) -> (
    Arc<FakeSessions>,
    (
        String,
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    ),
) {
    let sessions = Arc::new(FakeSessions(parking_lot::Mutex::new(Vec::new())));
    let served = serve(
        Source::Driver {
            status: store(events),
            sessions: sessions.clone(),
        },
        Auth::Secret("the-operator".into()),
    );
    (sessions, served)
}

#[test]
fn a_session_token_sees_only_its_own_application() {
    let mut events = job_events(10, 1, "a #1");
    events.extend(job_events(20, 2, "b #2"));
    events.push(AppEvent::TaskStarted {
        task_id: 7,
        stage_id: 2,
        stage_attempt: 1,
        partition: 0,
        attempt: 0,
        executor_id: "exec-b".into(),
        speculative: false,
        time_ms: 12,
    });
    let (sessions, (addr, stop, thread)) = serve_driver(&events);
    let a = ["Authorization: Bearer token-a"];
    let op = ["Authorization: Bearer the-operator"];
    let get_as = |path: &str, who: &[&str]| request(&addr, "GET", path, who);

    let (code, jobs) = get_as("/api/v1/jobs", &a);
    assert_eq!(code, 200);
    assert!(
        jobs.contains("\"job_id\":10") && !jobs.contains("\"job_id\":20"),
        "{jobs}"
    );
    let (_, page) = get_as("/jobs", &a);
    assert!(page.contains("count at a #1.rs:10"), "{page}");
    assert!(
        !page.contains("b #2"),
        "another application on the page: {page}"
    );
    assert_eq!(get_as("/api/v1/stages/1", &a).0, 200);
    for path in [
        "/api/v1/jobs/20",
        "/api/v1/jobs/20/stages",
        "/jobs/20",
        "/api/v1/stages/2",
        "/api/v1/stages/2/tasks",
        "/stages/2",
        // By application and number: another application's are as unknown.
        "/apps/b%20%232/jobs",
        "/apps/b%20%232/jobs/20",
        "/apps/b%20%232/stages/2",
        "/api/v1/apps/b%20%232/jobs/20",
        "/api/v1/apps/b%20%232/stages/2/tasks",
    ] {
        let (code, body) = get_as(path, &a);
        assert_eq!(code, 404, "{path}: {body}");
        // (A 404 may quote the address's application, never show its jobs.)
        assert!(
            !body.contains("exec-b") && !body.contains("count at b #2"),
            "{path}: {body}"
        );
    }
    let (code, apps) = get_as("/api/v1/apps", &a);
    assert_eq!((code, apps.as_str()), (200, r#"[{"id":"a #1","jobs":1}]"#));
    let (code, own) = get_as("/apps/a%20%231/jobs/10", &a);
    assert!(code == 200 && own.contains("Job 10 of a #1"), "{own}");
    let (code, stage) = get_as("/api/v1/apps/a%20%231/stages/1", &a);
    let stage: serde_json::Value = serde_json::from_str(&stage).unwrap();
    assert_eq!((code, &stage["stage_id"]), (200, &1.into()), "{stage}");
    let (code, other) = get_as("/apps/b%20%232/jobs/20", &op);
    assert!(code == 200 && other.contains("Job 20 of b #2"), "{other}");
    for path in ["/api/v1/executors", "/executors", "/metrics"] {
        assert_eq!(get_as(path, &a).0, 403, "{path}");
        assert_eq!(get_as(path, &op).0, 200, "{path}");
    }
    let (_, tasks) = get_as("/api/v1/stages/2/tasks", &op);
    assert!(
        tasks.contains("exec-b"),
        "the operator sees every stage: {tasks}"
    );
    assert_eq!(
        get_as("/api/v1/jobs", &["Authorization: Bearer nope"]).0,
        401
    );

    // Kills: only POST, only what the viewer sees, never cross-site.
    assert_eq!(request(&addr, "POST", "/api/v1/jobs/20/kill", &a).0, 404);
    assert_eq!(get_as("/api/v1/jobs/10/kill", &a).0, 405);
    let evil = [
        "Authorization: Bearer token-a",
        "Origin: http://evil.example",
    ];
    assert_eq!(request(&addr, "POST", "/api/v1/jobs/10/kill", &evil).0, 403);
    assert!(sessions.0.lock().is_empty(), "nothing killed yet");
    assert_eq!(request(&addr, "POST", "/api/v1/jobs/10/kill", &a).0, 200);
    let (code, _) = request(&addr, "POST", "/jobs/20/kill", &op);
    assert_eq!(code, 303, "the form goes back to the job's page");
    assert_eq!(
        *sessions.0.lock(),
        vec![(10, Some("a #1".to_string())), (20, None)]
    );

    // Decommissioning an executor: only POST, only the operator, never cross-site.
    let path = "/api/v1/executors/exec-b/decommission";
    assert_eq!(get_as(path, &op).0, 405);
    assert_eq!(request(&addr, "POST", path, &a).0, 403, "a session token");
    assert_eq!(
        request(&addr, "POST", path, &["Authorization: Bearer nope"]).0,
        401
    );
    let evil_op = [
        "Authorization: Bearer the-operator",
        "Origin: http://evil.example",
    ];
    assert_eq!(request(&addr, "POST", path, &evil_op).0, 403);
    let (code, body) = request(&addr, "POST", "/api/v1/executors/exec-x/decommission", &op);
    assert!(
        code == 404 && body.contains("no executor \"exec-x\""),
        "{body}"
    );
    let long = format!("/api/v1/executors/{}/decommission", "z".repeat(5000));
    let (code, body) = request(&addr, "POST", &long, &op);
    assert!(code == 404 && body.len() < 200, "{code} {body}");
    assert_eq!(sessions.0.lock().len(), 2, "nothing decommissioned yet");
    let (code, body) = request(&addr, "POST", path, &op);
    assert_eq!(
        (code, body.as_str()),
        (200, r#"{"executor_id":"exec-b","decommissioning":true}"#)
    );
    let (code, _) = request(&addr, "POST", "/executors/exec-b/decommission", &op);
    assert_eq!(code, 303, "the form goes back to the Executors page");
    assert_eq!(
        sessions.0.lock()[2..],
        [
            (u64::MAX, Some("exec-b".to_string())),
            (u64::MAX, Some("exec-b".to_string()))
        ]
    );
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn history_addresses_take_whole_stage_ids_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ember_ui::EventLogWriter::create(dir.path(), "app", 0).unwrap();
    for e in job_events(0, 1, "") {
        w.write(&e).unwrap();
    }
    w.flush().unwrap();
    let id = w.path().file_stem().unwrap().to_str().unwrap().to_string();
    drop(w);
    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let base = format!("/api/v1/applications/{id}");
    assert_eq!(get(&addr, &format!("{base}/stages/1")).0, 200);
    assert_eq!(get(&addr, &format!("{base}/apps/app/stages/1")).0, 200);
    assert_eq!(
        get(&addr, &format!("/history/{id}/apps/app/stages/1")).0,
        200
    );
    for path in [
        format!("{base}/stages/4294967297"),
        format!("{base}/stages/4294967297/tasks"),
        format!("/history/{id}/stages/4294967297"),
        format!("/history/{id}/apps/app/stages/4294967297"),
        format!("{base}/apps/app/stages/4294967297/tasks"),
    ] {
        assert_eq!(get(&addr, &path).0, 404, "{path}");
    }
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_stage_is_killed_by_its_own_session_or_the_operator_and_pools_are_shown() {
    let mut events = job_events(10, 1, "a #1");
    events.extend(job_events(20, 2, "b #2"));
    if let AppEvent::JobSubmitted {
        pool,
        job_group,
        pool_share,
        ..
    } = &mut events[0]
    {
        *pool = "etl".into();
        *job_group = "nightly".into();
        *pool_share = "weight 3, min share 1, fair".into();
    }
    let (sessions, (addr, stop, thread)) = serve_driver(&events);
    let a = ["Authorization: Bearer token-a"];
    let op = ["Authorization: Bearer the-operator"];
    let post = |path: &str, who: &[&str]| request(&addr, "POST", path, who);
    // Another session's stage is not there; a GET, no credential or another site is
    // refused; nothing is killed by any of them.
    assert_eq!(post("/api/v1/stages/2/kill", &a).0, 404);
    assert_eq!(request(&addr, "GET", "/api/v1/stages/1/kill", &a).0, 405);
    assert_eq!(
        post("/api/v1/stages/1/kill", &["Authorization: Bearer nope"]).0,
        401
    );
    assert_eq!(post("/api/v1/stages/1/kill", &[]).0, 401);
    let evil = [
        "Authorization: Bearer token-a",
        "Origin: http://evil.example",
    ];
    assert_eq!(post("/api/v1/stages/1/kill", &evil).0, 403);
    assert!(sessions.0.lock().is_empty(), "nothing killed yet");
    let (code, body) = post("/api/v1/stages/1/kill", &a);
    assert_eq!(
        (code, body.as_str()),
        (200, "{\"stage_id\":1,\"killed\":true}")
    );
    let (code, _) = post("/stages/2/kill", &op);
    assert_eq!(code, 303, "the form goes back to the stage's page");
    assert_eq!(
        *sessions.0.lock(),
        vec![(1_000_001, Some("a #1".to_string())), (1_000_002, None)]
    );
    // The running stage's page has the kill form; the jobs page shows the pools.
    let (code, page) = request(&addr, "GET", "/apps/a%20%231/stages/1", &a);
    assert!(
        code == 200 && page.contains("action=\"/stages/1/kill\""),
        "{page}"
    );
    let (_, jobs) = request(&addr, "GET", "/jobs", &op);
    assert!(jobs.contains("Scheduler pools"), "{jobs}");
    assert!(
        jobs.contains("<td>etl</td>") && jobs.contains("<td>default</td>"),
        "{jobs}"
    );
    assert!(
        jobs.contains("<td>weight 3, min share 1, fair</td>"),
        "{jobs}"
    );
    let (_, job) = request(&addr, "GET", "/apps/a%20%231/jobs/10", &a);
    assert!(job.contains("pool etl, job group nightly"), "{job}");
    let (_, api) = request(&addr, "GET", "/api/v1/jobs/10", &a);
    assert!(
        api.contains("\"pool\":\"etl\"") && api.contains("\"job_group\":\"nightly\""),
        "{api}"
    );
    stop.send(()).unwrap();
    thread.join().unwrap();
}
