//! Reduce-side block reading: a block's bytes (found by [`crate::local`] for a local
//! block, or arriving as a stream) verified and decoded record by record, frame by frame.
//!
//! Invariant: every failure while opening, reading, verifying or decoding a block (missing
//! data file, bad index, short read, checksum mismatch, undecodable frame or
//! record) surfaces as `ShuffleError::FetchFailed` carrying the [`BlockId`] and a message
//! naming the file and what went wrong, because the scheduler answers that error by
//! rerunning the map task. Nothing here panics on bad input.
//!
//! Checksums: a reducer reads a local block from its data file as it decodes it
//! ([`open_block_records`]: a 64 KiB read buffer and one frame in memory, whatever the
//! block's size; reading blocks whole held up to a block per running reducer outside the
//! memory pool), with a running crc32, as it does a block arriving as a stream
//! ([`BlockRecords::from_stream`]). A mismatch is then reported as the iterator's last item,
//! after records decoded from the bad bytes were already yielded, so the consumer must treat
//! the whole block's records as void on any error (a reduce task does: it fails with
//! `FetchFailed` and its partial output is discarded). [`read_local_block`] reads a block
//! whole and checks its crc before returning it, for callers that need the bytes.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, ShuffleError};
use crate::frame::FrameDecoder;
use crate::index::BlockEntry;
pub use crate::local::{open_local_block, read_local_block, LocalBlock};
use crate::resident::{ResidentBlock, View};

/// Names one block: the output of one map task for one reducer, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockId {
    pub executor_id: String,
    pub shuffle_id: u32,
    pub map_partition: u32,
    pub reduce_partition: u32,
}

impl BlockId {
    /// The `FetchFailed` error for this block, with `message` saying what went wrong.
    pub fn fetch_failed(&self, message: impl Into<String>) -> ShuffleError {
        ShuffleError::FetchFailed {
            executor_id: self.executor_id.clone(),
            shuffle_id: self.shuffle_id,
            map_partition: self.map_partition,
            reduce_partition: self.reduce_partition,
            message: message.into(),
        }
    }
}

/// Checks `bytes` against `expected_crc`; `source` names where they came from.
pub fn verify_block(id: &BlockId, source: &str, bytes: &[u8], expected_crc: u32) -> Result<()> {
    let actual = crc32fast::hash(bytes);
    if actual != expected_crc {
        return Err(id.fetch_failed(format!(
            "checksum mismatch in {source} block {}: expected {expected_crc:08x} got {actual:08x}",
            id.reduce_partition
        )));
    }
    Ok(())
}

/// Read buffer of a local block being decoded (a smaller block gets a buffer of its size).
pub const LOCAL_READ_BUFFER_BYTES: usize = 64 * 1024;

/// Opens local block `id` and decodes its records lazily from its data file, verifying
/// length and crc as the bytes go by (a mismatch is the last item, see module docs).
pub fn open_block_records<T: DeserializeOwned>(
    view: &View,
    dir: &Path,
    id: &BlockId,
) -> Result<BlockRecords<T>> {
    block_records(id, open_local_block(view, dir, id)?)
}

/// [`open_block_records`] of a map output on a shared file system (a stored copy): read
/// from its file, never through the resident outputs ([`crate::local::open_file_block`]).
pub fn open_file_block_records<T: DeserializeOwned>(
    dir: &Path,
    id: &BlockId,
) -> Result<BlockRecords<T>> {
    block_records(id, crate::local::open_file_block(dir, id)?)
}

/// The records of `block`, decoded lazily and checked as the bytes go by.
fn block_records<T: DeserializeOwned>(id: &BlockId, block: LocalBlock) -> Result<BlockRecords<T>> {
    let (reader, origin, entry) = match block {
        LocalBlock::Empty => return Ok(BlockRecords::from_bytes(id.clone(), Vec::new())),
        LocalBlock::Resident(block, entry) => {
            let origin = Origin::Resident(block.output().path().clone());
            (BlockBytes::Resident(block), origin, entry)
        }
        LocalBlock::File(file, path, entry) => {
            // A buffer no larger than the block: a tiny block is one read of its own
            // bytes, not of 64 KiB of the file after it.
            let capacity = usize::try_from(entry.len).map_or(LOCAL_READ_BUFFER_BYTES, |len| {
                len.min(LOCAL_READ_BUFFER_BYTES)
            });
            let reader = BufReader::with_capacity(capacity, file);
            (BlockBytes::File(reader), Origin::File(path), entry)
        }
    };
    Ok(BlockRecords::checked(id.clone(), reader, entry, origin))
}

