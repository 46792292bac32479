//! ember's object file format: one file of serialised records of one type, as
//! `save_as_object_file` writes each partition and `Context::object_file` reads it.
//!
//! ```text
//! file   := header chunk* footer
//! header := "EMBEROBJ" | version u32 | fingerprint u64 | name_len u16 | name
//!           | crc32 u32 (of every header byte before it)
//! chunk  := records u32 (>= 1) | crc32 u32 (of the frame) | frame
//! frame  := one frame of ember-shuffle's codec (lz4 block of postcard records)
//! footer := 0 u32 | total records u64 | crc32 u32 (of the total's 8 bytes)
//! ```
//!
//! All integers are little-endian. `fingerprint` is the first 8 bytes of the SHA-256
//! of `std::any::type_name::<T>()`, and `name` is that name (for error messages). The
//! type name is the compiler's; a file written by a build whose compiler spells the type
//! differently is refused as holding another type, never misread.
//!
//! Invariants: the reader returns every record the writer was given, in order, or an
//! error naming the file and the byte offset (and record number where it applies):
//! wrong magic or version, another record type, a checksum mismatch, an undecodable
//! frame, a chunk holding more or fewer records than its count, a file ending anywhere
//! before its footer (truncation), or bytes after the footer. It never panics on bad
//! input. Every length read from the file (the type name's, a chunk's frame) is checked
//! against the bytes the file has left before anything is allocated: a 70-byte file
//! claiming a 1 GiB frame is an error naming the claim and the file's length, not a
//! 1 GiB buffer. A chunk's buffers (its frame and the records it decompresses to) are
//! checked against the memory pool's *limit*: a chunk needing more than the whole pool
//! could ever grant is an out-of-memory error ([`io::ErrorKind::OutOfMemory`]) naming
//! what it needs and the limit. Within the limit, the buffers are charged to the
//! reader's reservation as far as the pool grants right now; the pool never waits nor
//! makes others spill, so a refusal only means other tasks hold the memory at this
//! moment, and the chunk is then read without the extra charge (as before the charge
//! existed) rather than failing a valid file under load.

use std::any::type_name;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ember_shuffle::frame::{frame_body_len, FrameDecoder, FrameEncoder, FRAME_HEADER_BYTES};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{EmberError, Result};
use crate::io::excerpt;
use crate::memory::Reservation;

