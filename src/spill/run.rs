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
//! Records are written and read with `ember_shuffle::codec` (postcard's bytes exactly).
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
        let before = self.frame.len();
        if let Err(e) = ember_shuffle::codec::encode_into(record, &mut self.frame) {
            self.frame.truncate(before);
            return Err(EmberError::ser(
                format!("spill run {}", self.path.display()),
                e,
            ));
        }
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
            path: RunPath::Temp(self.path),
            offset: 0,
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

/// Where a run file is, and whether it goes with its [`RunFile`].
#[derive(Debug)]
enum RunPath {
    /// Written here: deleted when the `RunFile` drops.
    Temp(TempPath),
    /// Adopted ([`RunFile::adopt`]): someone else's file, left in place.
    Kept(PathBuf),
}

/// A finished run file. It is deleted when this value (or the reader made from it) drops,
/// unless it was adopted.
#[derive(Debug)]
pub struct RunFile {
    path: RunPath,
    /// Where the run (its magic) starts in the file.
    offset: u64,
    bytes: u64,
    records: u64,
    /// The largest frame its writer wrote: payload bytes, uncompressed bytes.
    largest: (u32, u32),
}

impl RunFile {
    /// Where the file is.
    pub fn path(&self) -> &Path {
        match &self.path {
            RunPath::Temp(p) => p,
            RunPath::Kept(p) => p,
        }
    }

    /// A run another process wrote, `bytes` long from `offset` in the file at `path`,
    /// with the `records` and largest frame (`largest`: payload, uncompressed bytes) its
    /// writer reported ([`RunFile::largest`]). The file is left in place when this value
    /// drops. Its frames are checked as they are read, as any run's: a damaged file is
    /// [`EmberError::Corrupt`], and no frame claiming more than `largest` is read.
    pub fn adopt(
        path: PathBuf,
        offset: u64,
        bytes: u64,
        records: u64,
        largest: (u32, u32),
    ) -> Self {
        RunFile {
            path: RunPath::Kept(path),
            offset,
            bytes,
            records,
            largest,
        }
    }

    /// Where the run starts in its file (0 unless adopted from a file with a header).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The largest frame its writer wrote: payload bytes, uncompressed bytes.
    pub fn largest(&self) -> (u32, u32) {
        self.largest
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
        let path: &Path = run.path();
        let mut file = File::open(path).map_err(|e| EmberError::io(path, e))?;
        if run.offset > 0 {
            use std::io::{Seek, SeekFrom};
            file.seek(SeekFrom::Start(run.offset))
                .map_err(|e| EmberError::io(path, e))?;
        }
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
        let path: &Path = self.run.path();
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
        let (record, used) = ember_shuffle::codec::decode_prefix::<T>(rest)
            .map_err(|e| corrupt(self.run.path(), &format!("record does not decode: {e}")))?;
        self.pos += if used == 0 {
            // A zero-sized record: its marker byte.
            if rest[0] != ember_shuffle::frame::ZERO_SIZED_MARKER {
                return Err(corrupt(
                    self.run.path(),
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
#[path = "run_tests.rs"]
mod tests;