/// Where a block's bytes come from: memory (a fetched block) or a local data file.
pub enum BlockBytes {
    Memory(Cursor<Vec<u8>>),
    File(BufReader<File>),
    Resident(ResidentBlock),
}

impl Read for BlockBytes {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BlockBytes::Memory(c) => c.read(buf),
            BlockBytes::File(f) => f.read(buf),
            BlockBytes::Resident(r) => r.read(buf),
        }
    }
}

/// The records of one block, decoded one frame at a time. Yields `Err(FetchFailed)` at
/// most once, as its last item.
pub struct BlockRecords<T, R = BlockBytes> {
    id: BlockId,
    decoder: FrameDecoder<Checked<R>>,
    done: bool,
    _record: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> BlockRecords<T> {
    /// Decodes a block already in memory (and already verified, as by [`read_local_block`]).
    pub fn from_bytes(id: BlockId, bytes: Vec<u8>) -> Self {
        Self::from_reader(id, BlockBytes::Memory(Cursor::new(bytes)))
    }
}

impl<T: DeserializeOwned, R: Read> BlockRecords<T, R> {
    /// Decodes a block from `reader` until its end, without checksum verification (the
    /// caller verified the bytes, or the source cannot be corrupted).
    pub fn from_reader(id: BlockId, reader: R) -> Self {
        Self::new(
            id,
            Checked {
                inner: reader,
                expect: None,
            },
        )
    }

    /// Decodes a block of `entry.len` bytes from `reader` (reading no further), checking
    /// length and crc as the bytes go by; a mismatch is the last item (see module docs).
    pub fn from_stream(id: BlockId, reader: R, entry: BlockEntry) -> Self {
        Self::checked(id, reader, entry, Origin::Stream)
    }

    /// [`BlockRecords::from_stream`], with `origin` naming where the bytes come from in
    /// errors.
    fn checked(id: BlockId, reader: R, entry: BlockEntry, origin: Origin) -> Self {
        let expect = Expect {
            len: entry.len,
            crc: entry.crc,
            seen: 0,
            hasher: crc32fast::Hasher::new(),
            origin,
        };
        Self::new(
            id,
            Checked {
                inner: reader,
                expect: Some(expect),
            },
        )
    }

    fn new(id: BlockId, source: Checked<R>) -> Self {
        BlockRecords {
            id,
            decoder: FrameDecoder::new(source),
            done: false,
            _record: PhantomData,
        }
    }

    /// The block these records come from.
    pub fn block_id(&self) -> &BlockId {
        &self.id
    }

    /// At a clean end of stream: for a verified stream, checks length and crc.
    fn check_end(&self) -> Result<()> {
        let Some(x) = &self.decoder.get_ref().expect else {
            return Ok(());
        };
        if x.seen != x.len {
            return Err(self.id.fetch_failed(format!(
                "block {} in {} ended after {} of {} bytes",
                self.id.reduce_partition,
                x.origin.describe(&self.id),
                x.seen,
                x.len
            )));
        }
        let actual = x.hasher.clone().finalize();
        if actual != x.crc {
            return Err(self.id.fetch_failed(format!(
                "checksum mismatch in block {} read from {}: expected {:08x} got {actual:08x}",
                self.id.reduce_partition,
                x.origin.describe(&self.id),
                x.crc
            )));
        }
        Ok(())
    }
}

impl<T: DeserializeOwned, R: Read> Iterator for BlockRecords<T, R> {
    type Item = Result<T>;

