//! The fault-tolerance tests' job, `examples/faultjob.rs` (three stages, two
//! shuffles), on a test cluster: its input, a fault-free reference run, starting it with
//! its `--gate DIR` closed (the second stage waits while a test does its damage), the
//! map outputs each executor holds, and the driver's stage submissions.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::process::run_example;
use super::SplitMix;

pub const PARTITIONS: &str = "6";

/// Six kv input files of `lines` lines each.
pub fn kv_input(dir: &Path, lines: usize) -> PathBuf {
    let d = dir.join("input");
    fs::create_dir_all(&d).unwrap();
    let mut rng = SplitMix::new(0x5eed);
    for f in 0..6 {
        let text: String = (0..lines)
            .map(|_| {
                format!(
                    "{},{}.{:03}\n",
                    rng.below(3000),
                    rng.below(1000),
                    rng.below(1000)
                )
            })
            .collect();
        fs::write(d.join(format!("part-{f}.txt")), text).unwrap();
    }
    d
}

/// The concatenated part files of a finished output directory, in order.
pub fn output(dir: &Path) -> String {
    assert!(
        dir.join("_SUCCESS").exists(),
        "{} has no _SUCCESS",
        dir.display()
    );
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part-"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| fs::read_to_string(dir.join(n)).unwrap())
        .collect()
}

/// Starts faultjob on the cluster: `--partitions 6`, then `switches`, INPUT, OUTPUT.
pub fn spawn_faultjob(
    cluster: &Cluster,
    switches: &[&str],
    input: &Path,
    out: &Path,
    scratch: &Path,
) -> super::process::Running {
    spawn_faultjob_with_env(cluster, switches, input, out, scratch, &[])
}

/// [`spawn_faultjob`] with more environment variables for the client.
pub fn spawn_faultjob_with_env(
    cluster: &Cluster,
    switches: &[&str],
    input: &Path,
    out: &Path,
    scratch: &Path,
    env: &[(&str, &str)],
) -> super::process::Running {
    let mut args = vec!["--partitions", PARTITIONS];
    args.extend_from_slice(switches);
    args.extend([input.to_str().unwrap(), out.to_str().unwrap()]);
    cluster.spawn_with_env("faultjob", &args, scratch, env)
}

/// The output of a fault-free local run of faultjob over `input`, and its count of
/// records parsed (checked against the input's line count).
pub fn reference(input: &Path, scratch: &Path) -> (String, u64) {
    let out = scratch.join("reference");
    let run = run_example(
        "faultjob",
        &[
            "--master",
            "local[3]",
            "--partitions",
            PARTITIONS,
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        scratch,
    );
    assert!(run.success, "reference run: {run:?}");
    let text = output(&out);
    assert!(text.lines().count() > 1000);
    let lines: usize = fs::read_dir(input)
        .unwrap()
        .flatten()
        .map(|e| fs::read_to_string(e.path()).unwrap().lines().count())
        .sum();
    assert_eq!(
        parsed(&run),
        lines as u64,
        "records parsed in a fault-free run"
    );
    (text, parsed(&run))
}

/// The session's first shuffle id and the map outputs (data files) of it that each
/// executor holds.
pub fn first_shuffle(cluster: &Cluster, executors: usize) -> (u32, Vec<Vec<String>>) {
    let per: Vec<Vec<(u32, String)>> = (0..executors)
        .map(|i| {
            // Each session's files are in `shuffle/session-<i>/`: names are relative to
            // `shuffle/`.
            fs::read_dir(cluster.executor_dir(i).join("shuffle"))
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|session| {
                    let dir = session.file_name().to_string_lossy().into_owned();
                    fs::read_dir(session.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(move |e| (dir.clone(), e))
                })
                .filter_map(|(dir, e)| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let id = ember::shuffle::parse_file_name(&name)?.0;
                    // Committed outputs only, not a writer's temporary.
                    (name.ends_with(".data") && !name.starts_with('.'))
                        .then(|| (id, format!("{dir}/{name}")))
                })
                .collect()
        })
        .collect();
    let first = per.iter().flatten().map(|(id, _)| *id).min();
    let held = per
        .into_iter()
        .map(|v| {
            v.into_iter()
                .filter(|(id, _)| Some(*id) == first)
                .map(|(_, n)| n)
                .collect()
        })
        .collect();
    (first.unwrap_or(0), held)
}

pub fn first_shuffle_outputs(cluster: &Cluster, executors: usize) -> Vec<Vec<String>> {
    first_shuffle(cluster, executors).1
}

pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The driver's submissions of the map stage writing `shuffle_id`: the number of
/// partitions of each ("submitting stage NAME: all N partitions ... shuffle=S ..." or
/// "...: K of N partitions [..] ...").
pub fn submissions(driver_log: &str, shuffle_id: u32) -> Vec<usize> {
    let tag = format!("shuffle={shuffle_id}");
    driver_log
        .lines()
        .filter(|l| l.contains("submitting stage") && l.split_whitespace().any(|w| w == tag))
        .filter_map(|l| {
            let (_, rest) = l.split_once("submitting stage ")?.1.split_once(": ")?;
            let mut words = rest.split_whitespace();
            match words.next()? {
                "all" => words.next()?.parse().ok(),
                k => k.parse().ok(),
            }
        })
        .collect()
}

pub struct GateRun {
    pub gate: PathBuf,
    pub out: PathBuf,
    pub client: super::process::Running,
}

