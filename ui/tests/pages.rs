//! The pages next to Spark's: summary quantiles of a stage's task metrics, the Storage
//! page, the Environment page (secrets redacted) and the operators in the DAG's stage
//! boxes, each through the store, the REST API, the pages, and a history server reading
//! the event log back.

mod common;

use std::sync::Arc;

use common::{get, get_followed, json, serve};
use ember_ui::event::{OperatorRef, StageRef};
use ember_ui::{AppEvent, AppStatus, Auth, EventLogWriter, Metrics, Source};
use parking_lot::RwLock;

/// Launch and end times (ms), records in and shuffle bytes written of the map stage's
/// five successful tasks; a sixth task fails.
const TASKS: [(u64, u64, u64, u64); 5] = [
    (100, 108, 50, 4096),
    (100, 102, 10, 1024),
    (101, 107, 30, 3072),
    (102, 106, 20, 2048),
    (103, 113, 40, 5120),
];
const SECRET: &str = "Zq8-cluster-secret-value-nobody-may-see";

fn ended(task_id: u64, ok: bool, at: u64, records_in: u64, written: u64) -> AppEvent {
    AppEvent::TaskEnded {
        task_id,
        stage_id: 0,
        partition: task_id as u32,
        attempt: 0,
        executor_id: "e1".into(),
        metrics: Metrics {
            records_in,
            shuffle_bytes_written: written,
            run_time_micros: records_in * 100,
            ..Default::default()
        },
        succeeded: ok,
        failure: (!ok).then(|| "boom".to_string()),
        time_ms: at,
    }
}

fn op(rdd_id: u32, name: &str, cached: bool) -> OperatorRef {
    OperatorRef {
        rdd_id,
        name: name.into(),
        cached,
    }
}

fn cached(rdd_id: u32, partition: u32, ex: &str, memory: u64) -> AppEvent {
    AppEvent::BlockCached {
        application: String::new(),
        rdd_id,
        rdd_name: "cache at src/main.rs:9".into(),
        num_partitions: 4,
        storage: 1,
        partition,
        executor_id: ex.into(),
        memory_bytes: memory,
        disk_bytes: 0,
        moved_from: String::new(),
        time_ms: 120,
    }
}

fn events() -> Vec<AppEvent> {
    let mut e = vec![
        AppEvent::ExecutorAdded {
            executor_id: "e1".into(),
            slots: 4,
            time_ms: 1,
        },
        AppEvent::ExecutorAdded {
            executor_id: "e2".into(),
            slots: 4,
            time_ms: 1,
        },
        AppEvent::Environment {
            application: String::new(),
            section: "Configuration".into(),
            entries: vec![
                ("master".into(), "local[4]".into()),
                // A sender that forgot to redact: the store still does.
                ("EMBER_SECRET".into(), SECRET.into()),
            ],
            time_ms: 2,
        },
        // A restarted driver recovers a stage's outputs as it creates the stage, before
        // the job that needs it is listed.
        AppEvent::OutputsRecovered {
            stage_id: 0,
            shuffle_id: 0,
            outputs: 4,
            executors: vec!["e1".into()],
            time_ms: 98,
        },
        AppEvent::JobSubmitted {
            pool_share: Default::default(),
            job_group: Default::default(),
            pool: Default::default(),
            job_id: 0,
            application: String::new(),
            number: Some(0),
            description: "count at src/main.rs:12".into(),
            stages: vec![
                StageRef {
                    stage_id: 0,
                    number: Some(0),
                    name: "map at src/main.rs:10".into(),
                    num_tasks: 6,
                    parents: vec![],
                    shuffle_id: Some(0),
                    operators: vec![
                        op(0, "text_file(data/in.txt)", false),
                        op(1, "cache at src/main.rs:9", true),
                        op(2, "map at src/main.rs:10", false),
                    ],
                    more_operators: 2,
                },
                StageRef {
                    stage_id: 1,
                    number: Some(1),
                    name: "count at src/main.rs:12".into(),
                    num_tasks: 1,
                    parents: vec![0],
                    shuffle_id: None,
                    operators: vec![op(3, "reduce_by_key at src/main.rs:11", false)],
                    more_operators: 0,
                },
            ],
            time_ms: 99,
        },
        AppEvent::StageSubmitted {
            stage_id: 0,
            attempt: 1,
            tasks: 6,
            time_ms: 100,
        },
    ];
    for (i, (start, end, records, written)) in TASKS.iter().enumerate() {
        e.push(AppEvent::TaskStarted {
            task_id: i as u64,
            stage_id: 0,
            stage_attempt: 1,
            partition: i as u32,
            attempt: 0,
            executor_id: "e1".into(),
            speculative: false,
            time_ms: *start,
        });
        e.push(ended(i as u64, true, *end, *records, *written));
    }
    e.push(AppEvent::TaskStarted {
        task_id: 5,
        stage_id: 0,
        stage_attempt: 1,
        partition: 5,
        attempt: 0,
        executor_id: "e1".into(),
        speculative: false,
        time_ms: 100,
    });
    // A failed task, far longer than the others: not in the summary.
    e.push(ended(5, false, 900, 999, 999_999));
    e.extend([
        cached(1, 0, "e1", 1000),
        cached(1, 1, "e1", 3000),
        cached(1, 1, "e1", 3000), // a repeat counts once
        cached(1, 1, "e2", 500),  // the same partition on another executor
        cached(1, 2, "e2", 700),
        cached(1, 7, "e2", 1 << 40), // past the RDD's partitions: ignored
        cached(5, 0, "e1", 10),
        AppEvent::BlocksRemoved {
            rdd_lo: 5,
            rdd_hi: 6,
            time_ms: 130,
        },
        cached(6, 0, "e2", 10),
        AppEvent::ExecutorLost {
            executor_id: "e2".into(),
            reason: "heartbeat timed out".into(),
            outputs_from_storage: 0,
            outputs_from_replicas: 0,
            time_ms: 140,
        },
    ]);
    e
}