    #[inline]
    fn next(&mut self) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        match self.decoder.next_record::<T>() {
            Ok(Some(record)) => Some(Ok(record)),
            Ok(None) => {
                self.done = true;
                self.check_end().err().map(Err)
            }
            Err(e) => {
                self.done = true;
                let message = match &self.decoder.get_ref().expect {
                    Some(x) => format!(
                        "undecodable shuffle block from {}: {e}",
                        x.origin.describe(&self.id)
                    ),
                    None => format!("undecodable shuffle block: {e}"),
                };
                Some(Err(self.id.fetch_failed(message)))
            }
        }
    }
}

impl<T: DeserializeOwned, R: Read> FusedIterator for BlockRecords<T, R> {}

/// A reader that, when given an expected length and crc, stops at that length and hashes
/// what passes through.
struct Checked<R> {
    inner: R,
    expect: Option<Expect>,
}

struct Expect {
    len: u64,
    crc: u32,
    seen: u64,
    hasher: crc32fast::Hasher,
    /// Where the bytes come from, for errors.
    origin: Origin,
}

/// Where a checked block's bytes come from, named in errors only (so reading a block
/// formats nothing).
enum Origin {
    /// A local map output file.
    File(PathBuf),
    /// A resident copy of the local map output file at this path.
    Resident(Arc<Path>),
    /// The block stream from the executor holding the block.
    Stream,
}

