//! The raw push: how one executor sends a map output file to a peer's shuffle port as
//! plain bytes, beside the port's gRPC (as Spark's block transfer service streams block
//! files without a message layer). `Shuffle.PushMapOutput` carries the same file in 1 MiB
//! protobuf messages over HTTP/2, which both sides copy through message and frame
//! buffers: on the replicated sort of the kv set the two daemons spent 1.5 s of CPU per
//! GB pushed that way.
//!
//! A push is one connection, in this order:
//! 1. [`MAGIC`] (8 bytes; its first byte, 0, never starts an HTTP/2 connection preface,
//!    which is how the port tells the two apart);
//! 2. the header: a 4-byte big-endian length, at most [`MAX_HEADER_BYTES`], then a
//!    prost `RawPushHeader` (the executor secret, the output's shuffle and map id, the
//!    session's shuffle key and `file_len`);
//! 3. `file_len` bytes of the file;
//! 4. the crc32 (crc32fast, IEEE) of those bytes, 4 bytes big-endian;
//!
//! and the peer answers with one reply ([`write_reply`]): a `tonic::Code` as one byte (0:
//! stored) and a message of at most [`MAX_REPLY_MESSAGE_BYTES`] bytes (a 2-byte length
//! first), then closes. It may answer early (a refusal) without reading the rest.
//!
//! Invariants: every length is bounded before anything is allocated for it; the header
//! carries credentials, so its `Debug` shows only their lengths (`redacted.rs`); a reply
//! message is cut at a character boundary, never past its bound.

use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::v1::RawPushHeader;

/// The first bytes of a raw push.
pub const MAGIC: [u8; 8] = *b"\0EMBPSH1";
/// Largest header a peer decodes (a secret and a key of at most 256 bytes each, and a
/// few ids: well under this).
pub const MAX_HEADER_BYTES: usize = 4096;
/// Longest reply message.
pub const MAX_REPLY_MESSAGE_BYTES: usize = 1024;

/// Why a raw push's framing was refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RawPushError {
    #[error("not a raw push (its first bytes are not the raw push magic)")]
    NotRawPush,
    #[error("a raw push header of {0} bytes, over the {MAX_HEADER_BYTES} allowed")]
    HeaderTooLong(usize),
    #[error("a raw push header that does not decode: {0}")]
    BadHeader(#[from] prost::DecodeError),
    #[error("a reply code {0} that is no gRPC code")]
    BadCode(u8),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes the magic and `header` (the caller then writes the file and its crc).
pub async fn write_head<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &RawPushHeader,
) -> Result<(), RawPushError> {
    let body = header.encode_to_vec();
    if body.len() > MAX_HEADER_BYTES {
        return Err(RawPushError::HeaderTooLong(body.len()));
    }
    let mut head = Vec::with_capacity(MAGIC.len() + 4 + body.len());
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&(body.len() as u32).to_be_bytes());
    head.extend_from_slice(&body);
    w.write_all(&head).await?;
    Ok(())
}

/// Reads the magic and the header (the caller then reads `file_len` bytes and the crc).
pub async fn read_head<R: AsyncRead + Unpin>(r: &mut R) -> Result<RawPushHeader, RawPushError> {
    let mut magic = [0u8; MAGIC.len()];
    r.read_exact(&mut magic).await?;
    if magic != MAGIC {
        return Err(RawPushError::NotRawPush);
    }
    let len = r.read_u32().await? as usize;
    if len > MAX_HEADER_BYTES {
        return Err(RawPushError::HeaderTooLong(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(RawPushHeader::decode(body.as_slice())?)
}

/// Writes the peer's answer: `code` and `message` (cut to [`MAX_REPLY_MESSAGE_BYTES`]).
pub async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    code: tonic::Code,
    message: &str,
) -> std::io::Result<()> {
    let mut end = message.len().min(MAX_REPLY_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let mut reply = Vec::with_capacity(3 + end);
    reply.push(code as i32 as u8);
    reply.extend_from_slice(&(end as u16).to_be_bytes());
    reply.extend_from_slice(&message.as_bytes()[..end]);
    w.write_all(&reply).await?;
    w.flush().await
}

/// Reads the peer's answer: `Ok` if it stored the file, else its status.
pub async fn read_reply<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Result<(), tonic::Status>, RawPushError> {
    let code = r.read_u8().await?;
    let len = (r.read_u16().await? as usize).min(MAX_REPLY_MESSAGE_BYTES);
    let mut message = vec![0u8; len];
    r.read_exact(&mut message).await?;
    if code > tonic::Code::Unauthenticated as i32 as u8 {
        return Err(RawPushError::BadCode(code));
    }
    let code = tonic::Code::from_i32(i32::from(code));
    Ok(match code {
        tonic::Code::Ok => Ok(()),
        code => Err(tonic::Status::new(
            code,
            String::from_utf8_lossy(&message).into_owned(),
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RawPushHeader {
        RawPushHeader {
            executor_secret: "s".repeat(64),
            shuffle_id: 7,
            map_partition: 3,
            session_key: "k".repeat(64),
            file_len: 1 << 30,
        }
    }

    #[tokio::test]
    async fn a_head_round_trips_and_anything_else_is_refused() {
        let mut wire = Vec::new();
        write_head(&mut wire, &header()).await.unwrap();
        assert_eq!(wire[0], 0, "the first byte tells a raw push from HTTP/2");
        assert_eq!(read_head(&mut wire.as_slice()).await.unwrap(), header());

        // An HTTP/2 preface is not a raw push.
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert!(matches!(
            read_head(&mut &preface[..]).await,
            Err(RawPushError::NotRawPush)
        ));
        // A length over the bound is refused before its body is read.
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&(MAX_HEADER_BYTES as u32 + 1).to_be_bytes());
        assert!(matches!(
            read_head(&mut long.as_slice()).await,
            Err(RawPushError::HeaderTooLong(n)) if n == MAX_HEADER_BYTES + 1
        ));
        // A body that is not a header.
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&3u32.to_be_bytes());
        bad.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(
            read_head(&mut bad.as_slice()).await,
            Err(RawPushError::BadHeader(_))
        ));
        // Cut short.
        assert!(matches!(
            read_head(&mut &wire[..wire.len() - 1]).await,
            Err(RawPushError::Io(_))
        ));
    }

    #[tokio::test]
    async fn replies_round_trip_with_their_message_bounded() {
        let mut wire = Vec::new();
        write_reply(&mut wire, tonic::Code::Ok, "").await.unwrap();
        assert!(read_reply(&mut wire.as_slice()).await.unwrap().is_ok());

        let mut wire = Vec::new();
        let long = "é".repeat(MAX_REPLY_MESSAGE_BYTES);
        write_reply(&mut wire, tonic::Code::PermissionDenied, &long)
            .await
            .unwrap();
        let status = read_reply(&mut wire.as_slice()).await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(status.message(), "é".repeat(MAX_REPLY_MESSAGE_BYTES / 2));

        let bad = [200u8, 0, 0];
        assert!(matches!(
            read_reply(&mut &bad[..]).await,
            Err(RawPushError::BadCode(200))
        ));
    }
}
