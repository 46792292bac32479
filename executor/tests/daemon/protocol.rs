//! The executor <-> worker framing.

use bytes::BytesMut;
use ember_executor::protocol::*;
use ember_proto::{from_worker, to_worker, FromWorker, KillTask, ToWorker, WorkerReady};
use tokio_util::codec::{Decoder, Encoder};

#[test]
fn frames_are_a_big_endian_length_then_one_message() {
    let msg = ToWorker {
        msg: Some(to_worker::Msg::Kill(KillTask {
            interrupt: Default::default(),
            task_id: 42,
            reason: "speculation lost".into(),
        })),
    };
    let body = encode_to_worker(&msg);
    let mut codec = codec();
    let mut buf = BytesMut::new();
    codec.encode(body.clone(), &mut buf).unwrap();
    assert_eq!(buf[..4], (body.len() as u32).to_be_bytes());
    assert_eq!(buf[4..], body[..]);
    let frame = codec.decode(&mut buf).unwrap().unwrap();
    assert_eq!(decode_to_worker(&frame).unwrap(), msg);
    assert!(buf.is_empty());

    // The worker's side: Ready round-trips; a partial frame waits for more bytes.
    let ready = FromWorker {
        msg: Some(from_worker::Msg::Ready(WorkerReady {
            pid: 7,
            binary_sha256: "ab".repeat(32),
        })),
    };
    let mut buf = BytesMut::new();
    codec.encode(encode_from_worker(&ready), &mut buf).unwrap();
    let mut partial = buf.split_to(buf.len() - 1);
    assert!(codec.decode(&mut partial).unwrap().is_none());
    partial.unsplit(buf);
    let frame = codec.decode(&mut partial).unwrap().unwrap();
    assert_eq!(
        decode_from_worker(&frame).unwrap(),
        ready.msg.clone().unwrap()
    );
}

#[test]
fn garbage_and_oversized_frames_are_errors_not_panics() {
    let err = decode_from_worker(&BytesMut::from(&[0xff, 0xff, 0xff][..])).unwrap_err();
    assert!(err.contains("undecodable"), "{err}");
    let err = decode_from_worker(&BytesMut::new()).unwrap_err();
    assert!(err.contains("no content"), "{err}");
    let mut codec = codec();
    let mut huge = BytesMut::from(&((MAX_FRAME_BYTES as u32) + 1).to_be_bytes()[..]);
    assert!(codec.decode(&mut huge).is_err());
}
