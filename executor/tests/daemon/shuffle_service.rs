//! The Shuffle service end to end over gRPC on 127.0.0.1:0, against real shuffle files.

use std::path::Path;

use ember_executor::blocks::{self, ShuffleService, CHUNK_BYTES};
use ember_proto::auth::AddSecret;
use ember_proto::limits::{CHUNKS_MESSAGE_BYTES, MAX_CHUNKS_PER_MESSAGE};
use ember_proto::shuffle_client::ShuffleClient;
use ember_proto::{BlockChunk, BlockChunks, FetchBlocksRequest};
use ember_shuffle::{data_path, IndexFile, ShuffleWriter};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Code;

use crate::common::within;

/// A cluster secret a client may send; the service ignores it.
const SECRET: &str = "shuffle-secret";
const SHUFFLE: u32 = 7;
/// The session key of id range 1's session.
const OTHER_KEY: &str = "0ther0000000000000000000000000000000000000000000000000000000000a";
/// The session key of shuffle 7's session (id range 0).
const KEY: &str = "6b6579206f662073657373696f6e20302c2077686f7365206964732073746172";

type Client = ShuffleClient<InterceptedService<Channel, AddSecret>>;

/// Writes map output `map` of shuffle 7 with 3 reducers: reducer 0 gets about 2.5 MB of
/// poorly compressible records (several chunks), reducer 1 nothing, reducer 2 a few.
fn write_map_output(dir: &Path, map: u32) {
    write_map_output_of(dir, SHUFFLE, map)
}

/// [`write_map_output`] for shuffle `shuffle`.
fn write_map_output_of(dir: &Path, shuffle: u32, map: u32) {
    let mut w = ShuffleWriter::<(u64, String)>::new(dir, shuffle, map, 3);
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ map as u64;
    for i in 0..40_000u64 {
        let mut s = String::with_capacity(64);
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(&format!("{x:016x}"));
        }
        w.write(0, &(i, s)).unwrap();
    }
    for i in 0..5u64 {
        w.write(2, &(i, format!("small-{map}-{i}"))).unwrap();
    }
    w.finish().unwrap();
}

