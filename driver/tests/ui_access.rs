//! The web UI's access model and kill through a real `ember-driver` process with a
//! cluster secret and an operator secret: a session's token sees and kills only its own
//! application's jobs (another session's are 404), the cluster secret gets 401 (logged
//! with peer and path, never the credential), the operator secret kills any job, and a
//! killed job's client is told it was killed from the web UI.

mod common;

use common::process::{http, start, Driver};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use ember_proto::auth::with_session_token;
use ember_proto::SubmitJobRequest;
use ember_scheduler::{JobEvent, JobFailure};

const CLUSTER: &str = "cluster-secret-held-by-every-client";
const OPERATOR: &str = "operator-secret-that-no-client-holds";
/// The executors' own credential (for a driver that wants one beside the cluster secret).
const EXECUTOR: &str = "executor-secret-that-only-executors-hold";

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

/// The ids of the jobs `/api/v1/jobs` lists for `auth`.
fn job_ids(ui: &str, auth: &str) -> Vec<u64> {
    let (code, body) = http(ui, "GET", "/api/v1/jobs", Some(auth), &[]);
    assert_eq!(code, 200, "{body}");
    // Every job object starts with its id: `[{"job_id":N,...},...]`.
    let mut ids: Vec<u64> = (body.split("{\"job_id\":").skip(1))
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// Submits a one-partition job in the session; no executor runs it, so it stays
/// running. Returns its event stream and its scheduler id.
async fn running_job(
    c: &mut common::Client,
    opened: &ember_proto::SessionOpened,
    sha: &str,
) -> (tonic::Streaming<ember_proto::JobEvents>, u64) {
    let req = SubmitJobRequest {
        session_id: opened.session_id,
        plan: Some(common::tiny_plan(opened.id_base, 1, sha)),
        new_broadcasts: vec![],
    };
    let req = with_session_token(tonic::Request::new(req), &opened.session_token).unwrap();
    let mut stream = c.submit_job(req).await.expect("submit").into_inner();
    loop {
        let batch = tokio::time::timeout(common::WAIT, stream.message())
            .await
            .expect("events in time")
            .expect("stream ok")
            .expect("stream open");
        for ev in batch.events {
            if let JobEvent::Started { job_id, .. } = ember_scheduler::wire::from_wire(ev).unwrap()
            {
                return (stream, job_id);
            }
        }
    }
}

/// The job's failure, once its stream ends.
async fn failure(stream: &mut tonic::Streaming<ember_proto::JobEvents>) -> String {
    match common::job_events(stream).await.pop() {
        Some(JobEvent::JobFailed {
            failure: JobFailure::Cancelled(why),
            ..
        }) => why,
        other => panic!("expected a cancelled job, got {other:?}"),
    }
}

/// Waits until the UI lists `job` as running for `auth` (the store is fed
/// asynchronously).
async fn until_listed(ui: &str, auth: &str, job: u64) {
    for _ in 0..250 {
        if job_ids(ui, auth).contains(&job) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("job {job} never appeared in the UI");
}

#[tokio::test]
async fn session_tokens_see_and_kill_only_their_own_jobs_and_the_operator_any() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster_file, operator_file) = (dir.path().join("secret"), dir.path().join("operator"));
    std::fs::write(&cluster_file, CLUSTER).unwrap();
    std::fs::write(&operator_file, OPERATOR).unwrap();
    let executor_file = dir.path().join("executor-secret");
    std::fs::write(&executor_file, EXECUTOR).unwrap();
    let log = dir.path().join("driver.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-driver"));
    cmd.env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_OPERATOR_SECRET_FILE")
        .env("EMBER_EXECUTOR_SECRET_FILE", &executor_file)
        .env("EMBER_LOG", "warn")
        .args(["--port", "0", "--ui-port", "0", "--secret-file"])
        .arg(&cluster_file)
        .arg("--operator-secret-file")
        .arg(&operator_file)
        .arg("--binary-dir")
        .arg(dir.path().join("binaries"))
        .stderr(std::fs::File::create(&log).unwrap());
    let (driver, _stdout, grpc, ui) = start(&mut cmd);

    let mut c = common::client(grpc, Some(CLUSTER)).await;
    let sha = common::upload(&mut c, b"a job binary").await;
    let (a, _a_session) = common::open_session(&mut c, &sha).await;
    let (b, _b_session) = common::open_session(&mut c, &sha).await;
    let (mut a_job, ja) = running_job(&mut c, &a, &sha).await;
    let (mut b_job, jb) = running_job(&mut c, &b, &sha).await;
    let (a_auth, b_auth, op) = (
        bearer(&a.session_token),
        bearer(&b.session_token),
        bearer(OPERATOR),
    );
    until_listed(&ui, &op, ja).await;
    until_listed(&ui, &op, jb).await;

    // Each token sees its own application only; the operator sees both.
    assert_eq!(job_ids(&ui, &a_auth), vec![ja]);
    assert_eq!(job_ids(&ui, &b_auth), vec![jb]);
    assert_eq!(job_ids(&ui, &op), vec![ja, jb]);
    for path in [
        format!("/api/v1/jobs/{jb}"),
        format!("/jobs/{jb}"),
        format!("/api/v1/jobs/{jb}/stages"),
    ] {
        assert_eq!(http(&ui, "GET", &path, Some(&a_auth), &[]).0, 404, "{path}");
    }
    // The driver's id redirects to the application's own address, which the jobs
    // page links to.
    let (code, _) = http(&ui, "GET", &format!("/jobs/{ja}"), Some(&a_auth), &[]);
    assert_eq!(code, 303);
    let (_, jobs_page) = http(&ui, "GET", "/jobs", Some(&a_auth), &[]);
    let job_href = (jobs_page.split("<a href=\"").skip(1))
        .filter_map(|r| r.split('"').next())
        .find(|h| h.starts_with("/apps/") && h.contains("/jobs/"))
        .unwrap_or_else(|| panic!("no job link in {jobs_page}"))
        .to_string();
    let (code, page) = http(&ui, "GET", &job_href, Some(&a_auth), &[]);
    assert_eq!(code, 200, "{job_href}");
    assert_eq!(
        http(&ui, "GET", &job_href, Some(&b_auth), &[]).0,
        404,
        "{job_href}"
    );
    assert!(
        page.contains(&format!("action=\"/jobs/{ja}/kill\"")),
        "{page}"
    );
    assert!(!page.contains(&a.session_token), "the token is never shown");
    // Cluster-wide pages need the operator secret.
    for path in ["/api/v1/executors", "/executors", "/metrics"] {
        assert_eq!(http(&ui, "GET", path, Some(&a_auth), &[]).0, 403, "{path}");
        assert_eq!(http(&ui, "GET", path, Some(&op), &[]).0, 200, "{path}");
    }
    // The cluster secret alone, or nothing, is refused (after the refusal log's
    // interval, so this refusal gets its own line).
    std::thread::sleep(ember_proto::refusal_log::INTERVAL + Duration::from_millis(200));
    let (code, body) = http(&ui, "GET", "/api/v1/jobs", Some(&bearer(CLUSTER)), &[]);
    assert_eq!(code, 401, "{body}");
    assert_eq!(http(&ui, "GET", "/jobs", None, &[]).0, 401);

    // Kills: another session's job is 404, the cluster secret 401, GET never kills,
    // another site's POST is refused.
    let kill_a = format!("/api/v1/jobs/{ja}/kill");
    let kill_b = format!("/api/v1/jobs/{jb}/kill");
    assert_eq!(http(&ui, "POST", &kill_b, Some(&a_auth), &[]).0, 404);
    assert_eq!(
        http(&ui, "POST", &kill_a, Some(&bearer(CLUSTER)), &[]).0,
        401
    );
    assert_eq!(http(&ui, "GET", &kill_a, Some(&a_auth), &[]).0, 405);
    let evil = ["Origin: http://evil.example"];
    std::thread::sleep(ember_proto::refusal_log::INTERVAL + Duration::from_millis(200));
    assert_eq!(http(&ui, "POST", &kill_a, Some(&a_auth), &evil).0, 403);
    let cross = ["Sec-Fetch-Site: cross-site"];
    assert_eq!(http(&ui, "POST", &kill_a, Some(&op), &cross).0, 403);
    assert_eq!(job_ids(&ui, &a_auth), vec![ja]);
    let (code, body) = http(
        &ui,
        "GET",
        &format!("/api/v1/jobs/{ja}"),
        Some(&a_auth),
        &[],
    );
    assert_eq!(code, 200);
    assert!(
        body.contains("\"status\":\"running\""),
        "still running: {body}"
    );

    // The session's own token kills its job; its client is told why.
    let own_origin = format!("Origin: http://{ui}");
    let (code, body) = http(&ui, "POST", &kill_a, Some(&a_auth), &[own_origin.as_str()]);
    assert_eq!(
        (code, body.as_str()),
        (200, format!("{{\"job_id\":{ja},\"killed\":true}}").as_str())
    );
    assert_eq!(failure(&mut a_job).await, "killed from the web UI");
    // The operator kills another session's job.
    let (code, _) = http(&ui, "POST", &kill_b, Some(&op), &[]);
    assert_eq!(code, 200);
    assert_eq!(failure(&mut b_job).await, "killed from the web UI");

    // The refusal was logged with peer and path, never with the credential.
    drop(driver);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.lines().any(|l| l.contains("refused a request")
            && l.contains("peer=127.0.0.1:")
            && l.contains("path=\"/api/v1/jobs\"")
            && l.contains("status=401")),
        "{logged}"
    );
    // So were the 403s: a session's token asking a cluster-wide page, a cross-site kill.
    for path in ["/api/v1/executors", kill_a.as_str()] {
        assert!(
            logged.lines().any(|l| l.contains("refused a request")
                && l.contains("peer=127.0.0.1:")
                && l.contains(&format!("path=\"{path}\""))
                && l.contains("status=403")),
            "{path}: {logged}"
        );
    }
    for secret in [CLUSTER, OPERATOR, &a.session_token, &b.session_token] {
        assert!(
            !logged.contains(secret),
            "a credential in the log: {logged}"
        );
    }
}

