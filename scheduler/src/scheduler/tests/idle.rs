//! Memory given back: once its last job has ended, the scheduler shrinks its per-task
//! and per-job maps and calls the deployment's `release_memory`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ember_proto::{Plan, RddNode};

use super::{drain_until_end, Harness, WAIT};
use crate::SchedulerConfig;

static RELEASED: AtomicUsize = AtomicUsize::new(0);

fn count_release() {
    RELEASED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn after_the_last_job_its_task_state_is_shrunk_and_memory_released() {
    const TASKS: u32 = 8000;
    let h = Harness::new(
        &[("e1", 4)],
        SchedulerConfig {
            release_memory: Some(count_release),
            ..SchedulerConfig::default()
        },
    );
    let plan = Plan {
        nodes: vec![RddNode {
            id: 0,
            num_partitions: TASKS,
            name: "source".into(),
            ..Default::default()
        }],
        final_rdd: 0,
        ..Default::default()
    };
    let events = h.sched.submit(plan, HashMap::new());
    for _ in 0..TASKS {
        let (exec, task) = h.next_task();
        h.succeed(&exec, &task);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results.len(), TASKS as usize);
    let deadline = Instant::now() + WAIT;
    // The loop publishes its capacity after each step; the job's end is one.
    while h.sched.task_capacity() >= 64 || RELEASED.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "after a job of {TASKS} tasks the maps still have room for {} entries; \
             release_memory called {} times",
            h.sched.task_capacity(),
            RELEASED.load(Ordering::Relaxed)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
