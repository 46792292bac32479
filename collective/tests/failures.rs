//! Failures end in typed errors on every rank, never in a hang: another stage's key, a
//! rank that leaves, an abort from another thread (during a collective and while
//! connecting), mismatched calls, a per-call timeout, a byte value above the receiver's
//! bound, a failing combine function. Every run is under the harness's watchdog.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use ember_collective::{CollectiveError, CommOptions, Endpoint, ReduceOp, StageKey};

/// A short connect deadline, for the runs where some rank never completes the mesh.
fn short_connect() -> CommOptions {
    CommOptions::default().with_connect_timeout(Duration::from_secs(2))
}

#[test]
fn another_stages_key_is_refused() {
    for transport in TRANSPORTS {
        let key = StageKey::random().unwrap();
        let intruder = StageKey::random().unwrap();
        let outcomes = launch(
            3,
            transport,
            WATCHDOG,
            |rank| RankSetup {
                key: if rank == 0 {
                    intruder.clone()
                } else {
                    key.clone()
                },
                opts: short_connect(),
            },
            |_, comm| comm.map(|_| ()),
        );
        // Rank 0 dials rank 2 first, which refuses it as another stage's.
        match &outcomes[0] {
            Err(CollectiveError::AuthRefused {
                peer: Some(2),
                reason,
            }) => {
                assert!(reason.contains("another stage"), "{reason}")
            }
            other => panic!("rank 0: expected AuthRefused by rank 2, got {other:?}"),
        }
        // Rank 1 and 2 wait for rank 0 in vain; rank 2 saw (and names) the refusal.
        for (rank, outcome) in outcomes.iter().enumerate().skip(1) {
            assert!(outcome.is_err(), "rank {rank} connected without rank 0");
        }
        match &outcomes[2] {
            Err(CollectiveError::Timeout { waiting_for, .. }) => {
                assert!(waiting_for.contains("another stage"), "{waiting_for}")
            }
            other => panic!("rank 2: expected a timeout naming the refusal, got {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_leaves_makes_the_others_fail() {
    for transport in TRANSPORTS {
        for leaver in [0, 2] {
            let outcomes = launch(
                4,
                transport,
                WATCHDOG,
                {
                    let key = StageKey::random().unwrap();
                    move |_| RankSetup {
                        key: key.clone(),
                        opts: CommOptions::default(),
                    }
                },
                move |rank, comm| {
                    let mut comm = comm.unwrap();
                    comm.barrier().unwrap();
                    if rank == leaver {
                        return Ok(()); // the communicator drops: its sockets close
                    }
                    // Large enough for the ring: every rank waits on its neighbours.
                    let mut data = vec![1.0f64; 1 << 16];
                    comm.all_reduce_slice(&mut data, ReduceOp::Sum)?;
                    comm.barrier()
                },
            );
            for (rank, outcome) in outcomes.iter().enumerate() {
                if rank == leaver {
                    continue;
                }
                match outcome {
                    Err(CollectiveError::PeerLost { .. }) => {}
                    other => panic!("rank {rank} ({transport:?}, leaver {leaver}): expected PeerLost, got {other:?}"),
                }
            }
        }
    }
}

#[test]
fn abort_from_another_thread_unblocks_a_collective() {
    for transport in TRANSPORTS {
        let (handle_tx, handle_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = std::sync::Mutex::new(release_rx);
        let key = StageKey::random().unwrap();
        let aborter = thread::spawn(move || {
            let handle: ember_collective::AbortHandle = handle_rx.recv().unwrap();
            // Give rank 0 time to block (the outcome does not depend on it).
            thread::sleep(Duration::from_millis(100));
            handle.abort();
            assert!(handle.is_aborted());
        });
        let outcomes = launch(
            2,
            transport,
            WATCHDOG,
            |_| RankSetup {
                key: key.clone(),
                opts: CommOptions::default(),
            },
            move |rank, comm| {
                let mut comm = comm.unwrap();
                if rank == 0 {
                    handle_tx.send(comm.abort_handle()).unwrap();
                    let mut data = vec![0u64; 10];
                    let blocked = comm.all_reduce_slice(&mut data, ReduceOp::Sum);
                    let after = comm.barrier();
                    release_tx.send(()).unwrap();
                    (blocked, after)
                } else {
                    // Rank 1 makes no call until rank 0 was aborted; then its all-reduce
                    // may still complete (rank 0's contribution was sent before the
                    // abort), but the barrier after it cannot.
                    release_rx.lock().unwrap().recv().unwrap();
                    let mut data = vec![0u64; 10];
                    let first_failure = comm
                        .all_reduce_slice(&mut data, ReduceOp::Sum)
                        .and_then(|()| comm.barrier());
                    (first_failure, Ok(()))
                }
            },
        );
        aborter.join().unwrap();
        assert!(
            matches!(outcomes[0].0, Err(CollectiveError::Aborted)),
            "{:?}",
            outcomes[0]
        );
        assert!(
            matches!(outcomes[0].1, Err(CollectiveError::Aborted)),
            "{:?}",
            outcomes[0]
        );
        assert!(
            matches!(
                outcomes[1].0,
                Err(CollectiveError::PeerLost { rank: 0, .. })
            ),
            "{:?}",
            outcomes[1]
        );
    }
}

#[test]
fn abort_unblocks_connect() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Endpoint::bind_unix(dir.path()).unwrap();
    // This endpoint is rank 1 of 2, which only accepts; rank 0's endpoint never dials.
    let other = Endpoint::bind_unix(dir.path()).unwrap();
    let peers = vec![other.addr().clone(), endpoint.addr().clone()];
    let handle = endpoint.abort_handle();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let key = StageKey::random().unwrap();
        let _ = tx.send(ember_collective::Communicator::connect(
            endpoint,
            1,
            &peers,
            &key,
            CommOptions::default(),
        ));
    });
    thread::sleep(Duration::from_millis(100));
    handle.abort();
    match rx.recv_timeout(WATCHDOG) {
        Ok(Err(CollectiveError::Aborted)) => {}
        Ok(other) => panic!("expected Aborted, got {other:?}"),
        Err(_) => panic!("watchdog: connect did not return after abort"),
    }
    drop(other);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "socket files left behind"
    );
}

