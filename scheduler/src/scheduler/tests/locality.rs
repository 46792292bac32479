//! Cached blocks and where tasks go: delay scheduling (a task whose input is cached waits
//! for a slot there during the locality wait, then takes any free slot), and a
//! decommissioning executor's blocks moved to peers and read there.

use ember_proto::{task_status, task_success, CachedBlock, MapHost, TaskSuccess};

use super::listener::drain;
use super::replicated::{three_executors, three_executors_with};
use super::*;
use crate::ListenerEvent;

/// One memory-cached RDD of `parts` partitions, read by a result stage.
pub(super) fn cached_plan(parts: u32) -> Plan {
    Plan {
        nodes: vec![ember_proto::RddNode {
            id: 0,
            num_partitions: parts,
            name: "cache at src/main.rs:3".into(),
            storage: ember_proto::StorageLevel::StorageMemory as i32,
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    }
}

/// Succeeds `t` on `ex`, reporting its partition of RDD 0 cached there.
fn succeed_caching(h: &Harness, ex: &str, t: &TaskDescription) {
    h.reply(
        ex,
        t,
        task_status::Outcome::Success(TaskSuccess {
            output: Some(task_success::Output::Result(vec![0])),
            cached: vec![CachedBlock {
                rdd_id: 0,
                partition: t.partition,
                memory_bytes: 100,
                ..Default::default()
            }],
            ..Default::default()
        }),
    );
}

/// Runs a first job of `cached_plan(parts)`, every block cached where its task ran;
/// partition -> holder.
fn cache_all(h: &Harness, parts: u32) -> HashMap<u32, String> {
    let events = h.sched.submit(cached_plan(parts), HashMap::new());
    let mut holder = HashMap::new();
    for _ in 0..parts {
        let (ex, t) = h.next_task();
        holder.insert(t.partition, ex.clone());
        succeed_caching(h, &ex, &t);
    }
    assert!(drain_until_end(&events).1.is_ok());
    holder
}

/// Keeps `busy` occupied with a map task of another job; returns it, to finish later.
fn occupy(h: &Harness, busy: &str) -> (String, TaskDescription) {
    let _other = h.sched.submit(two_stage_plan(), HashMap::new());
    loop {
        let (ex, t) = h.next_task();
        if ex == busy {
            return (ex, t);
        }
        h.succeed(&ex, &t);
    }
}

/// The tasks of the cached plan launched within `window`, each succeeded; others are
/// succeeded and left out.
fn cached_launches(h: &Harness, window: Duration) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    while let Ok((e, t)) = h.launched.recv_timeout(window) {
        if t.shuffle_id.is_none() && t.plan.as_ref().is_some_and(|p| p.nodes.len() == 1) {
            out.push((e.clone(), t.partition));
        }
        h.succeed(&e, &t);
    }
    out
}

#[test]
fn a_cached_task_waits_for_its_busy_executor_within_the_locality_wait() {
    let config = SchedulerConfig {
        locality_wait: Duration::from_secs(60),
        ..Default::default()
    };
    let h = Harness::new(&[("e1", 1), ("e2", 1)], config);
    let holder = cache_all(&h, 2);
    let busy = holder[&0].clone();
    let (ex, blocker) = occupy(&h, &busy);
    let _second = h.sched.submit(cached_plan(2), HashMap::new());
    // The other executor is free, but partition 0's block is on the busy one.
    let launched = cached_launches(&h, Duration::from_millis(400));
    assert!(
        launched.iter().all(|(e, p)| *p != 0 && *e == holder[p]),
        "partition 0 waits for {busy}; the rest run where cached: {launched:?}"
    );
    h.succeed(&ex, &blocker);
    let launched = cached_launches(&h, Duration::from_millis(400));
    assert!(
        launched.contains(&(busy.clone(), 0)),
        "partition 0 ran on {busy} once it was free: {launched:?}"
    );
}

#[test]
fn past_the_locality_wait_a_cached_task_takes_any_free_slot() {
    for wait_ms in [0, 300] {
        let config = SchedulerConfig {
            locality_wait: Duration::from_millis(wait_ms),
            ..Default::default()
        };
        let h = Harness::new(&[("e1", 1), ("e2", 1)], config);
        let holder = cache_all(&h, 2);
        let busy = holder[&0].clone();
        let (_ex, _blocker) = occupy(&h, &busy);
        let started = std::time::Instant::now();
        let _second = h.sched.submit(cached_plan(2), HashMap::new());
        // Partition 0's launch, elsewhere, and when it came.
        let mut elsewhere = None;
        while let Ok((e, t)) = h.launched.recv_timeout(Duration::from_millis(1500)) {
            if t.shuffle_id.is_none()
                && t.partition == 0
                && t.plan.as_ref().is_some_and(|p| p.nodes.len() == 1)
            {
                elsewhere = Some((e.clone(), started.elapsed()));
            }
            h.succeed(&e, &t);
        }
        let (e, after) = elsewhere.expect("partition 0 launched");
        assert_ne!(e, busy, "wait {wait_ms} ms: partition 0 ran elsewhere");
        // Not before the wait was over (the loop wakes up to look, 100 ms ticks).
        assert!(
            after >= Duration::from_millis(wait_ms),
            "wait {wait_ms} ms: launched after {after:?}"
        );
    }
}

#[test]
fn a_block_held_by_two_leaving_executors_is_moved_by_them() {
    let config = SchedulerConfig {
        locality_wait: Duration::ZERO,
        ..Default::default()
    };
    let h = three_executors_with(config);
    let x = cache_all(&h, 1)[&0].clone();
    // A second copy of partition 0 elsewhere: x is busy, so the next job's task runs
    // on another executor and caches it there too.
    let (bx, blocker) = occupy(&h, &x);
    let events = h.sched.submit(cached_plan(1), HashMap::new());
    let (y, t) = loop {
        let (e, t) = h.next_task();
        if t.shuffle_id.is_none() && t.plan.as_ref().is_some_and(|p| p.nodes.len() == 1) {
            break (e, t);
        }
        h.succeed(&e, &t);
    };
    assert_ne!(y, x);
    succeed_caching(&h, &y, &t);
    assert!(drain_until_end(&events).1.is_ok());
    h.succeed(&bx, &blocker);
    let _ = cached_launches(&h, Duration::from_millis(300));
    // Both holders leave at once: neither copy may count on the other.
    for e in [&x, &y] {
        h.sched.send(SchedulerEvent::ExecutorDecommissioning {
            executor_id: e.to_string(),
            drained: false,
        });
    }
    h.sched.send(SchedulerEvent::ExecutorDecommissioning {
        executor_id: x.clone(),
        drained: true,
    });
    let _ = h.migrations.recv_timeout(WAIT).expect("a migration plan");
    let (from, blocks) = h.block_migrations.recv_timeout(WAIT).expect("its blocks");
    assert_eq!(from, x);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let to = String::from_utf8_lossy(&blocks[0].target.as_ref().unwrap().executor_id).into_owned();
    assert!(to != x && to != y, "to the executor that stays: {to}");
}

#[test]
fn a_decommissioned_executors_cached_blocks_move_and_are_read_where_they_went() {
    let h = three_executors();
    let rx = h.sched.listen();
    let holder = cache_all(&h, 3);
    // The executor with a block leaves: its blocks, held nowhere else, are planned.
    let ea = holder[&0].clone();
    let mine: Vec<u32> = {
        let mut v: Vec<u32> = holder
            .iter()
            .filter(|(_, e)| **e == ea)
            .map(|(p, _)| *p)
            .collect();
        v.sort_unstable();
        v
    };
    h.sched.send(SchedulerEvent::ExecutorDecommissioning {
        executor_id: ea.clone(),
        drained: true,
    });
    let (from, outputs) = h.migrations.recv_timeout(WAIT).expect("a migration plan");
    assert_eq!((from.as_str(), outputs.len()), (ea.as_str(), 0));
    let (from, blocks) = h.block_migrations.recv_timeout(WAIT).expect("its blocks");
    assert_eq!(from, ea);
    let planned: Vec<u32> = blocks.iter().map(|b| b.partition).collect();
    assert_eq!(planned, mine, "{blocks:?}");
    assert!(blocks.iter().all(|b| b.rdd_id == 0
        && b.target
            .as_ref()
            .is_some_and(|t| t.executor_id != ea.as_bytes())));
    // The moves are confirmed, then the executor leaves.
    let moved: Vec<(u32, u32, MapHost, u64)> = blocks
        .iter()
        .map(|b| (0, b.partition, b.target.clone().unwrap(), 4096))
        .collect();
    let went: HashMap<u32, String> = blocks
        .iter()
        .map(|b| {
            let t = &b.target.as_ref().unwrap().executor_id;
            (b.partition, String::from_utf8_lossy(t).into_owned())
        })
        .collect();
    h.sched.send(SchedulerEvent::OutputsMigrated {
        executor_id: ea.clone(),
        outputs: Vec::new(),
        blocks: moved,
    });
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: ea.clone(),
        reason: "decommissioned".into(),
    });
    let seen = drain(&rx);
    for (p, to) in &went {
        assert!(
            seen.iter().any(|e| matches!(e,
                ListenerEvent::BlockCached { partition, executor_id, moved_from, disk_bytes: 4096, .. }
                    if partition == p && executor_id == to && *moved_from == ea)),
            "partition {p} cached on {to}, moved from {ea}: {seen:?}"
        );
    }
    // The next job reads each moved block where it went.
    let events = h.sched.submit(cached_plan(3), HashMap::new());
    for _ in 0..3 {
        let (e, t) = h.next_task();
        let want = went.get(&t.partition).unwrap_or(&holder[&t.partition]);
        assert_eq!(&e, want, "partition {}", t.partition);
        h.succeed(&e, &t);
    }
    assert!(drain_until_end(&events).1.is_ok());
}

