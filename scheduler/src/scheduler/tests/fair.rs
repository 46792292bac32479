//! Fair scheduling: pools of weights 1 and 3 share slots 1:3, a min share is met
//! first, FIFO inside a pool keeps job order, sessions share fairly, the per-session
//! bound on slots, and cancelling a job group (interrupting its tasks, or asking them
//! to stop).

use std::collections::HashMap;
use std::time::Duration;

use crossbeam_channel::Receiver;
use ember_proto::{task_failure, JobProperties, Plan, TaskDescription};

use super::{Harness, INTERRUPTED, WAIT};
use crate::pools::{FairConfig, PoolSettings, SchedulingMode};
use crate::test_plans::node;
use crate::{JobEvent, JobFailure, SchedulerConfig, SchedulerEvent};

/// A one-stage job of `parts` result tasks over node `rdd`, in `application`'s `pool`.
fn job(rdd: u32, parts: u32, application: &str, pool: &str, group: &str) -> Plan {
    Plan {
        nodes: vec![node(rdd, parts, vec![])],
        final_rdd: rdd,
        application: application.into(),
        properties: Some(JobProperties {
            pool: pool.into(),
            job_group: group.into(),
            interrupt_on_cancel: group.starts_with("interrupt"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn fair(pools: &[(&str, u32, u32, SchedulingMode)]) -> SchedulerConfig {
    SchedulerConfig {
        fair: FairConfig {
            mode: SchedulingMode::Fair,
            pools: pools
                .iter()
                .map(|(name, weight, min_share, mode)| {
                    let s = PoolSettings {
                        weight: *weight,
                        min_share: *min_share,
                        mode: *mode,
                    };
                    (name.to_string(), s)
                })
                .collect(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Submits `plans` before any executor exists (so the first dispatch sees them all),
/// then adds one executor of `slots` slots.
fn submit_then_add(h: &Harness, plans: Vec<Plan>, slots: u32) -> Vec<Receiver<JobEvent>> {
    let events: Vec<_> = plans
        .into_iter()
        .map(|p| h.sched.submit(p, HashMap::new()))
        .collect();
    for ev in &events {
        // Each job's `Started` says the scheduler took it in.
        match ev.recv_timeout(WAIT).expect("job started") {
            JobEvent::Started { .. } => {}
            other => panic!("expected Started, got {other:?}"),
        }
    }
    h.sched.send(SchedulerEvent::ExecutorAdded {
        executor_id: "e".into(),
        slots,
        shuffle_address: String::new(),
        host: String::new(),
    });
    events
}

/// The tasks launched now, up to `n`.
fn launches(h: &Harness, n: usize) -> Vec<TaskDescription> {
    (0..n).map(|_| h.next_task().1).collect()
}

fn count(running: &[TaskDescription], job_id: u64) -> usize {
    running.iter().filter(|t| t.job_id == job_id).count()
}

#[test]
fn pools_of_weights_one_and_three_share_slots_one_to_three() {
    let h = Harness::new(
        &[],
        fair(&[
            ("a", 1, 0, SchedulingMode::Fifo),
            ("b", 3, 0, SchedulingMode::Fifo),
        ]),
    );
    submit_then_add(
        &h,
        vec![job(0, 200, "", "a", ""), job(1, 200, "", "b", "")],
        8,
    );
    let mut running = launches(&h, 8);
    h.no_more_tasks();
    let a_job = 0; // submitted first
    assert_eq!(count(&running, a_job), 2, "weight 1 of 4 of 8 slots");
    // Finish the oldest task, one at a time: the share holds within one slot.
    for round in 0..120 {
        let done = running.remove(0);
        h.succeed("e", &done);
        running.push(h.next_task().1);
        let a_running = count(&running, a_job);
        assert!(
            (1..=3).contains(&a_running),
            "round {round}: pool a (weight 1) runs {a_running} of 8 slots, not 2 +- 1"
        );
    }
}

#[test]
fn a_min_share_is_met_before_weights_count() {
    let h = Harness::new(
        &[],
        fair(&[
            ("small", 1, 3, SchedulingMode::Fifo),
            ("big", 10, 0, SchedulingMode::Fifo),
        ]),
    );
    submit_then_add(
        &h,
        vec![job(0, 50, "", "big", ""), job(1, 50, "", "small", "")],
        4,
    );
    let running = launches(&h, 4);
    h.no_more_tasks();
    let small_job = 1; // submitted second
    assert_eq!(
        count(&running, small_job),
        3,
        "the pool with min share 3 gets 3 of 4 slots though its weight is a tenth"
    );
}

#[test]
fn fifo_inside_a_pool_keeps_job_order() {
    let h = Harness::new(&[], fair(&[("p", 1, 0, SchedulingMode::Fifo)]));
    submit_then_add(
        &h,
        vec![
            job(0, 5, "", "p", ""),
            job(1, 5, "", "p", ""),
            job(2, 5, "", "p", ""),
        ],
        2,
    );
    let mut running = launches(&h, 2);
    let mut order: Vec<u64> = running.iter().map(|t| t.job_id).collect();
    while !running.is_empty() {
        let done = running.remove(0);
        h.succeed("e", &done);
        if let Ok((_, t)) = h.launched.recv_timeout(Duration::from_millis(300)) {
            order.push(t.job_id);
            running.push(t);
        }
    }
    assert_eq!(order.len(), 15);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(order, sorted, "every task of an earlier job launches first");
}

#[test]
fn a_fair_pool_splits_between_its_jobs() {
    let h = Harness::new(&[], fair(&[("p", 1, 0, SchedulingMode::Fair)]));
    submit_then_add(
        &h,
        vec![job(0, 20, "", "p", ""), job(1, 20, "", "p", "")],
        4,
    );
    let running = launches(&h, 4);
    assert_eq!(count(&running, 0), 2);
    assert_eq!(count(&running, 1), 2);
}

#[test]
fn sessions_share_the_slots_by_their_weights() {
    let mut config = fair(&[]);
    config.fair.applications.insert(
        "heavy".into(),
        PoolSettings {
            weight: 3,
            min_share: 0,
            mode: SchedulingMode::Fair,
        },
    );
    let h = Harness::new(&[], config);
    // The earlier session's job in one pool; the later one's in two pools.
    submit_then_add(
        &h,
        vec![
            job(0, 50, "light #1", "", ""),
            job(1, 50, "heavy #2", "x", ""),
            job(2, 50, "heavy #2", "y", ""),
        ],
        8,
    );
    let running = launches(&h, 8);
    assert_eq!(count(&running, 0), 2, "the session of weight 1 gets 2 of 8");
    assert_eq!(
        count(&running, 1),
        3,
        "the heavy session's pools split its 6"
    );
    assert_eq!(count(&running, 2), 3);
}

#[test]
fn fifo_mode_runs_the_earlier_job_first_whatever_its_session() {
    let h = Harness::new(&[], SchedulerConfig::default());
    submit_then_add(
        &h,
        vec![job(0, 6, "a #1", "", ""), job(1, 6, "b #2", "", "")],
        4,
    );
    let running = launches(&h, 4);
    assert_eq!(count(&running, 0), 4);
}

#[test]
fn a_session_at_its_core_bound_waits_and_others_take_the_slots() {
    let mut config = SchedulerConfig::default();
    config.fair.max_cores_per_session = Some(1);
    let h = Harness::new(&[], config);
    submit_then_add(
        &h,
        vec![job(0, 3, "a #1", "", ""), job(1, 3, "b #2", "", "")],
        4,
    );
    let mut running = launches(&h, 2);
    h.no_more_tasks();
    assert_eq!(count(&running, 0), 1);
    assert_eq!(count(&running, 1), 1);
    // Its task ending lets the session's next one in; none of the two free slots.
    let done = running.remove(0);
    h.succeed("e", &done);
    let next = h.next_task().1;
    assert_eq!(next.job_id, done.job_id);
    h.no_more_tasks();
}

#[test]
fn a_barrier_stage_wider_than_the_session_bound_fails_at_once() {
    let mut config = SchedulerConfig::default();
    config.fair.max_cores_per_session = Some(2);
    let h = Harness::new(&[("e", 8)], config);
    let mut plan = job(0, 3, "a #1", "", "");
    plan.nodes[0].barrier = true;
    let events = h.sched.submit(plan, HashMap::new());
    let failure = loop {
        if let JobEvent::JobFailed { failure, .. } = events.recv_timeout(WAIT).expect("event") {
            break failure;
        }
    };
    let text = crate::listener::describe_failure(&failure);
    assert!(
        text.contains("needs 3 slots but its session may use at most 2 (--max-cores-per-session)"),
        "{text}"
    );
    h.no_more_tasks();
}

/// The job's end: its failure, if it failed.
fn outcome(events: &Receiver<JobEvent>) -> Result<(), JobFailure> {
    loop {
        match events.recv_timeout(WAIT).expect("job event") {
            JobEvent::JobSucceeded { .. } => return Ok(()),
            JobEvent::JobFailed { failure, .. } => return Err(failure),
            _ => {}
        }
    }
}

#[test]
fn cancelling_an_interrupting_group_kills_its_tasks_and_frees_their_slots() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let events = submit_then_add(
        &h,
        vec![
            job(0, 3, "a #1", "", "interrupt-me"),
            job(1, 3, "a #1", "", "other"),
            job(2, 3, "b #2", "", "interrupt-me"),
        ],
        4,
    );
    let running = launches(&h, 4);
    let doomed: Vec<&TaskDescription> = running.iter().filter(|t| t.job_id == 0).collect();
    assert_eq!(doomed.len(), 3);
    h.sched.send(SchedulerEvent::CancelJobGroup {
        application: "a #1".into(),
        group: Some("interrupt-me".into()),
    });
    match outcome(&events[0]) {
        Err(JobFailure::Cancelled(m)) => {
            assert!(m.contains("job group \"interrupt-me\""), "{m}")
        }
        other => panic!("expected a cancellation, got {other:?}"),
    }
    let mut killed: Vec<u64> = (0..3)
        .map(|_| h.killed.recv_timeout(WAIT).unwrap())
        .collect();
    killed.sort_unstable();
    let mut want: Vec<u64> = doomed.iter().map(|t| t.task_id | INTERRUPTED).collect();
    want.sort_unstable();
    assert_eq!(
        killed, want,
        "exactly the group's running tasks are interrupted"
    );
    // Their statuses free the slots for the other jobs (b's group of the same name is
    // another session's: untouched).
    for t in &doomed {
        h.fail("e", t, task_failure::Reason::Killed("killed".into()));
    }
    let next = launches(&h, 3);
    assert!(next.iter().all(|t| t.job_id != 0));
    assert!(h.killed.try_recv().is_err());
}

#[test]
fn a_group_cancelled_without_interrupt_asks_its_tasks_to_stop_and_waits_for_them() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let events = submit_then_add(
        &h,
        vec![job(0, 2, "a #1", "", "g"), job(1, 2, "a #1", "", "")],
        2,
    );
    let running = launches(&h, 2);
    assert!(running.iter().all(|t| t.job_id == 0));
    h.sched.send(SchedulerEvent::CancelJobGroup {
        application: "a #1".into(),
        group: Some("g".into()),
    });
    assert!(matches!(outcome(&events[0]), Err(JobFailure::Cancelled(_))));
    let mut killed: Vec<u64> = (0..2)
        .map(|_| h.killed.recv_timeout(WAIT).unwrap())
        .collect();
    killed.sort_unstable();
    let mut want: Vec<u64> = running.iter().map(|t| t.task_id).collect();
    want.sort_unstable();
    assert_eq!(killed, want, "asked to stop, not interrupted");
    // The slots stay taken until the tasks end; their results are dropped.
    h.no_more_tasks();
    h.succeed("e", &running[0]);
    assert_eq!(h.next_task().1.job_id, 1);
    h.succeed("e", &running[1]);
    assert_eq!(h.next_task().1.job_id, 1);
}

#[test]
fn cancel_all_jobs_reaches_only_its_own_session() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let events = submit_then_add(
        &h,
        vec![
            job(0, 1, "a #1", "", "x"),
            job(1, 1, "a #1", "", ""),
            job(2, 1, "b #2", "", ""),
        ],
        4,
    );
    let running = launches(&h, 3);
    h.sched.send(SchedulerEvent::CancelJobGroup {
        application: "a #1".into(),
        group: None,
    });
    assert!(matches!(outcome(&events[0]), Err(JobFailure::Cancelled(_))));
    assert!(matches!(outcome(&events[1]), Err(JobFailure::Cancelled(_))));
    let other = running.iter().find(|t| t.job_id == 2).unwrap();
    h.succeed("e", other);
    assert_eq!(outcome(&events[2]), Ok(()));
}

#[test]
fn killing_a_stage_fails_the_jobs_that_need_it() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let events = submit_then_add(&h, vec![job(0, 2, "a #1", "", "")], 2);
    let running = launches(&h, 2);
    // Another application cannot kill it.
    h.sched.send(SchedulerEvent::CancelStage {
        stage_id: running[0].stage_id,
        application: Some("b #2".into()),
        reason: "killed from the web UI".into(),
    });
    assert!(h.killed.recv_timeout(Duration::from_millis(200)).is_err());
    h.sched.send(SchedulerEvent::CancelStage {
        stage_id: running[0].stage_id,
        application: Some("a #1".into()),
        reason: "killed from the web UI".into(),
    });
    match outcome(&events[0]) {
        Err(JobFailure::Cancelled(m)) => {
            assert!(
                m.contains("stage 0 was cancelled: killed from the web UI"),
                "{m}"
            )
        }
        other => panic!("expected a cancellation, got {other:?}"),
    }
    assert!(h.killed.recv_timeout(WAIT).is_ok());
}

#[test]
fn the_empty_group_name_cancels_nothing() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let events = submit_then_add(&h, vec![job(0, 1, "a #1", "", "")], 1);
    let running = launches(&h, 1);
    h.sched.send(SchedulerEvent::CancelJobGroup {
        application: "a #1".into(),
        group: Some(String::new()),
    });
    assert!(h.killed.recv_timeout(Duration::from_millis(200)).is_err());
    h.succeed("e", &running[0]);
    assert_eq!(
        outcome(&events[0]),
        Ok(()),
        "a job without a group is in none"
    );
}

#[test]
fn a_barrier_stage_waiting_under_the_bound_is_not_starved_by_its_sessions_other_tasks() {
    let mut config = SchedulerConfig::default();
    config.fair.max_cores_per_session = Some(2);
    let h = Harness::new(&[("e", 4)], config);
    let _first = h.sched.submit(job(0, 10, "a #1", "", ""), HashMap::new());
    let mut running = launches(&h, 2);
    assert!(running.iter().all(|t| t.job_id == 0));
    let mut gang = job(1, 2, "a #1", "", "");
    gang.nodes[0].barrier = true;
    let _second = h.sched.submit(gang, HashMap::new());
    h.no_more_tasks();
    // One ordinary task ends: its slot waits for the gang rather than the next one.
    h.succeed("e", &running.remove(0));
    h.no_more_tasks();
    h.succeed("e", &running.remove(0));
    let ranks = launches(&h, 2);
    assert!(
        ranks.iter().all(|t| t.job_id == 1),
        "the gang launched whole"
    );
    h.no_more_tasks();
}

#[test]
fn listeners_see_each_jobs_pool_group_and_share() {
    let h = Harness::new(&[("e", 1)], fair(&[("etl", 3, 1, SchedulingMode::Fair)]));
    let seen = h.sched.listen();
    let events = h
        .sched
        .submit(job(0, 1, "a #1", "etl", "nightly"), HashMap::new());
    let t = h.next_task().1;
    h.succeed("e", &t);
    assert_eq!(outcome(&events), Ok(()));
    let submitted = seen
        .try_iter()
        .find_map(|e| match e {
            crate::ListenerEvent::JobSubmitted {
                pool,
                job_group,
                pool_share,
                ..
            } => Some((pool, job_group, pool_share)),
            _ => None,
        })
        .expect("a JobSubmitted event");
    assert_eq!(
        submitted,
        (
            "etl".into(),
            "nightly".into(),
            "weight 3, min share 1, fair".into()
        )
    );
}
