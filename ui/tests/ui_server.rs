//! The status store, the event log and the HTTP server with a known application: a job
//! of two stages (one task failing once), a later job that skips its map stage, a failed
//! job, an executor lost. Checked through the REST API, the pages and a history server
//! reading the event log back.

mod common;

use std::io::Write;
use std::sync::Arc;

use common::{json, request, serve};

use ember_ui::event::StageRef;
use ember_ui::{AppEvent, AppStatus, Auth, EventLogWriter, Metrics, Source};
use parking_lot::RwLock;

fn stage(id: u32, parents: Vec<u32>, shuffle: Option<u32>) -> StageRef {
    StageRef {
        stage_id: id,
        number: Some(id),
        name: format!("map at src/main.rs:{}", 10 + id),
        num_tasks: 2,
        parents,
        shuffle_id: shuffle,
        operators: Vec::new(),
        more_operators: 0,
    }
}

fn task(task_id: u64, stage_id: u32, partition: u32, attempt: u32, ex: &str, t: u64) -> AppEvent {
    AppEvent::TaskStarted {
        task_id,
        stage_id,
        stage_attempt: 1,
        partition,
        attempt,
        executor_id: ex.into(),
        speculative: false,
        time_ms: t,
    }
}

fn ended(task_id: u64, stage_id: u32, partition: u32, ex: &str, ok: bool, t: u64) -> AppEvent {
    AppEvent::TaskEnded {
        task_id,
        stage_id,
        partition,
        attempt: 0,
        executor_id: ex.into(),
        metrics: Metrics {
            records_in: 100,
            records_out: 10,
            shuffle_bytes_written: if stage_id == 0 { 2048 } else { 0 },
            shuffle_bytes_read: if stage_id == 1 { 1024 } else { 0 },
            ..Default::default()
        },
        succeeded: ok,
        failure: (!ok).then(|| "panicked at src/main.rs:13: <bad> & worse".to_string()),
        time_ms: t,
    }
}

/// The events of the application the tests look at.
fn events() -> Vec<AppEvent> {
    let mut e = vec![
        // The driver's line about e1 may come before the scheduler's ExecutorAdded.
        AppEvent::ExecutorResources {
            executor_id: "e1".into(),
            host: "node-1".into(),
            memory_limit_bytes: 512 << 20,
            memory_used_bytes: 1 << 20,
            time_ms: 1,
        },
        AppEvent::ExecutorAdded {
            executor_id: "e1".into(),
            slots: 2,
            time_ms: 1,
        },
        AppEvent::ExecutorAdded {
            executor_id: "e2".into(),
            slots: 2,
            time_ms: 1,
        },
        AppEvent::JobSubmitted {
            pool_share: Default::default(),
            job_group: Default::default(),
            pool: Default::default(),
            job_id: 0,
            application: String::new(),
            number: Some(0),
            description: "collect at src/main.rs:20".into(),
            stages: vec![stage(0, vec![], Some(0)), stage(1, vec![0], None)],
            time_ms: 10,
        },
        AppEvent::StageSubmitted {
            stage_id: 0,
            attempt: 1,
            tasks: 2,
            time_ms: 11,
        },
        task(0, 0, 0, 0, "e1", 12),
        task(1, 0, 1, 0, "e2", 12),
        ended(0, 0, 0, "e1", true, 20),
        ended(1, 0, 1, "e2", false, 21),
        task(2, 0, 1, 1, "e1", 22),
        ended(2, 0, 1, "e1", true, 30),
        AppEvent::StageCompleted {
            stage_id: 0,
            time_ms: 30,
        },
        AppEvent::StageSubmitted {
            stage_id: 1,
            attempt: 1,
            tasks: 2,
            time_ms: 31,
        },
        task(3, 1, 0, 0, "e1", 31),
        task(4, 1, 1, 0, "e2", 31),
        ended(3, 1, 0, "e1", true, 40),
        ended(4, 1, 1, "e2", true, 41),
        AppEvent::StageCompleted {
            stage_id: 1,
            time_ms: 41,
        },
        AppEvent::JobEnded {
            job_id: 0,
            succeeded: true,
            failure: None,
            time_ms: 42,
        },
        // A second job over the same shuffle: its map stage is skipped.
        AppEvent::JobSubmitted {
            pool_share: Default::default(),
            job_group: Default::default(),
            pool: Default::default(),
            job_id: 1,
            application: String::new(),
            number: Some(1),
            description: "count at src/main.rs:21".into(),
            stages: vec![stage(0, vec![], Some(0)), stage(2, vec![0], None)],
            time_ms: 50,
        },
        AppEvent::StageSkipped {
            job_id: 1,
            stage_id: 0,
        },
        AppEvent::StageSubmitted {
            stage_id: 2,
            attempt: 1,
            tasks: 2,
            time_ms: 51,
        },
        task(5, 2, 0, 0, "e2", 51),
        ended(5, 2, 0, "e2", false, 52),
        AppEvent::StageFailed {
            stage_id: 2,
            reason: "task 0 failed: boom".into(),
            time_ms: 53,
        },
        AppEvent::JobEnded {
            job_id: 1,
            succeeded: false,
            failure: Some("task 0 of stage 2 failed: boom".into()),
            time_ms: 53,
        },
        AppEvent::ExecutorLost {
            executor_id: "e2".into(),
            reason: "heartbeat timed out".into(),
            outputs_from_storage: 2,
            outputs_from_replicas: 3,
            time_ms: 60,
        },
    ];
    e.insert(
        0,
        AppEvent::AppStarted {
            name: "wordcount".into(),
            time_ms: 0,
        },
    );
    e
}

