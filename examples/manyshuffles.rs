//! A long-lived context running many small shuffle jobs, for the cleaner's tests and
//! demos: `manyshuffles [--master M] [--jobs N] [--gate DIR]`.
//!
//! Job i reduces 200 numbers offset by i into 8 keys (one new shuffle per job), checks
//! the sums and drops its RDD, so the context's cleaner can release that shuffle. After
//! the last job it prints `jobs ok: N`. With `--gate DIR` it then creates `DIR/done`
//! and waits (at most 120 s) for `DIR/open` before it ends, so that a test can look at
//! the executors' work dirs while the session is still open.

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let mut jobs = 50u64;
    let mut gate: Option<PathBuf> = None;
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--jobs" => jobs = args.next().unwrap_or_default().parse()?,
            "--gate" => gate = args.next().map(PathBuf::from),
            other => anyhow::bail!(
                "unknown argument {other:?}; usage: manyshuffles [--master M] [--jobs N] [--gate DIR]"
            ),
        }
    }
    for i in 0..jobs {
        let data: Vec<u64> = (0..200).map(|x| x * 7 + i).collect();
        let mut want = [0u64; 8];
        for x in &data {
            want[(x % 8) as usize] += x;
        }
        let rdd = ctx
            .parallelize(data, 4)
            .map(|x: u64| (x % 8, x))
            .reduce_by_key(|a, b| a + b);
        let mut got = rdd.collect()?;
        got.sort_unstable();
        let want: Vec<(u64, u64)> = (0..8).map(|k| (k, want[k as usize])).collect();
        anyhow::ensure!(got == want, "job {i}: got {got:?}, want {want:?}");
    }
    println!("jobs ok: {jobs}");
    if let Some(dir) = gate {
        std::fs::write(dir.join("done"), b"")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !dir.join("open").exists() {
            anyhow::ensure!(Instant::now() < deadline, "the gate never opened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}
