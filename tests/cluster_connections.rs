//! Bounded connections on every port of the real daemons (`--max-connections`,
//! `--first-request-timeout-ms`): the driver's gRPC and web UI ports, the executor's
//! shuffle service and metrics port. Idle connections past the cap are closed at once
//! and the refusal is logged; idle ones within it are closed after the first-request
//! timeout, after which real requests succeed; a wordcount runs while the UI port sits
//! at its cap.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::cluster::{daemon_bin, Cluster};

/// Bounds every read: a test never waits longer than this for a byte or an EOF.
const READ_WAIT: Duration = Duration::from_secs(20);

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(READ_WAIT)).unwrap();
    s
}

/// Reads until the server closes `s`; panics if it stays open for [`READ_WAIT`].
fn closed_by_server(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // e.g. the HTTP/2 server's SETTINGS frame
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: still open after {READ_WAIT:?} ({e})"),
        }
    }
}

/// `GET path` on `addr`: (status code, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = connect(addr);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|x| x.1.to_string());
    (code, body.unwrap_or_default())
}

/// `BIN health --addr http://ADDR`: whether it said SERVING.
fn healthy(bin: &str, addr: &str) -> bool {
    Command::new(daemon_bin(bin))
        .args(["health", "--addr", &format!("http://{addr}")])
        .args(["--timeout-ms", "5000"])
        .output()
        .unwrap()
        .status
        .success()
}

/// One port's checks: idle connections fill its 8 slots (`held` of them are taken by
/// the cluster's own connections), a 9th is closed at once, a one-byte connection and
/// the idle ones are closed by the first-request timeout, and then `works()` (a real
/// request) succeeds.
///
/// `log` reads the daemon's log, where the refusal must show (`None`: the history
/// server, which does not log yet).
fn check_port(
    name: &str,
    addr: &str,
    held: usize,
    log: Option<&dyn Fn() -> String>,
    works: impl Fn() -> bool,
) {
    let mut idle: Vec<TcpStream> = (held..7).map(|_| connect(addr)).collect();
    let mut one_byte = connect(addr);
    // "P": the start of the HTTP/2 preface and of an HTTP/1 `POST`, so that neither
    // server can reject it as malformed: only the timeout closes it.
    one_byte.write_all(b"P").unwrap();
    // The cap is 8: the 9th is accepted and closed, long before the timeout could.
    let mut ninth = connect(addr);
    closed_by_server(&mut ninth, &format!("{name}: the 9th connection"));
    let refused = format!("{name} port {addr}: refused");
    let deadline = std::time::Instant::now() + READ_WAIT;
    while let Some(log) = log.filter(|log| !log().contains(&refused)) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {refused:?} in the log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Then the first-request timeout closes the idle ones and the one-byte one.
    closed_by_server(&mut one_byte, &format!("{name}: a one-byte connection"));
    for (i, s) in idle.iter_mut().enumerate() {
        closed_by_server(s, &format!("{name}: idle connection {i}"));
    }
    // With them gone, real requests are served again (the slots are free: the server
    // may still be dropping the last ones, so allow a few tries).
    let mut ok = false;
    for _ in 0..50 {
        if works() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ok,
        "{name}: a real request failed after the idle ones closed"
    );
}

#[test]
fn every_port_caps_idle_connections_and_closes_them_after_the_first_request_timeout() {
    let limits = [
        "--max-connections",
        "8",
        "--first-request-timeout-ms",
        "2000",
    ];
    let driver_args = [&["--ui-port", "0"][..], &limits].concat();
    let executor_args = [&["--metrics-port", "0"][..], &limits].concat();
    let cluster = Cluster::start_with(1, 1, None, &driver_args, &executor_args, &[]);
    let executor_log =
        || std::fs::read_to_string(cluster.dir().join("executor-0.log")).unwrap_or_default();
    let grpc = cluster.url.trim_start_matches("http://").to_string();
    let ui = cluster.ui_address();
    let shuffle = cluster.status().unwrap().executors[0]
        .shuffle_address
        .trim_start_matches("http://")
        .to_string();
    let metrics = cluster.executor_metrics_address(0);
    // The status call's connection is closed; give the driver a moment to drop it, so
    // that only the executor's channel holds a gRPC slot.
    std::thread::sleep(Duration::from_millis(500));

    check_port(
        "grpc",
        &grpc,
        1, // the executor's channel to the driver
        Some(&|| cluster.driver_log()),
        || healthy("ember-driver", &grpc),
    );
    check_port("ui", &ui, 0, Some(&|| cluster.driver_log()), || {
        get(&ui, "/api/v1/jobs") == (200, "[]".to_string())
    });
    check_port("shuffle", &shuffle, 0, Some(&executor_log), || {
        healthy("ember-executor", &shuffle)
    });
    check_port("metrics", &metrics, 0, Some(&executor_log), || {
        let (code, body) = get(&metrics, "/metrics");
        code == 200 && body.contains("ember_executor_cores 1")
    });
}

#[test]
fn a_wordcount_runs_while_the_ui_port_sits_at_its_cap() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let input = s.join("words");
    std::fs::create_dir_all(&input).unwrap();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for f in 0..3 {
        let text: String = (0..400)
            .map(|i| format!("w{} v{} common\n", i % 13, (i * (f + 1)) % 7))
            .collect();
        for w in text.split_whitespace() {
            *want.entry(w.to_string()).or_default() += 1;
        }
        std::fs::write(input.join(format!("part-{f}.txt")), text).unwrap();
    }
    let cluster = Cluster::start_with(
        2,
        1,
        None,
        &[
            "--ui-port",
            "0",
            "--max-connections",
            "8",
            "--first-request-timeout-ms",
            "120000",
        ],
        &[],
        &[],
    );
    let ui = cluster.ui_address();
    // The UI's 8 slots held by idle connections, and 40 more refused.
    let _idle: Vec<TcpStream> = (0..8).map(|_| connect(&ui)).collect();
    for _ in 0..40 {
        let mut s = connect(&ui);
        closed_by_server(&mut s, "a connection past the UI's cap");
    }

    let out = s.join("out");
    let run = cluster.run(
        "wordcount",
        &[
            "--partitions",
            "3",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        s,
    );
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for part in std::fs::read_dir(&out).unwrap().flatten() {
        let name = part.file_name().to_string_lossy().to_string();
        if !name.starts_with("part-") {
            continue;
        }
        for line in std::fs::read_to_string(part.path()).unwrap().lines() {
            let (w, c) = line.split_once('\t').unwrap();
            assert!(got.insert(w.to_string(), c.parse().unwrap()).is_none());
        }
    }
    assert_eq!(got, want);
    assert!(healthy(
        "ember-driver",
        cluster.url.trim_start_matches("http://")
    ));
    assert!(
        cluster
            .driver_log()
            .contains(&format!("ui port {ui}: refused")),
        "{}",
        cluster.driver_log()
    );
}

#[test]
fn the_history_server_caps_idle_connections_and_times_them_out() {
    let scratch = tempfile::tempdir().unwrap();
    let events = scratch.path().join("events");
    std::fs::create_dir(&events).unwrap();
    let mut child = Command::new(daemon_bin("ember-driver"))
        .arg("history")
        .arg(&events)
        .args(["--ui-port", "0", "--max-connections", "8"])
        .args(["--first-request-timeout-ms", "2000"])
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _killed = Killed(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("ember-driver history on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    check_port("ui", &addr, 0, None, || {
        get(&addr, "/api/v1/applications") == (200, "[]".to_string())
    });
}
