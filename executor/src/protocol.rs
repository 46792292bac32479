//! The executor <-> worker protocol on a worker's Unix socket: each frame is a u32
//! big-endian length followed by one prost message, `ToWorker` from the executor and
//! `FromWorker` from the worker.
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

/// Largest frame either side accepts (a task result can be large).
pub const MAX_FRAME_BYTES: usize = 512 * 1024 * 1024;

/// A worker connection, framed.
pub type WorkerFramed = Framed<UnixStream, LengthDelimitedCodec>;

/// The frame codec: u32 big-endian length, then the message bytes.
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
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
