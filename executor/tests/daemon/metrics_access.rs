//! `--metrics-port` under the credential model: the operator secret opens `/metrics`,
//! the cluster secret (which every client holds) gets 401, logged with the peer and
//! path and never the credential, and so does the executor secret; with either secret,
//! metrics need an operator secret.

use std::io::{Read, Write};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::common::*;

const CLUSTER: &str = "cluster-secret-that-every-client-holds";
const OPERATOR: &str = "operator-secret-that-only-operators-hold";
/// No driver listens there: the executor keeps trying to register, its metrics served.
const NO_DRIVER: &str = "http://127.0.0.1:1";

fn executor() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-executor"));
    cmd.env("EMBER_SECRET", CLUSTER)
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_OPERATOR_SECRET_FILE")
        .env_remove("EMBER_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `GET /metrics` on `addr` with `Authorization: Bearer token`: the status code.
fn scrape(addr: &str, token: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out[9..12].parse().unwrap()
}

#[tokio::test]
async fn metrics_need_the_operator_secret_and_refusals_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let operator = dir.path().join("operator");
    std::fs::write(&operator, OPERATOR).unwrap();
    // The executors' own credential, for daemons that want one beside the cluster secret.
    let executor_secret = dir.path().join("executor-secret");
    std::fs::write(
        &executor_secret,
        "executor-secret-neither-clients-nor-ops-hold",
    )
    .unwrap();

    // A cluster secret without an operator secret: metrics would be open to clients.
    let out = within(
        "exit",
        executor()
            .args(["--driver", NO_DRIVER, "--metrics-port", "0"])
            .env("EMBER_EXECUTOR_SECRET_FILE", &executor_secret)
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--operator-secret-file"), "{stderr}");

    // The executor secret alone (an executor needs no cluster secret) does not leave
    // metrics open either.
    let out = within(
        "exit",
        executor()
            .env_remove("EMBER_SECRET")
            .args(["--driver", NO_DRIVER, "--metrics-port", "0"])
            .env("EMBER_EXECUTOR_SECRET_FILE", &executor_secret)
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--operator-secret-file"), "{stderr}");

    // The work dir inside the test's: a SIGKILLed executor leaves nothing in /tmp.
    let mut child = executor()
        .args(["--driver", NO_DRIVER, "--metrics-port", "0", "--work-dir"])
        .arg(dir.path().join("work"))
        .arg("--operator-secret-file")
        .arg(&operator)
        .env("EMBER_EXECUTOR_SECRET_FILE", &executor_secret)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let logged = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut metrics = None;
    while metrics.is_none() {
        let line = within("a stdout line", lines.next_line())
            .await
            .unwrap()
            .expect("the metrics line");
        metrics = line
            .strip_prefix("ember-executor metrics on http://")
            .map(str::to_string);
    }
    let addr = metrics.unwrap();
    assert_eq!(scrape(&addr, CLUSTER), 401);
    assert_eq!(
        scrape(&addr, "executor-secret-neither-clients-nor-ops-hold"),
        401
    );
    assert_eq!(scrape(&addr, OPERATOR), 200);

    child.start_kill().unwrap();
    within("exit", child.wait()).await.unwrap();
    let logged = within("stderr", logged).await.unwrap();
    assert!(
        logged.lines().any(|l| l.contains("refused a request")
            && l.contains("peer=127.0.0.1:")
            && l.contains("path=\"/metrics\"")),
        "{logged}"
    );
    assert!(
        !logged.contains(CLUSTER) && !logged.contains(OPERATOR),
        "{logged}"
    );
}