struct Server {
    url: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
    shuffle_dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start() -> Server {
    start_with(blocks::MAX_FETCH_REQUEST_BYTES).await
}

/// [`start`] with a bound of `max_request_bytes` on one request's blocks.
async fn start_with(max_request_bytes: u64) -> Server {
    let dir = tempfile::tempdir().unwrap();
    // The service serves `shuffle/`; the session owning SHUFFLE keeps its files in
    // its own subdirectory.
    let shuffle_root = dir.path().join("shuffle");
    let shuffle_dir = ember_executor::config::session_shuffle_dir(
        &shuffle_root,
        ember_proto::IdRange::of_id(SHUFFLE),
    );
    std::fs::create_dir_all(&shuffle_dir).unwrap();
    write_map_output(&shuffle_dir, 0);
    write_map_output(&shuffle_dir, 1);
    let id = blocks::SharedExecutorId::default();
    *id.lock().unwrap() = "exec-7".into();
    let service = ShuffleService::new(&shuffle_root, id).with_max_request_bytes(max_request_bytes);
    service.session_keys().learn(SHUFFLE, KEY);
    service.session_keys().learn(1 << 20, OTHER_KEY);
    let (url, stop) = crate::common::serve_shuffle(service).await;
    Server {
        url,
        stop,
        _dir: dir,
        shuffle_dir,
    }
}

async fn client(url: &str, secret: Option<&str>) -> Client {
    crate::common::shuffle_client(url, secret).await
}

/// Fetches and returns the chunks received, and the error that ended the stream if any.
async fn fetch(
    c: &mut Client,
    reduce: u32,
    maps: Vec<u32>,
) -> (Vec<BlockChunk>, Option<tonic::Status>) {
    fetch_of(c, SHUFFLE, KEY, reduce, maps).await
}

/// [`fetch`] of shuffle `shuffle` with session key `key`.
async fn fetch_of(
    c: &mut Client,
    shuffle: u32,
    key: &str,
    reduce: u32,
    maps: Vec<u32>,
) -> (Vec<BlockChunk>, Option<tonic::Status>) {
    let (messages, err) = fetch_messages(c, shuffle, key, reduce, maps).await;
    (messages.into_iter().flat_map(|m| m.chunks).collect(), err)
}

/// [`fetch_of`] returning the messages as they came, each checked against the bounds
/// of a `BlockChunks` message.
async fn fetch_messages(
    c: &mut Client,
    shuffle: u32,
    key: &str,
    reduce: u32,
    maps: Vec<u32>,
) -> (Vec<BlockChunks>, Option<tonic::Status>) {
    let req = FetchBlocksRequest {
        shuffle_id: shuffle,
        reduce_partition: reduce,
        map_partitions: maps,
        session_key: key.to_string(),
    };
    let mut stream = match within("fetch_blocks", c.fetch_blocks(req)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return (Vec::new(), Some(s)),
    };
    let mut messages = Vec::new();
    loop {
        match within("a block chunk", stream.message()).await {
            Ok(Some(m)) => {
                let bytes: usize = m.chunks.iter().map(|c| c.data.len()).sum();
                assert!(
                    !m.chunks.is_empty() && m.chunks.len() <= MAX_CHUNKS_PER_MESSAGE,
                    "a message of {} chunks",
                    m.chunks.len()
                );
                assert!(
                    m.chunks.len() == 1 || bytes <= CHUNKS_MESSAGE_BYTES,
                    "{} chunks of {bytes} bytes in one message",
                    m.chunks.len()
                );
                messages.push(m)
            }
            Ok(None) => return (messages, None),
            Err(s) => return (messages, Some(s)),
        }
    }
}

/// Reassembles chunks into (map partition, block_len, crc, bytes) per block.
fn blocks_of(chunks: &[BlockChunk]) -> Vec<(u32, u64, u32, Vec<u8>)> {
    let mut out: Vec<(u32, u64, u32, Vec<u8>)> = Vec::new();
    for c in chunks {
        assert!(
            c.data.len() <= CHUNK_BYTES,
            "chunk of {} bytes",
            c.data.len()
        );
        if c.first {
            out.push((c.map_partition, c.block_len, c.crc32, c.data.clone()));
        } else {
            let last = out
                .last_mut()
                .expect("continuation chunk before a first chunk");
            assert_eq!(last.0, c.map_partition);
            last.3.extend_from_slice(&c.data);
        }
    }
    out
}

/// The bytes and crc of a block, straight from the files.
fn block_on_disk(dir: &Path, map: u32, reduce: u32) -> (Vec<u8>, u32) {
    let entry = IndexFile::read(&data_path(dir, SHUFFLE, map))
        .unwrap()
        .entry(reduce)
        .unwrap();
    let data = std::fs::read(data_path(dir, SHUFFLE, map)).unwrap();
    (
        data[entry.offset as usize..(entry.offset + entry.len) as usize].to_vec(),
        entry.crc,
    )
}

#[tokio::test]
async fn blocks_arrive_whole_in_request_order_with_their_crc() {
    let server = start().await;
    let mut c = client(&server.url, Some(SECRET)).await;

    let (chunks, err) = fetch(&mut c, 0, vec![1, 0]).await;
    assert!(err.is_none(), "{err:?}");
    assert!(
        chunks.len() >= 4,
        "large blocks come in several chunks: {}",
        chunks.len()
    );
    let got = blocks_of(&chunks);
    assert_eq!(got.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 0]);
    for (map, len, crc, bytes) in &got {
        let (want, want_crc) = block_on_disk(&server.shuffle_dir, *map, 0);
        assert!(want.len() > CHUNK_BYTES, "test block should span chunks");
        assert_eq!(*len as usize, want.len());
        assert_eq!(*crc, want_crc);
        assert!(bytes == &want, "block of map {map} differs from the file");
    }

    // An empty block is one chunk with no data; a small one is one chunk.
    let (chunks, err) = fetch(&mut c, 1, vec![0, 1]).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 2);
    for (c, map) in chunks.iter().zip([0, 1]) {
        assert!(c.first && c.block_len == 0 && c.data.is_empty() && c.map_partition == map);
    }
    let (chunks, _) = fetch(&mut c, 2, vec![0]).await;
    let (want, want_crc) = block_on_disk(&server.shuffle_dir, 0, 2);
    assert_eq!(chunks.len(), 1);
    assert_eq!((chunks[0].data.clone(), chunks[0].crc32), (want, want_crc));
}

