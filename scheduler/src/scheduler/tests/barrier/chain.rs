//! A barrier stage between ordinary shuffle stages, with a fetch failure in it: the
//! results equal the same computation done directly.

use std::collections::HashMap;

use ember_proto::{
    task_failure, task_status, task_success, FetchFailure, MapStatus, Plan, TaskDescription,
    TaskSuccess,
};

use super::{check_gang, node, shuffle, Gangs};
use crate::scheduler::tests::drain_until_end;
use crate::SchedulerConfig;

/// source(2) =s0=> barrier(3) =s1=> reduce(2).
fn chain_plan() -> Plan {
    Plan {
        nodes: vec![
            node(0, 2, "source", false, vec![]),
            node(1, 3, "barrier", true, vec![shuffle(0, 0, 3)]),
            node(2, 2, "reduce", false, vec![shuffle(1, 1, 2)]),
        ],
        final_rdd: 2,
        ..Default::default()
    }
}

/// The "data" of the chain, carried in block sizes: source map m writes
/// `10 m + r + 1` for reducer r; barrier rank k sums its blocks of s0 into `s` and writes
/// `s (r + 1) + k` for reducer r; reducer r returns the sum of its blocks of s1.
fn source_block(m: u32, r: u32) -> u64 {
    u64::from(10 * m + r + 1)
}

fn barrier_block(sum: u64, k: u32, r: u32) -> u64 {
    sum * u64::from(r + 1) + u64::from(k)
}

/// Reduce partition `r`'s blocks of the task's input `sid`, by map.
fn blocks_read(t: &TaskDescription, sid: u32, r: u32) -> Vec<u64> {
    let input = t
        .shuffle_inputs
        .iter()
        .find(|i| i.shuffle_id == sid)
        .expect("its input");
    let mut maps = input.clone().map_locations().expect("a valid input");
    maps.sort_by_key(|m| m.map_partition);
    maps.iter()
        .map(|m| m.block_sizes[(r - m.first_reduce) as usize])
        .collect()
}

/// Runs `t` as the chain's executors would (`wrong`: a barrier rank writes garbage).
fn run_chain_task(g: &Gangs, e: &str, t: &TaskDescription, wrong: bool) {
    run_chain_task_stored(g, e, t, wrong, false)
}

/// [`run_chain_task`]; `stored`: the source stage's outputs are also stored
/// (`storage:` durability).
fn run_chain_task_stored(g: &Gangs, e: &str, t: &TaskDescription, wrong: bool, stored: bool) {
    let output = match t.shuffle_id {
        Some(0) => {
            assert!(t.barrier.is_none(), "the map stage is ordinary");
            let sizes = (0..3).map(|r| source_block(t.partition, r)).collect();
            task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored,
                shuffle_id: 0,
                map_partition: t.partition,
                block_sizes: sizes,
            })
        }
        Some(1) => {
            let k = t.barrier.as_ref().expect("a rank").rank;
            let sum: u64 = blocks_read(t, 0, k).iter().sum();
            let garbage = if wrong { 1_000 } else { 0 };
            let sizes = (0..2).map(|r| barrier_block(sum, k, r) + garbage).collect();
            task_success::Output::MapStatus(MapStatus {
                replicas: Default::default(),
                stored: false,
                shuffle_id: 1,
                map_partition: k,
                block_sizes: sizes,
            })
        }
        _ => {
            assert!(t.barrier.is_none(), "the reduce stage is ordinary");
            let sum: u64 = blocks_read(t, 1, t.partition).iter().sum();
            task_success::Output::Result(sum.to_le_bytes().to_vec())
        }
    };
    let success = TaskSuccess {
        output: Some(output),
        ..Default::default()
    };
    g.reply(e, t, task_status::Outcome::Success(success));
}