/// The nearest-rank quantile the summary promises, computed the long way: the
/// smallest value with more than ⌊q·n⌋ values at or below it... i.e. the (⌊q·n⌋+1)-th
/// smallest, capped at the largest.
fn nth_smallest(values: &[u64], q: f64) -> u64 {
    let rank = ((q * values.len() as f64).floor() as usize + 1).min(values.len());
    *values
        .iter()
        .find(|v| {
            values.iter().filter(|w| w < v).count() < rank
                && values.iter().filter(|w| w <= v).count() >= rank
        })
        .unwrap()
}

fn expected(values: &[u64]) -> serde_json::Value {
    serde_json::json!([0.0, 0.25, 0.5, 0.75, 1.0].map(|q| nth_smallest(values, q)))
}

fn check_summary(addr: &str, api: &str) {
    let s = json(addr, &format!("{api}/stages/0/summary"));
    assert_eq!(s["tasks"], 5);
    let durations: Vec<u64> = TASKS.iter().map(|t| t.1 - t.0).collect();
    assert_eq!(durations, [8, 2, 6, 4, 10]);
    assert_eq!(s["duration_ms"], serde_json::json!([2, 4, 6, 8, 10]));
    assert_eq!(s["duration_ms"], expected(&durations));
    let records: Vec<u64> = TASKS.iter().map(|t| t.2).collect();
    assert_eq!(s["records_in"], expected(&records));
    let run: Vec<u64> = records.iter().map(|r| r * 100).collect();
    assert_eq!(s["run_time_micros"], expected(&run));
    let written: Vec<u64> = TASKS.iter().map(|t| t.3).collect();
    assert_eq!(s["shuffle_write_bytes"], expected(&written));
    assert_eq!(s["spilled_bytes"], serde_json::json!([0, 0, 0, 0, 0]));
    assert_eq!(
        json(addr, &format!("{api}/stages/1/summary"))["tasks"],
        0,
        "a stage with no task done yet"
    );
    assert_eq!(get(addr, &format!("{api}/stages/7/summary")).0, 404);
}

fn check_storage(addr: &str, api: &str, pages: &str) {
    let rdds = json(addr, &format!("{api}/storage/rdd"));
    // RDD 5 was unpersisted, RDD 6 went with e2; RDD 1 keeps e1's blocks only.
    assert_eq!(rdds.as_array().unwrap().len(), 1, "{rdds}");
    let r = &rdds[0];
    assert_eq!(
        (
            r["rdd_id"].as_u64(),
            r["partitions_cached"].as_u64(),
            r["num_partitions"].as_u64(),
            r["memory_bytes"].as_u64(),
            r["storage_level"].as_str()
        ),
        (Some(1), Some(2), Some(4), Some(1000 + 3000), Some("memory"))
    );
    assert_eq!(
        json(addr, &format!("{api}/storage/rdd/1"))["executors"][0]["blocks"],
        2
    );
    assert_eq!(get(addr, &format!("{api}/storage/rdd/5")).0, 404);
    let (code, page) = get(addr, &format!("{pages}/storage"));
    assert_eq!(code, 200);
    assert!(page.contains("Cached RDDs (1)"), "{page}");
    assert!(page.contains("cache at src/main.rs:9"), "{page}");
    assert!(
        page.contains(
            "<td class=\"n\">2 / 4</td><td class=\"n\">50%</td><td class=\"n\">3.9 KiB</td>"
        ),
        "{page}"
    );
    let (code, page) = get(addr, &format!("{pages}/storage/rdd/1"));
    assert_eq!(code, 200);
    assert!(page.contains("<td>e1</td><td class=\"n\">2</td>"), "{page}");
}