impl Origin {
    fn describe(&self, id: &BlockId) -> String {
        match self {
            Origin::File(path) => format!("shuffle data file {}", path.display()),
            Origin::Resident(path) => format!("shuffle data file {}", path.display()),
            Origin::Stream => format!("the block stream from executor {}", id.executor_id),
        }
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(x) = &mut self.expect else {
            return self.inner.read(buf);
        };
        let left = x.len - x.seen;
        let cap = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if cap == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..cap])?;
        x.hasher.update(&buf[..n]);
        x.seen += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_path;
    use crate::index::IndexFile;
    use crate::writer::ShuffleWriter;

    const N: u32 = 4;

    fn id(reduce: u32) -> BlockId {
        BlockId {
            executor_id: "exec-7".into(),
            shuffle_id: 3,
            map_partition: 1,
            reduce_partition: reduce,
        }
    }

    /// Writes map output 3/1 with 4 reducers (reducer 3 empty); returns records per reducer.
    fn setup(dir: &Path) -> Vec<Vec<(u32, String)>> {
        let mut w = ShuffleWriter::<(u32, String)>::new(dir, 3, 1, N);
        let mut want = vec![Vec::new(); N as usize];
        for i in 0..40_000u32 {
            let rec = (i, format!("record {i}"));
            let r = i % 3;
            w.write(r, &rec).unwrap();
            want[r as usize].push(rec);
        }
        w.finish().unwrap();
        want
    }

    fn expect_fetch_failed(err: ShuffleError, reduce: u32, needles: &[&str]) {
        let msg = err.to_string();
        match err {
            ShuffleError::FetchFailed {
                executor_id,
                shuffle_id: 3,
                map_partition: 1,
                reduce_partition,
                message,
            } => {
                assert_eq!((executor_id.as_str(), reduce_partition), ("exec-7", reduce));
                for n in needles {
                    assert!(message.contains(n), "{message:?} lacks {n:?}");
                }
            }
            _ => panic!("expected FetchFailed, got {msg}"),
        }
    }

    fn collect(dir: &Path, reduce: u32) -> Result<Vec<(u32, String)>> {
        open_block_records(&crate::resident::View::now(), dir, &id(reduce))?.collect()
    }

    #[test]
    fn reads_back_verified_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let want = setup(dir.path());
        for r in 0..N {
            assert_eq!(collect(dir.path(), r).unwrap(), want[r as usize]);
        }
        assert!(read_local_block(dir.path(), &id(3)).unwrap().is_empty());
        let err = read_local_block(dir.path(), &id(N)).unwrap_err();
        expect_fetch_failed(err, N, &["has 4 reduce partitions"]);
    }

    #[test]
    fn flipped_data_byte_is_a_checksum_fetch_failure() {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path());
        let path = data_path(dir.path(), 3, 1);
        let entry = IndexFile::read(&path).unwrap().entry(1).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(entry.offset + entry.len / 2) as usize] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let shown = path.display().to_string();
        // Decoded as it is read: the flipped byte fails lz4/postcard or, at the end, the crc.
        let err = collect(dir.path(), 1).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("checksum mismatch") || msg.contains("undecodable"),
            "{msg}"
        );
        expect_fetch_failed(err, 1, &[&shown]);
        // Read whole, the block is refused before any record is decoded.
        let err = read_local_block(dir.path(), &id(1)).unwrap_err();
        expect_fetch_failed(err, 1, &["checksum mismatch", &shown, "block 1"]);
        // Other blocks of the same file are intact.
        assert!(collect(dir.path(), 0).is_ok());
    }

    #[test]
    fn missing_or_damaged_files_are_fetch_failures() {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path());
        let data = data_path(dir.path(), 3, 1);
        let shown = data.display().to_string();
        let bytes = std::fs::read(&data).unwrap();

        // Its last byte gone: the index at the end no longer reads.
        std::fs::write(&data, &bytes[..bytes.len() - 1]).unwrap();
        let err = read_local_block(dir.path(), &id(0)).unwrap_err();
        expect_fetch_failed(err, 0, &["bad magic", &shown]);

        // A byte more before the index: the blocks no longer end where it starts.
        let mut longer = bytes.clone();
        longer.insert(0, 0);
        std::fs::write(&data, &longer).unwrap();
        let err = collect(dir.path(), 0).unwrap_err();
        expect_fetch_failed(err, 0, &["truncated", &shown]);

        std::fs::remove_file(&data).unwrap();
        let err = read_local_block(dir.path(), &id(2)).unwrap_err();
        expect_fetch_failed(err, 2, &["cannot open", "shuffle_3_1.data", "No such file"]);
        let err = collect(dir.path(), 0).unwrap_err();
        expect_fetch_failed(err, 0, &["cannot open", "shuffle_3_1.data"]);

        std::fs::write(&data, &bytes).unwrap();
        assert!(collect(dir.path(), 0).is_ok(), "whole again");
    }

    #[test]
    fn undecodable_block_is_a_fetch_failure() {
        let bytes = vec![0xff; 64];
        let mut recs = BlockRecords::<u32>::from_bytes(id(2), bytes);
        expect_fetch_failed(
            recs.next().unwrap().unwrap_err(),
            2,
            &["undecodable", "frame 0"],
        );
        assert!(recs.next().is_none(), "one error, then the end");
    }

    #[test]
    fn streamed_blocks_are_verified_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let want = setup(dir.path());
        let path = data_path(dir.path(), 3, 1);
        let entry = IndexFile::read(&path).unwrap().entry(2).unwrap();
        let file = std::fs::read(path).unwrap();
        let mut stream = file[entry.offset as usize..].to_vec(); // runs past the block
        let got: Result<Vec<(u32, String)>> =
            BlockRecords::from_stream(id(2), &stream[..], entry).collect();
        assert_eq!(got.unwrap(), want[2]);

        // Cut at a frame boundary: decodes cleanly but is short.
        let first_frame = 8 + u32::from_le_bytes(stream[4..8].try_into().unwrap()) as usize;
        let got: Result<Vec<(u32, String)>> =
            BlockRecords::from_stream(id(2), &stream[..first_frame], entry).collect();
        expect_fetch_failed(got.unwrap_err(), 2, &["ended after", "exec-7"]);

        // A flipped byte in the second frame: lz4/postcard reject it, or the crc does.
        stream[first_frame + 9] ^= 0x01;
        let results: Vec<Result<(u32, String)>> =
            BlockRecords::from_stream(id(2), &stream[..], entry).collect();
        let err = results.into_iter().find_map(|r| r.err()).expect("an error");
        let msg = err.to_string();
        assert!(matches!(err, ShuffleError::FetchFailed { .. }), "{msg}");
    }

    #[test]
    fn empty_block_from_reader() {
        let mut recs = BlockRecords::<u8, _>::from_reader(id(0), std::io::empty());
        assert!(recs.next().is_none());
        assert_eq!(recs.block_id(), &id(0));
    }
}