#[test]
fn a_barrier_stage_between_shuffles_gives_the_right_results_after_a_fetch_failure() {
    let slots = [("e1", 2), ("e2", 2)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let events = g.sched.submit(chain_plan(), HashMap::new());
    let maps = g.next_pass();
    assert_eq!(maps.len(), 2);
    for (e, t) in &maps {
        run_chain_task(&g, e, t, false);
    }
    // The first barrier attempt: rank 2 finishes (with output that must not survive:
    // it is on e2, which loses nothing), rank 1 cannot read map 0's output from e1;
    // rank 0 is killed.
    let first = check_gang(&g.next_pass(), 3, &slots);
    assert!(first.iter().all(|(_, t)| t.shuffle_id == Some(1)));
    let map0 = maps.iter().find(|(_, t)| t.partition == 0).unwrap();
    assert_ne!(
        first[2].0, map0.0,
        "rank 2's output is kept by its executor"
    );
    run_chain_task(&g, &first[2].0, &first[2].1, true);
    let lost = FetchFailure {
        from_storage: false,
        executor_id: map0.0.clone(),
        shuffle_id: 0,
        map_partition: 0,
        reduce_partition: 1,
        message: "gone".into(),
    };
    g.fail(
        &first[1].0,
        &first[1].1,
        task_failure::Reason::FetchFailed(lost),
    );
    let seen = g.settle();
    assert_eq!(seen.kills, vec![first[0].1.task_id]);
    // The map outputs on that executor rerun first (they may start with the kill).
    let mut rerun = seen.launches();
    g.fail(
        &first[0].0,
        &first[0].1,
        task_failure::Reason::Killed("stop".into()),
    );
    if rerun.is_empty() {
        rerun = g.next_pass();
    }
    assert!(
        rerun.iter().all(|(_, t)| t.shuffle_id == Some(0)),
        "{rerun:?}"
    );
    assert!(rerun.iter().any(|(_, t)| t.partition == 0));
    for (e, t) in &rerun {
        run_chain_task(&g, e, t, false);
    }
    // Then every rank again, as a new attempt, and the reducers.
    let second = check_gang(&g.next_pass(), 3, &slots);
    assert_eq!(second[0].1.stage_attempt, first[0].1.stage_attempt + 1);
    for (e, t) in &second {
        run_chain_task(&g, e, t, false);
    }
    let reducers = g.next_pass();
    assert_eq!(reducers.len(), 2);
    for (e, t) in &reducers {
        run_chain_task(&g, e, t, false);
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results, chain_results());
}

/// The chain's results, computed directly.
fn chain_results() -> HashMap<u32, Vec<u8>> {
    (0..2)
        .map(|r| {
            let total: u64 = (0..3)
                .map(|k| {
                    let sum: u64 = (0..2).map(|m| source_block(m, k)).sum();
                    barrier_block(sum, k, r)
                })
                .sum();
            (r, total.to_le_bytes().to_vec())
        })
        .collect()
}

/// The chain with the executor holding source map 0 lost while the barrier stage runs
/// (a new executor joins); returns the source partitions that ran again. The results
/// must equal the direct computation either way.
fn lose_an_executor_under_the_barrier_stage(stored: bool) -> Vec<u32> {
    let slots = [("e1", 2), ("e2", 2)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let events = g.sched.submit(chain_plan(), HashMap::new());
    let maps = g.next_pass();
    for (e, t) in &maps {
        run_chain_task_stored(&g, e, t, false, stored);
    }
    let first = check_gang(&g.next_pass(), 3, &slots);
    let gone = maps
        .iter()
        .find(|(_, t)| t.partition == 0)
        .unwrap()
        .0
        .clone();
    let mut tasks: HashMap<u64, (String, TaskDescription)> = first
        .iter()
        .map(|(e, t)| (t.task_id, (e.clone(), t.clone())))
        .collect();
    g.add_executor("e3", 2);
    g.sched.send(crate::SchedulerEvent::ExecutorLost {
        executor_id: gone.clone(),
        reason: "killed".into(),
    });
    let mut rerun = Vec::new();
    for _ in 0..100 {
        let seen = g.settle();
        for id in &seen.kills {
            if let Some((e, t)) = tasks.get(id) {
                g.fail(e, t, task_failure::Reason::Killed("stop".into()));
            }
        }
        let launches = seen.launches();
        if launches.is_empty() && seen.kills.is_empty() {
            break;
        }
        for (e, t) in launches {
            assert_ne!(e, gone, "nothing runs on the lost executor");
            if t.shuffle_id == Some(0) {
                rerun.push(t.partition);
            }
            if t.shuffle_id == Some(1) {
                // A rank reads source map 0 from storage once its executor is gone.
                let input = t.shuffle_inputs.iter().find(|i| i.shuffle_id == 0).unwrap();
                let zero = input
                    .clone()
                    .map_locations()
                    .unwrap()
                    .into_iter()
                    .find(|l| l.map_partition == 0)
                    .unwrap();
                assert_eq!(zero.from_storage, stored, "{zero:?}");
            }
            run_chain_task_stored(&g, &e, &t, false, stored);
            tasks.insert(t.task_id, (e, t));
        }
    }
    let (results, outcome, _) = drain_until_end(&events);
    assert_eq!(outcome, Ok(()));
    assert_eq!(results, chain_results());
    rerun
}

#[test]
fn a_lost_executor_under_a_barrier_stage_reruns_its_source_outputs_first() {
    let rerun = lose_an_executor_under_the_barrier_stage(false);
    assert!(rerun.contains(&0), "map 0 ran again: {rerun:?}");
}

#[test]
fn a_lost_executor_under_a_barrier_stage_keeps_its_stored_source_outputs() {
    assert_eq!(
        lose_an_executor_under_the_barrier_stage(true),
        Vec::<u32>::new()
    );
}

/// After a driver restart an executor reports `held` (shuffle, map, width) outputs;
/// the chain is then submitted: the launches of its first dispatch pass.
fn first_pass_after_rejoin(held: &[(u32, u32, usize)]) -> Vec<(Option<u32>, u32)> {
    let g = Gangs::new(&[], SchedulerConfig::default());
    g.sched.send(crate::SchedulerEvent::ExecutorRejoined {
        executor_id: "e1".into(),
        slots: 4,
        shuffle_address: String::new(),
        host: String::new(),
        held: (held.iter())
            .map(
                |&(shuffle_id, map_partition, width)| ember_proto::HeldOutput {
                    shuffle_id,
                    map_partition,
                    block_sizes: vec![1; width],
                },
            )
            .collect(),
    });
    let _events = g.sched.submit(chain_plan(), HashMap::new());
    let mut pass: Vec<(Option<u32>, u32)> = (g.next_pass().into_iter())
        .map(|(_, t)| (t.shuffle_id, t.partition))
        .collect();
    pass.sort();
    pass
}

#[test]
fn a_barrier_stage_with_some_ranks_reported_runs_again_as_a_whole() {
    // The source's two outputs and two of the barrier stage's three: the source is
    // skipped, the barrier stage runs every rank.
    let some = [(0, 0, 3), (0, 1, 3), (1, 0, 2), (1, 2, 2)];
    assert_eq!(
        first_pass_after_rejoin(&some),
        vec![(Some(1), 0), (Some(1), 1), (Some(1), 2)]
    );
    // Every rank's output reported: only the reducers run.
    let all = [(0, 0, 3), (0, 1, 3), (1, 0, 2), (1, 1, 2), (1, 2, 2)];
    assert_eq!(first_pass_after_rejoin(&all), vec![(None, 0), (None, 1)]);
}
