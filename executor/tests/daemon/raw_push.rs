//! The raw push of a map output (`ember_proto::raw_push`) end to end on 127.0.0.1:0: the
//! pusher's `raw_push::push` against the shuffle port, which serves gRPC on the same
//! port; crafted pushes (no or a wrong secret, another session's key, a wrong crc, cut
//! short, over the limit) are refused with their reason and leave no file behind.

use std::time::Duration;

use ember_executor::raw_push::{push, PushPiece};
use ember_proto::raw_push::{read_reply, write_head};
use ember_proto::RawPushHeader;
use ember_shuffle::data_path;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tonic::Code;

use crate::common::within;
use crate::replica_push::{fetched_bytes, map_output, start, EXECUTOR_SECRET, KEY, SHUFFLE};

fn header(map: u32, secret: &str, key: &str, file_len: u64) -> RawPushHeader {
    RawPushHeader {
        executor_secret: secret.into(),
        shuffle_id: SHUFFLE,
        map_partition: map,
        session_key: key.into(),
        file_len,
    }
}

/// `raw_push::push` of `bytes` in pieces of `piece` bytes.
async fn push_bytes(
    url: &str,
    header: RawPushHeader,
    bytes: &[u8],
    piece: usize,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel(4);
    let chunks: Vec<Vec<u8>> = bytes.chunks(piece.max(1)).map(<[u8]>::to_vec).collect();
    let crc = crc32fast::hash(bytes);
    let n = chunks.len().max(1);
    let feeding = async move {
        let mut chunks = chunks.into_iter();
        for i in 0..n {
            let data = chunks.next().unwrap_or_default();
            let last = i + 1 == n;
            let piece = PushPiece {
                data: data.into(),
                first: i == 0,
                last,
                crc32: if last { crc } else { 0 },
            };
            if tx.send(piece).await.is_err() {
                return;
            }
        }
    };
    let (r, ()) = within("a raw push", async {
        tokio::join!(push(url, header, rx), feeding)
    })
    .await;
    r
}

/// Sends `header`, `data` and `crc` as raw bytes and reads the reply.
async fn crafted(
    url: &str,
    header: &RawPushHeader,
    data: &[u8],
    crc: Option<u32>,
) -> tonic::Status {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    write_head(&mut s, header).await.unwrap();
    // A peer that refuses early may close before taking all of it.
    let _ = s.write_all(data).await;
    if let Some(crc) = crc {
        let _ = s.write_all(&crc.to_be_bytes()).await;
    }
    let _ = s.shutdown().await;
    match within("a reply", read_reply(&mut s)).await.unwrap() {
        Ok(()) => tonic::Status::ok(""),
        Err(status) => status,
    }
}

#[tokio::test]
async fn a_raw_push_is_stored_byte_for_byte_and_served_on_the_same_port() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 4);
    assert!(bytes.len() > 1 << 20, "several pieces");
    let len = bytes.len() as u64;
    for piece in [1 << 20, 65_537] {
        push_bytes(&r.url, header(4, EXECUTOR_SECRET, KEY, len), &bytes, piece)
            .await
            .unwrap();
        let stored = data_path(&r.session_dir(SHUFFLE), SHUFFLE, 4);
        assert!(
            std::fs::read(&stored).unwrap() == bytes,
            "byte for byte, pieces of {piece}"
        );
        assert_eq!(r.files(SHUFFLE), vec!["shuffle_3_4.data".to_string()]);
    }
    // The gRPC side of the port serves it to the session.
    let index = ember_shuffle::IndexFile::read(&data_path(src.path(), SHUFFLE, 4)).unwrap();
    let got = fetched_bytes(&r.url, SHUFFLE, 1, 4, KEY).await;
    assert_eq!(got, index.entry(1).unwrap().len);
    // An empty file is a push too.
    push_bytes(&r.url, header(9, EXECUTOR_SECRET, KEY, 0), &[], 1)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(data_path(&r.session_dir(SHUFFLE), SHUFFLE, 9)).unwrap(),
        b""
    );
}

