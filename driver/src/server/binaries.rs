//! The driver's binary store: job binaries, content-addressed by SHA-256, as files
//! named by their lower-case hex digest in one directory.
//!
//! Invariants:
//! - A file `<dir>/<sha256>` exists only with content that hashes to its name: uploads
//!   are written to a temporary file in the same directory, hashed while written, and
//!   renamed into place only if hash and length match what the client declared.
//! - Only names of exactly 64 lower-case hex characters are ever joined to the
//!   directory, so no request can reach a path outside it.
//! - A binary is deleted only by [`BinaryStore::collect_garbage`], when no session
//!   uses it and it was last used (uploaded, looked up or fetched; else its file's
//!   modification time) at least `max_age` ago; so the store does not grow forever.
//! - The store never holds more than `max_total_bytes` of binaries (their lengths): the
//!   binaries in place plus the declared lengths of the uploads in progress are
//!   counted, and an upload that would pass the limit is refused before anything is
//!   written. On disk a binary takes at most [`binary_file::stored_bound`] of its
//!   length (16 bytes more, and 9 per MiB), usually much less.
//! - A binary is stored as it travels, in LZ4-compressed chunks ([`binary_file`]);
//!   every chunk of an upload is decoded within [`ember_proto::binary_chunk`]'s bounds
//!   to be hashed, and a chunk that is not (a decompression bomb) fails the upload.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ember_proto::binary_chunk::Decoder;
use ember_proto::{BinaryChunk, BinaryRef};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::{info, warn};

use super::binary_file;

/// Size of the chunks `FetchBinary` sends of a binary stored raw (by an older driver).
pub const CHUNK_BYTES: usize = ember_proto::binary_chunk::MAX_CHUNK_BYTES;

pub use ember_proto::digest::is_sha256_hex;

/// `Err(INVALID_ARGUMENT)` unless `s` is a lower-case hex SHA-256.
pub fn check_sha256(s: &str) -> Result<(), Status> {
    if is_sha256_hex(s) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{:?} is not a SHA-256 digest (64 lower-case hex characters)",
            ember_scheduler::limits::bounded(s)
        )))
    }
}

/// Chunks an upload may have beyond one per KiB it declares: so a client cannot keep
/// an upload going forever with empty chunks.
pub const SPARE_UPLOAD_CHUNKS: u64 = 1024;

/// Bytes the store holds and has promised to uploads in progress.
#[derive(Debug, Default)]
struct Budget {
    /// Bytes of the binaries in place.
    stored: u64,
    /// Bytes the uploads in progress may write.
    reserved: u64,
}

/// An upload's share of the budget, given back when the upload ends either way.
struct Reservation<'a> {
    budget: &'a Mutex<Budget>,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut b = self.budget.lock();
        b.reserved = b.reserved.saturating_sub(self.bytes);
    }
}

/// Binaries on the driver's disk.
pub struct BinaryStore {
    dir: PathBuf,
    max_bytes: u64,
    max_total_bytes: u64,
    max_age: Duration,
    budget: Mutex<Budget>,
    /// When each binary was last uploaded, looked up or fetched.
    last_used: Mutex<HashMap<String, SystemTime>>,
    /// Bytes of binaries uploaded (decoded), over the daemon's life.
    uploaded: std::sync::atomic::AtomicU64,
}