#[test]
fn the_history_server_needs_the_operator_secret_and_logs_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    std::fs::create_dir(&events).unwrap();
    let operator_file = dir.path().join("operator");
    std::fs::write(&operator_file, OPERATOR).unwrap();
    let history = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-driver"));
        cmd.env_remove("EMBER_SECRET")
            .env_remove("EMBER_SECRET_FILE")
            .env_remove("EMBER_OPERATOR_SECRET_FILE")
            .env("EMBER_LOG", "warn")
            .arg("history")
            .arg(&events);
        cmd
    };
    // Off loopback: an operator secret is required, and a strong one.
    let out = history()
        .args(["--host", "0.0.0.0", "--ui-port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--operator-secret-file"), "{stderr}");
    let weak = dir.path().join("weak");
    std::fs::write(&weak, "short").unwrap();
    let out = history()
        .args([
            "--host",
            "0.0.0.0",
            "--ui-port",
            "0",
            "--operator-secret-file",
        ])
        .arg(&weak)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least 32"), "{stderr}");
    assert!(!stderr.contains("short"), "{stderr}");

    let log = dir.path().join("history.log");
    let mut child = history()
        .args(["--ui-port", "0", "--operator-secret-file"])
        .arg(&operator_file)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Driver(child);
    let first = BufReader::new(stdout).lines().next().unwrap().unwrap();
    let ui = first
        .strip_prefix("ember-driver history on http://")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    assert_eq!(http(&ui, "GET", "/api/v1/applications", None, &[]).0, 401);
    let cluster = bearer(CLUSTER);
    assert_eq!(http(&ui, "GET", "/history", Some(&cluster), &[]).0, 401);
    let (code, body) = http(
        &ui,
        "GET",
        "/api/v1/applications",
        Some(&bearer(OPERATOR)),
        &[],
    );
    assert_eq!((code, body.as_str()), (200, "[]"));
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.lines().any(|l| l.contains("refused a request")
            && l.contains("history server")
            && l.contains("peer=127.0.0.1:")
            && l.contains("path=\"/api/v1/applications\"")),
        "{logged}"
    );
    assert!(
        !logged.contains(OPERATOR) && !logged.contains(CLUSTER),
        "{logged}"
    );
}

#[test]
fn the_operator_secret_must_differ_from_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("same");
    std::fs::write(&same, CLUSTER).unwrap();
    let executor_file = dir.path().join("executor-secret");
    std::fs::write(&executor_file, EXECUTOR).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ember-driver"))
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_OPERATOR_SECRET_FILE")
        .env("EMBER_EXECUTOR_SECRET_FILE", &executor_file)
        .args(["--port", "0", "--secret-file"])
        .arg(&same)
        .arg("--operator-secret-file")
        .arg(&same)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("must differ from the cluster secret"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
