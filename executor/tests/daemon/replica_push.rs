//! `Shuffle.PushMapOutput` end to end over gRPC on 127.0.0.1:0 (`replicated:N` shuffle
//! durability): a peer's map output is stored byte for byte under its own name and
//! served like the executor's own; a push without the executor secret, with another
//! session's key, damaged, longer or shorter than announced, or announcing more than a
//! replica may take is refused and leaves no file behind.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ember_executor::blocks::ShuffleService;
use ember_proto::auth::AddSecret;
use ember_proto::shuffle_client::ShuffleClient;
use ember_proto::{FetchBlocksRequest, IdRange, MapOutputPiece};
use ember_shuffle::{data_path, ShuffleWriter};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Code;

use crate::common::within;

pub(crate) const EXECUTOR_SECRET: &str = "executor-secret-of-the-replica-test";
pub(crate) const SHUFFLE: u32 = 3;
/// The session key the receiving executor already holds for SHUFFLE's session.
pub(crate) const KEY: &str = "6b6579206f662073657373696f6e20302c2077686f7365206964732073746172";

pub(crate) type Client = ShuffleClient<InterceptedService<Channel, AddSecret>>;

pub(crate) struct Receiver {
    pub(crate) url: String,
    stop: CancellationToken,
    dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Receiver {
    pub(crate) fn session_dir(&self, shuffle: u32) -> PathBuf {
        ember_executor::config::session_shuffle_dir(
            &self.dir.path().join("shuffle"),
            IdRange::of_id(shuffle),
        )
    }

    /// Every file left in the session directory of `shuffle` (temporaries included).
    pub(crate) fn files(&self, shuffle: u32) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.session_dir(shuffle))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

pub(crate) async fn start() -> Receiver {
    let dir = tempfile::tempdir().unwrap();
    let service = ShuffleService::new(dir.path().join("shuffle"), Default::default())
        .with_executor_secret(Some(EXECUTOR_SECRET));
    service.session_keys().learn(SHUFFLE, KEY);
    let (url, stop) = crate::common::serve_shuffle(service).await;
    Receiver { url, stop, dir }
}

pub(crate) async fn client(url: &str, secret: Option<&str>) -> Client {
    crate::common::shuffle_client(url, secret).await
}

/// A real map output file (3 reducers, a few MB: several pieces), as its writer left it.
pub(crate) fn map_output(dir: &Path, shuffle: u32, map: u32) -> Vec<u8> {
    let mut w = ShuffleWriter::<(u64, String)>::new(dir, shuffle, map, 3);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..60_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.write((i % 3) as u32, &(i, format!("{x:016x}{x:032x}{i}")))
            .unwrap();
    }
    w.finish().unwrap();
    std::fs::read(data_path(dir, shuffle, map)).unwrap()
}

/// The pieces of a push of `bytes` as map `map` of `shuffle`: 1 MiB each, the header in
/// the first, `crc` (or the true crc32) and `last` in the last.
fn pieces(
    shuffle: u32,
    map: u32,
    key: &str,
    bytes: &[u8],
    announced: u64,
    crc: Option<u32>,
) -> Vec<MapOutputPiece> {
    let chunks: Vec<&[u8]> = if bytes.is_empty() {
        vec![&[][..]]
    } else {
        bytes.chunks(1 << 20).collect()
    };
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| MapOutputPiece {
            shuffle_id: shuffle,
            map_partition: map,
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

async fn push(c: &mut Client, pieces: Vec<MapOutputPiece>) -> Result<(), tonic::Status> {
    within("a push", c.push_map_output(tokio_stream::iter(pieces)))
        .await
        .map(|_| ())
}

#[tokio::test]
async fn a_pushed_output_is_stored_under_its_name_and_served_to_its_session() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 4);
    assert!(bytes.len() > 1 << 20, "two pieces at least");
    let mut c = client(&r.url, Some(EXECUTOR_SECRET)).await;
    let len = bytes.len() as u64;
    push(&mut c, pieces(SHUFFLE, 4, KEY, &bytes, len, None))
        .await
        .unwrap();
    let stored = data_path(&r.session_dir(SHUFFLE), SHUFFLE, 4);
    assert_eq!(std::fs::read(&stored).unwrap(), bytes, "byte for byte");
    let mode = std::fs::metadata(&stored).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(r.files(SHUFFLE), vec!["shuffle_3_4.data".to_string()]);
    // Served to the session's tasks like an output of this executor: every block, each
    // as long as the original's index says.
    let index = ember_shuffle::IndexFile::read(&data_path(src.path(), SHUFFLE, 4)).unwrap();
    for reduce in 0..3u32 {
        let got = fetched_bytes(&r.url, SHUFFLE, reduce, 4, KEY).await;
        assert_eq!(got, index.entry(reduce).unwrap().len, "reduce {reduce}");
    }
}

/// The bytes of block `reduce` of map output `map` of `shuffle` that the shuffle service
/// at `url` sends a fetch carrying `key`.
pub(crate) async fn fetched_bytes(
    url: &str,
    shuffle: u32,
    reduce: u32,
    map: u32,
    key: &str,
) -> u64 {
    let mut reader = client(url, None).await;
    let req = FetchBlocksRequest {
        shuffle_id: shuffle,
        reduce_partition: reduce,
        map_partitions: vec![map],
        session_key: key.into(),
    };
    let mut stream = within("a fetch", reader.fetch_blocks(req))
        .await
        .unwrap()
        .into_inner();
    let mut got = 0u64;
    while let Some(m) = within("blocks", stream.message()).await.unwrap() {
        got += m.chunks.iter().map(|c| c.data.len() as u64).sum::<u64>();
    }
    got
}

