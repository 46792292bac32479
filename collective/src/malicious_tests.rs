//! Tests with a peer that holds the stage key but writes raw frames (an insider gone
//! wrong): frames announcing huge lengths must be refused before allocation, with errors
//! naming the peer. A length of 2^60 bytes that were allocated would abort the test
//! process, so passing tests show the check comes first.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::conn::write_all;
use crate::frame::{Header, OpCode};
use crate::mesh;
use crate::{CollectiveError, CommOptions, Communicator, Endpoint, ReduceOp, StageKey};

/// Connects an honest rank 0 (as a `Communicator`, in a thread running `honest`) and a
/// raw rank 1 (its connections, to write frames by hand), then returns rank 0's outcome.
fn with_raw_peer<T: Send + 'static>(
    honest: impl FnOnce(&mut Communicator) -> T + Send + 'static,
    raw: impl FnOnce(&crate::conn::Conn),
) -> T {
    let dir = tempfile::tempdir().unwrap();
    let e0 = Endpoint::bind_unix(dir.path()).unwrap();
    let e1 = Endpoint::bind_unix(dir.path()).unwrap();
    let peers = vec![e0.addr().clone(), e1.addr().clone()];
    let key = StageKey::random().unwrap();
    let opts = CommOptions::default().with_max_message_bytes(1 << 20);
    let (tx, rx) = mpsc::channel();
    let (peers0, key0, opts0) = (peers.clone(), key.clone(), opts.clone());
    let abort0 = e0.abort_handle();
    thread::spawn(move || {
        let mut comm = Communicator::connect(e0, 0, &peers0, &key0, opts0).unwrap();
        let _ = tx.send(honest(&mut comm));
    });
    let conns = mesh::build(&e1, 1, &peers, &key, &opts).unwrap();
    raw(conns[0].as_ref().unwrap());
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome,
        Err(_) => {
            abort0.abort();
            panic!("watchdog: the honest rank hung on a malicious frame");
        }
    }
}

fn write_header(conn: &crate::conn::Conn, header: Header) {
    let abort = crate::abort::AbortHandle::new().unwrap();
    write_all(
        &conn.socket,
        &header.encode(),
        Instant::now() + Duration::from_secs(10),
        &abort,
    )
    .unwrap();
}

#[test]
fn oversized_byte_frame_is_refused_before_allocation() {
    let err = with_raw_peer(
        |comm| comm.all_gather(vec![1, 2, 3]).unwrap_err(),
        |conn| {
            write_header(
                conn,
                Header {
                    seq: 0,
                    op: OpCode::AllGather as u8,
                    detail: 0,
                    step: 0,
                    len: 1 << 60,
                    aux: 1,
                },
            )
        },
    );
    match err {
        CollectiveError::MessageTooLarge { rank, len, max } => {
            assert_eq!((rank, len, max), (1, 1 << 60, 1 << 20));
        }
        other => panic!("expected MessageTooLarge, got {other}"),
    }
}

#[test]
fn oversized_broadcast_total_is_refused_before_allocation() {
    let err = with_raw_peer(
        |comm| comm.broadcast(1, None).unwrap_err(),
        |conn| {
            // A small part announcing a huge total (what a scatter frame would carry).
            write_header(
                conn,
                Header {
                    seq: 0,
                    op: OpCode::Broadcast as u8,
                    detail: 0,
                    step: 0,
                    len: 0,
                    aux: 1 << 60,
                },
            )
        },
    );
    assert!(
        matches!(err, CollectiveError::MessageTooLarge { rank: 1, len, .. } if len == 1 << 60),
        "{err}"
    );
}

#[test]
fn wrong_length_slice_frame_is_a_protocol_violation() {
    let err = with_raw_peer(
        |comm| {
            let mut data = [1.0f64; 5];
            comm.all_reduce_slice(&mut data, ReduceOp::Sum).unwrap_err()
        },
        |conn| {
            let detail = crate::element::detail::<f64>(Some(ReduceOp::Sum));
            write_header(
                conn,
                Header {
                    seq: 0,
                    op: OpCode::AllReduceSlice as u8,
                    detail,
                    step: 1,
                    len: 1 << 60,
                    aux: 5,
                },
            )
        },
    );
    match err {
        CollectiveError::Protocol { rank: 1, what } => assert!(what.contains("expected"), "{what}"),
        other => panic!("expected a protocol violation, got {other}"),
    }
}
