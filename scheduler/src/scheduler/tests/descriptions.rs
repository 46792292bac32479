//! What a task description carries of its shuffle inputs: a reducer reached through
//! one-to-one steps gets only its own block sizes; anything else gets all of them.

use std::collections::HashMap;

use ember_proto::{dependency::Kind, Dependency, NarrowDependency, Plan, RddNode};

use super::{drain_until_end, two_stage_plan, Harness};
use crate::SchedulerConfig;

/// Runs the map stage of `plan` (shuffle 0 with 2 maps and `reducers` reduce
/// partitions, block sizes 10 * reduce + map) and returns the reducers' descriptions.
fn reducer_inputs(plan: Plan, reducers: usize) -> Vec<(u32, Vec<ember_proto::MapLocation>)> {
    let h = Harness::new(&[("e1", 4)], SchedulerConfig::default());
    let events = h.sched.submit(plan, HashMap::new());
    let mut out = Vec::new();
    loop {
        let (ex, t) = h.next_task();
        match t.shuffle_id {
            Some(sid) => h.reply(
                &ex,
                &t,
                ember_proto::task_status::Outcome::Success(ember_proto::TaskSuccess {
                    output: Some(ember_proto::task_success::Output::MapStatus(
                        ember_proto::MapStatus {
                            replicas: Default::default(),
                            stored: false,
                            shuffle_id: sid,
                            map_partition: t.partition,
                            block_sizes: (0..reducers as u64)
                                .map(|r| 10 * r + u64::from(t.partition))
                                .collect(),
                        },
                    )),
                    ..Default::default()
                }),
            ),
            None => {
                out.push((
                    t.partition,
                    t.shuffle_inputs[0].clone().map_locations().unwrap(),
                ));
                h.succeed(&ex, &t);
                if out.len() == reducers {
                    break;
                }
            }
        }
    }
    let (_, outcome, _) = drain_until_end(&events);
    assert!(outcome.is_ok(), "{outcome:?}");
    out.sort_by_key(|(p, _)| *p);
    out
}

#[test]
fn a_reducer_is_sent_only_its_own_block_sizes() {
    for (p, maps) in reducer_inputs(two_stage_plan(), 2) {
        assert_eq!(maps.len(), 2, "every map output is named");
        for loc in maps {
            assert_eq!(loc.first_reduce, p);
            assert_eq!(
                loc.block_sizes,
                vec![10 * u64::from(p) + u64::from(loc.map_partition)]
            );
        }
    }
}

#[test]
fn below_a_step_that_is_not_one_to_one_a_reducer_gets_every_size() {
    // source =s0=> reduce -(coalesce-like, not 1:1)-> final, 2 partitions each.
    let mut plan = two_stage_plan();
    plan.nodes.push(RddNode {
        id: 2,
        num_partitions: 2,
        name: "coalesce".into(),
        deps: vec![Dependency {
            kind: Some(Kind::Narrow(NarrowDependency {
                parent: 1,
                one_to_one: false,
            })),
        }],
        ..Default::default()
    });
    plan.final_rdd = 2;
    for (_, maps) in reducer_inputs(plan, 2) {
        for loc in maps {
            assert_eq!(loc.first_reduce, 0);
            let m = u64::from(loc.map_partition);
            assert_eq!(loc.block_sizes, vec![m, 10 + m]);
        }
    }
}
