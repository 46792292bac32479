//! Spark's failure rule: one rank failing (or its executor lost) kills the others and
//! reruns every rank as a new attempt with a new key, nothing of the failed attempt
//! reaching the job; past the stage-attempt limit the job fails.

use std::collections::{BTreeMap, HashMap};

use ember_proto::task_failure;

use super::{check_gang, one_stage, Gangs, WAIT};
use crate::scheduler::tests::drain_until_end;
use crate::{JobEvent, JobFailure, SchedulerConfig, SchedulerEvent};

#[test]
fn one_failing_rank_kills_the_others_and_every_rank_reruns_with_a_new_key() {
    let slots = [("e1", 2), ("e2", 1)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let events = g.sched.submit(one_stage(3, true), HashMap::new());
    let first = check_gang(&g.next_pass(), 3, &slots);
    g.succeed_with(&first[0].0, &first[0].1, 1);
    g.fail(
        &first[1].0,
        &first[1].1,
        task_failure::Reason::UserError("boom".into()),
    );
    let seen = g.settle();
    assert_eq!(
        seen.kills,
        vec![first[2].1.task_id],
        "the running rank is killed"
    );
    assert!(
        seen.passes.is_empty(),
        "the killed rank still holds its slot"
    );
    g.fail(
        &first[2].0,
        &first[2].1,
        task_failure::Reason::Killed("stop".into()),
    );
    let second = check_gang(&g.next_pass(), 3, &slots);
    let (old, new) = (
        first[0].1.barrier.as_ref().unwrap(),
        second[0].1.barrier.as_ref().unwrap(),
    );
    assert_eq!(new.stage_attempt, old.stage_attempt + 1);
    assert_ne!(new.key, old.key, "a new key per attempt");
    for (e, t) in &second {
        g.succeed_with(e, t, 2);
    }
    // What the job heard: results of the second attempt only, accumulator updates
    // counted from it only (the first attempt's success reported uncounted).
    let mut results = BTreeMap::new();
    let mut counted = Vec::new();
    let mut uncounted_successes = 0;
    loop {
        match events.recv_timeout(WAIT).expect("job event") {
            JobEvent::TaskResult { partition, result } => {
                assert!(results.insert(partition, result).is_none());
            }
            JobEvent::TaskEnded {
                succeeded: true,
                counted: true,
                accumulators,
                partition,
                ..
            } => counted.push((partition, accumulators[0].value.clone())),
            JobEvent::TaskEnded {
                succeeded: true,
                counted: false,
                accumulators,
                ..
            } => {
                assert!(accumulators.is_empty());
                uncounted_successes += 1;
            }
            JobEvent::JobSucceeded { .. } => break,
            JobEvent::JobFailed { failure, .. } => panic!("{failure:?}"),
            _ => {}
        }
    }
    let want: BTreeMap<u32, Vec<u8>> = (0..3)
        .map(|p| (p, vec![p as u8, new.stage_attempt as u8]))
        .collect();
    assert_eq!(results, want);
    counted.sort();
    assert_eq!(counted, (0..3).map(|p| (p, vec![2])).collect::<Vec<_>>());
    assert_eq!(uncounted_successes, 1);
}

#[test]
fn a_lost_executor_reruns_the_stage_once_enough_executors_are_back() {
    let slots = [("e1", 2), ("e2", 1)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let events = g.sched.submit(one_stage(3, true), HashMap::new());
    let first = check_gang(&g.next_pass(), 3, &slots);
    assert_eq!(first[2].0, "e2", "ranks 0 and 1 fill e1 first");
    g.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e2".into(),
        reason: "killed".into(),
    });
    let seen = g.settle();
    let mut kills = seen.kills.clone();
    kills.sort();
    assert_eq!(kills, vec![first[0].1.task_id, first[1].1.task_id]);
    for (e, t) in &first[..2] {
        g.fail(e, t, task_failure::Reason::Killed("stop".into()));
    }
    // 2 slots left: the rerun waits (it does not fail as too wide) for an executor.
    assert!(g.settle().passes.is_empty());
    g.add_executor("e3", 1);
    let second = check_gang(&g.next_pass(), 3, &[("e1", 2), ("e3", 1)]);
    assert_eq!(second[0].1.stage_attempt, first[0].1.stage_attempt + 1);
    for (e, t) in &second {
        g.succeed(e, t);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!((results.len(), outcome), (3, Ok(())));
}

#[test]
fn past_the_attempt_limit_the_job_fails_naming_the_stage_and_the_last_error() {
    let config = SchedulerConfig {
        max_stage_attempts: 2,
        ..Default::default()
    };
    let g = Gangs::new(&[("e1", 2)], config);
    let events = g.sched.submit(one_stage(2, true), HashMap::new());
    let first = check_gang(&g.next_pass(), 2, &[("e1", 2)]);
    g.fail(
        &first[0].0,
        &first[0].1,
        task_failure::Reason::UserError("first boom".into()),
    );
    assert_eq!(g.settle().kills, vec![first[1].1.task_id]);
    g.fail(
        &first[1].0,
        &first[1].1,
        task_failure::Reason::Killed("stop".into()),
    );
    let second = check_gang(&g.next_pass(), 2, &[("e1", 2)]);
    g.succeed(&second[0].0, &second[0].1);
    g.fail(
        &second[1].0,
        &second[1].1,
        task_failure::Reason::UserError("second boom".into()),
    );
    let (results, outcome, _) = drain_until_end(&events);
    assert!(results.is_empty(), "no partial results: {results:?}");
    assert_eq!(
        outcome,
        Err(JobFailure::StageFailed {
            stage_id: 0,
            stage_name: "barrier".into(),
            message: "barrier stage failed 2 consecutive attempts (the limit of \
                      --max-stage-attempts); last: task 1 on executor e1: second boom"
                .into(),
        })
    );
    assert!(g.settle().passes.is_empty(), "no third attempt");
}
