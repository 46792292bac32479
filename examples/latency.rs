//! Latency of a trivial job in an already created context:
//! `latency [--master M] [--runs N]` runs `parallelize(0..1000, 8).map(x + 1).count()`
//! N times (after 5 warm-up runs) and prints the median and 90th percentile, as
//! `ANCHOR key=value` lines for the benchmark suite.

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let mut runs = 100usize;
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().unwrap_or_default().parse()?,
            other => {
                anyhow::bail!("unknown argument {other:?}; usage: latency [--master M] [--runs N]")
            }
        }
    }
    let data: Vec<i64> = (0..1000).collect();
    let job = || -> anyhow::Result<f64> {
        let t = Instant::now();
        let n = ctx
            .parallelize(data.clone(), 8)
            .map(|x: i64| x + 1)
            .count()?;
        anyhow::ensure!(n == 1000, "expected 1000 records, counted {n}");
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    for _ in 0..5 {
        job()?;
    }
    let mut times = (0..runs.max(1))
        .map(|_| job())
        .collect::<anyhow::Result<Vec<f64>>>()?;
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!("ANCHOR trivial_job_median_ms={:.3}", pct(0.5));
    println!("ANCHOR trivial_job_p90_ms={:.3}", pct(0.9));
    println!("ANCHOR trivial_job_runs={}", times.len());
    Ok(())
}
