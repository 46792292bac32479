//! `replicated:N` shuffle durability in the scheduler: map tasks are told where to push
//! their output (other executors, other hosts first), the replicas their executors
//! confirm are recorded (not those on executors lost meanwhile), and a lost executor's
//! replicated outputs are read from a replica and never rerun.

use super::listener::drain;
use super::*;
use crate::ListenerEvent;
use ember_proto::MapHost;

/// `plan` with every shuffle replicated `n` times.
pub(super) fn replicated(mut plan: Plan, n: u32) -> Plan {
    for node in &mut plan.nodes {
        for dep in &mut node.deps {
            if let Some(ember_proto::dependency::Kind::Shuffle(s)) = dep.kind.as_mut() {
                s.replicas = n;
            }
        }
    }
    plan
}

/// Executors e1 and e2 on host a, e3 on host b, one slot each, each serving blocks.
pub(super) fn three_executors() -> Harness {
    three_executors_with(SchedulerConfig::default())
}

/// [`three_executors`] under `config`.
pub(super) fn three_executors_with(config: SchedulerConfig) -> Harness {
    let h = Harness::new(&[], config);
    for (id, host) in [("e1", "a"), ("e2", "a"), ("e3", "b")] {
        h.sched.send(SchedulerEvent::ExecutorAdded {
            executor_id: id.into(),
            slots: 1,
            shuffle_address: format!("http://{id}:7000"),
            host: host.into(),
        });
    }
    h
}

/// Reports map task `t` on `exec` done, its output confirmed on `replicas`.
pub(super) fn succeed_replicated(h: &Harness, exec: &str, t: &TaskDescription, replicas: &[&str]) {
    let sid = t.shuffle_id.unwrap();
    let output = task_success::Output::MapStatus(MapStatus {
        shuffle_id: sid,
        map_partition: t.partition,
        block_sizes: vec![1; reducers(t, sid) as usize],
        replicas: replicas
            .iter()
            .map(|r| MapHost {
                executor_id: r.to_string().into(),
                shuffle_address: format!("http://{r}:7000").into(),
                from_storage: false,
            })
            .collect(),
        ..Default::default()
    });
    h.reply(
        exec,
        t,
        task_status::Outcome::Success(TaskSuccess {
            output: Some(output),
            ..Default::default()
        }),
    );
}

pub(super) fn targets(t: &TaskDescription) -> Vec<String> {
    t.replica_targets
        .iter()
        .map(|r| String::from_utf8_lossy(&r.executor_id).into_owned())
        .collect()
}

#[test]
fn map_tasks_push_to_other_executors_on_other_hosts_first() {
    let h = three_executors();
    let _events = h
        .sched
        .submit(replicated(two_stage_plan(), 2), HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        let to = targets(&t);
        assert_eq!(to.len(), 2, "{to:?}");
        assert!(!to.contains(&ex), "never the writer itself: {ex} -> {to:?}");
        if ex != "e3" {
            assert_eq!(to[0], "e3", "the other host first: {ex} -> {to:?}");
        }
        for r in &t.replica_targets {
            let id = String::from_utf8_lossy(&r.executor_id);
            assert_eq!(
                String::from_utf8_lossy(&r.shuffle_address),
                format!("http://{id}:7000")
            );
        }
    }
    // A plan without replication names no targets.
    let h = three_executors();
    let _events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (_, t) = h.next_task();
    assert!(t.shuffle_id.is_some() && t.replica_targets.is_empty());
}