fn check_environment(addr: &str, api: &str, pages: &str) {
    let env = json(addr, &format!("{api}/environment"));
    let entries = &env["sections"][0]["entries"];
    assert_eq!(entries[0], serde_json::json!(["master", "local[4]"]));
    assert_eq!(
        entries[1],
        serde_json::json!(["EMBER_SECRET", "*********(redacted)"])
    );
    assert!(!env.to_string().contains(SECRET));
    let (code, page) = get(addr, &format!("{pages}/environment"));
    assert_eq!(code, 200);
    assert!(page.contains("<td>master</td><td>local[4]</td>"), "{page}");
    assert!(!page.contains(SECRET));
}

fn check_pages(addr: &str, pages: &str) {
    let (code, page) = get_followed(addr, &format!("{pages}/stages/0"));
    assert_eq!(code, 200);
    assert!(
        page.contains("Summary metrics for 5 completed tasks"),
        "{page}"
    );
    assert!(
        page.contains("4 of its map outputs were recovered from the executors"),
        "{page}"
    );
    // Duration: 0.002 s, 0.004, 0.006, 0.008, 0.010.
    assert!(
        page.contains(
            "<tr><td>Duration</td><td class=\"n\">0.002 s</td><td class=\"n\">0.004 s</td>\
         <td class=\"n\">0.006 s</td><td class=\"n\">0.008 s</td><td class=\"n\">0.010 s</td></tr>"
        ),
        "{page}"
    );
    assert!(page.contains(
        "<tr><td>Records in</td><td class=\"n\">10</td><td class=\"n\">20</td><td class=\"n\">30</td>\
         <td class=\"n\">40</td><td class=\"n\">50</td></tr>"
    ), "{page}");
    let (code, page) = get_followed(addr, &format!("{pages}/jobs/0"));
    assert_eq!(code, 200);
    for line in [
        ">text_file(data/in.txt)</text>",
        ">● cache at src/main.rs:9</text>",
        ">map at src/main.rs:10</text>",
        ">… 2 more</text>",
        // Cut to the box's 30 characters; the whole name is its tooltip.
        ">reduce_by_key at src/main.rs:1…</text>",
        "<title>RDD 3: reduce_by_key at src/main.rs:11</title>",
    ] {
        assert!(page.contains(line), "{line} in {page}");
    }
    let nav = get(addr, &format!("{pages}/jobs")).1;
    assert!(
        nav.contains(&format!("href=\"{pages}/storage\">Storage</a>")),
        "{nav}"
    );
    assert!(
        nav.contains(&format!("href=\"{pages}/environment\">Environment</a>")),
        "{nav}"
    );
}

#[test]
fn live_pages_show_quantiles_storage_environment_and_operators() {
    let mut s = AppStatus::new("pages", 0);
    for e in events() {
        s.apply(&e);
    }
    let (addr, stop, thread) = serve(Source::Live(Arc::new(RwLock::new(s))), Auth::Open);
    check_summary(&addr, "/api/v1");
    check_storage(&addr, "/api/v1", "");
    check_environment(&addr, "/api/v1", "");
    check_pages(&addr, "");
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn the_history_server_reads_the_new_events_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventLogWriter::create(dir.path(), "pages", 0).unwrap();
    for e in events() {
        w.write(&e).unwrap();
    }
    w.flush().unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let log = std::fs::read_to_string(&path).unwrap();
    assert!(
        !log.contains(SECRET),
        "the event log holds the redacted value only"
    );
    for kind in [
        "\"block_cached\"",
        "\"blocks_removed\"",
        "\"environment\"",
        "\"operators\"",
    ] {
        assert!(log.contains(kind), "{kind} in the log");
    }
    let id = path.file_stem().unwrap().to_str().unwrap().to_string();
    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let api = format!("/api/v1/applications/{id}");
    let pages = format!("/history/{id}");
    check_summary(&addr, &api);
    check_storage(&addr, &api, &pages);
    check_environment(&addr, &api, &pages);
    check_pages(&addr, &pages);
    stop.send(()).unwrap();
    thread.join().unwrap();
}

