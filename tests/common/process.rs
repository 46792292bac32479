//! Running the example programs as child processes: building their binaries on demand
//! and running them with a timeout, each in its own `EMBER_LOCAL_DIR`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a single example run may take before it is killed.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The path of example `name`'s binary, building it (once per test process) if it is
/// missing or older than this test binary or the example's sources: `cargo test
/// --test examples` does not build examples itself.
pub fn example_bin(name: &str) -> PathBuf {
    static CHECKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary is in target/<profile>/deps")
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if checked.contains(name) {
        return bin;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        exe.clone(),
        manifest.join("examples").join(format!("{name}.rs")),
        manifest.join("examples/support/args.rs"),
        manifest.join("examples/support/kv.rs"),
    ];
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    let stale = match mtime(&bin) {
        None => true,
        Some(built) => sources.iter().any(|s| mtime(s).is_some_and(|t| t > built)),
    };
    if stale {
        // Building it for the features of ember alone, as this did, built ember and a
        // dozen of its dependencies again in the middle of CI's test run (90 s).
        workspace_binaries(name);
    }
    assert!(bin.exists(), "example binary {} not found", bin.display());
    checked.insert(name.to_string());
    bin
}

/// Builds the workspace's binaries and example `example` (at most once per test process
/// and example) as `cargo build --workspace --bins --example EXAMPLE` in the test's own
/// profile. Selecting an example makes cargo resolve features with every member's
/// dev-dependencies, exactly as `cargo test --workspace` does, so after that command
/// (CI's) this finds everything fresh; `-p ember-driver` alone resolved other features
/// and rebuilt ember, the scheduler and the daemons in the middle of the test run (about
/// 5 minutes of a fresh CI run). With `ember/s3` when this test has it, so that an
/// example runs `s3://` jobs (the daemons do not link ember).
pub fn workspace_binaries(example: &str) {
    static BUILT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(example) {
        let mut args = vec!["--workspace", "--bins", "--example", example];
        if cfg!(feature = "s3") {
            args.extend(["--features", "ember/s3"]);
        }
        cargo_build(&args);
        built.insert(example.to_string());
    }
}

/// Runs `cargo build ARGS` for this workspace in the test's own profile; panics with
/// cargo's output if the build fails.
pub fn cargo_build(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("running cargo build");
    assert!(
        out.status.success(),
        "cargo build {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Outcome of one example run.
pub struct Run {
    /// The run's `EMBER_LOCAL_DIR`.
    pub work: PathBuf,
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs example `name` with `args`, killing it after [`RUN_TIMEOUT`]. Its output goes
/// to files in `scratch` (so a chatty child cannot block on a full pipe), and it gets a
/// fresh, empty `EMBER_LOCAL_DIR` there ([`Run::work`]).
pub fn run_example(name: &str, args: &[&str], scratch: &Path) -> Run {
    run_example_env(name, args, scratch, &[])
}

/// [`run_example`] with extra environment variables (`EMBER_SECRET`, `EMBER_LOG` and
/// `RUST_LOG` are passed only if listed here).
pub fn run_example_env(name: &str, args: &[&str], scratch: &Path, envs: &[(&str, &str)]) -> Run {
    spawn_example(name, args, scratch, envs).wait()
}

/// An example started by [`spawn_example`], not yet waited for.
pub struct Running {
    name: String,
    child: std::process::Child,
    work: PathBuf,
    out_path: PathBuf,
    err_path: PathBuf,
    started: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited.
    pub fn finished(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process, killing it after [`RUN_TIMEOUT`] from its start.
    pub fn wait(mut self) -> Run {
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if self.started.elapsed() > RUN_TIMEOUT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not finish within {RUN_TIMEOUT:?}\n--- stderr ---\n{}",
                    self.name,
                    fs::read_to_string(&self.err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Run {
            work: self.work.clone(),
            success: status.success(),
            code: status.code(),
            stdout: fs::read_to_string(&self.out_path).unwrap_or_default(),
            stderr: fs::read_to_string(&self.err_path).unwrap_or_default(),
        }
    }
}

/// Starts example `name` with `args` and extra environment variables; see
/// [`run_example`].
pub fn spawn_example(name: &str, args: &[&str], scratch: &Path, envs: &[(&str, &str)]) -> Running {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let bin = example_bin(name);
    let id = format!("{name}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed));
    let out_path = scratch.join(format!("{id}.stdout"));
    let err_path = scratch.join(format!("{id}.stderr"));
    let work = scratch.join(format!("{id}.work"));
    fs::create_dir_all(&work).unwrap();
    let child = Command::new(&bin)
        .args(args)
        .env("EMBER_PROGRESS", "0")
        .env("EMBER_LOCAL_DIR", &work)
        .env("RUST_BACKTRACE", "0")
        .env_remove("EMBER_MASTER")
        .env_remove("EMBER_EXECUTOR_MEMORY")
        .env_remove("EMBER_SECRET")
        .env_remove("EMBER_SECRET_FILE")
        // The job's own default log filter, unless the test names one.
        .env_remove("EMBER_LOG")
        .env_remove("RUST_LOG")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
    Running {
        name: format!("{name} {args:?}"),
        child,
        work,
        out_path,
        err_path,
        started: Instant::now(),
    }
}
