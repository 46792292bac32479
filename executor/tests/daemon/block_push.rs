//! `Shuffle.PushCachedBlock` end to end over gRPC on 127.0.0.1:0 (a decommissioning
//! peer moving a cached partition here): stored byte for byte as
//! `ember_shuffle::cached_block_path` in the session's directory, mode 0600; a push
//! without the executor secret, with another session's key, damaged or shorter than
//! announced is refused and leaves no file behind; an unpersist deletes the RDD's moved
//! blocks and nothing else.

use std::os::unix::fs::PermissionsExt;

use ember_proto::CachedBlockPiece;
use tonic::Code;

use crate::common::within;
use crate::replica_push::{client, start, Client, EXECUTOR_SECRET, KEY, SHUFFLE};

/// An RDD of the session SHUFFLE belongs to (same id range).
const RDD: u32 = SHUFFLE + 1;

/// The bytes of a moved block: opaque to the daemon, a few pieces long.
fn block_bytes() -> Vec<u8> {
    (0..2_500_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn pieces(
    part: u32,
    key: &str,
    bytes: &[u8],
    announced: u64,
    crc: Option<u32>,
) -> Vec<CachedBlockPiece> {
    let chunks: Vec<&[u8]> = bytes.chunks(1 << 20).collect();
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| CachedBlockPiece {
            rdd_id: RDD,
            partition: part,
            session_key: if i == 0 {
                key.to_string()
            } else {
                String::new()
            },
            file_len: announced,
            crc32: if i + 1 == n {
                crc.unwrap_or_else(|| crc32fast::hash(bytes))
            } else {
                0
            },
            data: c.to_vec().into(),
            last: i + 1 == n,
        })
        .collect()
}

async fn push(c: &mut Client, pieces: Vec<CachedBlockPiece>) -> Result<(), tonic::Status> {
    within("a push", c.push_cached_block(tokio_stream::iter(pieces)))
        .await
        .map(|_| ())
}

#[tokio::test]
async fn a_moved_block_is_stored_under_its_name_and_goes_with_its_rdd() {
    let r = start().await;
    let bytes = block_bytes();
    let len = bytes.len() as u64;
    let mut c = client(&r.url, Some(EXECUTOR_SECRET)).await;
    push(&mut c, pieces(2, KEY, &bytes, len, None))
        .await
        .unwrap();
    let stored = ember_shuffle::cached_block_path(&r.session_dir(SHUFFLE), RDD, 2);
    assert_eq!(std::fs::read(&stored).unwrap(), bytes, "byte for byte");
    let mode = std::fs::metadata(&stored).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(r.files(SHUFFLE), vec![format!("rdd_{RDD}_2.cached")]);
    // A shuffle file and another RDD's block beside it stay when RDD is unpersisted.
    let dir = r.session_dir(SHUFFLE);
    std::fs::write(ember_shuffle::data_path(&dir, SHUFFLE, 0), b"x").unwrap();
    std::fs::write(ember_shuffle::cached_block_path(&dir, RDD + 1, 2), b"x").unwrap();
    let shuffle_dir = r.session_dir(SHUFFLE).parent().unwrap().to_path_buf();
    assert_eq!(
        ember_executor::cleanup::delete_cached_blocks(&shuffle_dir, RDD),
        1
    );
    assert_eq!(
        r.files(SHUFFLE),
        vec![
            format!("rdd_{}_2.cached", RDD + 1),
            format!("shuffle_{SHUFFLE}_0.data")
        ]
    );
}

#[tokio::test]
async fn a_block_push_without_the_secret_or_with_a_bad_key_or_damage_is_refused() {
    let r = start().await;
    let bytes = block_bytes();
    let len = bytes.len() as u64;
    for secret in [None, Some("a-client-or-cluster-secret")] {
        let mut c = client(&r.url, secret).await;
        let e = push(&mut c, pieces(0, KEY, &bytes, len, None))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{secret:?}: {e:?}");
        assert!(e.message().contains("executor secret"), "{e:?}");
    }
    let mut c = client(&r.url, Some(EXECUTOR_SECRET)).await;
    let other_key = "0".repeat(64);
    let e = push(&mut c, pieces(0, &other_key, &bytes, len, None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = push(&mut c, pieces(0, KEY, &bytes, len, Some(7)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(
        e.message()
            .contains(&format!("cached partition 0 of RDD {RDD}")),
        "{e:?}"
    );
    let e = push(&mut c, pieces(0, KEY, &bytes, len + 1, None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("ended after"), "{e:?}");
    let e = push(&mut c, pieces(0, KEY, &bytes, 1 << 40, None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(r.files(SHUFFLE).is_empty(), "{:?}", r.files(SHUFFLE));
}
