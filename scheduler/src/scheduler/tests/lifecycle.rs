//! The stage lifecycle: a stage whose attempts run out fails as a stage, and a failed
//! stage runs again for a later job that needs it.

use std::collections::HashMap;

use ember_proto::{task_failure, FetchFailure};

use super::{drain_until_end, two_stage_plan, Harness};
use crate::{JobFailure, SchedulerConfig};

#[test]
fn fetch_failures_on_every_attempt_fail_the_stage_not_a_task() {
    // One slot: one reducer at a time, so each attempt's first reducer is the one to fail.
    let h = Harness::new(
        &[("e1", 1)],
        SchedulerConfig {
            max_stage_attempts: 2,
            ..Default::default()
        },
    );
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let mut reduce_stage = None;
    for attempt in 1..=2 {
        // The map outputs are (re)written, then a reducer cannot read map 0.
        let mut maps = 0;
        loop {
            let (ex, t) = h.next_task();
            if t.shuffle_id.is_some() {
                maps += 1;
                h.succeed(&ex, &t);
                continue;
            }
            assert_eq!(
                t.stage_attempt, attempt,
                "the reduce stage's attempt number"
            );
            reduce_stage = Some(t.stage_id);
            h.fail(
                &ex,
                &t,
                task_failure::Reason::FetchFailed(FetchFailure {
                    from_storage: false,
                    executor_id: ex.clone(),
                    shuffle_id: 0,
                    map_partition: 0,
                    reduce_partition: t.partition,
                    message: format!("block gone (attempt {attempt})"),
                }),
            );
            break;
        }
        assert!(
            maps >= 1,
            "attempt {attempt} ran its missing map tasks first"
        );
    }
    let (_, outcome, _) = drain_until_end(&events);
    match outcome {
        Err(JobFailure::StageFailed {
            stage_id, message, ..
        }) => {
            // The failure names the reduce stage by its number in the application
            // (1: after its parent map stage), not by the scheduler's id its tasks carry.
            assert_eq!((stage_id, reduce_stage), (1, Some(0)));
            assert!(
                message.starts_with("stage failed 2 consecutive attempts"),
                "{message}"
            );
            assert!(message.contains("block gone (attempt 2)"), "{message}");
        }
        other => panic!("expected a stage failure, got {other:?}"),
    }
}

#[test]
fn a_map_stage_that_failed_its_job_runs_again_for_the_next_job() {
    let h = Harness::new(
        &[("e1", 1)],
        SchedulerConfig {
            max_task_attempts: 1,
            ..Default::default()
        },
    );
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, first) = h.next_task();
    assert_eq!(first.shuffle_id, Some(0));
    h.fail(&ex, &first, task_failure::Reason::UserError("boom".into()));
    let (_, outcome, _) = drain_until_end(&events);
    assert!(
        matches!(outcome, Err(JobFailure::TaskFailed { ref message, .. }) if message == "boom"),
        "{outcome:?}"
    );
    // A status of the other map task (launched before the failure) comes late.
    while let Ok((ex, t)) = h.launched.try_recv() {
        h.succeed(&ex, &t);
    }

    // The same shuffle again: the failed stage is submitted anew, for what is missing.
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let mut map_partitions = Vec::new();
    let mut reducers = 0;
    while reducers < 2 {
        let (ex, t) = h.next_task();
        match t.shuffle_id {
            Some(_) => map_partitions.push(t.partition),
            None => reducers += 1,
        }
        h.succeed(&ex, &t);
    }
    assert!(map_partitions.contains(&0), "the failed map task reruns");
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    h.no_more_tasks();
}

