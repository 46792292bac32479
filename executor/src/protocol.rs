//! The executor <-> worker protocol on a worker's Unix socket, the executor's side: the
//! framing is [`ember_proto::worker_frame`]'s (a big-endian length, then one prost
//! message, `ToWorker` from the executor and `FromWorker` from the worker), here as a
//! tokio codec built from its constants.
//!
//! Conversation: the worker connects and sends `FromWorker{ready}` first; then the
//! executor sends `run`, `kill`, `broadcast` and `cleanup` messages (every broadcast a
//! task needs before that task), and the worker answers each `run` with exactly one
//! `FromWorker{status}`.
//!
//! Invariant: decoding never panics; a frame longer than [`MAX_FRAME_BYTES`] or a
//! message that does not decode is an error, which the caller treats as a broken worker.

use bytes::{Bytes, BytesMut};
use ember_proto::{from_worker, FromWorker, ToWorker};
use prost::Message;
use tokio::net::UnixStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use ember_proto::worker_frame::LENGTH_PREFIX_BYTES;
pub use ember_proto::worker_frame::MAX_FRAME_BYTES;

/// A worker connection, framed.
pub type WorkerFramed = Framed<UnixStream, LengthDelimitedCodec>;

/// The frame codec: the length prefix, then the message bytes.
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(LENGTH_PREFIX_BYTES)
        .big_endian()
        .max_frame_length(MAX_FRAME_BYTES)
        .new_codec()
}

/// Frames `stream` with [`codec`].
pub fn framed(stream: UnixStream) -> WorkerFramed {
    Framed::new(stream, codec())
}

/// The bytes of one `ToWorker` frame (without the length prefix the codec adds).
pub fn encode_to_worker(msg: &ToWorker) -> Bytes {
    Bytes::from(msg.encode_to_vec())
}

/// Decodes one frame from a worker; the error says what was wrong with it.
pub fn decode_from_worker(frame: &BytesMut) -> Result<from_worker::Msg, String> {
    let msg = FromWorker::decode(&frame[..])
        .map_err(|e| format!("an undecodable message ({} bytes): {e}", frame.len()))?;
    msg.msg
        .ok_or_else(|| "a message with no content (unknown or empty FromWorker)".to_string())
}

/// Decodes one frame to a worker (the worker side of the protocol, used by tests).
pub fn decode_to_worker(frame: &[u8]) -> Result<ToWorker, prost::DecodeError> {
    ToWorker::decode(frame)
}

/// The bytes of one `FromWorker` frame (the worker side, used by tests).
pub fn encode_from_worker(msg: &FromWorker) -> Bytes {
    Bytes::from(msg.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_proto::worker_frame;
    use tokio_util::codec::{Decoder, Encoder};

    #[test]
    fn the_executor_codec_and_the_worker_framing_agree() {
        // Executor -> worker: the codec writes what the worker's reader reads.
        let mut wire = BytesMut::new();
        codec()
            .encode(Bytes::from_static(b"to the worker"), &mut wire)
            .unwrap();
        let mut r = std::io::Cursor::new(wire.to_vec());
        assert_eq!(
            worker_frame::read_frame(&mut r).unwrap(),
            Some(b"to the worker".to_vec())
        );
        // Worker -> executor: the worker's writer writes what the codec reads.
        let mut out = Vec::new();
        worker_frame::write_frame(&mut out, b"to the executor").unwrap();
        let mut buf = BytesMut::from(&out[..]);
        let frame = codec().decode(&mut buf).unwrap().unwrap();
        assert_eq!(&frame[..], b"to the executor");
        // Both refuse a length over the one limit.
        let mut big = BytesMut::from(&((MAX_FRAME_BYTES + 1) as u32).to_be_bytes()[..]);
        assert!(codec().decode(&mut big).is_err());
        let mut at_limit = BytesMut::from(&(MAX_FRAME_BYTES as u32).to_be_bytes()[..]);
        assert!(
            codec().decode(&mut at_limit).unwrap().is_none(),
            "waits for the bytes"
        );
    }
}
