//! Scheduling throughput: `manytasks [--master M] [--tasks N] [--runs K] [--source S]`
//! counts `parallelize(0..N, N)` (`--source parallelize`, the default) or
//! `range(0, N, N)` (`--source range`), one record per task (default 50,000 tasks, 3
//! runs), in one context, checks the count, and prints each run's time and tasks per
//! second as `ANCHOR` lines (one `key=value` each). Nearly all of a run is the cost of scheduling, launching and
//! reporting N tasks, so the figure measures the driver, the executors' task path and
//! the worker round trip, not computation.

use std::time::Instant;

use anyhow::{bail, ensure};

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let (mut tasks, mut runs) = (50_000usize, 3usize);
    let mut source = String::from("parallelize");
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        let mut value = || -> anyhow::Result<usize> {
            let v = args.next().unwrap_or_default();
            v.parse()
                .map_err(|_| anyhow::anyhow!("{a} needs a number, got {v:?}"))
        };
        match a.as_str() {
            "--tasks" => tasks = value()?.max(1),
            "--runs" => runs = value()?.max(1),
            "--source" => source = args.next().unwrap_or_default(),
            other => {
                bail!(
                "unknown argument {other:?}; usage: manytasks [--master M] [--tasks N] [--runs K] \
                 [--source parallelize|range]"
            )
            }
        }
    }
    let data: Vec<u64> = (0..tasks as u64).collect();
    let mut times = Vec::new();
    for run in 0..runs {
        let t = Instant::now();
        let n = match source.as_str() {
            "parallelize" => ctx.parallelize(data.clone(), tasks).count()?,
            "range" => ctx.range(0, tasks as i64, tasks).count()?,
            other => bail!("--source is parallelize or range, not {other:?}"),
        };
        let secs = t.elapsed().as_secs_f64();
        ensure!(n == tasks as u64, "expected {tasks} records, counted {n}");
        println!("ANCHOR run{run}_s={secs:.3}");
        println!("ANCHOR run{run}_tasks_per_s={:.0}", tasks as f64 / secs);
        times.push(secs);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let median = times[times.len() / 2];
    println!("ANCHOR median_s={median:.3}");
    println!("ANCHOR source={source}");
    println!("ANCHOR tasks={tasks}");
    println!("ANCHOR tasks_per_s={:.0}", tasks as f64 / median);
    Ok(())
}
