//! The listener bus: every job, stage, task and executor event, in order, with what the
//! web UI and the event log need (the DAG, attempts, executors, failure reasons).

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::task_failure;

use super::{drain_until_end, two_stage_plan, Harness};
use crate::{ListenerEvent, SchedulerConfig, SchedulerEvent, StageDesc};

pub(super) fn drain(rx: &crossbeam_channel::Receiver<ListenerEvent>) -> Vec<ListenerEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
        out.push(e);
    }
    out
}

#[test]
fn listeners_see_a_job_from_submission_to_its_end() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let rx = h.sched.listen();
    let mut plan = two_stage_plan();
    plan.description = "collect at src/main.rs:7".into();
    let events = h.sched.submit(plan, HashMap::new());
    for _ in 0..4 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    assert!(drain_until_end(&events).1.is_ok());
    let seen: Vec<ListenerEvent> = drain(&rx)
        .into_iter()
        .filter(|e| !matches!(e, ListenerEvent::ExecutorAdded { .. }))
        .collect();
    let ListenerEvent::JobSubmitted {
        job_id,
        description,
        stages,
        ..
    } = &seen[0]
    else {
        panic!("first event: {:?}", seen[0]);
    };
    assert_eq!(description, "collect at src/main.rs:7");
    assert_eq!(stages.len(), 2);
    let (map, result): (&StageDesc, &StageDesc) = (&stages[0], &stages[1]);
    assert_eq!(
        (map.shuffle_id, map.num_tasks, map.parents.len()),
        (Some(0), 2, 0)
    );
    assert_eq!(
        (result.shuffle_id, &result.parents),
        (None, &vec![map.stage_id])
    );
    let kinds: Vec<&str> = seen
        .iter()
        .map(|e| match e {
            ListenerEvent::JobSubmitted { .. } => "job",
            ListenerEvent::StageSubmitted { .. } => "stage",
            ListenerEvent::TaskStarted { .. } => "start",
            ListenerEvent::TaskEnded {
                succeeded: true, ..
            } => "ok",
            ListenerEvent::StageCompleted { .. } => "done",
            ListenerEvent::JobEnded {
                succeeded: true, ..
            } => "end",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "job", "stage", "start", "start", "ok", "ok", "done", "stage", "start", "start", "ok",
            "ok", "done", "end"
        ]
    );
    assert!(seen.iter().all(|e| match e {
        ListenerEvent::TaskStarted { executor_id, .. }
        | ListenerEvent::TaskEnded { executor_id, .. } => executor_id == "e1",
        ListenerEvent::JobEnded { job_id: j, .. } => j == job_id,
        _ => true,
    }));
}

#[test]
fn listeners_see_failures_and_executors() {
    let h = Harness::new(
        &[("e1", 1)],
        SchedulerConfig {
            max_task_attempts: 2,
            ..Default::default()
        },
    );
    let rx = h.sched.listen();
    h.sched.send(SchedulerEvent::ExecutorAdded {
        executor_id: "e2".into(),
        slots: 3,
        shuffle_address: String::new(),
        host: String::new(),
    });
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    // Every attempt fails, until a partition has used its two attempts.
    while let Ok((ex, t)) = h.launched.recv_timeout(Duration::from_millis(300)) {
        h.fail(
            &ex,
            &t,
            task_failure::Reason::UserError("boom at src/main.rs:9".into()),
        );
    }
    assert!(drain_until_end(&events).1.is_err());
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e2".into(),
        reason: "heartbeat timed out".into(),
    });
    let seen = drain(&rx);
    assert!(seen.iter().any(|e| matches!(e, ListenerEvent::ExecutorAdded { executor_id, slots: 3, .. } if executor_id == "e2")));
    let failures: Vec<&String> = seen
        .iter()
        .filter_map(|e| match e {
            ListenerEvent::TaskEnded {
                succeeded: false,
                failure: Some(f),
                ..
            } => Some(f),
            _ => None,
        })
        .collect();
    assert!(failures.len() >= 2, "{seen:?}");
    assert!(failures.iter().all(|f| f.contains("boom at src/main.rs:9")));
    assert!(seen.iter().any(
        |e| matches!(e, ListenerEvent::StageFailed { reason, .. } if reason.contains("boom"))
    ));
    assert!(seen.iter().any(
        |e| matches!(e, ListenerEvent::JobEnded { succeeded: false, failure: Some(f), .. } if f.contains("boom"))
    ));
    assert!(seen.iter().any(
        |e| matches!(e, ListenerEvent::ExecutorLost { executor_id, reason, .. } if executor_id == "e2" && reason.contains("heartbeat"))
    ));
}

