//! Ctrl-C (SIGINT) or SIGTERM in the middle of a local-mode job: the job's work
//! directory (`ember-local-*` in the temp dir) and its uncommitted output are removed,
//! the process ends by the signal (a shell shows 130 or 143) saying so on stderr, and
//! the same command then succeeds. The job is `examples/faultjob` held at its gate
//! between two stages, with `TMPDIR` pointed at a directory the test owns.

mod common;

use std::fs;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Longest a run may take before the test gives up on it.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A child killed (and reaped) when dropped, so a failing test leaves no process.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Job {
    /// Waits for the end, failing the test after [`TIMEOUT`].
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the job did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

struct Dirs {
    _root: tempfile::TempDir,
    input: PathBuf,
    gate: PathBuf,
    tmp: PathBuf,
    out: PathBuf,
    stderr: PathBuf,
}

fn dirs() -> Dirs {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();
    let input = r.join("in.txt");
    let text: String = (0..4_000)
        .map(|i| format!("{},{}\n", i % 97, i % 13))
        .collect();
    fs::write(&input, text).unwrap();
    for d in ["gate", "tmp"] {
        fs::create_dir(r.join(d)).unwrap();
    }
    Dirs {
        _root: root,
        input,
        gate: r.join("gate"),
        tmp: r.join("tmp"),
        out: r.join("out"),
        stderr: r.join("stderr"),
    }
}

/// Starts `faultjob --master local[2]` on the input, its temp dir `d.tmp`.
fn start(d: &Dirs) -> Job {
    let mut cmd = Command::new(common::process::example_bin("faultjob"));
    cmd.args(["--master", "local[2]", "--partitions", "2", "--gate"])
        .arg(&d.gate)
        .arg(&d.input)
        .arg(&d.out)
        .env("TMPDIR", &d.tmp)
        .env("EMBER_PROGRESS", "0")
        .env("RUST_BACKTRACE", "0")
        .env_remove("EMBER_LOCAL_DIR")
        .env_remove("EMBER_MASTER")
        .env_remove("EMBER_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&d.stderr).unwrap());
    // The signals at their defaults, as in a terminal, whatever this test inherited (a
    // background job of a non-interactive shell ignores SIGINT, and ember then leaves
    // it alone).
    // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    Job(cmd.spawn().unwrap())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn interrupted_mid_job_leaves_nothing_and_the_rerun_succeeds(sig: i32, name: &str) {
    let d = dirs();
    let mut job = start(&d);
    // Stage 1 is done and both stage-2 tasks wait at the gate: mid-job.
    let deadline = Instant::now() + TIMEOUT;
    while entries(&d.gate)
        .iter()
        .filter(|n| n.starts_with("waiting-"))
        .count()
        < 2
    {
        assert!(job.0.try_wait().unwrap().is_none(), "the job ended early");
        assert!(Instant::now() < deadline, "the job never reached its gate");
        std::thread::sleep(Duration::from_millis(10));
    }
    let work = entries(&d.tmp);
    assert!(
        work.len() == 1 && work[0].starts_with("ember-local-"),
        "{work:?}"
    );
    assert_eq!(entries(&d.out), ["_temporary"]);

    // SAFETY: a signal to our own child, still running (not reaped).
    assert_eq!(unsafe { libc::kill(job.0.id() as i32, sig) }, 0);
    let status = job.wait();
    // Ended by the signal: a shell shows 128 + its number (130, 143).
    assert_eq!(status.signal(), Some(sig), "{status:?}");
    let stderr = fs::read_to_string(&d.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "ember: interrupted by {name}: removed the job's work directory and uncommitted output"
        )),
        "{stderr}"
    );
    assert_eq!(entries(&d.tmp), Vec::<String>::new());
    assert!(!d.out.exists(), "{:?}", entries(&d.out));

    // The same command again, its gate open: it succeeds and leaves only its output.
    for f in entries(&d.gate) {
        fs::remove_file(d.gate.join(f)).unwrap();
    }
    fs::write(d.gate.join("open"), b"").unwrap();
    let mut again = start(&d);
    let status = again.wait();
    assert!(
        status.success(),
        "{status:?}: {}",
        fs::read_to_string(&d.stderr).unwrap()
    );
    assert_eq!(entries(&d.out), ["_SUCCESS", "part-00000", "part-00001"]);
    let lines: usize = ["part-00000", "part-00001"]
        .iter()
        .map(|p| fs::read_to_string(d.out.join(p)).unwrap().lines().count())
        .sum();
    assert_eq!(lines, 97, "one line per key");
    assert_eq!(entries(&d.tmp), Vec::<String>::new());
}

#[test]
fn sigint_mid_job_removes_the_work_dir_and_the_output_and_the_rerun_succeeds() {
    interrupted_mid_job_leaves_nothing_and_the_rerun_succeeds(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_mid_job_removes_the_work_dir_and_the_output_and_the_rerun_succeeds() {
    interrupted_mid_job_leaves_nothing_and_the_rerun_succeeds(libc::SIGTERM, "SIGTERM");
}