/// The first bytes of every object file.
pub const MAGIC: &[u8; 8] = b"EMBEROBJ";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// The fingerprint of record type `T` stored in a file's header.
pub fn fingerprint<T>() -> u64 {
    let digest = Sha256::digest(type_name::<T>().as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

fn corrupt(path: &Path, message: String) -> EmberError {
    EmberError::Corrupt {
        what: format!("object file {}", path.display()),
        message,
    }
}

/// Writes records of type `T` into an object file.
pub struct ObjectWriter<W: Write> {
    out: W,
    path: PathBuf,
    encoder: FrameEncoder,
    frame: Vec<u8>,
    /// Records in the encoder not yet written as a chunk.
    pending: u32,
    total: u64,
}

impl<W: Write> ObjectWriter<W> {
    /// Starts a file of `T` records on `out` (`path` names it in errors).
    pub fn new<T>(mut out: W, path: &Path) -> Result<Self> {
        let name = type_name::<T>().as_bytes();
        let name = &name[..name.len().min(u16::MAX as usize)];
        let mut header = Vec::with_capacity(30 + name.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&fingerprint::<T>().to_le_bytes());
        header.extend_from_slice(&(name.len() as u16).to_le_bytes());
        header.extend_from_slice(name);
        let crc = crc32fast::hash(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&header)
            .map_err(|e| EmberError::io(path, e))?;
        Ok(ObjectWriter {
            out,
            path: path.to_path_buf(),
            encoder: FrameEncoder::new(),
            frame: Vec::new(),
            pending: 0,
            total: 0,
        })
    }

    /// Appends one record.
    pub fn push<T: Serialize>(&mut self, record: &T) -> Result<()> {
        self.encoder.push(record, &mut self.frame)?;
        self.pending += 1;
        self.total += 1;
        if !self.frame.is_empty() || self.pending == u32::MAX {
            self.encoder.flush(&mut self.frame)?;
            self.write_chunk()?;
        }
        Ok(())
    }

    fn write_chunk(&mut self) -> Result<()> {
        if self.frame.is_empty() {
            return Ok(());
        }
        let crc = crc32fast::hash(&self.frame);
        let io = |e| EmberError::io(&self.path, e);
        self.out
            .write_all(&self.pending.to_le_bytes())
            .map_err(io)?;
        self.out.write_all(&crc.to_le_bytes()).map_err(io)?;
        self.out.write_all(&self.frame).map_err(io)?;
        self.frame.clear();
        self.pending = 0;
        Ok(())
    }

    /// Writes the last chunk and the footer; returns the sink and the record count.
    pub fn finish(mut self) -> Result<(W, u64)> {
        self.encoder.flush(&mut self.frame)?;
        self.write_chunk()?;
        let total = self.total.to_le_bytes();
        let mut footer = Vec::with_capacity(16);
        footer.extend_from_slice(&0u32.to_le_bytes());
        footer.extend_from_slice(&total);
        footer.extend_from_slice(&crc32fast::hash(&total).to_le_bytes());
        let io = |e| EmberError::io(&self.path, e);
        self.out.write_all(&footer).map_err(io)?;
        self.out.flush().map_err(io)?;
        Ok((self.out, self.total))
    }
}

/// Decodes the records of one chunk's frame.
type ChunkDecoder = FrameDecoder<io::Cursor<Vec<u8>>>;

/// Reads the records of an object file of `T`, one frame in memory at a time.
pub struct ObjectReader<R: Read> {
    src: R,
    path: PathBuf,
    /// Bytes consumed so far.
    offset: u64,
    /// Records returned so far.
    records: u64,
    /// The current chunk: its decoder, records left in it, where it starts.
    chunk: Option<(ChunkDecoder, u32, u64)>,
    finished: bool,
    /// The file's length in bytes: no length read from it may claim more than is left.
    len: u64,
    /// What the current chunk's buffers hold, charged before they are allocated.
    memory: Option<Reservation>,
}

impl ObjectReader<io::BufReader<std::fs::File>> {
    /// Opens `path` and checks its header for records of type `T`; a chunk's buffers
    /// are charged to `memory` (when given) before they are allocated.
    pub fn open<T>(path: &Path, memory: Option<Reservation>) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| EmberError::io(path, e))?;
        let len = file.metadata().map_err(|e| EmberError::io(path, e))?.len();
        let src = io::BufReader::with_capacity(1 << 16, file);
        ObjectReader::new::<T>(src, path, len, memory)
    }
}