/// A stage lists its operators (parents first, persisted ones marked); a cached block
/// is reported once per block and executor, blocks the plan does not persist or past
/// the RDD's partitions are not reported, and an unpersist reports the RDD's blocks gone.
#[test]
fn listeners_see_stage_operators_and_cached_blocks() {
    use ember_proto::dependency::Kind;
    use ember_proto::{
        task_status, task_success, CachedBlock, Dependency, NarrowDependency, Plan, RddNode,
        StorageLevel, TaskSuccess,
    };
    let narrow = |parent| {
        vec![Dependency {
            kind: Some(Kind::Narrow(NarrowDependency {
                parent,
                one_to_one: true,
            })),
        }]
    };
    let node = |id, name: &str, deps, storage| RddNode {
        id,
        num_partitions: 2,
        name: name.into(),
        deps,
        storage,
        ..Default::default()
    };
    let plan = Plan {
        nodes: vec![
            node(0, "text_file(in)", vec![], 0),
            node(
                1,
                "cache at src/main.rs:3",
                narrow(0),
                StorageLevel::StorageMemory as i32,
            ),
            node(2, "map at src/main.rs:4", narrow(1), 0),
        ],
        final_rdd: 2,
        ..Default::default()
    };
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let rx = h.sched.listen();
    let events = h.sched.submit(plan, HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        let block = |rdd_id, partition, memory_bytes| CachedBlock {
            rdd_id,
            partition,
            memory_bytes,
            disk_bytes: 0,
        };
        let p = t.partition;
        h.reply(
            &ex,
            &t,
            task_status::Outcome::Success(TaskSuccess {
                output: Some(task_success::Output::Result(vec![0])),
                cached: vec![
                    block(1, p, 100 * u64::from(p + 1)),
                    block(1, p, 100 * u64::from(p + 1)),
                    block(0, p, 1),
                    block(1, 9, 1),
                ],
                ..Default::default()
            }),
        );
    }
    assert!(drain_until_end(&events).1.is_ok());
    h.sched.send(SchedulerEvent::Unpersist { rdd_id: 1 });
    let seen = drain(&rx);
    let Some(ListenerEvent::JobSubmitted { stages, .. }) = seen
        .iter()
        .find(|e| matches!(e, ListenerEvent::JobSubmitted { .. }))
    else {
        panic!("no job: {seen:?}");
    };
    let ops: Vec<(u32, &str, bool)> = stages[0]
        .operators
        .iter()
        .map(|o| (o.rdd_id, o.name.as_str(), o.cached))
        .collect();
    assert_eq!(
        ops,
        [
            (0, "text_file(in)", false),
            (1, "cache at src/main.rs:3", true),
            (2, "map at src/main.rs:4", false)
        ]
    );
    assert_eq!(stages[0].more_operators, 0);
    let mut blocks: Vec<(u32, u32, u64, u32, String)> = seen
        .iter()
        .filter_map(|e| match e {
            ListenerEvent::BlockCached {
                rdd_id,
                partition,
                memory_bytes,
                num_partitions,
                rdd_name,
                ..
            } => Some((
                *rdd_id,
                *partition,
                *memory_bytes,
                *num_partitions,
                rdd_name.clone(),
            )),
            _ => None,
        })
        .collect();
    blocks.sort();
    let name = "cache at src/main.rs:3".to_string();
    assert_eq!(blocks, [(1, 0, 100, 2, name.clone()), (1, 1, 200, 2, name)]);
    assert!(
        matches!(
            seen.last(),
            Some(ListenerEvent::BlocksRemoved {
                rdd_lo: 1,
                rdd_hi: 2,
                ..
            })
        ),
        "{:?}",
        seen.last()
    );
}
