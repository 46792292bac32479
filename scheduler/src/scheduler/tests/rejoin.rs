//! Executors that register holding map outputs from before (a driver restart): the
//! tracker is rebuilt from their reports, so a job skips the stages whose outputs
//! all exist and runs only the missing map tasks.

use std::collections::HashMap;

use ember_proto::{task_status, task_success, HeldOutput, MapStatus, TaskSuccess};

use super::listener::drain;
use super::*;
use crate::ListenerEvent;

fn held(shuffle_id: u32, map_partition: u32, width: usize) -> HeldOutput {
    HeldOutput {
        shuffle_id,
        map_partition,
        block_sizes: vec![7; width],
    }
}

fn rejoin(h: &Harness, id: &str, outputs: Vec<HeldOutput>) {
    h.sched.send(SchedulerEvent::ExecutorRejoined {
        executor_id: id.into(),
        slots: 2,
        shuffle_address: format!("http://{id}"),
        host: id.into(),
        held: outputs,
    });
}

/// The map tasks (of shuffle 0) launched until the job ends, each succeeded.
fn run_counting_maps(h: &Harness, events: &Receiver<JobEvent>) -> (u32, u32) {
    let mut maps = 0;
    while let Ok((ex, t)) = h.launched.recv_timeout(Duration::from_millis(300)) {
        maps += u32::from(t.shuffle_id.is_some());
        h.succeed(&ex, &t);
    }
    let (results, outcome, skipped) = drain_until_end(events);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(results.len(), 2);
    (maps, skipped)
}

#[test]
fn reported_outputs_make_the_next_job_skip_their_stage() {
    let h = Harness::new(&[], SchedulerConfig::default());
    let rx = h.sched.listen();
    // e1 holds both outputs of shuffle 0; e2 a copy of map 0 (a replica) and two that
    // do not fit (a map out of range, a width other than the shuffle's 2 reducers).
    rejoin(&h, "e1", vec![held(0, 0, 2), held(0, 1, 2)]);
    rejoin(&h, "e2", vec![held(0, 0, 2), held(0, 9, 2), held(0, 1, 3)]);
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (maps, skipped) = run_counting_maps(&h, &events);
    assert_eq!((maps, skipped), (0, 1), "the map stage is skipped");
    let recovered: Vec<(u32, Vec<String>)> = drain(&rx)
        .into_iter()
        .filter_map(|e| match e {
            ListenerEvent::OutputsRecovered {
                outputs,
                mut executors,
                shuffle_id: 0,
                ..
            } => {
                executors.sort();
                Some((outputs, executors))
            }
            _ => None,
        })
        .collect();
    assert_eq!(recovered, vec![(2, vec!["e1".into(), "e2".into()])]);

    // e1 goes: map 0 is served by e2's copy, map 1 runs again.
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e1".into(),
        reason: "gone".into(),
    });
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    assert_eq!(run_counting_maps(&h, &events), (1, 0));
}

#[test]
fn only_the_missing_map_tasks_run_and_a_lost_reporter_counts_for_nothing() {
    let h = Harness::new(&[], SchedulerConfig::default());
    rejoin(&h, "e1", vec![held(0, 1, 2)]);
    rejoin(&h, "e2", vec![held(0, 0, 2)]);
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e2".into(),
        reason: "gone before any job".into(),
    });
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, t) = h.next_task();
    assert_eq!((t.shuffle_id, t.partition), (Some(0), 0), "only map 0 runs");
    h.succeed(&ex, &t);
    assert_eq!(run_counting_maps(&h, &events), (0, 0));
}

#[test]
fn outputs_reported_for_a_known_stage_are_taken_and_a_released_shuffle_takes_none() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    assert_eq!(run_counting_maps(&h, &events), (2, 0));
    // The executor's channel broke: it is lost, then registers again with its files.
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: "e1".into(),
        reason: "channel broke".into(),
    });
    rejoin(&h, "e1b", vec![held(0, 0, 2), held(0, 1, 2)]);
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    assert_eq!(run_counting_maps(&h, &events), (0, 1));

    // Reports of a shuffle released before any job knew it are dropped.
    let h = Harness::new(&[], SchedulerConfig::default());
    rejoin(&h, "e1", vec![held(0, 0, 2), held(0, 1, 2)]);
    h.sched.send(SchedulerEvent::RemoveShuffles {
        shuffle_ids: vec![0],
    });
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    assert_eq!(run_counting_maps(&h, &events), (2, 0));
}

/// A job resubmitted before the executor holding its map outputs came back: the map
/// stage is running when the report arrives; the reported outputs finish their
/// partitions (the running copy is killed, the queued one never launches) and a late
/// success of the killed copy counts no accumulator update again.
#[test]
fn outputs_reported_to_a_running_map_stage_finish_its_partitions() {
    let h = Harness::new(&[("e2", 1)], SchedulerConfig::default());
    let events = h.sched.submit(two_stage_plan(), HashMap::new());
    let (ex, running) = h.next_task();
    assert_eq!((ex.as_str(), running.shuffle_id), ("e2", Some(0)));
    rejoin(&h, "e1", vec![held(0, 0, 2), held(0, 1, 2)]);
    let killed = h
        .killed
        .recv_timeout(WAIT)
        .expect("the running copy killed");
    assert_eq!(killed & !INTERRUPTED, running.task_id);
    // The killed copy reports success anyway, with an accumulator update: too late to
    // count.
    h.reply(
        &ex,
        &running,
        task_status::Outcome::Success(TaskSuccess {
            output: Some(task_success::Output::MapStatus(MapStatus {
                shuffle_id: 0,
                map_partition: running.partition,
                block_sizes: vec![1, 1],
                ..Default::default()
            })),
            accumulators: vec![ember_proto::AccumulatorUpdate {
                id: 1,
                value: vec![1],
            }],
            ..Default::default()
        }),
    );
    let mut results = 0;
    while let Ok((e, t)) = h.launched.recv_timeout(Duration::from_millis(300)) {
        assert_eq!(t.shuffle_id, None, "no map task runs: {t:?}");
        h.succeed(&e, &t);
        results += 1;
    }
    assert_eq!(results, 2);
    let mut counted_maps = 0;
    loop {
        match events.recv_timeout(WAIT).expect("job event") {
            JobEvent::TaskEnded {
                counted: true,
                accumulators,
                ..
            } if !accumulators.is_empty() => counted_maps += 1,
            JobEvent::JobSucceeded { .. } => break,
            JobEvent::JobFailed { failure, .. } => panic!("{failure:?}"),
            _ => {}
        }
    }
    assert_eq!(counted_maps, 0, "the killed copy's update counted");
}
