//! The receiving side of `replicated:N` shuffle durability: `Shuffle.PushMapOutput`,
//! where a peer executor pushes a map output file it committed, and this executor
//! stores it as a replica and serves it like its own.
//!
//! Invariants:
//! * Only executors push: the call must carry the executor secret (checked by the
//!   service before this module runs). The header's session key must equal the key
//!   this executor already holds for the session owning the shuffle, or becomes that
//!   session's key when it holds none; a push never replaces a key.
//! * Every size is bounded before it costs anything: the header's `file_len` at most
//!   [`MAX_PUSHED_OUTPUT_BYTES`], each piece's data at most what the header promised
//!   minus what came before, the key at most [`MAX_KEY_BYTES`].
//! * A replica is committed as a map task commits its output: written to a temporary
//!   name of the shuffle (`.shuffle_S_M.push-…`, which a shuffle's removal deletes too)
//!   in the session's shuffle directory (made `0700` if absent), mode `0600`, past the
//!   page cache where the file system allows (`ember_shuffle::cold_copy`: it is read
//!   only if its writer is lost), and
//!   renamed to `shuffle_S_M.data` only once its length matches the header's and its
//!   crc32 the last piece's, replacing any file of that name (the copy is the pushing
//!   attempt's output, whose block sizes the driver records; an older file may be
//!   damaged). A reader sees the whole replica or none; the temporary is removed
//!   however the push ends (failure, or the pusher gone mid-stream).
//! * A push ends within `limits::push_time_limit` of its announced length, however
//!   slowly its pieces come; past it, it is refused and its temporary removed.
//! * A push for a session this executor was told to clean up (`CleanupSession`) is
//!   refused until a task of that id range runs here again (`SessionKeys`), so a late
//!   push leaves nothing behind.
//!   The file is the original byte for byte, so the reducer checks its blocks' crcs as
//!   it checks the original's.
//! * A replica is deleted with its shuffle (`RemoveShuffles`), its session
//!   (`CleanupSession`) or this executor's registration, as the executor's own outputs.
//! * A cached block moved off a decommissioning peer (`Shuffle.PushCachedBlock`) is
//!   taken under the same rules (executor secret, the session key of the RDD's id
//!   range, bounded size, temporary name, length and crc32 checked, then renamed) and stored as `ember_shuffle::cached_block_path` in the session's
//!   directory, where that session's worker adopts it; it goes with its RDD
//!   (`UnpersistRdd`), its session or this executor's registration.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use ember_proto::limits::MAX_PUSHED_OUTPUT_BYTES;
use ember_proto::{CachedBlockPiece, IdRange, MapOutputPiece};
use ember_shuffle::cold_copy::ColdFile;
use tokio_stream::StreamExt;
use tonic::Status;

use crate::blocks::SessionKeys;

/// Pieces (of at most 1 MiB) received and not yet written, per push.
pub const WRITE_QUEUE: usize = 4;
/// Longest session key a push may carry (keys are 64 hex digits).
pub const MAX_KEY_BYTES: usize = 256;

/// What a push stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub path: PathBuf,
    pub bytes: u64,
}

/// A piece of a pushed file, whatever it carries: a map output or a cached block.
pub trait Piece {
    fn data(&self) -> &[u8];
    fn into_data(self) -> bytes::Bytes;
    fn last(&self) -> bool;
    fn crc32(&self) -> u32;
    /// What the first piece announces, and the file's name (`Pushed`) in `dir`.
    fn header(&self) -> Header<'_>;
    fn file(&self, dir: &Path) -> Pushed;
    /// The push, named in errors when it sends nothing.
    const KIND: &'static str;
}

/// Where a pushed file goes: its temporary's prefix and its final path.
pub struct Pushed {
    tmp_prefix: String,
    target: PathBuf,
}

impl Piece for MapOutputPiece {
    const KIND: &'static str = "a map output push";
    fn data(&self) -> &[u8] {
        &self.data
    }
    fn into_data(self) -> bytes::Bytes {
        self.data
    }
    fn last(&self) -> bool {
        self.last
    }
    fn crc32(&self) -> u32 {
        self.crc32
    }
    fn header(&self) -> Header<'_> {
        let (shuffle_id, map) = (self.shuffle_id, self.map_partition);
        Header {
            what: format!("the push of map output {map} of shuffle {shuffle_id}"),
            id: shuffle_id,
            file_len: self.file_len,
            session_key: &self.session_key,
        }
    }
    fn file(&self, dir: &Path) -> Pushed {
        let (shuffle_id, map) = (self.shuffle_id, self.map_partition);
        Pushed {
            tmp_prefix: format!(".shuffle_{shuffle_id}_{map}"),
            target: ember_shuffle::data_path(dir, shuffle_id, map),
        }
    }
}

