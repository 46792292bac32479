//! File modes under a permissive umask: the real daemon started with `umask 000` must
//! still create its work dir, subdirectories, stored binaries and worker sockets
//! private to its user.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ember_proto::{driver_message, LaunchTask, Registered};
use tokio::process::Command;

use crate::common::*;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn under_umask_000_the_work_dir_binaries_and_sockets_stay_private() {
    let root = tempfile::tempdir().unwrap();
    let probe = root.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    // A "job binary" that records where its socket is and then waits.
    let p = probe.display();
    let script = format!(
        "#!/bin/sh\nenv > \"{p}/tmp-$$\" && mv \"{p}/tmp-$$\" \"{p}/env-$$\"\nexec sleep 20\n"
    );
    let sha = sha256_hex(script.as_bytes());
    let mut driver = start_driver(HashMap::from([(sha.clone(), script.into_bytes())]), None).await;
    let work = root.path().join("work");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ember-executor"))
        // SIGTERM stops it at once below (no decommissioning: that is not what this
        // test is about).
        .args(["--decommission-timeout", "0"])
        .args(["--driver", &driver.url, "--cores", "1", "--work-dir"])
        .arg(&work)
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let conn = driver.accept_register("registration").await;
    conn.send(driver_message::Msg::Registered(Registered {
        executor_id: "exec-M".into(),
        heartbeat_interval_ms: 100,
    }))
    .await;
    conn.send(driver_message::Msg::Launch(LaunchTask {
        task: Some(task(1, &sha)),
        broadcasts: vec![],
        ..Default::default()
    }))
    .await;
    let env_file = within("the worker to start", async {
        loop {
            let found = std::fs::read_dir(&probe)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("env-"));
            if let Some(f) = found {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let worker_pid = env_file
        .to_string_lossy()
        .rsplit('-')
        .next()
        .unwrap()
        .to_string();
    let env: HashMap<String, String> = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // The worker never connects, so its socket stays until the ready timeout.
    let socket = Path::new(&env["EMBER_WORKER_SOCKET"]);
    let scratch = Path::new(&env["EMBER_WORKER_DIR"]);
    let mut modes = vec![(socket.to_path_buf(), mode(socket), 0o600)];
    for dir in ["", "binaries", "shuffle", "workers"] {
        let d = work.join(dir);
        modes.push((d.clone(), mode(&d), 0o700));
    }
    modes.push((scratch.to_path_buf(), mode(scratch), 0o700));
    let binary = work.join("binaries").join(&sha);
    modes.push((binary.clone(), mode(&binary), 0o700));
    for (path, got, want) in &modes {
        assert_eq!(
            got,
            want,
            "{} has mode {got:o}, want {want:o}",
            path.display()
        );
    }

    // Stop the worker (so the executor's start of it ends at once), then the executor.
    let pid = child.id().unwrap().to_string();
    for (signal, pid) in [("-KILL", &worker_pid), ("-TERM", &pid)] {
        assert!(std::process::Command::new("kill")
            .args([signal, pid])
            .status()
            .unwrap()
            .success());
    }
    let status = within("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}