/// Runs the two reducers to the end after `victim` is lost (a reducer launched on it is
/// launched again elsewhere); every map task launched meanwhile is run and its
/// partition returned.
fn finish_after_losing(h: &Harness, victim: &str) -> Vec<u32> {
    let (x0, r0) = h.next_task();
    let (x1, r1) = h.next_task();
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: victim.into(),
        reason: "killed".into(),
    });
    for (x, r) in [(&x0, &r0), (&x1, &r1)] {
        if x != victim {
            h.succeed(x, r);
        }
    }
    let mut maps_run = Vec::new();
    let left = [&x0, &x1].iter().filter(|x| x.as_str() == victim).count();
    let mut reducers = 0;
    while reducers < left {
        let (ex, t) = h.next_task();
        assert_ne!(ex, victim);
        if t.shuffle_id.is_some() {
            maps_run.push(t.partition);
        } else {
            let maps = t.shuffle_inputs[0].clone().map_locations().unwrap();
            if maps.len() < 2 {
                // Launched before a rerun map output was back: a real reducer fails.
                h.fail(
                    &ex,
                    &t,
                    task_failure::Reason::FetchFailed(ember_proto::FetchFailure {
                        shuffle_id: t.shuffle_inputs[0].shuffle_id,
                        map_partition: 0,
                        reduce_partition: t.partition,
                        message: "no known location for this map output".into(),
                        ..Default::default()
                    }),
                );
                continue;
            }
            assert!(maps.iter().all(|l| l.executor_id != victim), "{maps:?}");
            reducers += 1;
        }
        h.succeed(&ex, &t);
    }
    maps_run
}

#[test]
fn a_lost_executors_replicated_outputs_are_read_from_replicas_and_not_rerun() {
    let h = three_executors();
    let rx = h.sched.listen();
    let events = h
        .sched
        .submit(replicated(two_stage_plan(), 1), HashMap::new());
    let (ea, m0) = h.next_task();
    let (eb, m1) = h.next_task();
    let (ta, tb) = (targets(&m0), targets(&m1));
    succeed_replicated(&h, &ea, &m0, &[ta[0].as_str()]);
    succeed_replicated(&h, &eb, &m1, &[tb[0].as_str()]);
    let maps_run = finish_after_losing(&h, &ea);
    assert!(maps_run.is_empty(), "no map task runs again: {maps_run:?}");
    assert!(drain_until_end(&events).1.is_ok());
    h.no_more_tasks();
    let seen = drain(&rx);
    assert!(
        seen.iter().any(|e| matches!(
            e,
            ListenerEvent::ExecutorLost { executor_id, outputs_from_replicas: 1, .. }
                if *executor_id == ea
        )),
        "{seen:?}"
    );
}

#[test]
fn a_replica_claimed_on_an_unknown_executor_or_the_writer_is_no_replica() {
    let h = three_executors();
    let events = h
        .sched
        .submit(replicated(two_stage_plan(), 1), HashMap::new());
    let (ea, m0) = h.next_task();
    let (eb, m1) = h.next_task();
    // e9 never registered (or was lost before the status came); the writer holds the
    // output already.
    succeed_replicated(&h, &ea, &m0, &["e9", ea.as_str()]);
    succeed_replicated(&h, &eb, &m1, &[]);
    let maps_run = finish_after_losing(&h, &ea);
    assert_eq!(maps_run, vec![0], "map 0 had no copy elsewhere");
    assert!(drain_until_end(&events).1.is_ok());
}

#[test]
fn a_slot_given_back_while_an_output_is_pushed_runs_another_task_and_is_freed_once() {
    let h = Harness::new(&[("e1", 1)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, m0) = h.next_task();
    h.no_more_tasks(); // one slot: the other map task waits
    h.sched.send(SchedulerEvent::SlotReleased {
        task_id: m0.task_id,
        executor_id: ex.clone(),
    });
    // Given back twice, or by another executor: counted once.
    h.sched.send(SchedulerEvent::SlotReleased {
        task_id: m0.task_id,
        executor_id: ex.clone(),
    });
    let (_, m1) = h.next_task();
    assert_eq!(
        m1.shuffle_id, m0.shuffle_id,
        "the other map task took the slot"
    );
    h.no_more_tasks();
    // m0's status finishes it but frees no slot: m1 still holds the only one.
    h.succeed(&ex, &m0);
    h.no_more_tasks();
    h.succeed(&ex, &m1);
    let (_, r0) = h.next_task();
    assert!(r0.shuffle_id.is_none());
    h.no_more_tasks();
    h.succeed(&ex, &r0);
    let (_, r1) = h.next_task();
    h.succeed(&ex, &r1);
    assert!(drain_until_end(&events).1.is_ok());
}