/// What is refused: its name, header, data and crc; the code and words expected.
type Case<'a> = (&'a str, RawPushHeader, &'a [u8], Option<u32>, Code, &'a str);

#[tokio::test]
async fn raw_pushes_refused_say_why_and_leave_nothing() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 1);
    let len = bytes.len() as u64;
    let crc = crc32fast::hash(&bytes);
    let over = ember_proto::limits::MAX_PUSHED_OUTPUT_BYTES + 1;
    let cases: Vec<Case> = vec![
        (
            "no secret",
            header(1, "", KEY, len),
            &bytes,
            Some(crc),
            Code::Unauthenticated,
            "executor secret",
        ),
        (
            "a wrong secret",
            header(1, "a-client-secret", KEY, len),
            &bytes,
            Some(crc),
            Code::Unauthenticated,
            "executor secret",
        ),
        (
            "another session's key",
            header(1, EXECUTOR_SECRET, &KEY.replace('6', "7"), len),
            &bytes,
            Some(crc),
            Code::PermissionDenied,
            "other than its session's",
        ),
        (
            "a wrong crc",
            header(1, EXECUTOR_SECRET, KEY, len),
            &bytes,
            Some(crc ^ 1),
            Code::DataLoss,
            "arrived damaged",
        ),
        (
            "cut short",
            header(1, EXECUTOR_SECRET, KEY, len),
            &bytes[..bytes.len() / 2],
            None,
            Code::InvalidArgument,
            "ended after",
        ),
        (
            "no crc",
            header(1, EXECUTOR_SECRET, KEY, len),
            &bytes,
            None,
            Code::InvalidArgument,
            "without its crc32",
        ),
        (
            "over the replica limit",
            header(1, EXECUTOR_SECRET, KEY, over),
            &bytes,
            Some(crc),
            Code::ResourceExhausted,
            "over the",
        ),
    ];
    for (what, h, data, crc, code, says) in cases {
        let status = crafted(&r.url, &h, data, crc).await;
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(status.message().contains(says), "{what}: {status:?}");
        assert!(
            r.files(SHUFFLE).is_empty(),
            "{what} left {:?}",
            r.files(SHUFFLE)
        );
    }
    // The pusher reports a refusal with its reason.
    let e = push_bytes(&r.url, header(1, "wrong", KEY, len), &bytes, 1 << 20)
        .await
        .unwrap_err();
    assert!(
        e.contains("refused (executor secret)") && e.contains("executor secret"),
        "{e}"
    );
    assert!(r.files(SHUFFLE).is_empty());
}

#[tokio::test]
async fn a_stalled_raw_push_holds_up_no_fetch_on_the_port() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 2);
    push_bytes(
        &r.url,
        header(2, EXECUTOR_SECRET, KEY, bytes.len() as u64),
        &bytes,
        1 << 20,
    )
    .await
    .unwrap();
    // A push that sends its header and a little data, then nothing.
    let addr = r.url.trim_start_matches("http://");
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    write_head(&mut stalled, &header(5, EXECUTOR_SECRET, KEY, 1 << 20))
        .await
        .unwrap();
    stalled.write_all(&[1, 2, 3]).await.unwrap();
    // And a connection that sends nothing at all.
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let index = ember_shuffle::IndexFile::read(&data_path(src.path(), SHUFFLE, 2)).unwrap();
    let got = fetched_bytes(&r.url, SHUFFLE, 0, 2, KEY).await;
    assert_eq!(
        got,
        index.entry(0).unwrap().len,
        "a fetch beside a stalled push"
    );
    // The stalled push stored nothing (its temporary is there while it waits, at most).
    assert!(!data_path(&r.session_dir(SHUFFLE), SHUFFLE, 5).exists());
}
