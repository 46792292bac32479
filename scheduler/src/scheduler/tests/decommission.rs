//! Decommissioning in the scheduler: a draining executor gets no more tasks; once
//! drained, each of its map outputs without a replica is planned onto a live executor
//! (other hosts first); the moves it confirms become replicas, so its loss reruns no map
//! task.

use super::listener::drain;
use super::replicated::{replicated, targets, three_executors};
use super::*;
use crate::ListenerEvent;

fn decommissioning(h: &Harness, e: &str, drained: bool) {
    h.sched.send(SchedulerEvent::ExecutorDecommissioning {
        executor_id: e.into(),
        drained,
    });
}

#[test]
fn a_drained_executors_outputs_move_to_live_executors_and_none_reruns() {
    let h = three_executors();
    let rx = h.sched.listen();
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ea, m0) = h.next_task();
    let (eb, m1) = h.next_task();
    // ea starts decommissioning while its map task runs: nothing more goes there.
    decommissioning(&h, &ea, false);
    h.succeed(&ea, &m0);
    h.succeed(&eb, &m1);
    let mut reducers = vec![h.next_task(), h.next_task()];
    assert!(
        reducers
            .iter()
            .all(|(x, t)| *x != ea && t.shuffle_id.is_none()),
        "no task goes to a decommissioning executor: {:?}",
        reducers.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    decommissioning(&h, &ea, true);
    let (from, plan) = h.migrations.recv_timeout(WAIT).expect("a migration plan");
    assert_eq!(from, ea);
    assert_eq!(plan.len(), 1, "{plan:?}");
    let target = plan[0].target.clone().unwrap();
    let to = String::from_utf8_lossy(&target.executor_id).into_owned();
    assert_eq!(plan[0].map_partition, 0);
    assert_ne!(to, ea);
    // Executors ea and its host peer share host a unless ea is e3 (host b).
    if ea != "e3" {
        assert_eq!(to, "e3", "another host first");
    }
    assert_eq!(
        String::from_utf8_lossy(&target.shuffle_address),
        format!("http://{to}:7000")
    );
    // The move is confirmed, then the executor leaves.
    h.sched.send(SchedulerEvent::OutputsMigrated {
        executor_id: ea.clone(),
        outputs: vec![(plan[0].shuffle_id, 0, target)],
        blocks: Vec::new(),
    });
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: ea.clone(),
        reason: "decommissioned".into(),
    });
    // The reducers launched before finish; any launched again read map 0 from `to`.
    for (x, t) in reducers.drain(..) {
        h.succeed(&x, &t);
    }
    assert!(drain_until_end(&events).1.is_ok());
    h.no_more_tasks();
    let seen = drain(&rx);
    assert!(
        seen.iter().any(|e| matches!(
            e,
            ListenerEvent::ExecutorLost { executor_id, outputs_from_replicas: 1, reason, .. }
                if *executor_id == ea && reason == "decommissioned"
        )),
        "{seen:?}"
    );
}

#[test]
fn outputs_with_a_replica_need_no_move_and_the_plan_may_be_empty() {
    let h = three_executors();
    let _events = h
        .sched
        .submit(replicated(two_stage_plan(), 1), HashMap::new());
    let (ea, m0) = h.next_task();
    let (eb, m1) = h.next_task();
    let to = targets(&m0);
    super::replicated::succeed_replicated(&h, &ea, &m0, &[to[0].as_str()]);
    super::replicated::succeed_replicated(&h, &eb, &m1, &[]);
    decommissioning(&h, &ea, true);
    let (from, plan) = h.migrations.recv_timeout(WAIT).expect("a migration plan");
    assert_eq!((from.as_str(), plan.len()), (ea.as_str(), 0), "{plan:?}");
    decommissioning(&h, &eb, true);
    let (from, plan) = h.migrations.recv_timeout(WAIT).expect("a migration plan");
    assert_eq!(from, eb);
    assert_eq!(plan.len(), 1);
    let to = String::from_utf8_lossy(&plan[0].target.as_ref().unwrap().executor_id).into_owned();
    assert!(
        to != ea && to != eb,
        "never to a decommissioning executor: {to}"
    );
}
