//! Spill run files: a [`RunWriter`] writes records to a temporary file in a spill
//! directory, and a [`RunReader`] streams them back frame by frame. The reader never loads
//! the whole file.
//!
//! On-disk format (all integers little-endian):
//!
//! ```text
//! file    := magic frame*
//! magic   := b"EMBSPIL1"                                  (8 bytes)
//! frame   := clen:u32 crc:u32 payload[clen]
//! payload := ulen:u32 lz4_block(records)                  (lz4_flex "size prepended" block)
//! records := postcard(record)*                            (ulen bytes once decompressed)
//! ```
//!
//! A record postcard gives no bytes (a zero-sized type such as `()`) is written as one
//! marker byte (`ember_shuffle::frame::ZERO_SIZED_MARKER`), consumed by the reader when
//! decoding the record consumed nothing, so every record takes at least one byte.
//!
//! `crc` is the CRC-32 (crc32fast) of the `clen` payload bytes. The writer closes a frame
//! once its uncompressed records reach [`FRAME_TARGET`] (64 KiB), so a frame always holds
//! whole records and at least one, and only the last frame may be shorter. A record is
//! never split across frames.
//!
//! Invariants:
//! * The file is created with `tempfile` in the given spill directory. The [`RunFile`] owns
//!   its `TempPath`. A [`RunReader`] holds the `RunFile` (shared through an `Arc` when it
//!   was opened with [`RunReader::open_shared`]), so the file is deleted when the last
//!   handle on it drops. A writer dropped before `finish` deletes the file too.
//! * Any damage is reported as [`EmberError::Corrupt`] naming the file: a bad magic, a CRC
//!   mismatch, a truncated frame, a record that does not decode, or a record count that
//!   differs from what the writer wrote. After an error the reader yields nothing more.
//! * The [`RunFile`] remembers the largest frame its writer wrote (payload and
//!   uncompressed): a frame header read back claiming more is refused before anything is
//!   allocated for it, so a damaged length never costs more memory than writing did.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tempfile::TempPath;

use crate::error::{EmberError, Result};

/// First bytes of every run file.
pub const MAGIC: [u8; 8] = *b"EMBSPIL1";
/// Uncompressed size at which a frame is closed.
pub const FRAME_TARGET: usize = 64 * 1024;

/// Writes records to a new run file. Call [`finish`](Self::finish) to keep the file.
pub struct RunWriter<T> {
    file: File,
    path: TempPath,
    frame: Vec<u8>,
    compressed: Vec<u8>,
    bytes: u64,
    records: u64,
    /// The largest frame written: its payload (`clen`), its records (`ulen`).
    largest: (u32, u32),
    _marker: PhantomData<fn(&T)>,
}

impl<T: Serialize> RunWriter<T> {
    /// Creates a new temporary run file in `spill_dir`, creating the directory if needed.
    pub fn create(spill_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(spill_dir).map_err(|e| EmberError::io(spill_dir, e))?;
        let tmp = tempfile::Builder::new()
            .prefix("ember-spill-")
            .suffix(".run")
            .tempfile_in(spill_dir)
            .map_err(|e| EmberError::io(spill_dir, e))?;
        let (mut file, path) = tmp.into_parts();
        file.write_all(&MAGIC)
            .map_err(|e| EmberError::io(path.to_path_buf(), e))?;
        Ok(RunWriter {
            file,
            path,
            frame: Vec::with_capacity(FRAME_TARGET + FRAME_TARGET / 4),
            compressed: Vec::new(),
            bytes: MAGIC.len() as u64,
            records: 0,
            largest: (0, 0),
            _marker: PhantomData,
        })
    }

    /// Appends one record.
    pub fn push(&mut self, record: &T) -> Result<()> {
        let frame = std::mem::take(&mut self.frame);
        let before = frame.len();
        self.frame = postcard::to_extend(record, frame)
            .map_err(|e| EmberError::ser(format!("spill run {}", self.path.display()), e))?;
        if self.frame.len() == before {
            self.frame.push(ember_shuffle::frame::ZERO_SIZED_MARKER);
        }
        self.records += 1;
        if self.frame.len() >= FRAME_TARGET {
            self.flush_frame()?;
        }
        Ok(())
    }

    /// Records pushed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the last frame and returns the finished file.
    pub fn finish(mut self) -> Result<RunFile> {
        self.flush_frame()?;
        self.file
            .flush()
            .map_err(|e| EmberError::io(self.path.to_path_buf(), e))?;
        Ok(RunFile {
            path: self.path,
            bytes: self.bytes,
            records: self.records,
            largest: self.largest,
        })
    }