#[tokio::test]
async fn a_push_without_the_executor_secret_is_refused() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 0);
    let len = bytes.len() as u64;
    for secret in [None, Some("a-client-or-cluster-secret")] {
        let mut c = client(&r.url, secret).await;
        let e = push(&mut c, pieces(SHUFFLE, 0, KEY, &bytes, len, None))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{secret:?}: {e:?}");
        assert!(e.message().contains("executor secret"), "{e:?}");
    }
    assert!(r.files(SHUFFLE).is_empty(), "{:?}", r.files(SHUFFLE));
}

#[tokio::test]
async fn a_damaged_or_misannounced_push_is_refused_and_leaves_nothing() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 1);
    let len = bytes.len() as u64;
    let mut c = client(&r.url, Some(EXECUTOR_SECRET)).await;
    let crc = crc32fast::hash(&bytes);
    let mut no_last = pieces(SHUFFLE, 1, KEY, &bytes, len, None);
    no_last.last_mut().unwrap().last = false;
    let cases: Vec<(&str, Vec<MapOutputPiece>, Code, &str)> = vec![
        (
            "a wrong crc",
            pieces(SHUFFLE, 1, KEY, &bytes, len, Some(crc ^ 1)),
            Code::DataLoss,
            "arrived damaged",
        ),
        (
            "more than announced",
            pieces(SHUFFLE, 1, KEY, &bytes, len - 1, None),
            Code::InvalidArgument,
            "more than the",
        ),
        (
            "less than announced",
            pieces(SHUFFLE, 1, KEY, &bytes, len + 1, None),
            Code::InvalidArgument,
            "ended after",
        ),
        (
            "no last piece",
            no_last,
            Code::InvalidArgument,
            "without its last piece",
        ),
        (
            "over the replica limit",
            pieces(
                SHUFFLE,
                1,
                KEY,
                &bytes,
                ember_proto::limits::MAX_PUSHED_OUTPUT_BYTES + 1,
                None,
            ),
            Code::ResourceExhausted,
            "over the",
        ),
        (
            "another session's key",
            pieces(SHUFFLE, 1, &KEY.replace('6', "7"), &bytes, len, None),
            Code::PermissionDenied,
            "other than its session's",
        ),
        (
            "no key",
            pieces(SHUFFLE, 1, "", &bytes, len, None),
            Code::InvalidArgument,
            "session key of 0 bytes",
        ),
    ];
    for (what, p, code, says) in cases {
        let e = push(&mut c, p).await.unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e:?}");
        assert!(e.message().contains(says), "{what}: {e:?}");
        assert!(
            r.files(SHUFFLE).is_empty(),
            "{what} left {:?}",
            r.files(SHUFFLE)
        );
    }
}

#[tokio::test]
async fn a_push_for_a_session_without_a_key_here_teaches_its_key_and_never_replaces_it() {
    let r = start().await;
    let src = tempfile::tempdir().unwrap();
    // A shuffle of a session (id range 2) this executor ran no task for.
    let shuffle = (2 << 20) + 5;
    let key = "2".repeat(64);
    let bytes = map_output(src.path(), shuffle, 0);
    let len = bytes.len() as u64;
    let mut c = client(&r.url, Some(EXECUTOR_SECRET)).await;
    push(&mut c, pieces(shuffle, 0, &key, &bytes, len, None))
        .await
        .unwrap();
    assert_eq!(r.files(shuffle), vec![format!("shuffle_{shuffle}_0.data")]);
    let mode = std::fs::metadata(r.session_dir(shuffle))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the session directory it made");
    // Its blocks go to that key only, and a later push with another key is refused.
    let mut reader = client(&r.url, None).await;
    for (k, ok) in [(key.clone(), true), ("3".repeat(64), false)] {
        let req = FetchBlocksRequest {
            shuffle_id: shuffle,
            reduce_partition: 0,
            map_partitions: vec![0],
            session_key: k,
        };
        assert_eq!(reader.fetch_blocks(req).await.is_ok(), ok);
    }
    let e = push(
        &mut c,
        pieces(shuffle, 1, &"3".repeat(64), &bytes, len, None),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
}

#[tokio::test]
async fn a_push_for_a_session_cleaned_up_here_is_refused_until_it_runs_a_task_again() {
    let dir = tempfile::tempdir().unwrap();
    let service = ShuffleService::new(dir.path().join("shuffle"), Default::default())
        .with_executor_secret(Some(EXECUTOR_SECRET));
    let keys = service.session_keys();
    keys.learn(SHUFFLE, KEY);
    // The session (id range 0) ends here.
    keys.forget_range(0, 1 << 20);
    let (url, stop) = crate::common::serve_shuffle(service).await;
    let src = tempfile::tempdir().unwrap();
    let bytes = map_output(src.path(), SHUFFLE, 2);
    let len = bytes.len() as u64;
    let mut c = client(&url, Some(EXECUTOR_SECRET)).await;
    let e = push(&mut c, pieces(SHUFFLE, 2, KEY, &bytes, len, None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let session_dir = ember_executor::config::session_shuffle_dir(
        &dir.path().join("shuffle"),
        IdRange::of_id(SHUFFLE),
    );
    assert!(!session_dir.exists(), "a late push leaves nothing");
    // A task of that id range runs here again: pushes are taken again.
    keys.learn(SHUFFLE, KEY);
    push(&mut c, pieces(SHUFFLE, 2, KEY, &bytes, len, None))
        .await
        .unwrap();
    assert!(data_path(&session_dir, SHUFFLE, 2).exists());
    stop.cancel();
}
