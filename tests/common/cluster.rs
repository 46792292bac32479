//! A real cluster for tests: one `ember-driver` and N `ember-executor` processes on
//! 127.0.0.1 with ephemeral ports, each logging to a file in the cluster's temp dir.
//!
//! Invariants: every process is killed (SIGKILL) and reaped, and the temp dir removed,
//! when the [`Cluster`] drops, also when a test fails; startup waits are bounded.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ember_proto::auth::AddSecret;
use ember_proto::driver_client::DriverClient;

use super::process::{spawn_example, Run, Running};

/// Longest wait for a daemon to print its address or for executors to register.
const STARTUP: Duration = Duration::from_secs(30);

/// Path of a workspace binary (`ember-driver`, `ember-executor`), built once per test
/// process (a no-op when it is up to date).
pub fn daemon_bin(name: &str) -> PathBuf {
    super::process::workspace_binaries("wordcount");
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary is in target/<profile>/deps")
        .join(name)
}

/// Starts `cmd` and returns it with the first line it prints on stdout.
fn spawn_with_line(mut cmd: Command, log: &Path) -> (Child, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // The lines after the first go to `<log>.stdout` (the driver's `ui on` line).
    let rest = log.with_extension("stdout");
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(first)) = lines.next() {
            let _ = tx.send(first);
        }
        let mut out = fs::File::create(rest).ok();
        for line in lines.map_while(Result::ok) {
            if let Some(f) = out.as_mut() {
                use std::io::Write as _;
                let _ = writeln!(f, "{line}");
            }
        }
    });
    match rx.recv_timeout(STARTUP) {
        Ok(line) => (child, line),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} printed no address within {STARTUP:?}; its log:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            )
        }
    }
}

/// The address at the end of a daemon's "... on http://HOST:PORT" line.
fn address_of(line: &str) -> String {
    line.rsplit(' ').next().unwrap_or_default().to_string()
}

/// A running driver and its executors.
pub struct Cluster {
    pub url: String,
    pub secret: Option<String>,
    driver: Option<Child>,
    executors: Vec<Option<Child>>,
    cores: u32,
    executor_args: Vec<String>,
    executor_env: Vec<(String, String)>,
    /// The first driver's flags after `--host` and `--port`.
    driver_args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let all = self
            .executors
            .iter_mut()
            .chain(std::iter::once(&mut self.driver));
        for child in all.flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    /// A driver and `executors` executors with `cores` cores each, all registered.
    pub fn start(executors: usize, cores: u32, secret: Option<&str>) -> Cluster {
        Self::start_with(executors, cores, secret, &[], &[], &[])
    }

    /// [`Cluster::start`] with cluster secret `secret`, the driver's web UI on an
    /// ephemeral port (`ui_address`) and operator secret `operator` (written to a file
    /// under `scratch`).
    pub fn start_with_ui(
        executors: usize,
        cores: u32,
        secret: &str,
        operator: &str,
        scratch: &Path,
    ) -> Cluster {
        let file = scratch.join("operator");
        fs::write(&file, operator).unwrap();
        let ui = [
            "--ui-port",
            "0",
            "--operator-secret-file",
            file.to_str().unwrap(),
        ];
        Self::start_with(executors, cores, Some(secret), &ui, &[], &[])
    }