#[test]
fn a_move_confirmed_after_an_unpersist_or_to_a_lost_executor_is_not_recorded() {
    for unpersisted in [false, true] {
        let h = three_executors();
        let rx = h.sched.listen();
        let holder = cache_all(&h, 3);
        let ea = holder[&0].clone();
        h.sched.send(SchedulerEvent::ExecutorDecommissioning {
            executor_id: ea.clone(),
            drained: true,
        });
        let _ = h.migrations.recv_timeout(WAIT).expect("a migration plan");
        let (_, blocks) = h.block_migrations.recv_timeout(WAIT).expect("its blocks");
        let target = blocks[0].target.clone().unwrap();
        let to = String::from_utf8_lossy(&target.executor_id).into_owned();
        if unpersisted {
            h.sched.send(SchedulerEvent::Unpersist { rdd_id: 0 });
        } else {
            // Its target is lost before the confirmation arrives.
            h.sched.send(SchedulerEvent::ExecutorLost {
                executor_id: to.clone(),
                reason: "killed".into(),
            });
        }
        h.sched.send(SchedulerEvent::OutputsMigrated {
            executor_id: ea.clone(),
            outputs: Vec::new(),
            blocks: vec![(0, blocks[0].partition, target, 10)],
        });
        let seen = drain(&rx);
        assert!(
            !seen.iter().any(|e| matches!(e,
                ListenerEvent::BlockCached { moved_from, .. } if !moved_from.is_empty())),
            "unpersisted {unpersisted}: {seen:?}"
        );
    }
}
