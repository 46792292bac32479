//! The `ember-driver` binary: its stdout contract, its refusal to run open on a
//! non-loopback address, a clean exit on SIGTERM, and a non-zero exit when its
//! scheduler panics.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn driver() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ember-driver"));
    cmd.env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .env_remove("EMBER_EXECUTOR_SECRET_FILE")
        .env_remove("EMBER_OPERATOR_SECRET_FILE")
        .env("EMBER_LOG", "warn");
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
fn prints_its_address_and_exits_cleanly_on_sigterm_and_sigint_removing_its_temp_dir() {
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let executor_secret = dir.path().join("executor-secret");
        std::fs::write(&executor_secret, "executor-s3cret\n").unwrap();
        // The default binary directory goes to TMPDIR: a dir this test owns and checks.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut child = driver()
            .args(["--port", "0", "--ui-port", "0", "--secret-file"])
            .arg(&secret)
            .arg("--executor-secret-file")
            .arg(&executor_secret)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ember-driver");
        let guard = KillOnDrop(child.id());
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
        let names = |d: &std::path::Path| -> Vec<String> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        let made = names(&tmp);
        assert!(
            made.len() == 1 && made[0].starts_with("ember-driver-binaries-"),
            "{made:?}"
        );

        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let status = wait_exit(&mut child, Duration::from_secs(8), &format!("SIG{signal}"));
        // Reaped: its pid may be reused, so it must not be signalled any more.
        std::mem::forget(guard);
        assert!(status.success(), "SIG{signal}: {status:?}");
        assert_eq!(
            names(&tmp),
            Vec::<String>::new(),
            "SIG{signal} left its temp dir"
        );
    }
}

/// Debug builds: a scheduler panic (triggered by the documented test hook) ends the
/// daemon with a non-zero exit and the reason in its log, so a supervisor restarts it.
#[cfg(debug_assertions)]
#[tokio::test]
async fn a_scheduler_panic_ends_the_daemon_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("driver.log");
    let mut child = driver()
        .args(["--port", "0", "--binary-dir"])
        .arg(dir.path().join("binaries"))
        .env("EMBER_DRIVER_TEST_PANIC", "explode, please")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn ember-driver");
    let child_guard = KillOnDrop(child.id());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    let addr: std::net::SocketAddr = first
        .strip_prefix("ember-driver listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .parse()
        .expect("address");

    let mut c = common::client(addr, None).await;
    let sha = common::upload(&mut c, b"bin").await;
    let (opened, _session) = common::open_session(&mut c, &sha).await;
    let mut plan = common::tiny_plan(opened.id_base, 1, &sha);
    plan.description = "explode, please".into();
    let _ = c
        .submit_job(
            ember_proto::auth::with_session_token(
                tonic::Request::new(ember_proto::SubmitJobRequest {
                    session_id: opened.session_id,
                    plan: Some(plan),
                    new_broadcasts: vec![],
                }),
                &opened.session_token,
            )
            .unwrap(),
        )
        .await;

    let status = wait_exit(&mut child, Duration::from_secs(10), "the panic");
    // Reaped: its pid may be reused, so it must not be signalled any more.
    std::mem::forget(child_guard);
    assert_eq!(status.code(), Some(1), "{status:?}");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(
            "ember-driver: the scheduler thread panicked: test hook: the plan's description matches EMBER_DRIVER_TEST_PANIC; exiting"
        ),
        "{stderr}"
    );
}

