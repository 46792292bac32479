//! The Environment page of a real `ember-driver` started with all three secret files
//! and an event log: the operator sees the driver's flags with the values it runs with
//! and each session's configuration; a session's token sees its own configuration
//! only; no secret (the files' contents, a credential in a client's configuration) is
//! in any page, JSON answer or the event log, and the secret files' paths are redacted.

mod common;

use std::process::{Command, Stdio};

use common::process::{http, start};
use ember_proto::ConfEntry;

const CLUSTER: &str = "cluster-secret-Qx7-held-by-every-client";
const OPERATOR: &str = "operator-secret-Lm3-that-no-client-holds";
const EXECUTOR: &str = "executor-secret-Vb9-that-only-executors-hold";
/// A credential a client put in its configuration by mistake.
const CLIENT_KEY: &str = "client-access-key-Hd2-in-a-conf";

fn conf(name: &str, value: &str) -> ConfEntry {
    ConfEntry {
        name: name.into(),
        value: value.into(),
    }
}

#[tokio::test]
async fn the_environment_shows_flags_and_configuration_and_never_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let files = ["secret", "operator", "executor"].map(|f| dir.path().join(f));
    for (file, secret) in files.iter().zip([CLUSTER, OPERATOR, EXECUTOR]) {
        std::fs::write(file, secret).unwrap();
    }
    let logs = dir.path().join("events");
    std::fs::create_dir(&logs).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-driver"));
    cmd.env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_OPERATOR_SECRET_FILE")
        .env_remove("EMBER_EXECUTOR_SECRET_FILE")
        .env("EMBER_LOG", "warn")
        .args(["--port", "0", "--ui-port", "0", "--max-task-attempts", "7"])
        .arg("--secret-file")
        .arg(&files[0])
        .arg("--operator-secret-file")
        .arg(&files[1])
        .arg("--executor-secret-file")
        .arg(&files[2])
        .arg("--event-log-dir")
        .arg(&logs)
        .arg("--binary-dir")
        .arg(dir.path().join("binaries"))
        .stderr(Stdio::null());
    let (_driver, _stdout, grpc, ui) = start(&mut cmd);

    let mut c = common::client(grpc, Some(CLUSTER)).await;
    let sha = common::upload(&mut c, b"a job binary").await;
    let settings = vec![
        conf("EMBER_EXECUTOR_MEMORY", "1073741824"),
        conf("EMBER_S3_SECRET_ACCESS_KEY", CLIENT_KEY),
    ];
    let (opened, _session) = common::open_with_conf(&mut c, &sha, "envjob".into(), settings).await;
    let app = format!("envjob #{}", opened.session_id);
    let op = format!("Bearer {OPERATOR}");
    let token = format!("Bearer {}", opened.session_token);

    // The session's section arrives on the feeder's thread: wait for it.
    let mut env = serde_json::Value::Null;
    for _ in 0..250 {
        let (code, body) = http(&ui, "GET", "/api/v1/environment", Some(&op), &[]);
        assert_eq!(code, 200, "{body}");
        env = serde_json::from_str(&body).unwrap();
        if env["sections"].as_array().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sections = env["sections"].as_array().unwrap();
    assert_eq!(sections.len(), 2, "{env}");
    assert_eq!(sections[0]["title"], "Driver flags");
    let flags: Vec<(String, String)> =
        serde_json::from_value(sections[0]["entries"].clone()).unwrap();
    let flag = |name: &str| {
        flags
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} in {flags:?}"))
    };
    assert_eq!(flag("--host"), "127.0.0.1", "a default");
    assert_eq!(flag("--max-task-attempts"), "7", "given");
    assert_eq!(flag("--ui-port"), "0");
    assert_eq!(flag("--event-log-dir"), logs.display().to_string());
    for f in [
        "--secret-file",
        "--operator-secret-file",
        "--executor-secret-file",
    ] {
        assert_eq!(flag(f), "*********(redacted)", "{f}");
    }
    assert_eq!(sections[1]["application"], app.as_str());
    assert_eq!(
        sections[1]["entries"],
        serde_json::json!([
            ["EMBER_EXECUTOR_MEMORY", "1073741824"],
            ["EMBER_S3_SECRET_ACCESS_KEY", "*********(redacted)"]
        ])
    );

    // The session's token sees its own configuration, not the driver's flags.
    let (code, own) = http(&ui, "GET", "/api/v1/environment", Some(&token), &[]);
    assert_eq!(code, 200);
    let own: serde_json::Value = serde_json::from_str(&own).unwrap();
    assert_eq!(own["sections"].as_array().unwrap().len(), 1, "{own}");
    assert_eq!(own["sections"][0]["application"], app.as_str());

    let (code, page) = http(&ui, "GET", "/environment", Some(&op), &[]);
    assert_eq!(code, 200);
    assert!(
        page.contains("<td>--max-task-attempts</td><td>7</td>"),
        "{page}"
    );
    assert!(page.contains(&format!("Configuration of {app}")), "{page}");

    // A client's configuration is bounded: 64 entries, each text cut.
    let many: Vec<ConfEntry> = (0..100)
        .map(|i| conf(&format!("K{i}"), &"v".repeat(5000)))
        .collect();
    let (big, _big_session) = common::open_with_conf(&mut c, &sha, "big".into(), many).await;
    let big_token = format!("Bearer {}", big.session_token);
    let mut kept = serde_json::Value::Null;
    for _ in 0..250 {
        let (_, body) = http(&ui, "GET", "/api/v1/environment", Some(&big_token), &[]);
        kept = serde_json::from_str(&body).unwrap();
        if !kept["sections"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let entries = kept["sections"][0]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 64);
    assert_eq!(entries[63][0], "K63");
    let value = entries[0][1].as_str().unwrap();
    assert!(
        value.len() < 1200 && value.starts_with("vvvv"),
        "{}",
        value.len()
    );

    // No secret anywhere: pages, JSON, the event log; nor the secret files' paths.
    let (_, own_page) = http(&ui, "GET", "/environment", Some(&token), &[]);
    let log_dir = std::fs::read_dir(&logs).unwrap();
    let mut log = String::new();
    for f in log_dir {
        log.push_str(&std::fs::read_to_string(f.unwrap().path()).unwrap());
    }
    assert!(log.contains("\"environment\""), "{log}");
    for (what, text) in [
        ("the operator's page", &page),
        ("the session's page", &own_page),
        ("the JSON", &env.to_string()),
        ("the event log", &log),
    ] {
        for secret in [
            CLUSTER,
            OPERATOR,
            EXECUTOR,
            CLIENT_KEY,
            &opened.session_token,
        ] {
            assert!(!text.contains(secret), "{what} shows a secret");
        }
        for file in &files {
            let path = file.display().to_string();
            assert!(!text.contains(&path), "{what} shows {path}");
        }
    }
}