#[test]
fn mismatched_calls_are_protocol_violations() {
    let key = StageKey::random().unwrap();
    let outcomes = launch(
        2,
        Transport::Unix,
        WATCHDOG,
        |_| RankSetup {
            key: key.clone(),
            opts: CommOptions::default(),
        },
        |rank, comm| {
            let mut comm = comm.unwrap();
            // Different lengths, then (had that passed) different collectives.
            let mut data = vec![1.0f64; 10 + rank];
            let lengths = comm.all_reduce_slice(&mut data, ReduceOp::Sum);
            let later = comm.barrier();
            (lengths, later)
        },
    );
    for (rank, (lengths, later)) in outcomes.iter().enumerate() {
        match lengths {
            Err(CollectiveError::Protocol { rank: peer, what }) => {
                assert_eq!(*peer, 1 - rank);
                assert!(what.contains("lengths differ"), "{what}");
            }
            other => panic!("rank {rank}: expected a protocol violation, got {other:?}"),
        }
        assert!(
            matches!(later, Err(CollectiveError::Broken { .. })),
            "rank {rank}: {later:?}"
        );
    }
    let outcomes = launch(
        2,
        Transport::Tcp,
        WATCHDOG,
        |_| RankSetup {
            key: key.clone(),
            opts: CommOptions::default(),
        },
        |rank, comm| {
            let mut comm = comm.unwrap();
            if rank == 0 {
                comm.barrier().map(|_| ())
            } else {
                comm.all_gather(vec![1]).map(|_| ())
            }
        },
    );
    let violations = outcomes
        .iter()
        .filter(|o| matches!(o, Err(CollectiveError::Protocol { what, .. }) if what.contains("same order")))
        .count();
    assert!(
        violations >= 1 && outcomes.iter().all(Result::is_err),
        "{outcomes:?}"
    );
}