fn status() -> AppStatus {
    let mut s = AppStatus::default();
    for e in events() {
        s.apply(&e);
    }
    s
}

#[test]
fn the_store_counts_jobs_stages_tasks_and_executors() {
    let s = status();
    let jobs = s.jobs();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].job_id, 1, "newest first");
    assert_eq!(
        jobs[0].failure.as_deref(),
        Some("task 0 of stage 2 failed: boom")
    );
    let st = s.job_stages(0).unwrap();
    assert_eq!(
        (
            st[0].tasks_succeeded,
            st[0].tasks_failed,
            st[0].tasks_running
        ),
        (2, 1, 0)
    );
    assert_eq!(
        st[0].metrics.shuffle_bytes_written, 4096,
        "successful attempts only"
    );
    let second = s.job_stages(1).unwrap();
    assert_eq!(
        second[0].status.as_str(),
        "skipped",
        "job 1 skipped stage 0"
    );
    assert_eq!(second[1].status.as_str(), "failed");
    assert_eq!(
        s.stage(0).unwrap().status.as_str(),
        "succeeded",
        "for job 0 it ran"
    );
    let tasks = s.stage_tasks(0).unwrap();
    assert_eq!(tasks.len(), 3);
    assert!(tasks[1].error.as_deref().unwrap().contains("<bad>"));
    let ex = s.executors();
    assert_eq!((ex[0].tasks_succeeded, ex[0].tasks_failed), (3, 0));
    assert_eq!((ex[1].tasks_succeeded, ex[1].tasks_failed), (1, 2));
    assert_eq!(
        ex[1].lost_reason.as_deref(),
        Some("heartbeat timed out; 3 map output(s) served by replicas; 2 map output(s) read from storage")
    );
    assert!(!s.busy());
}

/// `GET path` with an optional Authorization header: (status, body).
fn get(addr: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let auth = auth.map(|a| format!("Authorization: {a}"));
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    request(addr, "GET", path, &headers)
}