/// Starts faultjob on the cluster with its gate closed; returns once the first stage
/// has finished (a second-stage task is waiting at the gate).
pub fn start_gated(cluster: &Cluster, input: &Path, scratch: &Path) -> GateRun {
    start_gated_with_env(cluster, input, scratch, &[])
}

/// [`start_gated`] with more environment variables for the client.
pub fn start_gated_with_env(
    cluster: &Cluster,
    input: &Path,
    scratch: &Path,
    env: &[(&str, &str)],
) -> GateRun {
    start_gated_with(cluster, input, scratch, &[], env)
}

/// [`start_gated`] with more switches for the job and environment variables for the
/// client.
pub fn start_gated_with(
    cluster: &Cluster,
    input: &Path,
    scratch: &Path,
    switches: &[&str],
    env: &[(&str, &str)],
) -> GateRun {
    let gate = scratch.join("gate");
    fs::create_dir_all(&gate).unwrap();
    let out = scratch.join("out");
    let mut all = vec!["--gate", gate.to_str().unwrap()];
    all.extend_from_slice(switches);
    let mut client = spawn_faultjob_with_env(cluster, &all, input, &out, scratch, env);
    wait_for("the second stage to start", Duration::from_secs(60), || {
        assert!(!client.finished(), "the job ended before its gate opened");
        fs::read_dir(&gate)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("waiting-"))
    });
    GateRun { gate, out, client }
}

impl GateRun {
    /// Opens the gate; returns the output and the records-parsed count the job printed.
    pub fn open_and_finish(self, cluster: &Cluster) -> (String, u64) {
        let (out, parsed, _) = self.open_and_finish_with_console(cluster);
        (out, parsed)
    }

    /// Kills executor `victim` (SIGKILL), waits for the driver to log the loss, opens the
    /// gate, and checks the job's output and records count against `want` (a fault-free
    /// run's); what the client printed on stderr.
    pub fn kill_and_finish(
        self,
        cluster: &mut Cluster,
        victim: usize,
        want: &(String, u64),
    ) -> String {
        let told = cluster.driver_log().matches("executor lost").count();
        cluster.signal_executor(victim, "KILL");
        // The driver hears of the loss (its connection to the executor closes) before the
        // gate opens: otherwise a reducer's fetch failure may reach it first, and the
        // rerun this scenario checks would be one for a fetch failure instead.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster.driver_log().matches("executor lost").count() == told {
            assert!(
                Instant::now() < deadline,
                "the driver did not notice the killed executor {victim} within 30 s:\n{}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (out, records, console) = self.open_and_finish_with_console(cluster);
        assert_eq!(
            &(out, records),
            want,
            "output differs from the fault-free run"
        );
        console
    }

    /// [`open_and_finish`](Self::open_and_finish) with what the client printed on stderr.
    pub fn open_and_finish_with_console(self, cluster: &Cluster) -> (String, u64, String) {
        fs::write(self.gate.join("open"), b"").unwrap();
        let run = self.client.wait();
        assert!(run.success, "the job failed: {run:?}\n{}", cluster.logs());
        (output(&self.out), parsed(&run), run.stderr.clone())
    }
}

/// The `records parsed: N` the job printed (its accumulator's value).
pub fn parsed(run: &super::process::Run) -> u64 {
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix("records parsed: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no records count in {run:?}"))
}

/// Flips the middle byte of every non-empty block of a map output file (blocks, then
/// the index: `20 * R + 16` bytes, see `shuffle/src/index.rs`).
pub fn flip_a_byte_in_every_block(file: &mut [u8]) {
    let n = file.len();
    let r = u32::from_le_bytes(file[n - 16..n - 12].try_into().unwrap()) as usize;
    let index = n - (20 * r + 16);
    for b in 0..r {
        let e = index + 20 * b;
        let offset = u64::from_le_bytes(file[e..e + 8].try_into().unwrap()) as usize;
        let len = u64::from_le_bytes(file[e + 8..e + 16].try_into().unwrap()) as usize;
        if len > 0 {
            file[offset + len / 2] ^= 0x5a;
        }
    }
}

/// Runs faultjob with a slow map stage on a fresh 3 x 1-core cluster (client environment
/// `env`) and kills executor 1 (SIGKILL) once some map output file exists but fewer than
/// `all_files` do (the map stage still runs); the job must give a fault-free run's output.
pub fn kill_during_the_map_stage(scratch: &Path, env: &[(&str, &str)], all_files: usize) {
    let input = kv_input(scratch, 3000);
    let want = reference(&input, scratch);
    let mut cluster = Cluster::start(3, 1, None);
    let out = scratch.join("out");
    let client = spawn_faultjob_with_env(
        &cluster,
        &["--map-delay-ms", "150"],
        &input,
        &out,
        scratch,
        env,
    );
    // Some map outputs exist, others are still being written.
    let written = |cluster: &Cluster| -> usize {
        first_shuffle_outputs(cluster, 3).iter().map(Vec::len).sum()
    };
    wait_for("a first map output", Duration::from_secs(60), || {
        written(&cluster) > 0
    });
    assert!(
        written(&cluster) < all_files,
        "the map stage finished before the kill"
    );
    cluster.signal_executor(1, "KILL");
    let run = client.wait();
    assert!(run.success, "{run:?}\n{}", cluster.logs());
    assert_eq!((output(&out), parsed(&run)), want);
}