/// A wide shuffle's tiny blocks travel many to a message: 300 map outputs' blocks of a
/// few records each arrive in one message, byte for byte as on disk, in request order;
/// and the same outputs asked again (served from memory now) arrive the same.
#[tokio::test]
async fn many_small_blocks_share_one_message() {
    let server = start().await;
    let mut c = client(&server.url, Some(SECRET)).await;
    let maps: Vec<u32> = (2..302).rev().collect();
    for &m in &maps {
        let mut w = ShuffleWriter::<(u64, String)>::new(&server.shuffle_dir, SHUFFLE, m, 3);
        for r in 0..3 {
            w.write(r, &(u64::from(m), format!("tiny-{m}-{r}")))
                .unwrap();
        }
        w.finish().unwrap();
    }
    for _ in 0..2 {
        let (messages, err) = fetch_messages(&mut c, SHUFFLE, KEY, 1, maps.clone()).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(messages.len(), 1, "300 tiny blocks in one message");
        let chunks: Vec<BlockChunk> = messages.into_iter().flat_map(|m| m.chunks).collect();
        let got = blocks_of(&chunks);
        assert_eq!(got.iter().map(|b| b.0).collect::<Vec<_>>(), maps);
        for (map, len, crc, bytes) in got {
            let (want, want_crc) = block_on_disk(&server.shuffle_dir, map, 1);
            assert_eq!((len as usize, crc), (want.len(), want_crc));
            assert!(bytes == want, "block of map {map} differs from the file");
        }
    }
}

#[tokio::test]
async fn missing_or_broken_map_output_ends_the_stream_naming_the_file() {
    let server = start().await;
    let mut c = client(&server.url, Some(SECRET)).await;

    // A map output this executor does not hold: the request is refused before any
    // block goes out.
    let (chunks, err) = fetch(&mut c, 2, vec![0, 5]).await;
    let err = err.expect("missing map output must fail");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("shuffle_7_5.data"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("map id 5"), "{}", err.message());
    assert!(chunks.is_empty());

    // A reducer the index does not have.
    let (_, err) = fetch(&mut c, 9, vec![0]).await;
    let err = err.unwrap();
    assert_eq!(err.code(), Code::DataLoss, "{err:?}");
    assert!(
        err.message().contains("shuffle_7_0.data"),
        "{}",
        err.message()
    );

    // A truncated data file.
    let data = data_path(&server.shuffle_dir, SHUFFLE, 1);
    let len = std::fs::metadata(&data).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let (_, err) = fetch(&mut c, 0, vec![1]).await;
    let err = err.unwrap();
    assert_eq!(err.code(), Code::DataLoss, "{err:?}");
    assert!(
        err.message().contains("shuffle_7_1.data") && err.message().contains("bad magic"),
        "{}",
        err.message()
    );

    // A missing data file.
    std::fs::remove_file(&data).unwrap();
    let (_, err) = fetch(&mut c, 0, vec![1]).await;
    let err = err.unwrap();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("shuffle_7_1.data"),
        "{}",
        err.message()
    );
}

/// The shuffle key is the only credential: a fetch with a wrong key is refused whatever
/// secret it carries, and one with its session's key is served without any secret
/// (workers hold none).
#[tokio::test]
async fn the_session_key_alone_decides_whatever_secret_is_sent() {
    let server = start().await;
    for secret in [Some(SECRET), Some("not-it"), None] {
        let mut c = client(&server.url, secret).await;
        for key in ["", OTHER_KEY, &KEY[..63]] {
            let (chunks, err) = fetch_of(&mut c, SHUFFLE, key, 2, vec![0]).await;
            assert!(chunks.is_empty(), "{secret:?} {key:?}");
            let err = err.expect("a wrong key must be refused");
            assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
            assert!(!err.message().contains(KEY), "{err:?}");
        }
        let (chunks, err) = fetch(&mut c, 2, vec![0]).await;
        assert!(err.is_none(), "{secret:?}: {err:?}");
        let (want, _) = block_on_disk(&server.shuffle_dir, 0, 2);
        assert_eq!(blocks_of(&chunks)[0].3, want);
    }
}

