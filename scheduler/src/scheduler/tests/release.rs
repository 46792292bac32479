//! Released shuffles (`RemoveShuffles`): forgotten and their files deleted once no live
//! job uses them, never while one does; a late attempt's output for a forgotten
//! shuffle is deleted too.

use std::collections::HashMap;
use std::time::Duration;

use super::{drain_until_end, two_stage_plan, Harness};
use crate::{SchedulerConfig, SchedulerEvent};

/// Runs `two_stage_plan` to the end; returns how many stages were skipped.
fn run_two_stages(h: &Harness, expect_map_tasks: bool) -> u32 {
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let tasks = if expect_map_tasks { 4 } else { 2 };
    for _ in 0..tasks {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let (results, outcome, skipped) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    skipped
}

#[test]
fn a_released_shuffle_is_forgotten_and_its_files_deleted() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    assert_eq!(run_two_stages(&h, true), 0);
    // A shuffle never run is forgotten without asking the executors for anything.
    h.sched.send(SchedulerEvent::RemoveShuffles {
        shuffle_ids: vec![0, 77],
    });
    assert_eq!(h.removed.recv_timeout(super::WAIT).unwrap(), vec![0]);
    // Its map outputs are gone: the same plan runs its map stage again.
    assert_eq!(run_two_stages(&h, true), 0, "no stage skipped");
    assert!(h.removed.try_recv().is_err());
}

#[test]
fn a_shuffle_a_running_job_reads_is_removed_only_after_that_job() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    for _ in 0..2 {
        let (ex, t) = h.next_task();
        assert_eq!(t.shuffle_id, Some(0));
        h.succeed(&ex, &t);
    }
    let (ea, ta) = h.next_task();
    let (eb, tb) = h.next_task();
    // Released while the reducers run: nothing is deleted under them.
    h.sched.send(SchedulerEvent::RemoveShuffles {
        shuffle_ids: vec![0],
    });
    assert!(h.removed.recv_timeout(Duration::from_millis(200)).is_err());
    h.succeed(&ea, &ta);
    h.succeed(&eb, &tb);
    let (results, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    assert_eq!(h.removed.recv_timeout(super::WAIT).unwrap(), vec![0]);
}

#[test]
fn a_late_map_output_of_a_forgotten_shuffle_is_deleted_when_it_arrives() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (e0, t0) = h.next_task();
    let (e1, t1) = h.next_task();
    h.sched.send(SchedulerEvent::CancelJob {
        job_id: 0,
        reason: "test".into(),
    });
    let (_, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_err());
    h.sched.send(SchedulerEvent::RemoveShuffles {
        shuffle_ids: vec![0],
    });
    assert_eq!(h.removed.recv_timeout(super::WAIT).unwrap(), vec![0]);
    // The abandoned map attempts finish anyway and wrote files: they go too.
    h.succeed(&e0, &t0);
    h.succeed(&e1, &t1);
    assert_eq!(h.removed.recv_timeout(super::WAIT).unwrap(), vec![0]);
    assert_eq!(h.removed.recv_timeout(super::WAIT).unwrap(), vec![0]);
}
