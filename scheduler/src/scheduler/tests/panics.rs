//! A panic in the scheduler thread: every job learns it, later jobs fail at once, and
//! the owner's panic handler runs (the daemon exits on it). Malformed statuses do not
//! get that far: they count as failed attempts.

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::{Plan, RddNode, TaskDescription};

use super::drain_until_end;
use crate::{
    JobFailure, SchedulerConfig, SchedulerEvent, SchedulerHandle, StageShared, TaskLauncher,
};

/// A launcher with a bug: it panics on the first launch.
struct PanickingLauncher;
impl TaskLauncher for PanickingLauncher {
    fn launch(&mut self, _: &str, _: TaskDescription, _: &StageShared) {
        panic!("launcher exploded");
    }
    fn kill(&mut self, _: &str, _: u64) {}
}

fn plan() -> Plan {
    Plan {
        nodes: vec![RddNode {
            id: 0,
            num_partitions: 2,
            name: "source".into(),
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    }
}

#[test]
fn a_scheduler_panic_fails_every_job_and_calls_the_handler() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let sched = SchedulerHandle::start_with_panic_handler(
        SchedulerConfig::default(),
        Box::new(PanickingLauncher),
        Box::new(move |reason| {
            let _ = tx.send(reason);
        }),
    );
    sched.send(SchedulerEvent::ExecutorAdded {
        executor_id: "e1".into(),
        slots: 1,
        shuffle_address: String::new(),
        host: String::new(),
    });
    let expected = "the scheduler thread panicked: launcher exploded";
    let events = sched.submit(plan(), HashMap::new());
    assert_eq!(
        drain_until_end(&events).1,
        Err(JobFailure::Cancelled(expected.into()))
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        expected,
        "the handler gets the reason"
    );
    assert_eq!(sched.failure(), Some(expected));
    // A later job fails at once instead of hanging.
    let events = sched.submit(plan(), HashMap::new());
    assert_eq!(
        drain_until_end(&events).1,
        Err(JobFailure::Cancelled(expected.into()))
    );
}

#[test]
fn a_malformed_map_status_is_a_failed_attempt_not_an_output() {
    use ember_proto::{task_status, task_success, MapStatus, TaskSuccess};
    let h = super::Harness::new(&[("e1", 1)], SchedulerConfig::default());
    let events = h.sched.submit(super::two_stage_plan(), HashMap::new());
    let (ex, t) = h.next_task();
    // Three block sizes for a shuffle of two reduce partitions.
    h.reply(
        &ex,
        &t,
        task_status::Outcome::Success(TaskSuccess {
            output: Some(task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored: false,
                shuffle_id: 0,
                map_partition: t.partition,
                block_sizes: vec![1, 1, 1],
            })),
            ..Default::default()
        }),
    );
    let mut retried = false;
    for _ in 0..4 {
        let (ex, u) = h.next_task();
        retried |= u.shuffle_id == Some(0) && u.partition == t.partition && u.attempt == 1;
        h.succeed(&ex, &u);
    }
    assert!(retried, "the map task runs again");
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results.len(), 2);
}
