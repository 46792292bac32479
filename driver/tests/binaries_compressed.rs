//! Job binaries travel and rest compressed: an LZ4-chunked upload is stored smaller than
//! the binary, served back as the same bytes, and a chunk that decodes to more than it
//! declares (a decompression bomb) fails the upload and leaves nothing behind.

mod common;

use common::*;
use ember_proto::binary_chunk::{encode, MAX_CHUNK_BYTES};
use ember_proto::BinaryChunk;
use tonic::Code;

/// Bytes that compress like code: repeated instructions with varying operands.
fn binary_like(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| match i % 16 {
            0..=7 => b"\x48\x89\xe5\x41\x57\x41\x56\x53"[i % 8],
            n => ((i / 16) as u8).wrapping_mul(n as u8),
        })
        .collect()
}

fn lz4_chunks(sha: &str, bytes: &[u8]) -> Vec<BinaryChunk> {
    let mut chunks: Vec<BinaryChunk> = bytes.chunks(MAX_CHUNK_BYTES).map(encode).collect();
    chunks[0].sha256 = sha.to_string();
    chunks[0].total_len = bytes.len() as u64;
    chunks
}

#[tokio::test]
async fn a_compressed_upload_is_stored_compressed_and_served_as_the_same_bytes() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let binary = binary_like(2 * MAX_CHUNK_BYTES + 12_345);
    let sha = sha256_hex(&binary);
    let chunks = lz4_chunks(&sha, &binary);
    assert_eq!(chunks.len(), 3);
    let sent: usize = chunks.iter().map(|c| c.data.len()).sum();
    let r = c
        .upload_binary(tokio_stream::iter(chunks))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.sha256, sha);
    let stored = std::fs::metadata(driver.binary_dir.join(&sha))
        .unwrap()
        .len();
    assert!(
        (sent as u64) < binary.len() as u64 / 2 && stored < sent as u64 + 64,
        "{} bytes sent as {sent}, stored as {stored}",
        binary.len()
    );
    assert_eq!(fetch_binary(&mut c, &sha).await, binary);

    // A binary stored raw (by an older driver) is served raw, the same bytes.
    let old = b"\x7fELF an old driver's binary".to_vec();
    let old_sha = sha256_hex(&old);
    std::fs::write(driver.binary_dir.join(&old_sha), &old).unwrap();
    assert_eq!(fetch_binary(&mut c, &old_sha).await, old);
}

#[tokio::test]
async fn a_decompression_bomb_is_refused_and_nothing_is_kept() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    // 1 MiB of zeros compressed (a few KiB), declared as a chunk of 1,000 bytes of a
    // 1,000-byte binary: decoding it would write a thousand times what it declares.
    let declared = vec![0u8; 1000];
    let sha = sha256_hex(&declared);
    let mut bomb = encode(&vec![0u8; MAX_CHUNK_BYTES]);
    assert!(bomb.data.len() < 8 << 10, "{}", bomb.data.len());
    bomb.raw_len = 1000;
    bomb.sha256 = sha.clone();
    bomb.total_len = 1000;
    let err = c
        .upload_binary(tokio_stream::iter(vec![bomb.clone()]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let want = format!(
        "binary upload of 1000 bytes, chunk 1: LZ4 binary chunk of {} bytes does not decode \
         to the 1000 bytes it declares (",
        bomb.data.len()
    );
    assert!(
        err.message().starts_with(&want) && err.message().ends_with("); refusing it"),
        "{}",
        err.message()
    );
    // Declaring what it really decodes to passes the binary's length: refused too.
    bomb.raw_len = MAX_CHUNK_BYTES as u32;
    let err = c
        .upload_binary(tokio_stream::iter(vec![bomb]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains("chunks decode to more than the 1000 bytes the binary declares"),
        "{}",
        err.message()
    );
    let left: Vec<_> = std::fs::read_dir(&driver.binary_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "nothing kept: {left:?}");
}
