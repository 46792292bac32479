//! Stages of no tasks (RDDs over empty inputs) and plans over the size limits.

use std::collections::HashMap;

use ember_proto::{Plan, RddNode};

use crate::test_plans::{node, shuffle};

use super::{drain_until_end, two_stage_plan, Harness};
use crate::{JobFailure, PlanLimits, SchedulerConfig};

fn plan(nodes: Vec<RddNode>) -> Plan {
    Plan {
        final_rdd: nodes.last().map_or(0, |n| n.id),
        nodes,
        ..Default::default()
    }
}

#[test]
fn a_result_stage_of_no_partitions_succeeds_at_once_with_no_results() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    // Alone, and behind a shuffle whose map stage must not run either.
    for p in [
        plan(vec![node(0, 0, vec![])]),
        plan(vec![node(1, 2, vec![]), node(2, 0, vec![shuffle(0, 1, 0)])]),
    ] {
        let events = h.sched.submit(p, HashMap::new());
        let (results, outcome, _) = drain_until_end(&events);
        assert_eq!(outcome, Ok(()));
        assert!(results.is_empty());
        h.no_more_tasks();
    }
}

#[test]
fn a_shuffle_with_no_map_tasks_gives_its_reducers_empty_input() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    // empty(0) =s0=> mid(3) ; mid =s1=> final(2): s0 has no maps, s1 has three.
    let p = plan(vec![
        node(0, 0, vec![]),
        node(1, 3, vec![shuffle(0, 0, 3)]),
        node(2, 2, vec![shuffle(1, 1, 2)]),
    ]);
    let events = h.sched.submit(p, HashMap::new());
    for _ in 0..3 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, Some(1), "the empty map stage runs no task");
        let input = t.shuffle_inputs.iter().find(|s| s.shuffle_id == 0);
        assert!(input.is_some_and(|s| s.num_maps() == 0), "{t:?}");
        h.succeed(&ex, &t);
    }
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, None);
        h.succeed(&ex, &t);
    }
    let (results, outcome, skipped) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results.len(), 2);
    assert_eq!(skipped, 1, "the empty map stage is reported skipped");
    h.no_more_tasks();
}

#[test]
fn plans_over_the_limits_are_refused_and_the_scheduler_goes_on() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h
        .sched
        .submit(plan(vec![node(0, u32::MAX, vec![])]), HashMap::new());
    let (_, outcome, _) = drain_until_end(&events);
    assert_eq!(
        outcome,
        Err(JobFailure::InvalidPlan(
            "the number of partitions of node 0 (n0) is 4294967295, over the limit of 100000 (--max-partitions-per-node)".into()
        ))
    );
    // A normal job still runs.
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    for _ in 0..4 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results.len(), 2);
}

#[test]
fn tasks_per_job_and_result_bytes_are_bounded() {
    let config = SchedulerConfig {
        limits: PlanLimits {
            max_tasks_per_job: 3,
            max_result_bytes: 1,
            ..PlanLimits::default()
        },
        ..SchedulerConfig::default()
    };
    let h = Harness::new(&[("e1", 2)], config);
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (_, outcome, _) = drain_until_end(&events);
    assert_eq!(
        outcome,
        Err(JobFailure::InvalidPlan(
            "the number of tasks of the job is 4, over the limit of 3 (--max-tasks-per-job)".into()
        ))
    );
    // Two map tasks and one reducer fit; two one-byte results do not.
    let mut one = two_stage_plan();
    one.partitions = vec![1];
    let events = h.sched.submit(one, HashMap::new());
    for _ in 0..3 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results.len(), 1);
    let events = h
        .sched
        .submit(plan(vec![node(10, 2, vec![])]), HashMap::new());
    let (ex, a) = h.next_task();
    let (_, b) = h.next_task();
    h.succeed(&ex, &a);
    h.succeed(&ex, &b);
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(results.len(), 1, "the first result fits");
    match outcome {
        Err(JobFailure::TaskFailed { message, .. }) => assert_eq!(
            message,
            "the job's results total 2 bytes with this partition's, over the limit of 1 (--max-result-bytes)"
        ),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_known_shuffle_written_by_another_node_is_refused() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    for _ in 0..4 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    assert_eq!(drain_until_end(&events).1, Ok(()));
    let mut other = two_stage_plan();
    other.nodes[0].num_partitions = 5;
    let events = h.sched.submit(other, HashMap::new());
    match drain_until_end(&events).1 {
        Err(JobFailure::InvalidPlan(m)) => assert_eq!(
            m,
            "shuffle 0 was written by node 0 with 2 partitions in an earlier job, but this plan writes it from node 0 with 5"
        ),
        other => panic!("unexpected {other:?}"),
    }
    h.no_more_tasks();
}
