//! A wide shuffle of tiny data, for measuring what a shuffle costs per map and reduce
//! task: `wideshuffle [--master M] [--maps M] [--reducers R] [--records N] [--runs K]
//! [--range 1]` sums `1` per key over `N` records (`key = i % 1000`) spread over `M` map
//! partitions into `R` reduce partitions, `K` times in one context (default 1000 x 1000,
//! 10,000 records, 3 runs), checks the answer against the plain computation and prints
//! each run's time as `ANCHOR` lines. The records come from `parallelize` (shipped with
//! the plan), or with `--range 1` from `range(0, N, M)` (generated in the map tasks).

use std::time::Instant;

use anyhow::{bail, ensure};

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let (mut maps, mut reducers, mut records, mut runs) = (1000usize, 1000usize, 10_000u64, 3usize);
    let mut from_range = false;
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        let mut value = || -> anyhow::Result<u64> {
            let v = args.next().unwrap_or_default();
            v.parse()
                .map_err(|_| anyhow::anyhow!("{a} needs a number, got {v:?}"))
        };
        match a.as_str() {
            "--maps" => maps = value()? as usize,
            "--reducers" => reducers = value()? as usize,
            "--records" => records = value()?,
            "--runs" => runs = value()? as usize,
            "--range" => from_range = value()? == 1,
            other => bail!(
                "unknown argument {other:?}; usage: wideshuffle [--master M] [--maps M] \
                 [--reducers R] [--records N] [--runs K] [--range 1]"
            ),
        }
    }
    let keys = records.min(1000);
    let data: Vec<u64> = (0..records).collect();
    let mut times = Vec::new();
    for run in 0..runs.max(1) {
        let t = Instant::now();
        let source = if from_range {
            ctx.range(0, records as i64, maps).map(|i: i64| i as u64)
        } else {
            ctx.parallelize(data.clone(), maps)
        };
        let counts = source
            .map(|i: u64| (i % 1000, 1u64))
            .reduce_by_key_into(|a, b| a + b, reducers)
            .collect()?;
        let secs = t.elapsed().as_secs_f64();
        ensure!(
            counts.len() as u64 == keys,
            "expected {keys} keys, got {}",
            counts.len()
        );
        for (k, n) in &counts {
            let expected = records / 1000 + u64::from(*k < records % 1000);
            ensure!(*n == expected, "key {k}: expected {expected}, got {n}");
        }
        println!("ANCHOR run{run}_s={secs:.3}");
        times.push(secs);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    println!("ANCHOR median_s={:.3}", times[times.len() / 2]);
    println!("ANCHOR maps={maps} reducers={reducers} records={records}");
    Ok(())
}