#[test]
fn a_fetch_failure_reruns_every_output_of_that_executor_in_one_attempt() {
    // Map outputs 0 and 1 on e1, reducer on e2: one fetch failure naming map 0 on e1
    // loses both of e1's outputs, so the next attempt does not fail on map 1 again.
    let h = Harness::new(
        &[("e1", 2), ("e2", 1)],
        SchedulerConfig {
            max_stage_attempts: 2,
            ..Default::default()
        },
    );
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    // Both map tasks go to e1 (the first free executor with 2 slots).
    let maps: Vec<_> = (0..2).map(|_| h.next_task()).collect();
    assert!(maps
        .iter()
        .all(|(ex, t)| ex == "e1" && t.shuffle_id.is_some()));
    for (ex, t) in &maps {
        h.succeed(ex, t);
    }
    let (ex, t) = h.next_task();
    assert_eq!(t.shuffle_id, None);
    h.fail(
        &ex,
        &t,
        task_failure::Reason::FetchFailed(FetchFailure {
            from_storage: false,
            executor_id: "e1".into(),
            shuffle_id: 0,
            map_partition: 0,
            reduce_partition: t.partition,
            message: "e1 unreachable".into(),
        }),
    );
    let mut rerun = Vec::new();
    let mut reducers = 0;
    while reducers < 2 {
        let (ex, t) = h.next_task();
        match t.shuffle_id {
            Some(_) => rerun.push(t.partition),
            None => reducers += 1,
        }
        h.succeed(&ex, &t);
    }
    rerun.sort();
    assert_eq!(rerun, vec![0, 1], "both of e1's outputs rerun at once");
    let (_, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
}

/// A lineage thousands of shuffles deep (an iterative job): every stage runs once, in
/// order, and each task carries only its stage's part of the plan, not the lineage.
#[test]
fn a_deep_chain_of_stages_runs_in_order_with_flat_task_plans() {
    use crate::test_plans::{node, shuffle};
    const DEPTH: u32 = 3000;
    // 0 =s0=> 1 =s1=> 2 ... =s(DEPTH-1)=> DEPTH (final)
    let mut nodes = vec![node(0, 2, vec![])];
    for i in 1..=DEPTH {
        nodes.push(node(i, 2, vec![shuffle(i - 1, i - 1, 2)]));
    }
    let plan = ember_proto::Plan {
        nodes,
        final_rdd: DEPTH,
        ..Default::default()
    };
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(plan, HashMap::new());
    let mut next_shuffle = 0;
    let mut results = 0;
    while results < 2 {
        let (ex, t) = h.next_task();
        let plan_nodes = t.plan.as_ref().map_or(0, |p| p.nodes.len());
        assert!(plan_nodes <= 3, "a task carries {plan_nodes} nodes");
        match t.shuffle_id {
            Some(sid) => {
                assert!(sid == next_shuffle || sid + 1 == next_shuffle, "order");
                next_shuffle = next_shuffle.max(sid + 1);
            }
            None => {
                assert_eq!(next_shuffle, DEPTH, "every map stage ran first");
                results += 1;
            }
        }
        h.succeed(&ex, &t);
    }
    let (_, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
}

/// A local checkpoint's partitions exist only in the block store of the executor that
/// wrote them: its tasks wait for that executor's slot instead of running elsewhere.
#[test]
fn tasks_over_a_local_checkpoint_wait_for_the_executor_holding_their_block() {
    pinned_tasks_wait_for_their_executor(SchedulerConfig::default());
}

/// Fair sharing does not undo locality: the pinned task still waits for its executor.
#[test]
fn under_fair_scheduling_pinned_tasks_still_wait_for_their_executor() {
    let mut config = SchedulerConfig::default();
    config.fair.mode = crate::pools::SchedulingMode::Fair;
    pinned_tasks_wait_for_their_executor(config);
}

fn pinned_tasks_wait_for_their_executor(config: SchedulerConfig) {
    use ember_proto::{task_status, task_success, CachedBlock, TaskSuccess};
    let h = Harness::new(&[("e1", 1), ("e2", 1)], config);
    let pinned = || ember_proto::Plan {
        nodes: vec![ember_proto::RddNode {
            id: 0,
            num_partitions: 2,
            name: "checkpointed".into(),
            storage: ember_proto::StorageLevel::StorageDisk as i32,
            pinned: true,
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    };
    // The first job writes the blocks: partition p on whichever executor ran it.
    let events = h.sched.submit(pinned(), HashMap::new());
    let mut holder = HashMap::new();
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        holder.insert(t.partition, ex.clone());
        h.reply(
            &ex,
            &t,
            task_status::Outcome::Success(TaskSuccess {
                output: Some(task_success::Output::Result(vec![0])),
                cached: vec![CachedBlock {
                    rdd_id: 0,
                    partition: t.partition,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        );
    }
    assert!(drain_until_end(&events).1.is_ok());
    // Another job keeps the holder of partition 0 busy.
    let busy = &holder[&0];
    let other = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, blocker) = loop {
        let (ex, t) = h.next_task();
        if ex == *busy {
            break (ex, t);
        }
        h.succeed(&ex, &t);
    };
    let second = h.sched.submit(pinned(), HashMap::new());
    // Partition 1 may run (on its holder, if free); partition 0 must not go elsewhere.
    let mut launched = Vec::new();
    while let Ok((e, t)) = h
        .launched
        .recv_timeout(std::time::Duration::from_millis(300))
    {
        if t.plan
            .as_ref()
            .is_some_and(|p| p.nodes.iter().any(|n| n.pinned))
        {
            assert_eq!(
                e, holder[&t.partition],
                "partition {} ran away",
                t.partition
            );
            launched.push(t.partition);
            h.succeed(&e, &t);
        } else {
            h.succeed(&e, &t);
        }
    }
    assert!(!launched.contains(&0), "partition 0 waited for {busy}");
    h.succeed(&ex, &blocker);
    let (e, t) = loop {
        let (e, t) = h.next_task();
        if t.plan
            .as_ref()
            .is_some_and(|p| p.nodes.iter().any(|n| n.pinned))
        {
            break (e, t);
        }
        h.succeed(&e, &t);
    };
    assert_eq!((t.partition, &e), (0, busy));
    h.succeed(&e, &t);
    let _ = other;
    let _ = second;
}