impl Piece for CachedBlockPiece {
    const KIND: &'static str = "a cached block push";
    fn data(&self) -> &[u8] {
        &self.data
    }
    fn into_data(self) -> bytes::Bytes {
        self.data
    }
    fn last(&self) -> bool {
        self.last
    }
    fn crc32(&self) -> u32 {
        self.crc32
    }
    fn header(&self) -> Header<'_> {
        let (rdd_id, partition) = (self.rdd_id, self.partition);
        Header {
            what: format!("the push of cached partition {partition} of RDD {rdd_id}"),
            id: rdd_id,
            file_len: self.file_len,
            session_key: &self.session_key,
        }
    }
    fn file(&self, dir: &Path) -> Pushed {
        let (rdd_id, partition) = (self.rdd_id, self.partition);
        Pushed {
            tmp_prefix: format!(".rdd_{rdd_id}_{partition}"),
            target: ember_shuffle::cached_block_path(dir, rdd_id, partition),
        }
    }
}

/// Receives one pushed file (a map output, or a cached block a decommissioning peer
/// moves here) into the session's directory under `shuffle_dir`: its header checked,
/// then written to a temporary and renamed to its name once its length and crc32 match.
pub async fn receive<P, S>(
    shuffle_dir: &Path,
    keys: &SessionKeys,
    pieces: S,
) -> Result<Stored, Status>
where
    P: Piece,
    S: tokio_stream::Stream<Item = Result<P, Status>> + Unpin,
{
    let limit = ember_proto::limits::push_time_limit;
    receive_within(shuffle_dir, keys, pieces, limit).await
}

/// [`receive`] with the time a push of a given length may take.
async fn receive_within<P, S>(
    shuffle_dir: &Path,
    keys: &SessionKeys,
    mut pieces: S,
    time_limit: impl Fn(u64) -> std::time::Duration,
) -> Result<Stored, Status>
where
    P: Piece,
    S: tokio_stream::Stream<Item = Result<P, Status>> + Unpin,
{
    let first = match pieces.next().await {
        Some(Ok(p)) => p,
        Some(Err(s)) => return Err(s),
        None => {
            return Err(Status::invalid_argument(format!(
                "{} sent nothing",
                P::KIND
            )))
        }
    };
    let header = first.header();
    let dir = header.check(shuffle_dir, keys)?;
    let what = header.what.clone();
    let file_len = header.file_len;
    let Pushed { tmp_prefix, target } = first.file(&dir);
    let tmp = dir.join(format!("{tmp_prefix}.push-{}", nanos()));
    // Removes the temporary however this ends: an error, or the pusher going away (the
    // server then drops this future mid-write).
    let _tmp = RemoveOnDrop(tmp.clone());
    // However slowly the pusher sends, the push ends within its time limit.
    let limit = time_limit(file_len);
    let writing = write_checked(&tmp, &target, &dir, file_len, first, &mut pieces, &what);
    match tokio::time::timeout(limit, writing).await {
        Ok(r) => r,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "{what} took longer than the {} s a push of {file_len} bytes may",
            limit.as_secs()
        ))),
    }
}

/// What a push's first piece announces.
pub struct Header<'a> {
    what: String,
    /// A shuffle or RDD id: its id range names the session.
    id: u32,
    file_len: u64,
    session_key: &'a str,
}

