//! The rendezvous: every rank's address to every hosting executor once per attempt,
//! in rank order; unknown, stale, duplicate and oversized addresses ignored.

use std::collections::{BTreeMap, HashMap};

use ember_proto::{task_failure, BarrierPeers};

use super::{check_gang, one_stage, Gangs};
use crate::scheduler::tests::drain_until_end;
use crate::{SchedulerConfig, SchedulerEvent};

#[test]
fn the_peers_go_to_every_hosting_executor_once_in_rank_order() {
    let slots = [("e1", 2), ("e2", 2)];
    let g = Gangs::new(&slots, SchedulerConfig::default());
    let events = g.sched.submit(one_stage(3, true), HashMap::new());
    let ranks = check_gang(&g.next_pass(), 3, &slots);
    for rank in [2, 0] {
        g.address(&ranks[rank].1, &format!("addr-{rank}"));
    }
    assert!(
        g.settle().peers.is_empty(),
        "not before every rank reported"
    );
    g.address(&ranks[1].1, "addr-1");
    let seen = g.settle();
    let mut want: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (e, t) in &ranks {
        want.entry(e.clone()).or_default().push(t.task_id);
    }
    let got: BTreeMap<String, Vec<u64>> = seen
        .peers
        .iter()
        .map(|(e, ids, _)| (e.clone(), ids.clone()))
        .collect();
    assert_eq!(seen.peers.len(), want.len(), "once per hosting executor");
    assert_eq!(
        got, want,
        "each executor with its ranks' tasks in rank order"
    );
    let t = &ranks[0].1;
    for (_, _, p) in &seen.peers {
        assert_eq!(
            *p,
            BarrierPeers {
                stage_id: t.stage_id,
                stage_attempt: t.stage_attempt,
                addresses: vec!["addr-0".into(), "addr-1".into(), "addr-2".into()],
                task_ids: vec![],
            }
        );
    }
    g.address(&ranks[1].1, "addr-1");
    assert!(g.settle().peers.is_empty(), "once per attempt");
    for (e, t) in &ranks {
        g.succeed(e, t);
    }
    assert_eq!(drain_until_end(&events).1, Ok(()));
}

#[test]
fn bad_addresses_are_ignored_and_never_stop_the_scheduler() {
    let g = Gangs::new(&[("e1", 3)], SchedulerConfig::default());
    let ordinary = g.sched.submit(one_stage(1, false), HashMap::new());
    let plain = g.next_pass().remove(0);
    let events = g.sched.submit(one_stage(2, true), HashMap::new());
    let ranks = check_gang(&g.next_pass(), 2, &[("e1", 3)]);
    let (r0, r1) = (&ranks[0].1, &ranks[1].1);
    g.sched.send(SchedulerEvent::BarrierAddress {
        task_id: 9_999,
        executor_id: "e1".into(),
        address: "unknown".into(),
    });
    g.address(&plain.1, "not-a-barrier-task");
    g.address(r0, "");
    g.address(
        r0,
        &"x".repeat(ember_proto::limits::MAX_BARRIER_ADDRESS_BYTES + 1),
    );
    g.address_via("e2", r0, "posing-as-e1");
    g.address(r0, "a0");
    g.address(r0, "a0-again");
    assert!(g.settle().peers.is_empty(), "rank 1 has not reported");
    g.address(
        r1,
        &"b".repeat(ember_proto::limits::MAX_BARRIER_ADDRESS_BYTES),
    );
    let seen = g.settle();
    assert_eq!(seen.peers.len(), 1);
    let want = vec![
        "a0".to_string(),
        "b".repeat(ember_proto::limits::MAX_BARRIER_ADDRESS_BYTES),
    ];
    assert_eq!(
        seen.peers[0].2.addresses, want,
        "the first valid address of each rank"
    );
    // The attempt fails; the old attempt's addresses no longer count for the new one.
    g.fail(
        &ranks[0].0,
        r0,
        task_failure::Reason::UserError("boom".into()),
    );
    assert_eq!(g.settle().kills, vec![r1.task_id]);
    g.address(r1, "stale");
    g.fail(
        &ranks[1].0,
        r1,
        task_failure::Reason::Killed("by the scheduler".into()),
    );
    let again = check_gang(&g.next_pass(), 2, &[("e1", 3)]);
    g.address(&again[0].1, "n0");
    g.address(r1, "stale-again");
    assert!(
        g.settle().peers.is_empty(),
        "a superseded task is no rank of the new attempt"
    );
    g.address(&again[1].1, "n1");
    let seen = g.settle();
    assert_eq!(seen.peers.len(), 1);
    assert_eq!(
        seen.peers[0].2.addresses,
        vec!["n0".to_string(), "n1".to_string()]
    );
    assert_eq!(seen.peers[0].2.stage_attempt, again[0].1.stage_attempt);
    for (e, t) in &again {
        g.succeed(e, t);
    }
    g.address(&again[0].1, "finished");
    assert!(g.settle().peers.is_empty());
    assert_eq!(drain_until_end(&events).1, Ok(()));
    g.succeed(&plain.0, &plain.1);
    assert_eq!(drain_until_end(&ordinary).1, Ok(()));
}