impl BinaryStore {
    /// A store in `dir` (created if missing, binaries already there counted) accepting
    /// binaries of up to `max_bytes`, holding at most `max_total_bytes` and keeping unused
    /// ones for `max_age`.
    pub fn new(
        dir: impl Into<PathBuf>,
        max_bytes: u64,
        max_total_bytes: u64,
        max_age: Duration,
    ) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let mut stored = 0;
        for entry in std::fs::read_dir(&dir)?.flatten() {
            if is_sha256_hex(&entry.file_name().to_string_lossy()) {
                stored += binary_file::binary_len(&entry.path())?;
            }
        }
        Ok(BinaryStore {
            dir,
            max_bytes,
            max_total_bytes,
            max_age,
            budget: Mutex::new(Budget {
                stored,
                reserved: 0,
            }),
            last_used: Mutex::new(HashMap::new()),
            uploaded: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Bytes of binaries stored from uploads so far (for metrics).
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reserves `bytes` for an upload, or says why the store cannot take them.
    fn reserve(&self, bytes: u64) -> Result<Reservation<'_>, Status> {
        let mut b = self.budget.lock();
        let after = b.stored.saturating_add(b.reserved).saturating_add(bytes);
        if after > self.max_total_bytes {
            return Err(Status::resource_exhausted(format!(
                "the binary store is full: it holds {} bytes and {} more are being uploaded; \
                 a binary of {bytes} bytes would pass its limit of {} bytes \
                 (--max-binary-store-bytes); binaries no session uses are deleted once unused \
                 for {} s",
                b.stored,
                b.reserved,
                self.max_total_bytes,
                self.max_age.as_secs()
            )));
        }
        b.reserved += bytes;
        Ok(Reservation {
            budget: &self.budget,
            bytes,
        })
    }

    /// How long an unused binary is kept.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    fn touch(&self, sha256: &str) {
        self.last_used
            .lock()
            .insert(sha256.to_string(), SystemTime::now());
    }

