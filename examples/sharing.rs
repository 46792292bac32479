//! Sharing one driver: the jobs of the fair-scheduling benchmark and tests.
//!
//! - `sharing hog --tasks N --sleep-ms S [--pool P]`: one job of N tasks, each sleeping
//!   S ms; prints `ANCHOR hog_seconds=` and checks its count.
//! - `sharing probe --jobs K --gap-ms G [--pool P]`: K one-task jobs, G ms apart, each
//!   timed from its submission (the first included: no warm-up); prints each time and
//!   `ANCHOR probe_median_ms=`, `probe_max_ms=`.
//! - `sharing cancel --tasks N --sleep-ms S --wait-ms W [--interrupt] [--save DIR]
//!   [--probe-tasks P]`: runs a job of N tasks sleeping S ms (a count, or with `--save`
//!   a `save_as_text_file` into DIR) in job group `sharing-cancel` on a second thread,
//!   cancels the group from the main thread W ms later, and prints the action's error,
//!   `ANCHOR cancel_to_return_ms=` (cancel call to the action's return) and, after a
//!   job of P one-record tasks, `ANCHOR cancel_to_probe_done_ms=` (cancel call to that
//!   job's end: the slots were free again by then). Exits 1 unless the action failed
//!   with a cancellation naming the group.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};

const GROUP: &str = "sharing-cancel";

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let mut args = ember::job_args().into_iter().skip(1);
    let mode = args.next().unwrap_or_default();
    let (mut tasks, mut sleep_ms, mut wait_ms, mut jobs, mut gap_ms) =
        (100u64, 50u64, 1000u64, 20u64, 200u64);
    let (mut pool, mut save, mut interrupt, mut probe_tasks) = (String::new(), None, false, 1u64);
    while let Some(a) = args.next() {
        let mut number = || -> anyhow::Result<u64> {
            let v = args.next().unwrap_or_default();
            v.parse()
                .with_context(|| format!("{a} needs a number, got {v:?}"))
        };
        match a.as_str() {
            "--tasks" => tasks = number()?.max(1),
            "--sleep-ms" => sleep_ms = number()?,
            "--wait-ms" => wait_ms = number()?,
            "--jobs" => jobs = number()?.max(1),
            "--gap-ms" => gap_ms = number()?,
            "--probe-tasks" => probe_tasks = number()?.max(1),
            "--pool" => pool = args.next().unwrap_or_default(),
            "--save" => save = args.next(),
            "--interrupt" => interrupt = true,
            other => bail!("unknown argument {other:?}; see the comment atop examples/sharing.rs"),
        }
    }
    ctx.set_pool(&pool)?;
    match mode.as_str() {
        "hog" => {
            let t = Instant::now();
            let n = sleepers(&ctx, tasks, sleep_ms).count()?;
            ensure!(n == tasks, "expected {tasks} records, counted {n}");
            println!("ANCHOR hog_seconds={:.3}", t.elapsed().as_secs_f64());
        }
        "probe" => {
            let mut times = Vec::new();
            for i in 0..jobs {
                let t = Instant::now();
                let n = ctx.parallelize(vec![i], 1).map(|x: u64| x + 1).count()?;
                ensure!(n == 1, "expected 1 record, counted {n}");
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                println!("probe job {i}: {ms:.1} ms");
                times.push(ms);
                std::thread::sleep(Duration::from_millis(gap_ms));
            }
            times.sort_by(|a, b| a.total_cmp(b));
            println!("ANCHOR probe_median_ms={:.1}", times[times.len() / 2]);
            println!("ANCHOR probe_max_ms={:.1}", times[times.len() - 1]);
        }
        "cancel" => cancel(&ctx, tasks, sleep_ms, wait_ms, interrupt, save, probe_tasks)?,
        other => bail!("unknown mode {other:?}: hog, probe or cancel"),
    }
    Ok(())
}

/// N tasks of one record each, each sleeping `sleep_ms` in user code.
fn sleepers(ctx: &ember::Context, tasks: u64, sleep_ms: u64) -> ember::Rdd<u64> {
    ctx.parallelize((0..tasks).collect(), tasks as usize)
        .map_with(sleep_ms, |ms: &u64, x: u64| {
            std::thread::sleep(Duration::from_millis(*ms));
            x
        })
}

fn cancel(
    ctx: &ember::Context,
    tasks: u64,
    sleep_ms: u64,
    wait_ms: u64,
    interrupt: bool,
    save: Option<String>,
    probe_tasks: u64,
) -> anyhow::Result<()> {
    let runner = {
        let ctx = ctx.clone();
        std::thread::spawn(move || -> (ember::Result<()>, Instant) {
            let outcome = ctx
                .set_job_group(GROUP, "a job the main thread cancels", interrupt)
                .and_then(|()| {
                    let rdd = sleepers(&ctx, tasks, sleep_ms);
                    match &save {
                        Some(dir) => rdd.save_as_text_file(dir),
                        None => rdd.count().map(|_| ()),
                    }
                });
            (outcome, Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(wait_ms));
    let cancelled_at = Instant::now();
    ctx.cancel_job_group(GROUP)?;
    let (outcome, returned_at) = runner.join().expect("the job thread panicked");
    let returned = returned_at.saturating_duration_since(cancelled_at);
    let message = match outcome {
        Ok(()) => bail!("the job finished although its group was cancelled"),
        Err(e) => e.to_string(),
    };
    println!("action failed: {message}");
    println!(
        "ANCHOR cancel_to_return_ms={:.1}",
        returned.as_secs_f64() * 1000.0
    );
    let n = ctx
        .parallelize((0..probe_tasks).collect(), probe_tasks as usize)
        .count()?;
    ensure!(n == probe_tasks, "the probe counted {n}");
    println!(
        "ANCHOR cancel_to_probe_done_ms={:.1}",
        cancelled_at.elapsed().as_secs_f64() * 1000.0
    );
    if !message.contains("job cancelled") || !message.contains(&format!("{GROUP:?}")) {
        eprintln!("the action's error does not name its cancelled group: {message}");
        std::process::exit(1);
    }
    Ok(())
}
