//! `ember-driver history` over event logs with bad lines: it lists every application,
//! and logs each line it skipped (file and line number) and each log it left out.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::process::{http, Driver};

#[test]
fn history_lists_logs_with_bad_lines_and_logs_each_line_it_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("events");
    std::fs::create_dir(&logs).unwrap();
    let job = |id: u64| {
        format!(
            "{{\"event\":\"job_submitted\",\"job_id\":{id},\"application\":\"a\",\"number\":{id},\
             \"description\":\"count at src/main.rs:4\",\"stages\":[],\"time_ms\":2}}\n"
        )
    };
    let long = format!(
        "{{\"event\":\"stage_failed\",\"reason\":\"{}\"}}\n",
        "r".repeat(1 << 21)
    );
    std::fs::write(
        logs.join("run-1-2.jsonl"),
        [
            "{\"event\":\"app_started\",\"name\":\"wordcount\",\"time_ms\":1}\n".to_string(),
            job(0),
            "{\"junk\":\"x\"}\n".into(),
            long,
            job(1),
            "{\"event\":\"job_ended\",\"jo".into(),
        ]
        .concat(),
    )
    .unwrap();
    std::fs::write(logs.join("notes.jsonl"), "{\"not\":\"an event log\"}\n").unwrap();
    let stderr_path = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ember-driver"))
        .arg("history")
        .arg(&logs)
        .args(["--ui-port", "0"])
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("RUST_LOG")
        .env("EMBER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawn ember-driver history");
    let stdout = child.stdout.take().unwrap();
    let history = Driver(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("ember-driver history on http://")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();

    let (code, apps) = http(&addr, "GET", "/api/v1/applications", None, &[]);
    assert_eq!(code, 200, "{apps}");
    assert_eq!(
        apps, "[{\"id\":\"run-1-2\",\"name\":\"wordcount\",\"started_ms\":1,\"jobs\":2}]",
        "the log with bad lines is listed with both its jobs; the other is left out"
    );
    drop(history);

    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let at = |file: &str, n: usize| format!("{}:{n}: ", logs.join(file).display());
    assert!(
        stderr.contains(&at("run-1-2.jsonl", 3)) && stderr.contains(&at("run-1-2.jsonl", 4)),
        "{stderr}"
    );
    assert!(stderr.contains("longer than 1048576 bytes"), "{stderr}");
    assert!(
        stderr.contains(&at("notes.jsonl", 1)) && stderr.contains("app_started"),
        "{stderr}"
    );
    assert!(stderr.lines().all(|l| l.len() < 1000), "{stderr}");
}