    fn flush_frame(&mut self) -> Result<()> {
        if self.frame.is_empty() {
            return Ok(());
        }
        let ulen = u32::try_from(self.frame.len()).map_err(|_| {
            EmberError::ser(
                format!("spill run {}", self.path.display()),
                "a single record is larger than 4 GiB",
            )
        })?;
        let max = lz4_flex::block::get_maximum_output_size(self.frame.len());
        self.compressed.clear();
        self.compressed.resize(4 + max, 0);
        self.compressed[..4].copy_from_slice(&ulen.to_le_bytes());
        let n = lz4_flex::block::compress_into(&self.frame, &mut self.compressed[4..])
            .map_err(|e| EmberError::ser(format!("spill run {}", self.path.display()), e))?;
        self.compressed.truncate(4 + n);
        let mut header = [0u8; 8];
        header[..4].copy_from_slice(&(self.compressed.len() as u32).to_le_bytes());
        header[4..].copy_from_slice(&crc32fast::hash(&self.compressed).to_le_bytes());
        let io = |e| EmberError::io(self.path.to_path_buf(), e);
        self.file.write_all(&header).map_err(io)?;
        self.file.write_all(&self.compressed).map_err(io)?;
        self.bytes += (header.len() + self.compressed.len()) as u64;
        let (clen, ulen_max) = &mut self.largest;
        *clen = (*clen).max(self.compressed.len() as u32);
        *ulen_max = (*ulen_max).max(ulen);
        self.frame.clear();
        Ok(())
    }
}

/// A finished run file. It is deleted when this value (or the reader made from it) drops.
#[derive(Debug)]
pub struct RunFile {
    path: TempPath,
    bytes: u64,
    records: u64,
    /// The largest frame its writer wrote: payload bytes, uncompressed bytes.
    largest: (u32, u32),
}

impl RunFile {
    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes on disk, header included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of records in the file.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Opens a streaming reader. The reader takes the file over and deletes it on drop.
    pub fn reader<T: DeserializeOwned>(self) -> Result<RunReader<T>> {
        RunReader::open(self)
    }
}