impl<R: Read> ObjectReader<R> {
    /// Reads and checks the header from `src`, `len` bytes long (`path` names it in
    /// errors); a chunk's buffers are charged to `memory` (when given).
    pub fn new<T>(src: R, path: &Path, len: u64, memory: Option<Reservation>) -> Result<Self> {
        let mut r = ObjectReader {
            src,
            path: path.to_path_buf(),
            offset: 0,
            records: 0,
            chunk: None,
            finished: false,
            len,
            memory,
        };
        let fixed: [u8; 22] = r.read_array("the header")?;
        if &fixed[..8] != MAGIC {
            return Err(corrupt(
                path,
                "not an ember object file (bad magic at byte 0)".into(),
            ));
        }
        let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(corrupt(
                path,
                format!("object file format version {version}, this build reads {VERSION}"),
            ));
        }
        let print = u64::from_le_bytes(fixed[12..20].try_into().expect("8 bytes"));
        let name_len = u16::from_le_bytes(fixed[20..22].try_into().expect("2 bytes"));
        r.check_claim(u64::from(name_len), "the header's type name")?;
        let mut name = vec![0u8; name_len as usize];
        r.read_exact_at(&mut name, "the header's type name")?;
        let crc: [u8; 4] = r.read_array("the header's checksum")?;
        let mut header = fixed.to_vec();
        header.extend_from_slice(&name);
        if crc32fast::hash(&header) != u32::from_le_bytes(crc) {
            return Err(corrupt(path, "header checksum mismatch".into()));
        }
        if print != fingerprint::<T>() {
            return Err(EmberError::Serialization {
                what: format!("object file {}", path.display()),
                message: format!(
                    "it holds records of type {}, not of the type read, {}",
                    excerpt(&String::from_utf8_lossy(&name)),
                    excerpt(type_name::<T>())
                ),
            });
        }
        Ok(r)
    }

    /// The next record, `None` after the footer.
    pub fn next_record<T: DeserializeOwned>(&mut self) -> Result<Option<T>> {
        loop {
            if self.finished {
                return Ok(None);
            }
            if let Some((decoder, left, at)) = &mut self.chunk {
                let index = self.records;
                let at = *at;
                if *left == 0 {
                    // Every counted record decoded: the frame must hold no more.
                    let extra = decoder.next_record::<T>();
                    if !matches!(extra, Ok(None)) {
                        return Err(self.bad_chunk(at, "holds more records than its count"));
                    }
                    self.chunk = None;
                    continue;
                }
                return match decoder.next_record::<T>() {
                    Ok(Some(x)) => {
                        *left -= 1;
                        self.records += 1;
                        Ok(Some(x))
                    }
                    Ok(None) => Err(self.bad_chunk(at, "holds fewer records than its count")),
                    Err(e) => Err(corrupt(
                        &self.path,
                        format!("record {index} (chunk at byte {at}) does not decode: {e}"),
                    )),
                };
            }
            self.next_chunk()?;
        }
    }

    fn bad_chunk(&self, at: u64, what: &str) -> EmberError {
        corrupt(&self.path, format!("chunk at byte {at} {what}"))
    }

    /// Reads the next chunk (or the footer).
    fn next_chunk(&mut self) -> Result<()> {
        let at = self.offset;
        let count: [u8; 4] = self.read_array("a chunk's record count")?;
        let count = u32::from_le_bytes(count);
        if count == 0 {
            return self.footer(at);
        }
        let head: [u8; 4 + FRAME_HEADER_BYTES] = self.read_array("a chunk header")?;
        let crc = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let raw = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let word = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        let Some(comp) = frame_body_len(raw, word) else {
            return Err(self.bad_chunk(
                at,
                &format!("has an implausible frame header ({raw} bytes, body word {word:#x})"),
            ));
        };
        self.check_claim(comp as u64, &format!("the frame of the chunk at byte {at}"))?;
        // The frame and the records it decompresses to (at most `raw` bytes).
        let needed = (FRAME_HEADER_BYTES + comp) as u64 + u64::from(raw);
        if let Some(memory) = &mut self.memory {
            let limit = memory.pool().limit();
            if needed > limit {
                return Err(EmberError::io(
                    &self.path,
                    io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!(
                            "the chunk at byte {at} needs {needed} bytes of buffers \
                             ({comp} compressed, {raw} decompressed), more than the memory \
                             pool grants: its limit is {limit} bytes"
                        ),
                    ),
                ));
            }
            // Within the limit: charged as far as the pool grants now (see the module doc).
            if memory.resize(needed).is_err() {
                tracing::debug!(
                    consumer = memory.consumer(),
                    needed,
                    "object file chunk read without its full memory charge: the pool is busy"
                );
            }
        }
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + comp);
        frame.extend_from_slice(&head[4..]);
        frame.resize(FRAME_HEADER_BYTES + comp, 0);
        self.read_exact_at(&mut frame[FRAME_HEADER_BYTES..], "a chunk's frame")?;
        if crc32fast::hash(&frame) != crc {
            return Err(self.bad_chunk(at, "fails its checksum"));
        }
        self.chunk = Some((FrameDecoder::new(io::Cursor::new(frame)), count, at));
        Ok(())
    }

    fn footer(&mut self, at: u64) -> Result<()> {
        let rest: [u8; 12] = self.read_array("the footer")?;
        let total = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(rest[8..].try_into().expect("4 bytes"));
        if crc32fast::hash(&rest[..8]) != crc {
            return Err(corrupt(
                &self.path,
                format!("footer at byte {at} fails its checksum"),
            ));
        }
        if total != self.records {
            return Err(corrupt(
                &self.path,
                format!(
                    "footer at byte {at} counts {total} records, the file holds {}",
                    self.records
                ),
            ));
        }
        let mut one = [0u8; 1];
        match self.src.read(&mut one) {
            Ok(0) => {}
            Ok(_) => {
                return Err(corrupt(
                    &self.path,
                    format!(
                        "unexpected bytes after the footer (at byte {})",
                        self.offset
                    ),
                ))
            }
            Err(e) => return Err(EmberError::io(&self.path, e)),
        }
        self.finished = true;
        Ok(())
    }

    /// Checks that `claimed` bytes of `what`, about to be read, fit in what is left of
    /// the file.
    fn check_claim(&self, claimed: u64, what: &str) -> Result<()> {
        let left = self.len.saturating_sub(self.offset);
        if claimed > left {
            return Err(corrupt(
                &self.path,
                format!(
                    "truncated or corrupt: {what} claims {claimed} bytes, but the file ({} bytes) \
                     has only {left} bytes left after byte {}",
                    self.len, self.offset
                ),
            ));
        }
        Ok(())
    }

    fn read_array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.read_exact_at(&mut buf, what)?;
        Ok(buf)
    }

    /// Fills `buf`; the end of the file before that is a truncation error.
    fn read_exact_at(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.src.read(&mut buf[filled..]) {
                Ok(0) => {
                    return Err(corrupt(
                        &self.path,
                        format!(
                            "truncated: the file ends at byte {} inside {what} ({} records read)",
                            self.offset + filled as u64,
                            self.records
                        ),
                    ))
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(EmberError::io(&self.path, e)),
            }
        }
        self.offset += buf.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryPool;

    fn write<T: Serialize>(records: &[T]) -> Vec<u8> {
        let mut w = ObjectWriter::new::<T>(Vec::new(), Path::new("mem")).unwrap();
        for r in records {
            w.push(r).unwrap();
        }
        w.finish().unwrap().0
    }

    fn read<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>> {
        let mut r = ObjectReader::new::<T>(bytes, Path::new("mem"), bytes.len() as u64, None)?;
        let mut out = Vec::new();
        while let Some(x) = r.next_record()? {
            out.push(x);
        }
        Ok(out)
    }

    #[test]
    fn round_trips_and_every_truncation_is_an_error() {
        let records: Vec<(u32, String)> = (0..20_000).map(|i| (i, format!("r{i}"))).collect();
        let bytes = write(&records);
        assert_eq!(read::<(u32, String)>(&bytes).unwrap(), records);
        assert_eq!(read::<()>(&write(&[(), (), ()])).unwrap().len(), 3);
        let small = write(&records[..50]);
        for cut in 0..small.len() {
            assert!(
                read::<(u32, String)>(&small[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    /// A reader charging `pool`, over a file of `records`.
    fn read_charged(bytes: &[u8], pool: &std::sync::Arc<MemoryPool>) -> Result<Vec<Vec<u8>>> {
        let memory = Some(pool.reservation("reader"));
        let mut r =
            ObjectReader::new::<Vec<u8>>(bytes, Path::new("mem"), bytes.len() as u64, memory)?;
        let mut out = Vec::new();
        while let Some(x) = r.next_record()? {
            out.push(x);
        }
        Ok(out)
    }

    #[test]
    fn a_busy_pool_does_not_fail_a_valid_file_but_a_chunk_over_its_limit_is_refused() {
        let records: Vec<Vec<u8>> = (0..4u32)
            .map(|i| {
                (0..300_000u32)
                    .map(|j| (j.wrapping_mul(2_654_435_761) >> (i + 7)) as u8)
                    .collect()
            })
            .collect();
        let bytes = write(&records);
        let pool = MemoryPool::new(8 << 20);
        let mut sorter = pool.reservation("sorter");
        sorter.try_grow((8 << 20) - (64 << 10)).unwrap();
        assert_eq!(read_charged(&bytes, &pool).unwrap(), records);
        assert!(pool.used() <= pool.limit());
        drop(sorter);

        let small = MemoryPool::new(100_000);
        match read_charged(&bytes, &small) {
            Err(EmberError::Io { path, source }) => {
                assert_eq!(path, Path::new("mem"));
                assert_eq!(source.kind(), io::ErrorKind::OutOfMemory);
                let message = source.to_string();
                assert!(
                    message.contains("the chunk at byte 45 needs")
                        && message.contains("its limit is 100000 bytes"),
                    "{message}"
                );
            }
            other => panic!(
                "expected an out-of-memory error, got {:?}",
                other.map(|v| v.len())
            ),
        }
        assert_eq!(small.used(), 0);
    }

    #[test]
    fn every_flipped_byte_is_an_error() {
        let small = write(&[(1u8, "x".to_string()), (2, "y".to_string())]);
        for i in 0..small.len() {
            let mut bad = small.clone();
            bad[i] ^= 0x40;
            assert!(read::<(u8, String)>(&bad).is_err(), "flipped byte {i}");
        }
    }
}
