//! Job groups, pools and cancellation in local mode: a group cancelled from another
//! thread ends the blocked action with an error naming the group while other jobs run
//! on, `cancel_all_jobs`, names over the limit, and local mode's fair pools from a pool
//! file (a bad one refused naming it).

use std::time::Duration;

use ember::{Conf, Context, EmberError, SchedulingMode};

fn local(threads: usize) -> Context {
    let mut conf = Conf::local(threads, 64 << 20);
    conf.progress = false;
    Context::with_conf(conf).unwrap()
}

/// A job of `tasks` tasks of 50 records that each sleep `ms` ms.
fn slow(ctx: &Context, tasks: usize, ms: u64) -> ember::Rdd<u64> {
    ctx.parallelize((0..tasks as u64 * 50).collect(), tasks)
        .map_with(ms, |ms: &u64, x: u64| {
            std::thread::sleep(Duration::from_millis(*ms));
            x
        })
}

#[test]
fn a_group_cancelled_from_another_thread_ends_its_action_and_spares_other_jobs() {
    let ctx = local(2);
    let in_group = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            ctx.set_job_group("nightly", "the nightly rebuild", true)
                .unwrap();
            slow(&ctx, 4, 100).count()
        })
    };
    let outside = {
        let ctx = ctx.clone();
        std::thread::spawn(move || slow(&ctx, 2, 2).count())
    };
    std::thread::sleep(Duration::from_millis(300));
    ctx.cancel_job_group("nightly").unwrap();
    match in_group.join().unwrap() {
        Err(EmberError::Cancelled(m)) => {
            assert!(m.contains("part of cancelled job group \"nightly\""), "{m}")
        }
        other => panic!("expected a cancellation, got {other:?}"),
    }
    assert_eq!(
        outside.join().unwrap().unwrap(),
        100,
        "the other job runs on"
    );
    // The thread's group stays set on its own thread only; this one runs freely.
    assert_eq!(ctx.range(0, 10, 2).count().unwrap(), 10);
}

#[test]
fn cancel_all_jobs_ends_every_running_action() {
    let ctx = local(2);
    let runs: Vec<_> = (0..2)
        .map(|i| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                ctx.set_pool(&format!("pool-{i}")).unwrap();
                slow(&ctx, 2, 100).count()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    ctx.cancel_all_jobs().unwrap();
    for r in runs {
        match r.join().unwrap() {
            Err(EmberError::Cancelled(m)) => assert!(m.contains("cancel_all_jobs"), "{m}"),
            other => panic!("expected a cancellation, got {other:?}"),
        }
    }
    assert_eq!(ctx.range(0, 10, 2).count().unwrap(), 10, "later jobs run");
}

#[test]
fn names_over_the_limit_are_refused_and_properties_are_per_thread() {
    let ctx = local(1);
    let long = "x".repeat(2000);
    let e = ctx.set_pool(&long).unwrap_err().to_string();
    assert!(
        e.contains("pool name") && e.contains("over the limit of 1024"),
        "{e}"
    );
    assert!(e.len() < 300, "{e}");
    let e = ctx.set_job_group(&long, "", false).unwrap_err().to_string();
    assert!(e.contains("job group") && e.contains("2000 bytes"), "{e}");
    ctx.set_pool("etl").unwrap();
    assert_eq!(ctx.pool(), "etl");
    let other = ctx.clone();
    assert_eq!(std::thread::spawn(move || other.pool()).join().unwrap(), "");
    ctx.set_pool("").unwrap();
    assert_eq!(ctx.pool(), "");
}

#[test]
fn local_mode_takes_fair_pools_from_a_pool_file_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("pools.toml");
    std::fs::write(&good, "[pools.etl]\nweight = 3\nmode = \"fair\"\n").unwrap();
    let mut conf = Conf::local(2, 64 << 20).with_scheduling(SchedulingMode::Fair, Some(good));
    conf.progress = false;
    let ctx = Context::with_conf(conf).unwrap();
    ctx.set_pool("etl").unwrap();
    let sums = ctx
        .range(0, 1000, 4)
        .map(|x: i64| (x % 3, x))
        .reduce_by_key(|a, b| a + b);
    let mut got = sums.collect().unwrap();
    got.sort_unstable();
    let want: Vec<(i64, i64)> = (0..3)
        .map(|k| (k, (0..1000).filter(|x| x % 3 == k).sum()))
        .collect();
    assert_eq!(got, want);

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[pools.etl]\nweight = 0\n").unwrap();
    let mut conf = Conf::local(2, 64 << 20).with_scheduling(SchedulingMode::Fair, Some(bad));
    conf.progress = false;
    let e = Context::with_conf(conf).err().expect("refused").to_string();
    assert!(
        e.contains("EMBER_POOL_FILE")
            && e.contains("bad.toml")
            && e.contains("weight must be at least 1"),
        "{e}"
    );
}