/// The links of `page` to a job or stage page: (address, the number their text shows),
/// each checked to carry that number as its last segment, under `/apps/`.
fn numbered_links(page: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for part in page.split("<a href=\"").skip(1) {
        let (href, rest) = part.split_once('"').unwrap();
        let text = &rest[rest.find('>').unwrap() + 1..rest.find("</a>").unwrap()];
        let Some(n) = text
            .trim_start_matches("job ")
            .parse::<u64>()
            .ok()
            .or_else(|| {
                // A DAG box (`Stage N (status)`) or a timeline bar (`job N`).
                let at = text
                    .find(">Stage ")
                    .map(|a| a + 7)
                    .or_else(|| text.find(">job ").map(|a| a + 5))?;
                let digits: String = text[at..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
        else {
            continue;
        };
        assert!(
            href.contains("/apps/"),
            "{href} is not an application's address"
        );
        let last = href.rsplit('/').next().unwrap();
        assert_eq!(last, n.to_string(), "{href} shows {n}");
        out.push((href.to_string(), n));
    }
    out
}

#[test]
fn the_api_and_pages_show_the_application() {
    let (addr, stop, thread) = serve(Source::Live(Arc::new(RwLock::new(status()))), Auth::Open);
    let jobs = json(&addr, "/api/v1/jobs");
    assert_eq!(jobs.as_array().unwrap().len(), 2);
    assert_eq!(jobs[1]["description"], "collect at src/main.rs:20");
    assert_eq!(jobs[1]["status"], "succeeded");
    assert_eq!(jobs[0]["status"], "failed");
    assert_eq!(json(&addr, "/api/v1/jobs/1")["skipped_stage_ids"][0], 0);
    let stages = json(&addr, "/api/v1/jobs/0/stages");
    assert_eq!(stages[0]["tasks_failed"], 1);
    assert_eq!(stages[1]["parents"][0], 0);
    assert_eq!(stages[1]["metrics"]["shuffle_bytes_read"], 2048);
    let tasks = json(&addr, "/api/v1/stages/0/tasks");
    assert_eq!(tasks.as_array().unwrap().len(), 3);
    assert_eq!(tasks[1]["status"], "failed");
    assert_eq!(json(&addr, "/api/v1/stages/2")["status"], "failed");
    let ex = json(&addr, "/api/v1/executors");
    assert_eq!(
        ex[1]["lost_reason"],
        "heartbeat timed out; 3 map output(s) served by replicas; 2 map output(s) read from storage"
    );
    assert_eq!(
        (ex[0]["host"].as_str(), ex[0]["slots"].as_u64()),
        (Some("node-1"), Some(2))
    );
    assert_eq!(ex[0]["memory_limit_bytes"], 512 << 20);
    assert_eq!(ex[0]["memory_used_bytes"], 1 << 20);
    for bad in [
        "/api/v1/jobs/7",
        "/api/v1/jobs/x",
        "/api/v1/stages/99/tasks",
        "/jobs/7",
        "/nope",
    ] {
        assert_eq!(get(&addr, bad, None).0, 404, "{bad}");
    }
    let (code, page) = get(&addr, "/jobs", None);
    assert_eq!(code, 200);
    assert!(
        page.contains("Succeeded jobs (1)") && page.contains("Failed jobs (1)"),
        "{page}"
    );
    // Local mode: the application's id is the store's name; the addresses carry its
    // own numbers, and the old ones (the driver's ids) redirect there.
    assert!(
        page.contains("<a href=\"/apps/wordcount/jobs/0\">0</a>"),
        "{page}"
    );
    assert_eq!(
        numbered_links(&page).len(),
        2 + 2,
        "two jobs in the table, two bars in the timeline: {page}"
    );
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "nothing runs: no refresh"
    );
    // The event timeline: executors added and lost, a bar per job, a time axis.
    let timeline = &page[page.find("<svg").unwrap()..page.find("</svg>").unwrap()];
    for text in [
        "executor e1 added",
        "executor e2 added",
        "executor e2 lost: heartbeat timed out",
        ">job 0</text>",
        ">job 1</text>",
        "class=\"job failed\"",
        ">0 ms</text>",
        "time since 00:00:00 UTC",
    ] {
        assert!(timeline.contains(text), "no {text:?} in {timeline}");
    }
    assert_eq!(timeline.matches("class=\"executor-added\"").count(), 2);
    assert_eq!(
        common::location(&addr, "/jobs/1", &[]),
        (303, Some("/apps/wordcount/jobs/1".to_string()))
    );
    let (_, job) = get(&addr, "/apps/wordcount/jobs/1", None);
    assert!(
        job.contains("<svg")
            && job.contains("<h1>Job 1</h1>")
            && job.contains("Stage 0 (skipped)")
            && job.contains("Stage 2 (failed)"),
        "{job}"
    );
    let links = numbered_links(&job);
    assert!(
        links.contains(&("/apps/wordcount/stages/2".into(), 2)),
        "{links:?}"
    );
    assert_eq!(
        common::location(&addr, "/stages/0", &[]),
        (303, Some("/apps/wordcount/stages/0".to_string()))
    );
    let (_, stage) = get(&addr, "/apps/wordcount/stages/0", None);
    assert!(stage.contains("<h1>Stage 0</h1>"), "{stage}");
    assert!(stage.contains("2 / 0 / 1 of 2"), "{stage}");
    assert!(
        stage.contains("&lt;bad&gt; &amp; worse"),
        "escaped error text"
    );
    // One bar per task attempt, in rows by executor, over a labelled time axis.
    assert!(stage.contains("class=\"timeline\""));
    assert_eq!(
        stage.matches("<rect class=\"task ").count(),
        tasks.as_array().unwrap().len()
    );
    assert_eq!(stage.matches("class=\"lane\"").count(), 2, "e1 and e2");
    for tick in [">0 ms</text>", ">5 ms</text>", ">15 ms</text>"] {
        assert!(stage.contains(tick), "no tick {tick}: {stage}");
    }
    assert!(stage.contains("time since the stage&#39;s first task launched"));
    // The same by application in the JSON, which keeps the driver's ids.
    assert_eq!(
        json(&addr, "/api/v1/apps"),
        serde_json::json!([{"id": "wordcount", "jobs": 2}])
    );
    assert_eq!(json(&addr, "/api/v1/apps/wordcount/jobs/1")["job_id"], 1);
    assert_eq!(
        json(&addr, "/api/v1/apps/wordcount/jobs")
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        json(&addr, "/api/v1/apps/wordcount/stages/0/tasks"),
        json(&addr, "/api/v1/stages/0/tasks")
    );
    assert_eq!(
        json(&addr, "/api/v1/apps/wordcount/jobs/0/stages")[1]["stage_id"],
        1
    );
    for bad in [
        "/apps/wordcount/jobs/7",
        "/apps/other/jobs",
        "/apps/wordcount/stages/x",
        "/apps/wordcount/nope",
        "/api/v1/apps/other/jobs/0",
        "/api/v1/apps/wordcount/stages/9",
    ] {
        assert_eq!(get(&addr, bad, None).0, 404, "{bad}");
    }
    let (_, execs) = get(&addr, "/executors", None);
    assert!(execs.contains("heartbeat timed out") && execs.contains(">lost<"));
    assert!(
        execs.contains("3 map output(s) served by replicas; 2 map output(s) read from storage"),
        "{execs}"
    );
    assert!(
        execs.contains("1.0 MiB / 512.0 MiB") && execs.contains("node-1"),
        "{execs}"
    );
    // Prometheus: the same numbers, OpenMetrics text.
    let (code, metrics) = get(&addr, "/metrics", None);
    assert_eq!(code, 200);
    for line in [
        "ember_jobs{status=\"succeeded\"} 1",
        "ember_jobs{status=\"failed\"} 1",
        "ember_jobs{status=\"running\"} 0",
        "ember_tasks_total{outcome=\"succeeded\"} 4",
        "ember_tasks_total{outcome=\"failed\"} 2",
        "ember_executors{state=\"lost\"} 1",
        "ember_executors{state=\"active\"} 1",
        "ember_executor_cores 2",
        "ember_tasks_running 0",
        "ember_task_duration_seconds_count 6",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    assert!(
        metrics.contains("# TYPE ember_task_duration_seconds histogram"),
        "{metrics}"
    );
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn with_a_secret_every_request_needs_it() {
    let (addr, stop, thread) = serve(
        Source::Live(Arc::new(RwLock::new(status()))),
        Auth::Secret("s3cret".into()),
    );
    let (code, body) = get(&addr, "/api/v1/jobs", None);
    assert_eq!(code, 401);
    assert!(!body.contains("collect"));
    assert_eq!(get(&addr, "/jobs", Some("Bearer wrong")).0, 401);
    assert_eq!(get(&addr, "/jobs", Some("Bearer s3cret")).0, 200);
    // Basic auth, any user: base64("ember:s3cret").
    assert_eq!(
        get(&addr, "/api/v1/jobs", Some("Basic ZW1iZXI6czNjcmV0")).0,
        200
    );
    assert_eq!(
        get(&addr, "/api/v1/jobs", Some("Basic ZW1iZXI6bm8=")).0,
        401
    );
    let (_, page) = get(&addr, "/jobs", Some("Bearer s3cret"));
    assert!(!page.contains("s3cret"), "the secret is never shown");
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_history_server_replays_event_logs() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventLogWriter::create(dir.path(), "word count!", 0).unwrap();
    for e in events().iter().skip(1) {
        w.write(e).unwrap();
    }
    w.flush().unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let replayed = ember_ui::event_log::replay(&path).unwrap();
    assert_eq!(replayed.name, "word count!");
    assert_eq!(
        format!("{:?}", replayed.jobs()),
        format!("{:?}", status().jobs())
    );
    // A torn last line (the application died mid-write) is skipped.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"event\":\"job_ended\",\"job_").unwrap();
    drop(f);
    assert!(ember_ui::event_log::replay(&path).is_ok());
    // A bad line in the middle is skipped, naming the file and line (tests/history.rs).
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"event\":\"app_started\",\"name\":\"x\",\"time_ms\":0}\nnot json\n{}\n",
    )
    .unwrap();
    let mut skipped = AppStatus::default();
    let read = ember_ui::log_reader::LogReader::new(&bad)
        .read_new(&mut skipped)
        .unwrap();
    let err = read.skipped[0].to_string();
    assert!(err.contains("bad.jsonl:2"), "{err}");
    assert_eq!((read.events, read.skipped.len()), (1, 2));
    std::fs::remove_file(&bad).unwrap();

    let id = path.file_stem().unwrap().to_str().unwrap().to_string();
    assert!(id.starts_with("word_count_-0-"), "{id}");
    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let apps = json(&addr, "/api/v1/applications");
    assert_eq!(apps[0]["id"], id.as_str());
    assert_eq!(apps[0]["jobs"], 2);
    let jobs = json(&addr, &format!("/api/v1/applications/{id}/jobs"));
    assert_eq!(jobs[1]["description"], "collect at src/main.rs:20");
    assert_eq!(
        json(&addr, &format!("/api/v1/applications/{id}/stages/0/tasks"))
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let app = format!("/history/{id}/apps/word%20count%21");
    assert_eq!(
        common::location(&addr, &format!("/history/{id}/jobs/0"), &[]),
        (303, Some(format!("{app}/jobs/0")))
    );
    let (code, page) = get(&addr, &format!("{app}/jobs/0"), None);
    assert_eq!(code, 200);
    assert!(page.contains(&format!("href=\"{app}/stages/1\"")), "{page}");
    assert_eq!(
        json(&addr, &format!("/api/v1/applications/{id}/apps")),
        serde_json::json!([{"id": "word count!", "jobs": 2}])
    );
    let (code, jobs_page) = get(&addr, &format!("{app}/jobs"), None);
    assert!(
        code == 200 && jobs_page.contains("executor e1 added"),
        "{jobs_page}"
    );
    assert_eq!(
        json(
            &addr,
            &format!("/api/v1/applications/{id}/apps/word%20count%21/stages/0/tasks")
        )
        .as_array()
        .unwrap()
        .len(),
        3
    );
    let (_, index) = get(&addr, "/history", None);
    assert!(index.contains(&id));
    assert_eq!(get(&addr, "/history/../../etc/passwd/jobs", None).0, 404);
    assert_eq!(get(&addr, "/history/nope/jobs", None).0, 404);
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_driver_of_several_applications_shows_each_ones_numbers() {
    // Driver-wide ids 3 and 4; each the first job (number 0) of its application.
    let job = |job_id: u64, app: &str, stage_id: u32| AppEvent::JobSubmitted {
        pool_share: Default::default(),
        job_group: Default::default(),
        pool: Default::default(),
        job_id,
        application: app.into(),
        number: Some(0),
        description: format!("count at {app}"),
        stages: vec![StageRef {
            stage_id,
            number: Some(0),
            name: "count at src/main.rs:3".into(),
            num_tasks: 1,
            parents: vec![],
            shuffle_id: None,
            operators: Vec::new(),
            more_operators: 0,
        }],
        time_ms: 10,
    };
    let mut s = AppStatus::default();
    s.apply(&job(3, "etl #1", 7));
    s.apply(&job(4, "report <2>", 8));
    // A line of an older version's log, without application and numbers: the ids are
    // the numbers.
    let old: AppEvent = serde_json::from_str(
        r#"{"event":"job_submitted","job_id":5,"description":"d","stages":[{"stage_id":9,"name":"n","num_tasks":1,"parents":[],"shuffle_id":null}],"time_ms":11}"#,
    )
    .unwrap();
    s.apply(&old);
    assert_eq!(
        (s.job(5).unwrap().number, s.stage(9).unwrap().number),
        (5, 9)
    );
    let (addr, stop, thread) = serve(Source::Live(Arc::new(RwLock::new(s))), Auth::Open);
    let jobs = json(&addr, "/api/v1/jobs");
    assert_eq!(jobs[2]["application"], "etl #1");
    assert_eq!(
        (jobs[2]["job_id"].as_u64(), jobs[2]["number"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(json(&addr, "/api/v1/stages/8")["number"], 0);
    let (_, page) = get(&addr, "/jobs", None);
    assert!(page.contains("<th>Application</th>"), "{page}");
    assert!(
        page.contains("<td>report &lt;2&gt;</td>"),
        "escaped: {page}"
    );
    // Each application's job 0 at its own address; the old log's job (no
    // application, a store without a name) under `local`.
    let links = numbered_links(&page);
    for want in [
        "/apps/report%20%3C2%3E/jobs/0",
        "/apps/etl%20%231/jobs/0",
        "/apps/local/jobs/5",
    ] {
        assert_eq!(
            links.iter().filter(|(href, _)| href == want).count(),
            2,
            "{want} in the table and the timeline: {links:?}"
        );
    }
    assert_eq!(
        common::location(&addr, "/jobs/3", &[]),
        (303, Some("/apps/etl%20%231/jobs/0".to_string()))
    );
    let (_, job_page) = get(&addr, "/apps/etl%20%231/jobs/0", None);
    assert!(job_page.contains("Job 0 of etl #1"), "{job_page}");
    assert!(job_page.contains("Stage 0 (pending)"), "{job_page}");
    assert!(
        job_page.contains("href=\"/apps/etl%20%231/stages/0\""),
        "{job_page}"
    );
    let (_, stage_page) = get(&addr, "/apps/report%20%3C2%3E/stages/0", None);
    assert!(
        stage_page.contains("Stage 0 of report &lt;2&gt;"),
        "{stage_page}"
    );
    assert!(
        stage_page.contains("<a href=\"/apps/report%20%3C2%3E/jobs/0\">job 0</a>"),
        "{stage_page}"
    );
    assert_eq!(
        json(&addr, "/api/v1/apps/report%20%3C2%3E/stages/0")["stage_id"],
        8
    );
    assert_eq!(
        json(&addr, "/api/v1/apps"),
        serde_json::json!([
            {"id": "etl #1", "jobs": 1},
            {"id": "report <2>", "jobs": 1},
            {"id": "local", "jobs": 1}
        ])
    );
    stop.send(()).unwrap();
    thread.join().unwrap();
}
