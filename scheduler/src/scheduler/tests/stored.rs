//! `storage:` shuffle durability in the scheduler: a lost executor's stored map outputs
//! are read from storage (reducers are told so) and never rerun; its unstored ones are.

use super::listener::drain;
use super::*;
use crate::ListenerEvent;

/// e1 dies; e2 (two slots) joins.
fn e1_lost_and_e2_joins(h: &Harness) {
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e1".into(),
        reason: "killed".into(),
    });
    h.sched.send(SchedulerEvent::ExecutorAdded {
        executor_id: "e2".into(),
        slots: 2,
        shuffle_address: "e2:7000".into(),
        host: String::new(),
    });
}

#[test]
fn a_lost_executors_stored_outputs_are_not_rerun_and_reducers_read_them_from_storage() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let rx = h.sched.listen();
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, m0) = h.next_task();
    let (_, m1) = h.next_task();
    assert!(m0.shuffle_id.is_some() && m1.shuffle_id.is_some());
    h.succeed_stored(&ex, &m0, true);
    h.succeed_stored(&ex, &m1, true);
    // Both reducers start on e1; then e1 dies and e2 joins.
    let (_, r0) = h.next_task();
    let (_, r1) = h.next_task();
    assert!(r0.shuffle_id.is_none() && r1.shuffle_id.is_none());
    e1_lost_and_e2_joins(&h);
    // Only the two reducers run again, on e2, reading both map outputs from storage.
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!((ex.as_str(), t.shuffle_id), ("e2", None), "{t:?}");
        let maps = t.shuffle_inputs[0].clone().map_locations().unwrap();
        let read: Vec<(u32, &str, bool)> = maps
            .iter()
            .map(|l| (l.map_partition, l.executor_id.as_str(), l.from_storage))
            .collect();
        assert_eq!(read, vec![(0, "e1", true), (1, "e1", true)]);
        h.succeed(&ex, &t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    h.no_more_tasks();
    let seen = drain(&rx);
    assert!(
        seen.iter().any(|e| matches!(
            e,
            ListenerEvent::ExecutorLost { executor_id, outputs_from_storage: 2, .. }
                if executor_id == "e1"
        )),
        "{seen:?}"
    );
}

#[test]
fn a_lost_executors_unstored_outputs_still_rerun() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, m0) = h.next_task();
    let (_, m1) = h.next_task();
    h.succeed_stored(&ex, &m0, true);
    h.succeed_stored(&ex, &m1, false);
    let _ = h.next_task();
    let _ = h.next_task();
    e1_lost_and_e2_joins(&h);
    // Map 1 (not stored) runs again, map 0 never; every reducer reads map 0 from
    // storage.
    let mut maps_run = Vec::new();
    let mut reducers = 0;
    while reducers < 2 {
        let (ex, t) = h.next_task();
        assert_eq!(ex, "e2");
        if t.shuffle_id.is_some() {
            maps_run.push(t.partition);
        } else {
            let maps = t.shuffle_inputs[0].clone().map_locations().unwrap();
            let zero = maps.iter().find(|l| l.map_partition == 0).unwrap();
            assert!(zero.from_storage && zero.executor_id == "e1", "{maps:?}");
            if !maps.iter().any(|l| l.map_partition == 1) {
                // Launched before map 1 ran again: a real reducer fails to find it.
                h.fail(
                    &ex,
                    &t,
                    task_failure::Reason::FetchFailed(ember_proto::FetchFailure {
                        shuffle_id: 0,
                        map_partition: 1,
                        reduce_partition: t.partition,
                        message: "no known location for this map output".into(),
                        ..Default::default()
                    }),
                );
                continue;
            }
            reducers += 1;
        }
        h.succeed(&ex, &t);
    }
    assert_eq!(maps_run, vec![1]);
    assert!(drain_until_end(&events).1.is_ok());
}