    /// [`Cluster::start`] with extra driver flags, executor flags and executor
    /// environment variables.
    pub fn start_with(
        executors: usize,
        cores: u32,
        secret: Option<&str>,
        driver_args: &[&str],
        executor_args: &[&str],
        executor_env: &[(&str, &str)],
    ) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("ember-cluster-")
            .tempdir()
            .unwrap();
        if executor_args.contains(&"--worker-uids") {
            // Worker uids must pass through it to the executors' work dirs.
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
        }
        let mut cmd = Command::new(daemon_bin("ember-driver"));
        // Binaries inside the cluster's dir: a SIGKILLed driver leaves nothing in /tmp.
        let binaries = dir.path().join("driver-binaries");
        let mut flags = vec!["--binary-dir".to_string(), binaries.display().to_string()];
        flags.extend(driver_args.iter().map(|a| a.to_string()));
        cmd.args(["--host", "127.0.0.1", "--port", "0"])
            .args(&flags);
        Self::secret_env(&mut cmd, dir.path(), secret, true);
        let (driver, line) = spawn_with_line(cmd, &dir.path().join("driver.log"));
        let mut cluster = Cluster {
            url: address_of(&line),
            secret: secret.map(str::to_string),
            driver: Some(driver),
            executors: Vec::new(),
            cores,
            executor_args: executor_args.iter().map(|a| a.to_string()).collect(),
            executor_env: executor_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            driver_args: flags,
            dir,
        };
        for _ in 0..executors {
            cluster.add_executor();
        }
        cluster.wait_for_executors(executors);
        cluster
    }

    /// The daemons' secrets: with a cluster secret, the executor secret (in
    /// `executor-secret` of the cluster's dir, named by `EMBER_EXECUTOR_SECRET_FILE`),
    /// which no client is given; the driver also gets the cluster secret
    /// (`EMBER_SECRET`), executors do not (they need none).
    fn secret_env(cmd: &mut Command, dir: &Path, secret: Option<&str>, driver: bool) {
        cmd.env_remove("EMBER_SECRET")
            .env_remove("EMBER_SECRET_FILE")
            .env_remove("EMBER_EXECUTOR_SECRET_FILE");
        if let Some(s) = secret {
            let file = dir.join("executor-secret");
            if !file.exists() {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&file)
                    .unwrap();
                std::io::Write::write_all(&mut f, format!("{s}-executor-only").as_bytes()).unwrap();
            }
            cmd.env("EMBER_EXECUTOR_SECRET_FILE", file);
            if driver {
                cmd.env("EMBER_SECRET", s);
            }
        }
        cmd.env("EMBER_LOG", "info");
    }

    /// The executor secret of a cluster started with a cluster secret.
    pub fn executor_secret(&self) -> Option<String> {
        fs::read_to_string(self.dir.path().join("executor-secret")).ok()
    }

    /// Starts one more executor (not waiting for it to register); returns its index.
    pub fn add_executor(&mut self) -> usize {
        let i = self.executors.len();
        let work = self.dir.path().join(format!("executor-{i}"));
        let mut cmd = Command::new(daemon_bin("ember-executor"));
        cmd.args([
            "--driver",
            &self.url,
            "--host",
            "127.0.0.1",
            "--shuffle-port",
            "0",
        ])
        .args(["--cores", &self.cores.to_string(), "--memory", "512m"])
        .arg("--work-dir")
        .arg(&work);
        Self::secret_env(&mut cmd, self.dir.path(), self.secret.as_deref(), false);
        cmd.args(&self.executor_args);
        cmd.envs(self.executor_env.iter().map(|(k, v)| (k, v)));
        let log = self.dir.path().join(format!("executor-{i}.log"));
        let (child, _line) = spawn_with_line(cmd, &log);
        self.executors.push(Some(child));
        i
    }

    /// The work directory of executor `i`.
    pub fn executor_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("executor-{i}"))
    }

    /// Sends `signal` (a `kill -s` name: KILL, STOP, CONT) to executor `i`; with KILL
    /// the process is also reaped and forgotten.
    pub fn signal_executor(&mut self, i: usize, signal: &str) {
        let child = self.executors[i].as_mut().expect("executor still running");
        let ok = Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .expect("running kill")
            .success();
        assert!(ok, "kill -s {signal} failed");
        if signal == "KILL" {
            let _ = child.wait();
            self.executors[i] = None;
        }
    }

    /// Waits up to `timeout` for executor `i` to exit (after a signal it handles); its
    /// exit status. The process is reaped and forgotten.
    pub fn wait_executor(&mut self, i: usize, timeout: Duration) -> std::process::ExitStatus {
        let child = self.executors[i].as_mut().expect("executor still running");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("waiting for the executor") {
                self.executors[i] = None;
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "executor {i} did not exit within {timeout:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for any executor to exit; which one, and its exit status
    /// (reaped and forgotten).
    pub fn wait_any_executor(&mut self, timeout: Duration) -> (usize, std::process::ExitStatus) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            for (i, slot) in self.executors.iter_mut().enumerate() {
                if let Some(child) = slot.as_mut() {
                    if let Some(status) = child.try_wait().expect("waiting for an executor") {
                        *slot = None;
                        return (i, status);
                    }
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no executor exited within {timeout:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the driver (SIGKILL) without starting another.
    pub fn kill_driver(&mut self) {
        if let Some(mut d) = self.driver.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// The driver's log so far (all drivers this cluster started).
    pub fn driver_log(&self) -> String {
        ["driver.log", "driver-2.log"]
            .iter()
            .map(|n| fs::read_to_string(self.dir.path().join(n)).unwrap_or_default())
            .collect()
    }

    /// Kills the driver (SIGKILL) and starts a new one on the same port, with a binary
    /// directory of its own (nothing of the first driver's sessions survives).
    pub fn restart_driver(&mut self) {
        let binaries = self.dir.path().join("driver-2-binaries");
        self.restart_driver_with(vec!["--binary-dir".into(), binaries.display().to_string()]);
    }

    /// Kills the driver (SIGKILL) and starts a new one on the same port with the first
    /// one's flags (its `--binary-dir` among them: the sessions' state survives).
    pub fn restart_driver_with_the_same_flags(&mut self) {
        self.restart_driver_with(self.driver_args.clone());
    }

    fn restart_driver_with(&mut self, flags: Vec<String>) {
        self.kill_driver();
        let port = self.url.rsplit(':').next().unwrap().to_string();
        let mut cmd = Command::new(daemon_bin("ember-driver"));
        cmd.args(["--host", "127.0.0.1", "--port", &port])
            .args(&flags);
        Self::secret_env(&mut cmd, self.dir.path(), self.secret.as_deref(), true);
        let (driver, line) = spawn_with_line(cmd, &self.dir.path().join("driver-2.log"));
        assert_eq!(
            address_of(&line),
            self.url,
            "the new driver took another address"
        );
        self.driver = Some(driver);
    }

    /// The address of the driver's web UI (started with `--ui-port 0`), waiting for its
    /// `ember-driver ui on http://...` line.
    pub fn ui_address(&self) -> String {
        let path = self.dir.path().join("driver.stdout");
        let deadline = std::time::Instant::now() + STARTUP;
        loop {
            let text = fs::read_to_string(&path).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(" ui on http://")) {
                return address_of(line).trim_start_matches("http://").to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no ui line in {}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The address of executor `i`'s metrics endpoint (started with `--metrics-port 0`),
    /// waiting for its `ember-executor metrics on http://...` line.
    pub fn executor_metrics_address(&self, i: usize) -> String {
        let path = self.dir.path().join(format!("executor-{i}.stdout"));
        let deadline = std::time::Instant::now() + STARTUP;
        loop {
            let text = fs::read_to_string(&path).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(" metrics on http://")) {
                return address_of(line).trim_start_matches("http://").to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no metrics line in {}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Asks the driver for its status.
    pub fn status(&self) -> Result<ember_proto::ClusterStatus, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let channel = tonic::transport::Endpoint::from_shared(self.url.clone())
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            let mut client = DriverClient::with_interceptor(
                channel,
                AddSecret::new(self.secret.as_deref()).unwrap(),
            );
            client
                .status(ember_proto::Empty {})
                .await
                .map(|r| r.into_inner())
                .map_err(|s| s.to_string())
        })
    }

    /// Waits until exactly `n` executors are registered.
    pub fn wait_for_executors(&self, n: usize) {
        let started = Instant::now();
        loop {
            if let Ok(s) = self.status() {
                if s.executors.len() == n {
                    return;
                }
            }
            if started.elapsed() > STARTUP {
                panic!(
                    "{n} executors did not register within {STARTUP:?}: {:?}\n{}",
                    self.status(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the driver and every executor still run.
    pub fn all_alive(&mut self) -> bool {
        let all = self
            .executors
            .iter_mut()
            .chain(std::iter::once(&mut self.driver));
        all.flatten().all(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The temp dir holding logs and executor work dirs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut names: Vec<_> = fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| {
                format!(
                    "--- {} ---\n{}",
                    p.display(),
                    fs::read_to_string(p).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs example `name` against this cluster (`--master URL` is prepended).
    pub fn run(&self, name: &str, args: &[&str], scratch: &Path) -> Run {
        self.spawn(name, args, scratch).wait()
    }

    /// Starts example `name` against this cluster without waiting for it.
    pub fn spawn(&self, name: &str, args: &[&str], scratch: &Path) -> Running {
        self.spawn_with_env(name, args, scratch, &[])
    }

    /// [`run`](Self::run) with more environment variables for the client.
    #[allow(dead_code)]
    pub fn run_with_env(
        &self,
        name: &str,
        args: &[&str],
        scratch: &Path,
        extra: &[(&str, &str)],
    ) -> Run {
        self.spawn_with_env(name, args, scratch, extra).wait()
    }

    /// [`spawn`](Self::spawn) with more environment variables for the client.
    #[allow(dead_code)]
    pub fn spawn_with_env(
        &self,
        name: &str,
        args: &[&str],
        scratch: &Path,
        extra: &[(&str, &str)],
    ) -> Running {
        let mut all = vec!["--master", self.url.as_str()];
        all.extend_from_slice(args);
        let mut envs: Vec<(&str, &str)> = self
            .secret
            .as_deref()
            .map(|s| vec![("EMBER_SECRET", s)])
            .unwrap_or_default();
        envs.extend_from_slice(extra);
        spawn_example(name, &all, scratch, &envs)
    }
}
