//! Pipelining: once a stage's tasks have run briefly several times in a row, a slot
//! gets up to `pipeline_depth` of its tasks in flight (fewer as its tasks take longer:
//! `pipeline_budget`); slow stages, and any stage with
//! speculation on, get one per slot.

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::{task_status, task_success, Plan, RddNode, TaskMetrics, TaskStatus, TaskSuccess};

use super::{drain_until_end, Harness};
use crate::{SchedulerConfig, SchedulerEvent};

fn one_stage(tasks: u32) -> Plan {
    Plan {
        nodes: vec![RddNode {
            id: 0,
            num_partitions: tasks,
            name: "source".into(),
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    }
}

/// Answers `task` as a success that ran for `micros`.
fn done(h: &Harness, exec: &str, task: &ember_proto::TaskDescription, micros: u64) {
    h.sched
        .send(SchedulerEvent::TaskFinished(Box::new(TaskStatus {
            barrier: None,
            task_id: task.task_id,
            executor_id: exec.to_string(),
            metrics: Some(TaskMetrics {
                run_time_micros: micros,
                ..Default::default()
            }),
            outcome: Some(task_status::Outcome::Success(TaskSuccess {
                output: Some(task_success::Output::Result(vec![task.partition as u8])),
                ..Default::default()
            })),
        })));
}

/// Launched and not yet answered, after the scheduler has settled.
fn in_flight(h: &Harness) -> Vec<(String, ember_proto::TaskDescription)> {
    let mut out = vec![h.next_task()];
    while let Ok(t) = h.launched.recv_timeout(Duration::from_millis(100)) {
        out.push(t);
    }
    out
}

fn config(speculation: bool) -> SchedulerConfig {
    SchedulerConfig {
        pipeline_depth: 4,
        quick_streak: 3,
        quick_task: Duration::from_millis(2),
        speculation,
        ..Default::default()
    }
}

#[test]
fn quick_tasks_fill_each_slot_up_to_the_depth_evenly() {
    let h = Harness::new(&[("e1", 1), ("e2", 2)], config(false));
    let events = h.sched.submit(one_stage(40), HashMap::new());
    // One task per slot until three in a row ran quickly.
    let mut flight = in_flight(&h);
    assert_eq!(flight.len(), 3, "one per slot at first");
    for (ex, t) in flight.drain(..) {
        done(&h, &ex, &t, 100);
    }
    // Now every slot may hold 4: e1 4, e2 8.
    let flight = in_flight(&h);
    let on = |e: &str| flight.iter().filter(|(x, _)| x == e).count();
    assert_eq!(
        (on("e1"), on("e2")),
        (4, 8),
        "{:?}",
        flight.iter().map(|(e, _)| e).collect::<Vec<_>>()
    );
    let mut left = 40 - 3;
    let mut flight = flight;
    while left > 0 {
        for (ex, t) in flight.drain(..) {
            done(&h, &ex, &t, 100);
            left -= 1;
        }
        if left > 0 {
            flight = in_flight(&h);
            let on = |e: &str| flight.iter().filter(|(x, _)| x == e).count();
            assert!(on("e1") <= 4 && on("e2") <= 8, "never past the depth");
        }
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(results.len(), 40, "every partition once");
}

#[test]
fn slow_tasks_and_speculation_keep_one_task_per_slot() {
    for speculation in [false, true] {
        let h = Harness::new(&[("e1", 1)], config(speculation));
        let events = h.sched.submit(one_stage(8), HashMap::new());
        // Slow tasks (5 ms) never start a streak; quick ones do not matter with speculation.
        let micros = if speculation { 100 } else { 5_000 };
        for _ in 0..8 {
            let flight = in_flight(&h);
            assert_eq!(
                flight.len(),
                1,
                "one task in flight (speculation {speculation})"
            );
            let (ex, t) = &flight[0];
            done(&h, ex, t, micros);
        }
        let (results, outcome, _) = drain_until_end(&events);
        assert!(outcome.is_ok());
        assert_eq!(results.len(), 8);
    }
}

#[test]
fn the_depth_is_the_run_time_budget_over_the_slowest_quick_task() {
    // Budget 1 ms, depth up to 256: tasks of 250 µs get 4 per slot, of 900 µs the
    // floor of 2, of 10 µs 100, of 1 µs the whole 256 (one slot; three rounds' worth).
    for (micros, want) in [(250u64, 4usize), (900, 2), (10, 100), (1, 256)] {
        let tasks = 3 + 3 * want;
        let cfg = SchedulerConfig {
            pipeline_depth: 256,
            pipeline_budget: Duration::from_millis(1),
            ..config(false)
        };
        let h = Harness::new(&[("e1", 1)], cfg);
        let events = h.sched.submit(one_stage(tasks as u32), HashMap::new());
        let mut left = tasks;
        // The streak: three single tasks.
        for _ in 0..3 {
            let flight = in_flight(&h);
            assert_eq!(flight.len(), 1, "one per slot before the streak");
            let (ex, t) = &flight[0];
            done(&h, ex, t, micros);
            left -= 1;
        }
        let mut widest = 0;
        while left > 0 {
            let flight = in_flight(&h);
            widest = widest.max(flight.len());
            assert!(
                flight.len() <= want,
                "{micros} µs: {} in flight",
                flight.len()
            );
            for (ex, t) in flight {
                done(&h, &ex, &t, micros);
                left -= 1;
            }
        }
        assert_eq!(widest, want, "{micros} µs tasks");
        let (results, outcome, _) = drain_until_end(&events);
        assert!(outcome.is_ok());
        assert_eq!(results.len(), tasks, "every partition once");
    }
}
