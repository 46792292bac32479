//! The driver's web UI and event log with a real cluster: after a wordcount, the REST
//! API and the pages show its job, stages, tasks and executors with the numbers the job
//! had (records read = input lines, shuffle bytes read = written), and a history server
//! (`ember-driver history DIR`) started on the event log afterwards shows the same jobs.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::{daemon_bin, Cluster};

/// `GET path` on `addr`: (status code, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    (
        code,
        out.split_once("\r\n\r\n")
            .map(|x| x.1.to_string())
            .unwrap_or_default(),
    )
}

/// `s` as one path segment: every byte but `A-Za-z0-9-._~` percent-encoded.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn json(addr: &str, path: &str) -> serde_json::Value {
    let (code, body) = get(addr, path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// Kills the history server however the test ends.
struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_web_ui_shows_a_wordcount_and_the_history_server_replays_it() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = s.join("words");
    std::fs::create_dir_all(&input).unwrap();
    let mut lines = 0;
    for f in 0..3 {
        let text: String = (0..500)
            .map(|i| format!("w{} w{} common\n", i % 37, (i * f) % 11))
            .collect();
        lines += 500;
        std::fs::write(input.join(format!("part-{f}.txt")), text).unwrap();
    }
    let events = s.join("events");
    let cluster = Cluster::start_with(
        2,
        1,
        None,
        &[
            "--ui-port",
            "0",
            "--event-log-dir",
            events.to_str().unwrap(),
        ],
        &["--metrics-port", "0"],
        &[],
    );
    let ui = cluster.ui_address();
    let out = s.join("out");
    // Info logs on the client's console (CI runs with EMBER_LOG=warn).
    let info = [("EMBER_LOG", "info")];
    let run = cluster.run_with_env(
        "wordcount",
        &[
            "--partitions",
            "3",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        s,
        &info,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());

    // The store is fed asynchronously: wait for the job's end.
    let mut jobs = serde_json::Value::Null;
    for _ in 0..100 {
        jobs = json(&ui, "/api/v1/jobs");
        if jobs[0]["status"] == "succeeded" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let job = &jobs[0];
    assert_eq!(job["status"], "succeeded", "{jobs}");
    assert!(
        job["description"]
            .as_str()
            .unwrap()
            .contains("save_as_text_file"),
        "{job}"
    );
    let id = job["job_id"].as_u64().unwrap();
    let stages = json(&ui, &format!("/api/v1/jobs/{id}/stages"));
    let stages = stages.as_array().unwrap();
    assert_eq!(stages.len(), 2, "{stages:?}");
    let (map, result) = (&stages[0], &stages[1]);
    assert_eq!(result["parents"][0], map["stage_id"]);
    for st in [map, result] {
        assert_eq!(st["status"], "succeeded");
        assert_eq!(st["tasks_succeeded"], st["num_tasks"]);
    }
    assert_eq!(
        map["metrics"]["records_in"], lines,
        "records read = input lines"
    );
    assert!(map["metrics"]["shuffle_bytes_written"].as_u64().unwrap() > 0);
    assert_eq!(
        map["metrics"]["shuffle_bytes_written"], result["metrics"]["shuffle_bytes_read"],
        "what the map stage wrote is what the reducers read"
    );
    let map_id = map["stage_id"].as_u64().unwrap();
    let tasks = json(&ui, &format!("/api/v1/stages/{map_id}/tasks"));
    assert_eq!(
        tasks.as_array().unwrap().len() as u64,
        map["num_tasks"].as_u64().unwrap()
    );
    let executors = json(&ui, "/api/v1/executors");
    let executors = executors.as_array().unwrap();
    assert_eq!(executors.len(), 2);
    for e in executors {
        assert_eq!(
            e["memory_limit_bytes"],
            512 << 20,
            "the executor's --memory: {e}"
        );
        assert!(!e["host"].as_str().unwrap().is_empty(), "{e}");
        assert!(e["memory_used_bytes"].is_u64(), "{e}");
    }
    let done: u64 = executors
        .iter()
        .map(|e| e["tasks_succeeded"].as_u64().unwrap())
        .sum();
    let all = map["num_tasks"].as_u64().unwrap() + result["num_tasks"].as_u64().unwrap();
    assert_eq!(done, all, "every task ran on some executor");
    // Pages are addressed by application and its own numbers (the driver's ids
    // redirect there).
    let application = job["application"].as_str().unwrap().to_string();
    let app = segment(&application);
    let map_number = map["number"].as_u64().unwrap();
    let job_number = job["number"].as_u64().unwrap();
    assert_eq!(get(&ui, &format!("/jobs/{id}")).0, 303);
    let (code, page) = get(&ui, &format!("/apps/{app}/jobs/{job_number}"));
    assert_eq!(code, 200);
    assert!(
        page.contains("<svg")
            && page.contains(&format!(
                "<a href=\"/apps/{app}/stages/{map_number}\">{map_number}</a>"
            )),
        "{page}"
    );
    let (_, page) = get(&ui, "/jobs");
    assert!(page.contains("Succeeded jobs (1)"), "{page}");
    let (code, metrics) = get(&ui, "/metrics");
    assert_eq!(code, 200);
    for line in [
        "ember_jobs{status=\"succeeded\"} 1".to_string(),
        format!("ember_tasks_total{{outcome=\"succeeded\"}} {all}"),
        "ember_executors{state=\"active\"} 2".to_string(),
        "ember_executor_cores 2".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    // The driver's own: one exposition (one `# EOF`, at the end).
    assert_eq!(metrics.matches("# EOF").count(), 1, "{metrics}");
    assert!(metrics.ends_with("# EOF\n"));
    assert!(
        metrics.lines().any(|l| l == "ember_driver_queued_tasks 0"),
        "{metrics}"
    );
    let uploaded = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ember_driver_uploaded_bytes_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        uploaded > 1 << 20,
        "the wordcount binary was uploaded: {metrics}"
    );
    assert!(metrics.contains("ember_driver_sessions "), "{metrics}");
    // Each executor's own metrics add up to what the UI saw.
    let value = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or_else(|| panic!("no {name} in\n{text}")) as u64
    };
    let scraped: Vec<String> = (0..2)
        .map(|i| get(&cluster.executor_metrics_address(i), "/metrics"))
        .map(|(code, body)| {
            assert_eq!(code, 200);
            body
        })
        .collect();
    let sum = |name: &str| scraped.iter().map(|t| value(t, name)).sum::<u64>();
    assert_eq!(
        sum("ember_executor_tasks_total{outcome=\"succeeded\"} "),
        all
    );
    assert_eq!(sum("ember_executor_tasks_running "), 0);
    assert_eq!(
        sum("ember_executor_shuffle_written_bytes_total "),
        map["metrics"]["shuffle_bytes_written"].as_u64().unwrap()
    );
    assert_eq!(
        sum("ember_executor_shuffle_fetched_bytes_total "),
        result["metrics"]["shuffle_bytes_read"].as_u64().unwrap()
    );
    assert!(
        sum("ember_executor_shuffle_served_bytes_total ")
            <= sum("ember_executor_shuffle_fetched_bytes_total "),
        "served to others is part of what was fetched"
    );
    assert_eq!(sum("ember_executor_cores "), 2);
    assert_eq!(
        sum("ember_executor_memory_limit_bytes "),
        2 * 512 * 1024 * 1024
    );
    // A worker per (binary, session): the client's session has ended, so its workers
    // stop (the metric is present either way).
    assert!(
        sum("ember_executor_workers ") <= 2,
        "at most one worker per executor for the one session"
    );

    // A second client is an application of its own: its first job and stages are
    // numbered from 0 on its console and in the UI, while the driver's ids go on.
    let second = cluster.run_with_env(
        "wordcount",
        &[
            "--partitions",
            "3",
            input.to_str().unwrap(),
            s.join("out2").to_str().unwrap(),
        ],
        s,
        &info,
    );
    assert!(second.success, "{second:?}");
    for run in [&run, &second] {
        assert!(
            run.stderr.contains("job 0 stage 0 (") && run.stderr.contains("job 0 stage 1 ("),
            "each client's console starts at job 0, stage 0: {}",
            run.stderr
        );
    }
    let mut both = serde_json::Value::Null;
    for _ in 0..100 {
        both = json(&ui, "/api/v1/jobs");
        if both.as_array().unwrap().len() == 2 && both[0]["status"] == "succeeded" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (newer, older) = (&both[0], &both[1]);
    assert_eq!(
        (newer["number"].as_u64(), older["number"].as_u64()),
        (Some(0), Some(0)),
        "{both}"
    );
    assert_ne!(newer["application"], older["application"], "{both}");
    assert!(
        newer["application"]
            .as_str()
            .unwrap()
            .starts_with("wordcount #"),
        "{both}"
    );
    assert_ne!(
        newer["job_id"], older["job_id"],
        "the driver's ids stay unique"
    );
    let newer_stages = json(&ui, &format!("/api/v1/jobs/{}/stages", newer["job_id"]));
    let numbers: Vec<u64> = newer_stages
        .as_array()
        .unwrap()
        .iter()
        .map(|st| st["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [0, 1], "{newer_stages}");
    assert!(newer_stages[0]["stage_id"] != map["stage_id"]);
    let (_, page) = get(&ui, "/jobs");
    assert!(
        page.contains("<th>Application</th>")
            && page.contains(&format!(">{}</td>", older["application"].as_str().unwrap())),
        "{page}"
    );
    let jobs = both.clone();
    drop(cluster);

    // The history server over the driver's event log.
    let logs: Vec<_> = std::fs::read_dir(&events).unwrap().flatten().collect();
    assert_eq!(logs.len(), 1, "one log per driver");
    let mut child = Command::new(daemon_bin("ember-driver"))
        .args(["history", events.to_str().unwrap(), "--ui-port", "0"])
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let history = Killed(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("ember-driver history on http://")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let apps = json(&addr, "/api/v1/applications");
    let app = apps[0]["id"].as_str().unwrap().to_string();
    let replayed = json(&addr, &format!("/api/v1/applications/{app}/jobs"));
    assert_eq!(
        replayed, jobs,
        "the history server shows the jobs the live UI showed"
    );
    assert_eq!(
        get(&addr, &format!("/history/{app}/stages/{map_id}")).0,
        303
    );
    let (code, page) = get(
        &addr,
        &format!(
            "/history/{app}/apps/{}/stages/{map_number}",
            segment(&application)
        ),
    );
    assert_eq!(code, 200);
    assert!(page.contains("Timeline"), "{page}");
    drop(history);
}
