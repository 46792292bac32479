//! The `ember-driver` binary: its stdout contract, its refusal to run open on a
//! non-loopback address, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn driver() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-driver"));
    cmd.env_remove("EMBER_SECRET").env("EMBER_LOG", "warn");
    cmd
}

#[test]
fn refuses_a_non_loopback_host_without_a_secret() {
    let out = driver()
        .args(["--host", "0.0.0.0", "--port", "0"])
        .output()
        .expect("run ember-driver");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without a cluster secret"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn prints_its_address_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let mut child = driver()
        .args(["--port", "0", "--ui-port", "0", "--secret-file"])
        .arg(&secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ember-driver");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    let port: u16 = first
        .strip_prefix("ember-driver listening on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .parse()
        .expect("port");
    assert_ne!(port, 0);
    let second = lines.next().expect("a line").expect("utf-8");
    assert!(
        second.starts_with("ember-driver ui on http://127.0.0.1:"),
        "{second}"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ember-driver did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