/// A log of an older version (no operators, no cached blocks, no configuration) reads
/// as before: the new pages are there and empty, the stage has no operators listed, and
/// its summary is computed from its tasks.
#[test]
fn an_older_log_shows_empty_new_pages() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"event":"app_started","name":"old","time_ms":0}"#,
        r#"{"event":"job_submitted","job_id":0,"description":"d","stages":[{"stage_id":0,"name":"n","num_tasks":1,"parents":[],"shuffle_id":null}],"time_ms":1}"#,
        r#"{"event":"task_started","task_id":0,"stage_id":0,"stage_attempt":0,"partition":0,"attempt":0,"executor_id":"e","speculative":false,"time_ms":2}"#,
        r#"{"event":"task_ended","task_id":0,"stage_id":0,"partition":0,"attempt":0,"executor_id":"e","metrics":{"records_in":7,"records_out":7,"shuffle_bytes_written":0,"shuffle_bytes_read":0,"shuffle_records_written":0,"shuffle_records_read":0,"bytes_spilled":0,"spill_count":0,"run_time_micros":5},"succeeded":true,"failure":null,"time_ms":9}"#,
    ];
    std::fs::write(dir.path().join("old.jsonl"), lines.join("\n") + "\n").unwrap();
    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let api = "/api/v1/applications/old";
    assert_eq!(
        json(&addr, &format!("{api}/storage/rdd")),
        serde_json::json!([])
    );
    assert_eq!(
        json(&addr, &format!("{api}/environment")),
        serde_json::json!({"sections": []})
    );
    assert_eq!(
        json(&addr, &format!("{api}/stages/0"))["operators"],
        serde_json::json!([])
    );
    let s = json(&addr, &format!("{api}/stages/0/summary"));
    assert_eq!(
        (s["tasks"].as_u64(), &s["records_in"]),
        (Some(1), &serde_json::json!([7, 7, 7, 7, 7]))
    );
    assert_eq!(s["duration_ms"], serde_json::json!([7, 7, 7, 7, 7]));
    for (path, text) in [
        ("/history/old/storage", "Cached RDDs (0)"),
        ("/history/old/environment", "No configuration was reported."),
        ("/history/old/jobs/0", "class=\"dag\""),
    ] {
        let (code, page) = get_followed(&addr, path);
        assert_eq!(code, 200, "{path}");
        assert!(page.contains(text), "{path}: {page}");
    }
    stop.send(()).unwrap();
    thread.join().unwrap();
}

/// A session's view holds its own cached RDDs and configuration only.
#[test]
fn a_scoped_view_has_only_its_applications_storage_and_environment() {
    let mut s = AppStatus::default();
    for (app, rdd) in [("a #1", 1), ("b #2", 2)] {
        s.apply(&AppEvent::BlockCached {
            application: app.into(),
            rdd_id: rdd,
            rdd_name: format!("cache of {app}"),
            num_partitions: 1,
            storage: 2,
            partition: 0,
            executor_id: "e1".into(),
            memory_bytes: 0,
            disk_bytes: 512,
            moved_from: String::new(),
            time_ms: 1,
        });
        s.apply(&AppEvent::Environment {
            application: app.into(),
            section: "Configuration".into(),
            entries: vec![("EMBER_MASTER".into(), app.into())],
            time_ms: 1,
        });
    }
    s.apply(&AppEvent::Environment {
        application: String::new(),
        section: "Driver flags".into(),
        entries: vec![("--host".into(), "0.0.0.0".into())],
        time_ms: 1,
    });
    let a = s.scoped("a #1");
    let rdds = a.storage.rdds();
    assert_eq!(rdds.len(), 1);
    assert_eq!(
        (rdds[0].rdd_id, rdds[0].disk_bytes, rdds[0].storage_level),
        (1, 512, "disk")
    );
    let sections = a.environment.sections();
    assert_eq!(sections.len(), 1);
    assert_eq!(
        sections[0].entries,
        [("EMBER_MASTER".to_string(), "a #1".to_string())]
    );
    assert_eq!(s.storage.rdds().len(), 2, "the operator sees both");
    assert_eq!(s.environment.sections().len(), 3);
}