#[test]
fn op_timeout_ends_a_wait_for_a_silent_peer() {
    let key = StageKey::random().unwrap();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    let outcomes = launch(
        2,
        Transport::Unix,
        WATCHDOG,
        |_| RankSetup {
            key: key.clone(),
            opts: CommOptions::default().with_op_timeout(Some(Duration::from_millis(300))),
        },
        move |rank, comm| {
            let mut comm = comm.unwrap();
            if rank == 0 {
                let outcome = comm.barrier();
                done_tx.send(()).unwrap();
                outcome
            } else {
                done_rx.lock().unwrap().recv().unwrap();
                Ok(())
            }
        },
    );
    match &outcomes[0] {
        Err(CollectiveError::Timeout { waiting_for, .. }) => {
            assert!(waiting_for.contains("[1]"), "{waiting_for}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_value_above_the_receivers_bound_is_refused() {
    let key = StageKey::random().unwrap();
    let outcomes = launch(
        2,
        Transport::Unix,
        WATCHDOG,
        |rank| RankSetup {
            key: key.clone(),
            // Rank 0 accepts at most 1000 bytes; rank 1 would accept more and sends 2000.
            opts: CommOptions::default().with_max_message_bytes(if rank == 0 {
                1000
            } else {
                1 << 20
            }),
        },
        |rank, comm| {
            let mut comm = comm.unwrap();
            comm.all_gather(vec![7u8; if rank == 1 { 2000 } else { 10 }])
                .and_then(|_| comm.barrier())
        },
    );
    match &outcomes[0] {
        Err(CollectiveError::MessageTooLarge {
            rank: 1,
            len: 2000,
            max: 1000,
        }) => {}
        other => panic!("rank 0: expected MessageTooLarge from rank 1, got {other:?}"),
    }
    // Rank 1's all-gather may complete (rank 0's value was sent); its barrier cannot.
    assert!(
        matches!(outcomes[1], Err(CollectiveError::PeerLost { rank: 0, .. })),
        "{:?}",
        outcomes[1]
    );
}

#[test]
fn a_failing_combine_fails_every_rank() {
    let key = StageKey::random().unwrap();
    let outcomes = launch(
        3,
        Transport::Unix,
        WATCHDOG,
        |_| RankSetup {
            key: key.clone(),
            opts: CommOptions::default(),
        },
        |rank, comm| {
            let mut comm = comm.unwrap();
            comm.all_reduce(vec![rank as u8], |a, b| {
                if a.len() + b.len() > 2 {
                    Err("this combine refuses more than two bytes".into())
                } else {
                    Ok([a, b].concat())
                }
            })
        },
    );
    assert!(outcomes.iter().all(Result::is_err), "{outcomes:?}");
    assert!(
        outcomes.iter().any(
            |o| matches!(o, Err(CollectiveError::Combine(e)) if e.to_string().contains("two bytes"))
        ),
        "{outcomes:?}"
    );
}

#[test]
fn bad_arguments_are_typed_errors() {
    let outcomes = run(2, Transport::Unix, |comm| {
        let root = comm.broadcast(5, Some(vec![1]));
        let later = comm.barrier();
        (root, later)
    });
    for (root, later) in outcomes {
        assert!(
            matches!(root, Err(CollectiveError::InvalidArgument(ref m)) if m.contains("root 5")),
            "{root:?}"
        );
        assert!(
            matches!(later, Err(CollectiveError::Broken { .. })),
            "{later:?}"
        );
    }
    let outcomes = run(1, Transport::Unix, |comm| {
        comm.all_to_all(vec![vec![1], vec![2]])
    });
    assert!(
        matches!(&outcomes[0], Err(CollectiveError::InvalidArgument(m)) if m.contains("2 values for 1 ranks"))
    );
}