/// Streams the records of a [`RunFile`] one frame at a time.
pub struct RunReader<T> {
    file: File,
    run: std::sync::Arc<RunFile>,
    compressed: Vec<u8>,
    frame: Vec<u8>,
    pos: usize,
    records: u64,
    done: bool,
    _marker: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> RunReader<T> {
    fn open(run: RunFile) -> Result<Self> {
        Self::open_shared(std::sync::Arc::new(run))
    }

    /// Opens another reader of a run that stays alive as long as any handle on it
    /// (used for disk-cached partitions, which are read many times).
    pub fn open_shared(run: std::sync::Arc<RunFile>) -> Result<Self> {
        let path: &Path = &run.path;
        let mut file = File::open(path).map_err(|e| EmberError::io(path, e))?;
        let mut magic = [0u8; 8];
        read_full(&mut file, &mut magic, path)?;
        if magic != MAGIC {
            return Err(corrupt(path, "not an ember spill run (bad magic)"));
        }
        Ok(RunReader {
            file,
            run,
            compressed: Vec::new(),
            frame: Vec::new(),
            pos: 0,
            records: 0,
            done: false,
            _marker: PhantomData,
        })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        self.run.path()
    }

    /// Loads the next frame. Returns false at a clean end of file.
    fn next_frame(&mut self) -> Result<bool> {
        let path: &Path = &self.run.path;
        let mut header = [0u8; 8];
        if !read_full(&mut self.file, &mut header, path)? {
            return Ok(false);
        }
        let clen = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let (largest_payload, largest_frame) = self.run.largest;
        if clen > u64::from(largest_payload) {
            return Err(corrupt(
                path,
                &format!(
                    "implausible frame: it claims a payload of {clen} bytes, but no frame \
                     written to this run was larger than {largest_payload}"
                ),
            ));
        }
        self.compressed.clear();
        // `take` + `read_to_end` so a damaged length cannot make us allocate a huge buffer.
        (&mut self.file)
            .take(clen)
            .read_to_end(&mut self.compressed)
            .map_err(|e| EmberError::io(path, e))?;
        if self.compressed.len() as u64 != clen || clen < 4 {
            return Err(corrupt(path, "truncated frame"));
        }
        let actual = crc32fast::hash(&self.compressed);
        if actual != crc {
            return Err(corrupt(
                path,
                &format!("frame checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"),
            ));
        }
        let ulen = u32::from_le_bytes(self.compressed[..4].try_into().expect("4 bytes")) as usize;
        // lz4 cannot expand data by more than ~255x.
        if ulen == 0 || ulen as u64 > clen * 256 + 64 {
            return Err(corrupt(path, "implausible frame size"));
        }
        if ulen > largest_frame as usize {
            return Err(corrupt(
                path,
                &format!(
                    "implausible frame: it claims {ulen} uncompressed bytes, but no frame \
                     written to this run was larger than {largest_frame}"
                ),
            ));
        }
        self.frame.clear();
        self.frame.resize(ulen, 0);
        let n = lz4_flex::block::decompress_into(&self.compressed[4..], &mut self.frame)
            .map_err(|e| corrupt(path, &format!("lz4: {e}")))?;
        if n != ulen {
            return Err(corrupt(path, "frame decompressed to the wrong size"));
        }
        self.pos = 0;
        Ok(true)
    }

    fn next_record(&mut self) -> Result<Option<T>> {
        while self.pos >= self.frame.len() {
            if !self.next_frame()? {
                if self.records != self.run.records {
                    return Err(corrupt(
                        self.path(),
                        &format!(
                            "file ends after {} of {} records",
                            self.records, self.run.records
                        ),
                    ));
                }
                return Ok(None);
            }
        }
        let rest = &self.frame[self.pos..];
        let (record, tail) = postcard::take_from_bytes::<T>(rest)
            .map_err(|e| corrupt(&self.run.path, &format!("record does not decode: {e}")))?;
        let used = rest.len() - tail.len();
        self.pos += if used == 0 {
            // A zero-sized record: its marker byte.
            if rest[0] != ember_shuffle::frame::ZERO_SIZED_MARKER {
                return Err(corrupt(
                    &self.run.path,
                    "a record consumed no bytes and no marker follows",
                ));
            }
            1
        } else {
            used
        };
        self.records += 1;
        Ok(Some(record))
    }
}

impl<T: DeserializeOwned> Iterator for RunReader<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                self.frame = Vec::new();
                self.compressed = Vec::new();
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn corrupt(path: &Path, message: &str) -> EmberError {
    EmberError::Corrupt {
        what: format!("spill run {}", path.display()),
        message: message.to_string(),
    }
}

/// Fills `buf`. Ok(false) on a clean end of file before the first byte; a partial fill is
/// a truncated file.
fn read_full(file: &mut File, buf: &mut [u8], path: &Path) -> Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(corrupt(path, "truncated frame header")),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(EmberError::io(PathBuf::from(path), e)),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, n: u64) -> RunFile {
        let mut w = RunWriter::<(u64, String)>::create(dir).unwrap();
        for i in 0..n {
            w.push(&(i, format!("value-{}", i * 7919 % 1000))).unwrap();
        }
        assert_eq!(w.records(), n);
        w.finish().unwrap()
    }

    fn files_in(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn round_trips_many_frames_and_deletes_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let run = write(dir.path(), 50_000);
        assert_eq!(run.records(), 50_000);
        assert_eq!(run.bytes(), std::fs::metadata(run.path()).unwrap().len());
        assert!(run.bytes() < 50_000 * 12, "lz4 should compress this");
        let back: Vec<(u64, String)> = run.reader().unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(back.len(), 50_000);
        for (i, (k, v)) in back.iter().enumerate() {
            assert_eq!(
                (*k, v.as_str()),
                (i as u64, &*format!("value-{}", i * 7919 % 1000))
            );
        }
        assert_eq!(files_in(dir.path()), 0);

        let run = write(dir.path(), 10);
        assert_eq!(files_in(dir.path()), 1);
        drop(run);
        assert_eq!(files_in(dir.path()), 0);

        let mut reader = write(dir.path(), 100_000)
            .reader::<(u64, String)>()
            .unwrap();
        reader.next().unwrap().unwrap(); // dropping a reader part-way deletes the file
        drop(reader);
        assert_eq!(files_in(dir.path()), 0);

        let w = RunWriter::<u8>::create(dir.path()).unwrap();
        drop(w); // abandoned writer
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn shared_run_is_read_many_times_and_deleted_with_the_last_handle() {
        let dir = tempfile::tempdir().unwrap();
        let run = std::sync::Arc::new(write(dir.path(), 30_000));
        let a = RunReader::<(u64, String)>::open_shared(run.clone()).unwrap();
        let b = RunReader::<(u64, String)>::open_shared(run.clone()).unwrap();
        drop(run);
        assert_eq!(a.count(), 30_000); // a is dropped here
        assert_eq!(files_in(dir.path()), 1);
        assert_eq!(b.map(Result::unwrap).last().unwrap().0, 29_999);
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn zero_sized_records_round_trip_with_their_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RunWriter::<((), ())>::create(dir.path()).unwrap();
        for _ in 0..150_000 {
            w.push(&((), ())).unwrap();
        }
        let run = w.finish().unwrap();
        assert_eq!(run.records(), 150_000);
        let back: Vec<((), ())> = RunReader::<((), ())>::open(run)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(back.len(), 150_000);
    }

    #[test]
    fn empty_run_and_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        let run = RunWriter::<u32>::create(&nested).unwrap().finish().unwrap();
        assert_eq!(run.bytes(), 8);
        assert_eq!(run.reader::<u32>().unwrap().count(), 0);
    }

    #[test]
    fn huge_record_gets_its_own_frame() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RunWriter::<Vec<u8>>::create(dir.path()).unwrap();
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        w.push(&vec![1, 2, 3]).unwrap();
        w.push(&big).unwrap();
        w.push(&vec![]).unwrap();
        let back: Vec<Vec<u8>> = w
            .finish()
            .unwrap()
            .reader()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, vec![vec![1, 2, 3], big, vec![]]);
    }

    fn expect_corrupt(run: RunFile) -> String {
        let path = run.path().display().to_string();
        let r = run
            .reader::<(u64, String)>()
            .and_then(|r| r.collect::<Result<Vec<_>>>());
        match r {
            Err(e @ EmberError::Corrupt { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&path), "{msg} should name {path}");
                msg
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn flipped_byte_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        for offset in [20u64, 2000, 8 + 3, 8 + 5, 2] {
            let run = write(dir.path(), 20_000);
            let mut bytes = std::fs::read(run.path()).unwrap();
            bytes[offset as usize] ^= 0x40;
            std::fs::write(run.path(), &bytes).unwrap();
            let msg = expect_corrupt(run);
            assert!(
                msg.contains("checksum")
                    || msg.contains("truncated")
                    || msg.contains("magic")
                    || msg.contains("implausible"),
                "{msg}"
            );
        }
        assert_eq!(files_in(dir.path()), 0);
    }

    #[test]
    fn truncation_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let run = write(dir.path(), 20_000);
        let len = run.bytes();
        // Cut mid-frame.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(run.path())
            .unwrap();
        f.set_len(len - 10).unwrap();
        assert!(expect_corrupt(run).contains("truncated"));
        // Cut exactly at a frame boundary: caught by the record count.
        let run = write(dir.path(), 20_000);
        let bytes = std::fs::read(run.path()).unwrap();
        let first = 8 + 8 + u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        std::fs::write(run.path(), &bytes[..first]).unwrap();
        assert!(expect_corrupt(run).contains("records"));
    }

    /// A frame length read back larger than any frame the writer wrote (the payload
    /// length in the frame header, or the uncompressed length inside a payload whose
    /// crc still matches) is refused before a buffer is sized from it.
    #[test]
    fn lengths_larger_than_any_frame_written_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let run = write(dir.path(), 20_000);
        let (payload, frame) = run.largest;
        let mut bytes = std::fs::read(run.path()).unwrap();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(run.path(), &bytes).unwrap();
        let msg = expect_corrupt(run);
        assert!(
            msg.contains(&format!(
                "implausible frame: it claims a payload of {} bytes, but no frame written to \
                 this run was larger than {payload}",
                u32::MAX
            )),
            "{msg}"
        );

        let run = write(dir.path(), 20_000);
        let mut bytes = std::fs::read(run.path()).unwrap();
        let clen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let claim = frame + 1;
        bytes[16..20].copy_from_slice(&claim.to_le_bytes());
        let crc = crc32fast::hash(&bytes[16..16 + clen]);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(run.path(), &bytes).unwrap();
        let msg = expect_corrupt(run);
        assert!(
            msg.contains(&format!(
                "implausible frame: it claims {claim} uncompressed bytes, but no frame \
                 written to this run was larger than {frame}"
            )),
            "{msg}"
        );
        assert_eq!(files_in(dir.path()), 0);
    }
}