    /// Deletes every binary that no session uses (`in_use`) and that was last used at
    /// least `max_age` before `now`; returns their digests, sorted.
    pub fn collect_garbage(&self, in_use: &HashSet<String>, now: SystemTime) -> Vec<String> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                warn!("binary store: cannot list {}: {e}", self.dir.display());
                return Vec::new();
            }
        };
        let mut removed = Vec::new();
        let mut last_used = self.last_used.lock();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_sha256_hex(&name) || in_use.contains(&name) {
                continue; // uploads in progress are `.upload-*` files
            }
            let used = match last_used.get(&name) {
                Some(t) => *t,
                None => match entry.metadata().and_then(|m| m.modified()) {
                    Ok(t) => t,
                    Err(_) => continue,
                },
            };
            if now.duration_since(used).unwrap_or_default() < self.max_age {
                continue;
            }
            let len = binary_file::binary_len(&entry.path()).unwrap_or(0);
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    let mut b = self.budget.lock();
                    b.stored = b.stored.saturating_sub(len);
                    drop(b);
                    info!(sha256 = %name, "binary deleted: unused for {} s", self.max_age.as_secs());
                    last_used.remove(&name);
                    removed.push(name);
                }
                Err(e) => warn!(sha256 = %name, "binary store: cannot delete: {e}"),
            }
        }
        removed.sort();
        removed
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the binary `sha256` is stored (false for malformed names); a binary
    /// looked up counts as used now.
    pub fn contains(&self, sha256: &str) -> bool {
        let present = is_sha256_hex(sha256) && self.dir.join(sha256).is_file();
        if present {
            self.touch(sha256);
        }
        present
    }

    /// Receives an upload; returns the digest once the binary is in place.
    pub async fn upload(&self, mut chunks: Streaming<BinaryChunk>) -> Result<BinaryRef, Status> {
        let first = chunks
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty binary upload"))?;
        let declared = first.sha256.clone();
        check_sha256(&declared)?;
        if first.total_len > self.max_bytes {
            return Err(Status::resource_exhausted(format!(
                "a binary of {} bytes is over the limit of {} bytes (--max-binary-bytes)",
                first.total_len, self.max_bytes
            )));
        }
        // A binary already in place is not stored twice: the upload's bytes are checked
        // against its digest and dropped (and it counts as used now, so it stays).
        let path = self.dir.join(&declared);
        let present = self.contains(&declared);
        let _reservation = self.reserve(if present { 0 } else { first.total_len })?;
        let max_chunks = first.total_len / 1024 + SPARE_UPLOAD_CHUNKS;
        let io = |what: &str, e: std::io::Error| {
            warn!("binary store: {what}: {e}");
            Status::internal(format!("binary store: {what}: {e}"))
        };
        // Deleted on drop, so any error below (or the client going away) leaves nothing.
        let mut sink = None;
        if !present {
            let tmp = tempfile::Builder::new()
                .prefix(".upload-")
                .tempfile_in(&self.dir)
                .map_err(|e| io("cannot create a temporary file", e))?;
            let file = tokio::fs::OpenOptions::new()
                .write(true)
                .open(tmp.path())
                .await
                .map_err(|e| io("cannot open the temporary file", e))?;
            let mut file = tokio::io::BufWriter::new(file);
            file.write_all(&binary_file::header(first.total_len))
                .await
                .map_err(|e| io("cannot write the temporary file", e))?;
            sink = Some((tmp, file));
        }
        let declared_len = first.total_len;
        let mut hasher = Sha256::new();
        let mut decoder = Decoder::new(declared_len);
        let mut records = binary_file::Rechunker::default();
        let mut chunk_count: u64 = 0;
        let mut next = Some(first);
        while let Some(chunk) = next {
            chunk_count += 1;
            if chunk_count > max_chunks {
                return Err(Status::resource_exhausted(format!(
                    "an upload of {declared_len} bytes may have at most {max_chunks} chunks \
                     (one per KiB and {SPARE_UPLOAD_CHUNKS} more); got more"
                )));
            }
            let before = decoder.decoded();
            let decoded = decoder.decode(&chunk).map_err(|e| {
                Status::invalid_argument(format!(
                    "binary upload of {declared_len} bytes, chunk {chunk_count}: {e}"
                ))
            })?;
            hasher.update(decoded);
            if let Some((_, file)) = &mut sink {
                let last = before + decoded.len() as u64 == declared_len;
                records
                    .push(file, &chunk, decoded, last)
                    .await
                    .map_err(|e| io("cannot write the temporary file", e))?;
            }
            next = chunks.message().await?;
        }
        let received = decoder.decoded();
        let tmp = match sink {
            Some((tmp, mut file)) => {
                file.flush()
                    .await
                    .map_err(|e| io("cannot write the temporary file", e))?;
                file.get_mut()
                    .sync_all()
                    .await
                    .map_err(|e| io("cannot sync the temporary file", e))?;
                Some(tmp)
            }
            None => None,
        };
        let actual = ember_proto::digest::to_hex(&hasher.finalize());
        if received != declared_len {
            return Err(Status::invalid_argument(format!(
                "binary length mismatch: declared {declared_len} bytes, received {received}"
            )));
        }
        if actual != declared {
            return Err(Status::invalid_argument(format!(
                "binary hash mismatch: declared {declared}, content hashes to {actual}"
            )));
        }
        let Some(tmp) = tmp else {
            info!(sha256 = %declared, bytes = received, "binary already stored");
            return Ok(BinaryRef { sha256: declared });
        };
        {
            // Counted once however many clients upload the same binary at once.
            let mut b = self.budget.lock();
            let replaced = binary_file::binary_len(&path).unwrap_or(0);
            tmp.persist(&path)
                .map_err(|e| io("cannot move the upload into place", e.error))?;
            b.stored = b.stored.saturating_sub(replaced) + received;
        }
        self.touch(&declared);
        let stored = binary_file::HEADER_BYTES + records.written();
        debug_assert!(stored <= binary_file::stored_bound(received));
        info!(sha256 = %declared, bytes = received, stored, "binary stored");
        self.uploaded
            .fetch_add(received, std::sync::atomic::Ordering::Relaxed);
        Ok(BinaryRef { sha256: declared })
    }

    /// Streams the binary `sha256` as it is stored (compressed chunks; a raw file in
    /// chunks of [`CHUNK_BYTES`]); the first chunk names it and its length.
    pub async fn fetch(
        &self,
        sha256: &str,
    ) -> Result<ReceiverStream<Result<BinaryChunk, Status>>, Status> {
        check_sha256(sha256)?;
        self.touch(sha256);
        let path = self.dir.join(sha256);
        let not_found = || Status::not_found(format!("no binary {sha256} on this driver"));
        let internal = |what: &str, e: std::io::Error| {
            Status::internal(format!("binary store: cannot {what} {sha256}: {e}"))
        };
        let mut file = match tokio::fs::File::open(&path).await {
            Ok(f) => tokio::io::BufReader::new(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(internal("open", e)),
        };
        let header = binary_file::read_header(&mut file)
            .await
            .map_err(|e| internal("read", e))?;
        let (total_len, compressed) = match header {
            Some(len) => (len, true),
            None => {
                file.seek(std::io::SeekFrom::Start(0))
                    .await
                    .map_err(|e| internal("read", e))?;
                let len = file
                    .get_ref()
                    .metadata()
                    .await
                    .map_err(|e| internal("stat", e))?
                    .len();
                (len, false)
            }
        };
        let (tx, rx) = mpsc::channel(4);
        let sha256 = sha256.to_string();
        tokio::spawn(async move {
            let mut sent: u64 = 0;
            let mut first = true;
            loop {
                let next = if compressed {
                    binary_file::read_record(&mut file).await
                } else {
                    read_raw_chunk(&mut file).await
                };
                let mut chunk = match next {
                    Ok(Some(c)) => c,
                    Ok(None) if first => BinaryChunk::default(),
                    Ok(None) => break,
                    Err(e) => {
                        warn!(sha256 = %sha256, "binary store: cannot read: {e}");
                        let _ = tx
                            .send(Err(Status::internal(format!(
                                "binary store: cannot read {sha256}: {e}"
                            ))))
                            .await;
                        return;
                    }
                };
                sent += u64::from(chunk.raw_len);
                if first {
                    chunk.sha256 = sha256.clone();
                    chunk.total_len = total_len;
                    first = false;
                }
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
            if sent != total_len {
                warn!(sha256 = %sha256, sent, total_len, "binary changed size while being sent");
            }
        });
        Ok(ReceiverStream::new(rx))
    }
}

/// Up to [`CHUNK_BYTES`] of a raw file as a raw chunk; `None` at its end.
async fn read_raw_chunk(
    file: &mut (impl AsyncReadExt + Unpin),
) -> std::io::Result<Option<BinaryChunk>> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut filled = 0;
    // Fill a whole chunk unless the file ends first.
    while filled < buf.len() {
        match file.read(&mut buf[filled..]).await? {
            0 => break,
            n => filled += n,
        }
    }
    if filled == 0 {
        return Ok(None);
    }
    buf.truncate(filled);
    Ok(Some(BinaryChunk {
        raw_len: filled as u32,
        data: buf,
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unused_binaries_older_than_the_max_age_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            BinaryStore::new(dir.path(), 1 << 20, 1 << 30, Duration::from_secs(3600)).unwrap();
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        for name in [&a, &b, &".upload-x".to_string()] {
            std::fs::write(dir.path().join(name), b"bin").unwrap();
        }
        assert!(store.contains(&a) && store.contains(&b));
        let now = SystemTime::now();
        let none = HashSet::new();
        assert!(store
            .collect_garbage(&none, now + Duration::from_secs(10))
            .is_empty());
        let in_use: HashSet<String> = [a.clone()].into();
        let later = now + Duration::from_secs(3601);
        assert_eq!(store.collect_garbage(&in_use, later), vec![b.clone()]);
        assert!(store.contains(&a) && !store.contains(&b));
        // `contains` just used `a` again: it is kept another hour from then.
        let used = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let none_yet = store.collect_garbage(&none, used + hour - Duration::from_secs(60));
        assert!(none_yet.is_empty());
        assert_eq!(store.collect_garbage(&none, used + hour), vec![a.clone()]);
        assert!(
            dir.path().join(".upload-x").exists(),
            "uploads in progress stay"
        );
    }

    #[test]
    fn hex_matches_sha2() {
        let d = Sha256::digest(b"abc");
        assert_eq!(
            ember_proto::digest::to_hex(&d),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