/// SIGKILLs a process when dropped (a failing test leaves no daemon behind).
/// Waits (at most `limit`) for `child` to exit; panics naming `after` if it does not.
fn wait_exit(
    child: &mut std::process::Child,
    limit: Duration,
    after: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "ember-driver did not exit after {after}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// `ember-driver health --addr ADDR`: (exit code, stdout + stderr).
fn health(addr: &str) -> (Option<i32>, String) {
    let out = driver()
        .args(["health", "--addr", addr, "--timeout-ms", "2000"])
        .output()
        .expect("run ember-driver health");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Starts `cmd` (an `ember-driver` command) with its binaries in `dir`; returns the
/// child, a guard that kills it, and its first stdout line.
fn spawn_driver(
    mut cmd: Command,
    dir: &std::path::Path,
) -> (std::process::Child, KillOnDrop, String) {
    let mut child = cmd
        .arg("--binary-dir")
        .arg(dir.join("binaries"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ember-driver");
    let guard = KillOnDrop(child.id());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    (child, guard, first)
}

#[test]
fn health_answers_serving_while_the_driver_runs_and_names_what_failed_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = driver();
    cmd.args(["--port", "0"]);
    let (mut child, _guard, first) = spawn_driver(cmd, dir.path());
    let addr = first
        .strip_prefix("ember-driver listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    // Without the secret too: the health service needs none.
    let (code, text) = health(&addr);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.trim(), format!("{addr}: serving"));
    // A bare host:port works as well.
    let bare = addr.trim_start_matches("http://");
    assert_eq!(health(bare).0, Some(0));

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let (code, text) = health(&addr);
    assert_eq!(code, Some(1));
    assert!(
        text.starts_with(&format!("ember-driver health: cannot reach {addr}")),
        "{text}"
    );
}

#[test]
fn the_secret_can_come_from_the_file_ember_secret_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{}\n", "f".repeat(32))).unwrap();
    let executor_secret = dir.path().join("executor-secret");
    std::fs::write(&executor_secret, "e".repeat(32)).unwrap();
    // A non-loopback host needs a secret: EMBER_SECRET_FILE provides it (and
    // EMBER_EXECUTOR_SECRET_FILE the executor secret).
    let mut cmd = driver();
    cmd.args(["--host", "0.0.0.0", "--port", "0"])
        .env("EMBER_SECRET_FILE", &secret)
        .env("EMBER_EXECUTOR_SECRET_FILE", &executor_secret);
    let (mut child, _guard, first) = spawn_driver(cmd, dir.path());
    assert!(
        first.starts_with("ember-driver listening on http://0.0.0.0:"),
        "{first}"
    );
    let _ = child.kill();
    let _ = child.wait();
    // An empty file is refused, naming it.
    std::fs::write(&secret, "\n").unwrap();
    let out = driver()
        .args(["--host", "0.0.0.0", "--port", "0"])
        .env("EMBER_SECRET_FILE", &secret)
        .output()
        .expect("run ember-driver");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("secret file {} is empty", secret.display())),
        "{stderr}"
    );
}

/// Runs the driver with `args` and the given secret files; its stderr if it refused to
/// start with exit code 2.
fn refused(args: &[&str], secret: Option<&str>, executor_secret: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = driver();
    cmd.args(args).args(["--port", "0"]);
    if let Some(s) = secret {
        let f = dir.path().join("secret");
        std::fs::write(&f, s).unwrap();
        cmd.arg("--secret-file").arg(f);
    }
    if let Some(s) = executor_secret {
        let f = dir.path().join("executor-secret");
        std::fs::write(&f, s).unwrap();
        cmd.arg("--executor-secret-file").arg(f);
    }
    let (code, stdout, stderr) = exits_within(cmd, &format!("with {args:?}"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    stderr
}

#[test]
fn the_credential_rules_are_checked_at_start_up() {
    let strong = "s".repeat(32);
    let other = "o".repeat(32);
    // A cluster secret without an executor secret.
    let err = refused(&[], Some(&strong), None);
    assert!(
        err.contains("a cluster secret needs an executor secret too (--executor-secret-file"),
        "{err}"
    );
    // The same secret twice.
    let err = refused(&[], Some(&strong), Some(&strong));
    assert!(
        err.contains("--executor-secret-file holds the cluster secret"),
        "{err}"
    );
    // Short secrets off loopback, each named by its flag and the minimum.
    let err = refused(&["--host", "0.0.0.0"], Some("short"), Some(&other));
    assert!(
        err.contains("--secret-file") && err.contains("needs at least 32"),
        "{err}"
    );
    assert!(
        !err.contains("short\n") && !err.contains(" short "),
        "{err}"
    );
    let err = refused(&["--host", "0.0.0.0"], Some(&strong), Some("tiny"));
    assert!(
        err.contains("--executor-secret-file") && err.contains("needs at least 32"),
        "{err}"
    );
    // An operator secret equal to the executor secret (every executor holds it).
    let dir = tempfile::tempdir().unwrap();
    let operator = dir.path().join("operator");
    std::fs::write(&operator, &other).unwrap();
    let operator = operator.to_str().unwrap();
    let err = refused(
        &["--operator-secret-file", operator],
        Some(&strong),
        Some(&other),
    );
    assert!(
        err.contains(
            "the operator secret (--operator-secret-file) must differ from the executor secret"
        ),
        "{err}"
    );
    assert!(!err.contains(&other), "{err}");
}

/// Runs `cmd` expecting it to exit within 10 s (a daemon that started instead is killed
/// and the test fails); its exit code, stdout and stderr.
fn exits_within(mut cmd: Command, what: &str) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ember-driver");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ember-driver started {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stdout, stderr)
}