#[tokio::test]
async fn a_fetch_for_another_sessions_shuffle_is_permission_denied() {
    let server = start().await;
    // Id range 1 owns shuffle ids [2^20, 2^21); one of its map outputs is here.
    let theirs = (1 << 20) + 3;
    write_map_output_of(&server.shuffle_dir, theirs, 0);
    let mut c = client(&server.url, Some(SECRET)).await;
    for key in ["", KEY] {
        let (chunks, err) = fetch_of(&mut c, theirs, key, 2, vec![0]).await;
        assert!(
            chunks.is_empty(),
            "{} chunks served with key {key:?}",
            chunks.len()
        );
        let err = err.expect("a fetch of another session's shuffle must fail");
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
        assert!(
            err.message().contains(&format!("shuffle {theirs}")),
            "{err:?}"
        );
    }
}

/// A shuffle key holder cannot make a small request stream much: a map id asked twice,
/// one the executor does not hold, or blocks adding up to more than one request may ask
/// for are refused before any block goes out; one block is served whatever its size.
#[tokio::test]
async fn duplicate_unknown_or_too_many_bytes_of_map_ids_are_refused() {
    // Reducer 0's blocks are ~2.5 MB each; a request may ask for 1 MiB.
    let server = start_with(1 << 20).await;
    let mut c = client(&server.url, Some(SECRET)).await;

    let (chunks, err) = fetch(&mut c, 2, vec![0, 1, 0]).await;
    let err = err.expect("a map id asked twice must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .starts_with("map id 0 appears more than once in the fetch of shuffle 7 reduce 2"),
        "{err:?}"
    );
    assert!(chunks.is_empty());

    for unknown in [2, u32::MAX] {
        let (chunks, err) = fetch(&mut c, 2, vec![1, unknown]).await;
        let err = err.expect("a map id not held here must be refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().starts_with(&format!(
                "map id {unknown} is not a map output executor exec-7 holds for shuffle 7"
            )),
            "{err:?}"
        );
        assert!(chunks.is_empty());
    }

    let (want0, _) = block_on_disk(&server.shuffle_dir, 0, 0);
    let (want1, _) = block_on_disk(&server.shuffle_dir, 1, 0);
    let total = want0.len() + want1.len();
    let (chunks, err) = fetch(&mut c, 0, vec![0, 1]).await;
    let err = err.expect("blocks over the request bound must be refused");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.message(),
        format!(
            "the fetch of shuffle 7 reduce 0 asks for 2 blocks of {total} bytes in all, over \
             the 1048576 bytes one request may ask for; split it"
        )
    );
    assert!(chunks.is_empty());

    // Each block alone is served whole, though over the bound; small blocks together too.
    for (map, want) in [(0, &want0), (1, &want1)] {
        let (chunks, err) = fetch(&mut c, 0, vec![map]).await;
        assert!(err.is_none(), "{err:?}");
        assert!(want.len() > 1 << 20);
        assert_eq!(&blocks_of(&chunks)[0].3, want);
    }
    let (chunks, err) = fetch(&mut c, 2, vec![1, 0]).await;
    assert!(err.is_none(), "{err:?}");
    let got: Vec<u32> = blocks_of(&chunks).iter().map(|b| b.0).collect();
    assert_eq!(got, [1, 0]);
}

/// A fetch naming more map ids than any stage has, or a body over the request's decoding
/// bound, is refused before the service allocates for it.
#[tokio::test]
async fn over_many_map_ids_or_an_over_size_body_are_refused() {
    let server = start().await;
    let mut c = client(&server.url, Some(SECRET)).await;
    let ids: Vec<u32> = (0..=blocks::MAX_FETCH_MAP_IDS as u32).collect();
    let (chunks, err) = fetch(&mut c, 2, ids).await;
    let err = err.expect("too many map ids must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.message(),
        "the fetch of shuffle 7 reduce 2 names 100001 map ids, over the 100000 one request \
         may name"
    );
    assert!(chunks.is_empty());

    // A body over the decoding bound (here a huge session key) is refused unread.
    let huge = "k".repeat(blocks::MAX_FETCH_REQUEST_MESSAGE_BYTES + 1);
    let (chunks, err) = fetch_of(&mut c, SHUFFLE, &huge, 2, vec![0]).await;
    let err = err.expect("an over-size body must be refused");
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );
    assert!(err.message().contains("too large"), "{err:?}");
    assert!(chunks.is_empty());

    // The same connection's service still serves a right request.
    let (chunks, err) = fetch(&mut c, 2, vec![0]).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(blocks_of(&chunks).len(), 1);
}
