//! Gang launch: all ranks in one dispatch pass, each on a free slot, or none; other
//! stages use the slots a waiting gang cannot; the too-wide error; partial jobs
//! refused; no speculative copies.

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::{
    task_status, task_success, TaskDescription, TaskMetrics, TaskStatus, TaskSuccess,
};

use super::{check_gang, one_stage, Gangs};
use crate::scheduler::tests::drain_until_end;
use crate::{JobFailure, SchedulerConfig, SchedulerEvent};

#[test]
fn a_gang_launches_whole_once_enough_slots_are_free_and_others_use_the_rest() {
    let slots = [("e1", 2), ("e2", 1)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let first = g.sched.submit(one_stage(2, false), HashMap::new());
    let busy = g.next_pass();
    assert_eq!(busy.len(), 2);
    let events = g.sched.submit(one_stage(3, true), HashMap::new());
    assert!(
        g.settle().passes.is_empty(),
        "1 slot free, 3 needed: nothing launches"
    );
    // An ordinary task may take the slot the gang cannot use yet.
    let other = g.sched.submit(one_stage(1, false), HashMap::new());
    let filler = g.next_pass();
    assert_eq!(filler.len(), 1);
    assert!(filler[0].1.barrier.is_none());
    for (e, t) in [&busy[0], &filler[0]] {
        g.succeed(e, t);
        assert!(
            g.settle().passes.is_empty(),
            "still fewer free slots than ranks"
        );
    }
    g.succeed(&busy[1].0, &busy[1].1);
    let seen = g.settle();
    assert_eq!(seen.passes.len(), 1, "every rank in one dispatch pass");
    let ranks = check_gang(&seen.passes[0], 3, &slots);
    for (e, t) in &ranks {
        g.succeed(e, t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    let want: HashMap<u32, Vec<u8>> = (0..3).map(|p| (p, vec![p as u8, 1])).collect();
    assert_eq!(results, want);
    assert_eq!(drain_until_end(&first).1, Ok(()));
    assert_eq!(drain_until_end(&other).1, Ok(()));
}

#[test]
fn a_rank_never_waits_behind_a_pipelined_task() {
    // Quick ordinary tasks fill e1's one slot 4 deep; a gang of one waits until no
    // ordinary task is left in flight there.
    let config = SchedulerConfig {
        pipeline_depth: 4,
        quick_streak: 1,
        quick_task: Duration::from_millis(2),
        ..Default::default()
    };
    let g = Gangs::new(&[("e1", 1)], config);
    let ordinary = g.sched.submit(one_stage(9, false), HashMap::new());
    let quick = |e: &str, t: &TaskDescription| {
        g.sched
            .send(SchedulerEvent::TaskFinished(Box::new(TaskStatus {
                barrier: None,
                task_id: t.task_id,
                executor_id: e.into(),
                metrics: Some(TaskMetrics {
                    run_time_micros: 100,
                    ..Default::default()
                }),
                outcome: Some(task_status::Outcome::Success(TaskSuccess {
                    output: Some(task_success::Output::Result(vec![t.partition as u8])),
                    ..Default::default()
                })),
            })))
    };
    let first = g.next_pass();
    quick(&first[0].0, &first[0].1);
    let mut flight = g.next_pass();
    assert_eq!(flight.len(), 4, "pipelined 4 deep");
    assert!(g.settle().passes.is_empty());
    let events = g.sched.submit(one_stage(1, true), HashMap::new());
    let mut gang = None;
    // In-flight tasks end one at a time; ordinary tasks refill the slot while their
    // stage has any left, and the rank may launch only once none is in flight.
    while gang.is_none() {
        let (e, t) = flight
            .pop()
            .expect("the slot was free, yet the rank did not launch");
        quick(&e, &t);
        for (e, t) in g.settle().launches() {
            if t.barrier.is_some() {
                let n = flight.len();
                assert_eq!(
                    n, 0,
                    "the rank launched while {n} ordinary tasks were in flight"
                );
                gang = Some((e, t));
            } else {
                flight.push((e, t));
            }
        }
    }
    let (e, t) = gang.expect("the rank launched");
    g.succeed(&e, &t);
    assert_eq!(drain_until_end(&events).1, Ok(()));
    while !flight.is_empty() {
        for (e, t) in flight.drain(..) {
            quick(&e, &t);
        }
        flight = g.settle().launches();
    }
    let (results, outcome, _) = drain_until_end(&ordinary);
    assert_eq!((results.len(), outcome), (9, Ok(())));
}

#[test]
fn a_stage_wider_than_the_cluster_fails_at_once_naming_both_numbers() {
    for (slots, world, total) in [
        (&[("e1", 2), ("e2", 1)][..], 4, 3),
        (&[("local", 2)][..], 3, 2),
    ] {
        let g = Gangs::new(slots, SchedulerConfig::default());
        let events = g.sched.submit(one_stage(world, true), HashMap::new());
        let (results, outcome, _) = drain_until_end(&events);
        assert!(results.is_empty());
        assert_eq!(
            outcome,
            Err(JobFailure::StageFailed {
                stage_id: 0,
                stage_name: "barrier".into(),
                message: format!("barrier stage 0 needs {world} slots but the cluster has {total}"),
            })
        );
        assert!(g.settle().passes.is_empty(), "nothing launched");
        // A gang that fits still runs.
        let events = g.sched.submit(one_stage(total, true), HashMap::new());
        let pass = g.next_pass();
        for (e, t) in check_gang(&pass, total, slots) {
            g.succeed(&e, &t);
        }
        assert_eq!(drain_until_end(&events).1, Ok(()));
    }
}

#[test]
fn a_partial_job_over_a_barrier_stage_is_refused() {
    let g = Gangs::new(&[("e1", 4)], SchedulerConfig::default());
    let mut plan = one_stage(3, true);
    plan.partitions = vec![0];
    let (_, outcome, _) = drain_until_end(&g.sched.submit(plan, HashMap::new()));
    match outcome {
        Err(JobFailure::InvalidPlan(m)) => assert!(m.contains("1 of the 3 partitions"), "{m}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn barrier_tasks_get_no_speculative_copies() {
    let config = SchedulerConfig {
        speculation: true,
        speculation_min: Duration::from_millis(20),
        ..Default::default()
    };
    let slots = [("e1", 2), ("e2", 2), ("e3", 2)];
    // The control: the same stage, not barrier, gets a copy of its slow task.
    for barrier in [false, true] {
        let g = Gangs::new(&slots, config.clone());
        let events = g.sched.submit(one_stage(4, barrier), HashMap::new());
        let pass = g.next_pass();
        assert_eq!(pass.len(), 4);
        for (e, t) in &pass[..3] {
            g.succeed(e, t);
        }
        std::thread::sleep(Duration::from_millis(300));
        let copies = g.settle().launches();
        if barrier {
            assert!(copies.is_empty(), "a barrier task was copied: {copies:?}");
        } else {
            assert_eq!(copies.len(), 1, "the ordinary slow task gets a copy");
            g.succeed(&copies[0].0, &copies[0].1);
        }
        g.succeed(&pass[3].0, &pass[3].1);
        let (results, outcome, _) = drain_until_end(&events);
        assert_eq!((results.len(), outcome), (4, Ok(())));
    }
}
