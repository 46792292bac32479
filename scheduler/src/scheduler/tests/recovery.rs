//! Speculative copies of slow tasks, and executors excluded from a stage after
//! repeated failures.

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::{task_failure, Plan, RddNode};

use super::{drain_until_end, Harness};
use crate::{JobFailure, SchedulerConfig, SchedulerEvent};

/// One result stage of `n` partitions.
fn one_stage_plan(n: u32) -> Plan {
    Plan {
        nodes: vec![RddNode {
            id: 0,
            num_partitions: n,
            name: "source".into(),
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    }
}

#[test]
fn a_slow_task_gets_a_speculative_copy_elsewhere_and_the_first_to_finish_wins() {
    let config = SchedulerConfig {
        speculation: true,
        speculation_min: Duration::from_millis(50),
        ..SchedulerConfig::default()
    };
    let h = Harness::new(&[("e1", 2), ("e2", 2)], config);
    let events = h.sched.submit(one_stage_plan(4), HashMap::new());
    let tasks: Vec<_> = (0..4).map(|_| h.next_task()).collect();
    // Three finish at once; the fourth hangs.
    for (ex, t) in &tasks[..3] {
        h.succeed(ex, t);
    }
    let (slow_ex, slow) = &tasks[3];
    let (copy_ex, copy) = h.next_task();
    assert_eq!(
        copy.partition, slow.partition,
        "the copy is of the slow task"
    );
    assert_ne!(&copy_ex, slow_ex, "the copy runs on another executor");
    assert!(copy.attempt > slow.attempt);
    h.no_more_tasks(); // one copy only
    h.succeed(&copy_ex, &copy);
    assert_eq!(
        h.killed.recv_timeout(Duration::from_secs(5)).unwrap(),
        slow.task_id,
        "the loser is killed"
    );
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok());
    assert_eq!(results.len(), 4);
    // The loser's late success changes nothing.
    h.succeed(slow_ex, slow);
    let events = h.sched.submit(one_stage_plan(1), HashMap::new());
    let (ex, t) = h.next_task();
    h.succeed(&ex, &t);
    assert!(drain_until_end(&events).1.is_ok());
}

#[test]
fn without_speculation_a_slow_task_is_left_alone() {
    let h = Harness::new(&[("e1", 2), ("e2", 2)], SchedulerConfig::default());
    let events = h.sched.submit(one_stage_plan(2), HashMap::new());
    let (e0, t0) = h.next_task();
    let (e1, t1) = h.next_task();
    h.succeed(&e0, &t0);
    std::thread::sleep(Duration::from_millis(300));
    h.no_more_tasks();
    h.succeed(&e1, &t1);
    assert!(drain_until_end(&events).1.is_ok());
}

#[test]
fn an_executor_failing_twice_in_a_stage_gets_no_more_of_its_tasks() {
    let config = SchedulerConfig {
        max_task_attempts: 4,
        ..SchedulerConfig::default()
    };
    let h = Harness::new(&[("bad", 1), ("good", 1)], config);
    let events = h.sched.submit(one_stage_plan(6), HashMap::new());
    let mut bad_failures = 0;
    let mut done = 0;
    while done < 6 {
        let (ex, t) = h.next_task();
        if ex == "bad" {
            assert!(
                bad_failures < 2,
                "an excluded executor got another task of the stage"
            );
            bad_failures += 1;
            h.fail(
                &ex,
                &t,
                task_failure::Reason::UserError("disk on fire".into()),
            );
        } else {
            h.succeed(&ex, &t);
            done += 1;
        }
    }
    assert_eq!(bad_failures, 2);
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 6);
}

#[test]
fn a_task_that_keeps_losing_its_executor_fails_its_job_after_the_cap() {
    // Each executor the task runs on is lost while it runs (say its channel breaks),
    // and a new one registers: without a cap the task would be requeued forever.
    let config = SchedulerConfig {
        max_executor_losses_per_task: 3,
        max_task_attempts: 1,
        ..SchedulerConfig::default()
    };
    let h = Harness::new(&[("e0", 1)], config);
    let events = h.sched.submit(one_stage_plan(1), HashMap::new());
    for i in 0..3 {
        let (ex, t) = h.next_task();
        assert_eq!((ex.as_str(), t.partition), (format!("e{i}").as_str(), 0));
        h.sched.send(SchedulerEvent::ExecutorAdded {
            executor_id: format!("e{}", i + 1),
            slots: 1,
            shuffle_address: String::new(),
            host: String::new(),
        });
        h.sched.send(SchedulerEvent::ExecutorLost {
            executor_id: ex,
            reason: "channel broke".into(),
        });
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert!(results.is_empty());
    assert_eq!(
        outcome,
        Err(JobFailure::TaskFailed {
            stage_id: 0,
            stage_name: "source".into(),
            partition: 0,
            executor_id: "e2".into(),
            message: "the task was lost with its executor 3 times (executors e0, e1, e2), the limit of --max-executor-losses-per-task; last: executor e2 lost: channel broke".into(),
        })
    );
    h.no_more_tasks();
    // The scheduler goes on: the next job runs on the executor still there.
    let events = h.sched.submit(one_stage_plan(1), HashMap::new());
    let (ex, t) = h.next_task();
    assert_eq!(ex, "e3");
    h.succeed(&ex, &t);
    assert_eq!(drain_until_end(&events).1, Ok(()));
}
