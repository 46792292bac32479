//! Local mode's web UI and event log (`EMBER_UI_PORT`, `EMBER_EVENT_LOG_DIR`): a job's
//! numbers through the REST API while the context lives (its stages' task summaries and
//! operators, the context's configuration, a cached RDD on the Storage page until it is
//! unpersisted), the server gone with it, and the event log replayable. Alone in its binary: it sets process environment variables.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.get(9..12)?.parse().ok()?;
    Some((code, out.split_once("\r\n\r\n")?.1.to_string()))
}

#[test]
fn a_local_context_serves_its_ui_and_writes_its_event_log() {
    let logs = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::env::set_var("EMBER_UI_PORT", "0");
    std::env::set_var("EMBER_EVENT_LOG_DIR", logs.path());
    let mut conf = ember::Conf::local(2, 256 << 20);
    conf.progress = false;
    conf.local_dir = Some(work.path().to_path_buf());
    let ctx = ember::Context::with_conf(conf).unwrap();
    std::env::remove_var("EMBER_UI_PORT");
    std::env::remove_var("EMBER_EVENT_LOG_DIR");
    let url = ctx.ui_url().expect("a UI");
    let addr = url.strip_prefix("http://").unwrap().to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let sums = ctx
        .parallelize((0..1000u64).map(|i| (i % 10, 1u64)).collect::<Vec<_>>(), 4)
        .reduce_by_key(|a: u64, b: u64| a + b)
        .collect()
        .unwrap();
    assert_eq!(sums.len(), 10);
    let mut jobs = serde_json::Value::Null;
    for _ in 0..100 {
        let (code, body) = get(&addr, "/api/v1/jobs").unwrap();
        assert_eq!(code, 200);
        jobs = serde_json::from_str(&body).unwrap();
        if jobs[0]["status"] == "succeeded" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(jobs[0]["status"], "succeeded", "{jobs}");
    assert!(
        jobs[0]["description"]
            .as_str()
            .unwrap()
            .contains("tests/local_ui.rs"),
        "{jobs}"
    );
    let stages: serde_json::Value =
        serde_json::from_str(&get(&addr, "/api/v1/jobs/0/stages").unwrap().1).unwrap();
    assert_eq!(stages[0]["metrics"]["records_in"], 1000);
    assert_eq!(stages[1]["metrics"]["records_out"], 10);
    // The pages are addressed by the application (local mode: the context's name,
    // the program's file name) and its own numbers, as on a cluster.
    let app = std::env::args()
        .next()
        .and_then(|a| Some(std::path::Path::new(&a).file_name()?.to_str()?.to_string()))
        .unwrap();
    assert!(
        app.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{app} is its own path segment"
    );
    let (_, page) = get(&addr, "/jobs").unwrap();
    assert!(
        page.contains(&format!("<a href=\"/apps/{app}/jobs/0\">0</a>")),
        "{page}"
    );
    assert!(
        page.contains(">executor local added</text>"),
        "the event timeline: {page}"
    );
    let (code, job) = get(&addr, &format!("/apps/{app}/jobs/0")).unwrap();
    assert!(code == 200 && job.contains("<h1>Job 0</h1>"), "{job}");
    let map = &stages[0]["number"];
    assert!(
        job.contains(&format!("<a href=\"/apps/{app}/stages/{map}\">{map}</a>")),
        "{job}"
    );
    let (code, stage) = get(&addr, &format!("/apps/{app}/stages/{map}")).unwrap();
    assert!(
        code == 200 && stage.contains(&format!("<h1>Stage {map}</h1>")),
        "{stage}"
    );
    assert_eq!(
        stage.matches("<rect class=\"task ").count() as u64,
        stages[0]["num_tasks"].as_u64().unwrap(),
        "a bar per task: {stage}"
    );
    let api = |path: &str| -> serde_json::Value {
        let (code, body) = get(&addr, path).unwrap();
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    // 1000 records in 4 partitions: each map task read 250.
    let map_stage = stages[0]["stage_id"].as_u64().unwrap();
    let summary = api(&format!("/api/v1/stages/{map_stage}/summary"));
    assert_eq!(summary["tasks"], 4);
    assert_eq!(
        summary["records_in"],
        serde_json::json!([250, 250, 250, 250, 250])
    );
    // The map stage lists its operators, the source first.
    let ops = stages[0]["operators"].as_array().unwrap();
    assert!(
        ops[0]["name"].as_str().unwrap().starts_with("parallelize"),
        "{ops:?}"
    );
    // The context's configuration, on the Environment page.
    let env = api("/api/v1/environment");
    assert_eq!(
        env["sections"][0]["entries"][0],
        serde_json::json!(["EMBER_MASTER", "local[2,1]"])
    );
    // A cached RDD on the Storage page: every partition, 8 bytes a u64 record in
    // memory (plus a vector per batch), on disk nothing.
    let cached = ctx
        .parallelize((0..1000u64).collect::<Vec<_>>(), 4)
        .map(|x| x * 2);
    cached.cache();
    assert_eq!(cached.count().unwrap(), 1000);
    let mut rdds = serde_json::Value::Null;
    for _ in 0..100 {
        rdds = api("/api/v1/storage/rdd");
        if rdds[0]["partitions_cached"] == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = &rdds[0];
    assert_eq!(
        (
            r["partitions_cached"].as_u64(),
            r["num_partitions"].as_u64()
        ),
        (Some(4), Some(4)),
        "{rdds}"
    );
    assert_eq!(
        (r["storage_level"].as_str(), r["disk_bytes"].as_u64()),
        (Some("memory"), Some(0))
    );
    let memory = r["memory_bytes"].as_u64().unwrap();
    let vec_header = std::mem::size_of::<Vec<u64>>() as u64;
    assert!(
        memory >= 1000 * 8 + 4 * vec_header && (memory - 8000).is_multiple_of(vec_header),
        "{rdds}"
    );
    cached.unpersist();
    for _ in 0..100 {
        if api("/api/v1/storage/rdd").as_array().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        api("/api/v1/storage/rdd"),
        serde_json::json!([]),
        "unpersisted"
    );
    // A barrier stage: each rank's collectives, per superstep, in the API and on the
    // stage page.
    let sums = ctx
        .parallelize(vec![1.0f64, 2.0], 2)
        .barrier()
        .map_partitions(|b, r: ember::Records<f64>| {
            let mut v: Vec<f64> = r.collect();
            b.barrier()?;
            for _ in 0..3 {
                b.all_reduce_slice(&mut v, ember::ReduceOp::Sum)?;
            }
            Ok(v)
        })
        .collect()
        .unwrap();
    assert_eq!(sums, vec![12.0, 12.0]);
    let jobs = api("/api/v1/jobs");
    let job = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["job_id"].as_u64())
        .max()
        .unwrap();
    let barrier_stage = api(&format!("/api/v1/jobs/{job}/stages"))[0]["stage_id"]
        .as_u64()
        .unwrap();
    let mut tasks = serde_json::Value::Null;
    for _ in 0..100 {
        tasks = api(&format!("/api/v1/stages/{barrier_stage}/tasks"));
        if tasks
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["barrier"].is_object())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for t in tasks.as_array().unwrap() {
        let steps = t["barrier"]["supersteps"].as_array().unwrap();
        let ops: Vec<&str> = steps.iter().map(|s| s["op"].as_str().unwrap()).collect();
        assert_eq!(
            ops,
            [
                "barrier",
                "all_reduce_slice",
                "all_reduce_slice",
                "all_reduce_slice"
            ],
            "{t}"
        );
        // One f64 each way per all-reduce between two ranks, with frame headers.
        assert!(steps[1]["bytes_sent"].as_u64().unwrap() >= 8, "{t}");
        assert!(steps[1]["bytes_received"].as_u64().unwrap() >= 8, "{t}");
    }
    let stage_number = api(&format!("/api/v1/jobs/{job}/stages"))[0]["number"].clone();
    let (_, page) = get(&addr, &format!("/apps/{app}/stages/{stage_number}")).unwrap();
    assert!(page.contains("<h2>Supersteps (attempt 1)</h2>"), "{page}");
    assert!(page.contains("<th>rank 1 in collective</th>"), "{page}");
    assert_eq!(
        page.matches("<td>all_reduce_slice</td>").count(),
        3,
        "{page}"
    );
    drop(cached);
    drop(ctx);
    assert!(
        get(&addr, "/api/v1/jobs").is_none(),
        "the server ends with the context"
    );
    let log = std::fs::read_dir(logs.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let replayed = ember_ui::event_log::replay(&log).unwrap();
    assert_eq!(
        replayed.jobs().len(),
        3,
        "the reduce, the cached count and the barrier job"
    );
    let replayed_tasks = replayed.stage_tasks(barrier_stage as u32).unwrap();
    assert!(
        replayed_tasks
            .iter()
            .all(|t| t.barrier.as_ref().is_some_and(|b| b.supersteps.len() == 4)),
        "the supersteps are in the event log"
    );
    assert_eq!(replayed.job_stages(0).unwrap()[0].metrics.records_in, 1000);
    // The log carries the configuration and the cached RDD's life (gone at the end).
    assert_eq!(
        replayed.environment.sections()[0].entries[0],
        ("EMBER_MASTER".to_string(), "local[2,1]".to_string())
    );
    assert!(replayed.storage.rdds().is_empty());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("\"event\":\"block_cached\"").count(),
        4,
        "one per partition"
    );
}
