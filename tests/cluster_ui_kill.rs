//! The web UI's kill through a real cluster: a slow `faultjob` (its map tasks would run
//! for ~40 s) is killed by the operator (`POST /api/v1/jobs/N/kill`, or its running
//! stage's `POST /api/v1/stages/N/kill`); the client's action fails saying so, the
//! job's tasks are killed, and the cluster secret could not kill.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::cluster::Cluster;

const CLUSTER: &str = "cluster-secret-for-the-ui-kill-test";
const OPERATOR: &str = "operator-secret-for-the-ui-kill-test";

/// `METHOD path` with `Authorization: Bearer token`: (status, body).
fn http(addr: &str, method: &str, path: &str, token: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split_once("\r\n\r\n").map(|x| x.1.to_string());
    (out[9..12].parse().unwrap(), body.unwrap_or_default())
}

#[test]
fn the_operator_kills_a_running_job_from_the_web_ui_and_its_client_is_told() {
    kill_from_the_ui(false);
}

#[test]
fn the_operator_kills_a_running_stage_from_the_web_ui_and_its_jobs_fail() {
    kill_from_the_ui(true);
}

/// Kills the running job of a slow `faultjob`, or with `stage` its running stage, from
/// the web UI: the cluster secret cannot, the operator can, and the client is told.
fn kill_from_the_ui(stage: bool) {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let cluster = Cluster::start_with_ui(1, 2, CLUSTER, OPERATOR, s);
    let ui = cluster.ui_address();
    let input = s.join("kv.txt");
    // Two map tasks of 200,000 records, sleeping 200 ms every 1,000: ~40 s each.
    let lines: String = (0..400_000)
        .map(|i| format!("{},{}\n", i % 17, i))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let out = s.join("out");
    let mut client = cluster.spawn(
        "faultjob",
        &[
            "--partitions",
            "2",
            "--map-delay-ms",
            "200",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        s,
    );
    // Wait until its map tasks run.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = cluster.status().unwrap();
        if st.executors.iter().any(|e| e.running_tasks > 0) {
            break;
        }
        if client.finished() {
            let run = client.wait();
            panic!("the job ended before it ran: {}{}", run.stdout, run.stderr);
        }
        assert!(Instant::now() < deadline, "the job's tasks never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, jobs) = http(&ui, "GET", "/api/v1/jobs", OPERATOR);
    assert_eq!(code, 200, "{jobs}");
    let jobs: serde_json::Value = serde_json::from_str(&jobs).unwrap();
    let running: Vec<u64> = (jobs.as_array().unwrap().iter())
        .filter(|j| j["status"] == "running")
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    assert_eq!(running.len(), 1, "{jobs}");
    let kill = if stage {
        let (code, stages) = http(
            &ui,
            "GET",
            &format!("/api/v1/jobs/{}/stages", running[0]),
            OPERATOR,
        );
        assert_eq!(code, 200, "{stages}");
        let stages: serde_json::Value = serde_json::from_str(&stages).unwrap();
        let active: Vec<u64> = (stages.as_array().unwrap().iter())
            .filter(|s| s["status"] == "running")
            .map(|s| s["stage_id"].as_u64().unwrap())
            .collect();
        assert_eq!(active.len(), 1, "{stages}");
        format!("/api/v1/stages/{}/kill", active[0])
    } else {
        format!("/api/v1/jobs/{}/kill", running[0])
    };

    assert_eq!(http(&ui, "POST", &kill, CLUSTER).0, 401);
    assert_eq!(http(&ui, "POST", &kill, OPERATOR).0, 200);
    let run = client.wait();
    assert!(!run.success, "{}", run.stdout);
    let said = format!("{}{}", run.stdout, run.stderr);
    let told = if stage {
        "was cancelled: killed from the web UI"
    } else {
        "job cancelled: killed from the web UI"
    };
    assert!(said.contains(told), "the client was not told: {said}");
    assert!(!out.join("_SUCCESS").exists());
    // Its tasks were killed: the executor runs nothing, long before they would have ended.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let st = cluster.status().unwrap();
        let busy: u32 = st.executors.iter().map(|e| e.running_tasks).sum();
        if busy == 0 && st.running_jobs == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "tasks still run: {st:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The operator decommissions an executor from the web UI (`POST
/// /api/v1/executors/ID/decommission`): it leaves gracefully and exits 0, and the driver
/// records why; the cluster secret cannot do it.
#[test]
fn the_operator_decommissions_an_executor_from_the_web_ui() {
    let scratch = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start_with_ui(2, 1, CLUSTER, OPERATOR, scratch.path());
    let ui = cluster.ui_address();
    let before: Vec<String> = (cluster.status().unwrap().executors.iter())
        .map(|e| e.executor_id.clone())
        .collect();
    assert_eq!(before.len(), 2);
    let path = format!("/api/v1/executors/{}/decommission", before[0]);
    assert_eq!(http(&ui, "POST", &path, CLUSTER).0, 401);
    let (code, body) = http(&ui, "POST", &path, OPERATOR);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"decommissioning\":true"), "{body}");
    let (_, status) = cluster.wait_any_executor(Duration::from_secs(30));
    assert!(status.success(), "it exited {status}");
    let left: Vec<String> = (cluster.status().unwrap().executors.iter())
        .map(|e| e.executor_id.clone())
        .collect();
    assert_eq!(left, before[1..], "only the other executor is left");
    let log = cluster.driver_log();
    assert!(
        log.contains("executor decommissioned")
            && log.contains("asking the executor to decommission"),
        "{log}"
    );
}