impl Header<'_> {
    /// Checks the size and the key; the session's directory (made if absent).
    fn check(&self, shuffle_dir: &Path, keys: &SessionKeys) -> Result<PathBuf, Status> {
        let what = &self.what;
        if self.file_len > MAX_PUSHED_OUTPUT_BYTES {
            return Err(Status::resource_exhausted(format!(
                "{what} announces {} bytes, over the {MAX_PUSHED_OUTPUT_BYTES} a pushed copy may take",
                self.file_len
            )));
        }
        if self.session_key.is_empty() || self.session_key.len() > MAX_KEY_BYTES {
            return Err(Status::invalid_argument(format!(
                "{what} carries a session key of {} bytes (expected 1 to {MAX_KEY_BYTES})",
                self.session_key.len()
            )));
        }
        keys.check_or_learn(self.id, self.session_key)?;
        let dir = crate::config::session_shuffle_dir(shuffle_dir, IdRange::of_id(self.id));
        if !dir.is_dir() {
            crate::config::private_dir(&dir).map_err(|e| {
                Status::internal(format!(
                    "{what}: cannot make the session directory in {}: {e}",
                    dir.display()
                ))
            })?;
        }
        Ok(dir)
    }
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A path removed when dropped (if it still exists).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes the pieces to `tmp`, checks their length and crc against the header, and
/// renames the file to `target`.
async fn write_checked<P, S>(
    tmp: &Path,
    target: &Path,
    dir: &Path,
    expected_len: u64,
    first: P,
    pieces: &mut S,
    what: &str,
) -> Result<Stored, Status>
where
    P: Piece,
    S: tokio_stream::Stream<Item = Result<P, Status>> + Unpin,
{
    let io = |e: std::io::Error, doing: &str| {
        Status::internal(format!("{what}: {doing} {}: {e}", tmp.display()))
    };
    let mut announced_crc = None;
    // A cold copy: read only if its writer is lost, so written past the page cache.
    let file = ColdFile::create(tmp, 0o600).map_err(|e| io(e, "cannot create"))?;
    // Written on a blocking thread while the stream goes on being read (a few pieces
    // queued between them), so the pusher is not held up by each write in turn.
    let (to_disk, mut queue) = tokio::sync::mpsc::channel::<bytes::Bytes>(WRITE_QUEUE);
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        let mut file = file;
        while let Some(data) = queue.blocking_recv() {
            file.write_all(&data)?;
        }
        // Not synced, as a map output is not: a replica is relied on while this executor
        // stays registered, and one whose machine goes down is lost as a whole (the
        // tracker forgets every copy it held), so a sync would guard nothing the driver
        // relies on. Measured: syncing each replica cost the replicated sort ~3 %.
        file.finish()
    });
    let mut crc = crc32fast::Hasher::new();
    let mut got: u64 = 0;
    let mut next = Some(first);
    loop {
        let piece = match next.take() {
            Some(p) => p,
            None => match pieces.next().await {
                Some(Ok(p)) => p,
                Some(Err(s)) => return Err(s),
                None => break,
            },
        };
        if announced_crc.is_some() {
            return Err(Status::invalid_argument(format!(
                "{what} sent a piece after its last"
            )));
        }
        if piece.last() {
            announced_crc = Some(piece.crc32());
        }
        let len = piece.data().len() as u64;
        if got.saturating_add(len) > expected_len {
            return Err(Status::invalid_argument(format!(
                "{what} sent more than the {expected_len} bytes it announced"
            )));
        }
        got += len;
        crc.update(piece.data());
        if to_disk.send(piece.into_data()).await.is_err() {
            break; // the writer failed: its error is reported below
        }
    }
    drop(to_disk);
    let file = writer
        .await
        .map_err(|e| io(std::io::Error::other(e), "cannot write"))?
        .map_err(|e| io(e, "cannot write"))?;
    if got != expected_len {
        return Err(Status::invalid_argument(format!(
            "{what} ended after {got} of the {expected_len} bytes it announced"
        )));
    }
    let Some(expected_crc) = announced_crc else {
        return Err(Status::invalid_argument(format!(
            "{what} ended without its last piece"
        )));
    };
    let crc = crc.finalize();
    if crc != expected_crc {
        return Err(Status::data_loss(format!(
            "{what} arrived damaged: crc32 {crc:08x}, announced {expected_crc:08x}"
        )));
    }
    // With worker uids the session's directory belongs to its uid: so does the replica,
    // or a reducer of that session on this executor could not read it.
    if let Ok(meta) = std::fs::metadata(dir) {
        if meta.uid() != nix_euid() {
            let _ = std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()));
        }
    }
    drop(file);
    // Over any file of that name: the copy must be the pushing attempt's output (whose
    // block sizes the driver records), and an older file may be damaged. A reader keeps
    // the file it opened.
    std::fs::rename(tmp, target).map_err(|e| io(e, "cannot commit"))?;
    Ok(Stored {
        path: target.to_path_buf(),
        bytes: got,
    })
}

/// This process's effective uid.
fn nix_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_push_that_trickles_ends_at_its_time_limit_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let keys = SessionKeys::default();
        let key = "k".repeat(64);
        keys.learn(3, &key);
        let file_len = 64 << 20;
        let first = MapOutputPiece {
            shuffle_id: 3,
            map_partition: 0,
            session_key: key,
            file_len,
            ..Default::default()
        };
        // A byte every 50 ms after the header: each piece in time, the whole far too slow
        // for a limit of 400 ms.
        let trickle = tokio_stream::StreamExt::throttle(
            tokio_stream::iter((0..u32::MAX).map(|_| {
                Ok(MapOutputPiece {
                    shuffle_id: 3,
                    file_len,
                    data: vec![7u8].into(),
                    ..Default::default()
                })
            })),
            std::time::Duration::from_millis(50),
        );
        let pieces = tokio_stream::once(Ok(first)).chain(trickle);
        let started = tokio::time::Instant::now();
        let limit = std::time::Duration::from_millis(400);
        let pushing = receive_within(dir.path(), &keys, Box::pin(pieces), |_| limit);
        let e = tokio::time::timeout(std::time::Duration::from_secs(20), pushing)
            .await
            .expect("the push ended by its time limit")
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
        assert!(started.elapsed() >= limit, "{e:?}");
        assert!(e.message().contains("took longer than"), "{e:?}");
        let session = crate::config::session_shuffle_dir(dir.path(), IdRange::of_id(3));
        let left: Vec<_> = std::fs::read_dir(&session).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
