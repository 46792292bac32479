//! The record/frame codec shared by the shuffle writer and reader.
//!
//! Records are serialised in postcard's format ([`crate::codec`]) back to back into a
//! reusable buffer. When that buffer
//! reaches [`FRAME_TARGET_BYTES`] it is compressed (lz4 block format) into one frame, or
//! stored as it is when compression would save under a fifth of it (lz4 costs more CPU
//! than writing and reading those bytes back saves; text still compresses by half):
//!
//! ```text
//! frame := [u32 LE uncompressed_len][u32 LE body_len][body_len bytes of lz4 block]
//!        | [u32 LE uncompressed_len][u32 LE STORED | uncompressed_len][the raw bytes]
//! block := frame*            (zero frames = empty block)
//! ```
//!
//! An encoder whose frame did not compress well stores the next
//! [`STORED_FRAMES_AFTER_A_POOR_ONE`] frames without trying (numbers, hashes and
//! already-compressed bytes do not compress), then tries again: incompressible data costs
//! one compression in sixteen frames, compressible data is always compressed. The
//! encoders of one map output share that [`CompressHint`] (`flush_with`): their records are
//! of one type, and a reducer's block of a 64-reducer shuffle is only a few frames long,
//! so per-encoder hints tried one frame in four (parquet_etl: lz4 3.6 % of the job and
//! the zeroed output buffers 1.4 %, for frames that were then stored).
//!
//! Invariants:
//! * A record never spans two frames, so a frame decodes on its own; a frame holds at least
//!   one record, and a frame bigger than the target holds exactly one (large) record.
//! * Every record takes at least one byte: a record postcard gives no bytes (a zero-sized
//!   type such as `()` or `((), ())`) is written as one [`ZERO_SIZED_MARKER`] byte, which
//!   the decoder consumes when decoding the record consumed nothing, so such records are
//!   counted back out exactly.
//! * A frame's uncompressed length is at most [`MAX_FRAME_BYTES`]; its compressed length is
//!   at most `lz4_flex::block::get_maximum_output_size(uncompressed_len)`. The decoder
//!   checks both before allocating, so a corrupt header cannot make it allocate gigabytes.
//! * The decoder holds one frame in memory at a time (compressed + uncompressed buffers,
//!   reused) and pops records with [`crate::codec::decode_prefix`]; it never loads a block.
//!
//! Frames carry no checksum: integrity is per block (crc32 in the index, see `index.rs`).
//! lz4_flex is used with its default `safe-decode`, so corrupt input is an error, never UB.

use std::io::{self, Read};

use lz4_flex::block::{compress_into, decompress_into, get_maximum_output_size};
use serde::{de::DeserializeOwned, Serialize};

use crate::codec::{decode_prefix, encode_into};
use crate::error::{Result, ShuffleError};

/// The flag of a stored (uncompressed) frame's second length word.
pub const STORED: u32 = 1 << 31;
/// Frames an encoder stores without trying compression after one that saved too little.
pub const STORED_FRAMES_AFTER_A_POOR_ONE: u32 = 15;

/// The length of a frame's body from its header words, if they are plausible: an lz4
/// block no larger than lz4 makes of `raw_len` bytes, or a stored copy of exactly
/// `raw_len` bytes; `raw_len` at most [`MAX_FRAME_BYTES`].
pub fn frame_body_len(raw_len: u32, body_word: u32) -> Option<usize> {
    let raw = raw_len as usize;
    if raw > MAX_FRAME_BYTES {
        return None;
    }
    if body_word & STORED != 0 {
        return (body_word & !STORED == raw_len).then_some(raw);
    }
    let body = body_word as usize;
    // lz4 shrinks at most about 255 to 1: a header claiming more is corrupt (and would
    // make the decoder allocate far more than the bytes it was given).
    (body <= get_maximum_output_size(raw) && raw <= body.saturating_mul(256) + 1024).then_some(body)
}

/// The byte standing for a record that serialises to no bytes.
pub const ZERO_SIZED_MARKER: u8 = 0;

/// Uncompressed size at which the pending records become a frame (at most; see
/// [`FrameEncoder::with_target`]).
pub const FRAME_TARGET_BYTES: usize = 64 * 1024;
/// The smallest frame target an encoder takes.
pub const MIN_FRAME_TARGET_BYTES: usize = 4 * 1024;
/// Bytes of a frame header: uncompressed length, compressed length.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest uncompressed frame accepted by encoder and decoder (so one record < 1 GiB).
pub const MAX_FRAME_BYTES: usize = 1 << 30;
/// Capacity a pending buffer may keep after a frame (target plus room for the record
/// that crosses the target). A buffer grown far past this by a huge record is shrunk back.
const PENDING_CAPACITY: usize = FRAME_TARGET_BYTES + 4 * 1024;
/// What the encoder reserves at its first record; the buffer then grows as records come.
/// Small, because a map task of a wide shuffle has an encoder per reducer and most of
/// them see a few records: reserving the full frame for each of 1,000 reducers cost a
/// 1,000 x 1,000 shuffle a page fault per reducer per map task.
const FIRST_PENDING_CAPACITY: usize = 1024;

/// Whether the next frames are worth compressing: frames still to be stored without
/// trying (the last try saved too little). One per encoder, or shared by the encoders
/// of one stream of records of a type (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct CompressHint {
    store_next: u32,
}

/// Accumulates serialised records and emits them as compressed frames into a sink.
#[derive(Debug)]
pub struct FrameEncoder {
    pending: Vec<u8>,
    /// The hint of [`push`](Self::push) and [`flush`](Self::flush).
    hint: CompressHint,
    /// Pending bytes at which the records become a frame.
    target: usize,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        Self::with_target(FRAME_TARGET_BYTES)
    }
}

impl FrameEncoder {
    /// An encoder with nothing pending (allocates on first push).
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder cutting frames at `target` uncompressed bytes (clamped to
    /// `MIN_FRAME_TARGET_BYTES..=FRAME_TARGET_BYTES`) instead of [`FRAME_TARGET_BYTES`]: a
    /// writer with many encoders keeps all their pending buffers in cache this way.
    pub fn with_target(target: usize) -> Self {
        FrameEncoder {
            pending: Vec::new(),
            hint: CompressHint::default(),
            target: target.clamp(MIN_FRAME_TARGET_BYTES, FRAME_TARGET_BYTES),
        }
    }

    /// Serialises `record` into the pending buffer; if the buffer reaches the frame target,
    /// compresses it as one frame appended to `sink`. No allocation per record.
    #[inline]
    pub fn push<T: Serialize + ?Sized>(&mut self, record: &T, sink: &mut Vec<u8>) -> Result<()> {
        let mut hint = self.hint;
        let done = self.push_with(record, sink, &mut hint);
        self.hint = hint;
        done
    }

    /// [`push`](Self::push) with a hint shared with other encoders.
    #[inline]
    pub fn push_with<T: Serialize + ?Sized>(
        &mut self,
        record: &T,
        sink: &mut Vec<u8>,
        hint: &mut CompressHint,
    ) -> Result<()> {
        if self.push_pending(record)? {
            self.flush_with(sink, hint)?;
        }
        Ok(())
    }

    /// Serialises `record` into the pending buffer only; true when the pending records
    /// should now become a frame ([`flush_with`](Self::flush_with), which appends at most
    /// [`frame_bound`](Self::frame_bound) bytes to its sink).
    #[inline]
    pub fn push_pending<T: Serialize + ?Sized>(&mut self, record: &T) -> Result<bool> {
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(FIRST_PENDING_CAPACITY);
        }
        let start = self.pending.len();
        if let Err(e) = encode_into(record, &mut self.pending) {
            self.pending.truncate(start);
            return Err(ShuffleError::ser("shuffle record", e));
        }
        if self.pending.len() == start {
            self.pending.push(ZERO_SIZED_MARKER);
        }
        Ok(self.pending.len() >= self.target)
    }

    /// The most bytes a flush appends to its sink now (header and body).
    #[inline]
    pub fn frame_bound(&self) -> usize {
        if self.pending.is_empty() {
            0
        } else {
            FRAME_HEADER_BYTES + get_maximum_output_size(self.pending.len())
        }
    }

    /// Compresses whatever is pending (if anything) as one frame appended to `sink`.
    pub fn flush(&mut self, sink: &mut Vec<u8>) -> Result<()> {
        let mut hint = self.hint;
        let done = self.flush_with(sink, &mut hint);
        self.hint = hint;
        done
    }

    /// [`flush`](Self::flush) with a hint shared with other encoders.
    pub fn flush_with(&mut self, sink: &mut Vec<u8>, hint: &mut CompressHint) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // Only a frame of a good size tells whether the data compresses (a few records
        // flushed early, before a spill or at the end, seldom do).
        let telling = self.pending.len() >= self.target / 2;
        if hint.store_next > 0 && telling {
            hint.store_next -= 1;
            store_frame(&self.pending, sink)?;
        } else if encode_frame(&self.pending, sink)? == FRAME_HEADER_BYTES + self.pending.len()
            && telling
        {
            // Stored: compression saved too little; do not try for a while.
            hint.store_next = STORED_FRAMES_AFTER_A_POOR_ONE;
        }
        self.pending.clear();
        if self.pending.capacity() > 2 * PENDING_CAPACITY {
            self.pending.shrink_to(PENDING_CAPACITY);
        }
        Ok(())
    }

    /// Uncompressed bytes waiting to become a frame.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Memory held by the pending buffer (its capacity), for memory accounting.
    pub fn buffer_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// Frees the pending buffer's memory. Call after [`flush`](Self::flush); anything still
    /// pending is a caller bug and is kept (debug builds assert).
    pub fn release(&mut self) {
        debug_assert!(self.pending.is_empty(), "release() with pending records");
        if self.pending.is_empty() {
            self.pending = Vec::new();
        }
    }
}

fn check_frame_len(raw: &[u8]) -> Result<()> {
    if raw.len() > MAX_FRAME_BYTES {
        return Err(ShuffleError::ser(
            "shuffle frame",
            format!(
                "frame of {} bytes exceeds the {MAX_FRAME_BYTES} byte limit (a record that large cannot be shuffled)",
                raw.len()
            ),
        ));
    }
    Ok(())
}

/// Appends `raw` to `sink` as one stored frame; returns the frame's size in bytes.
pub fn store_frame(raw: &[u8], sink: &mut Vec<u8>) -> Result<usize> {
    check_frame_len(raw)?;
    sink.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    sink.extend_from_slice(&(raw.len() as u32 | STORED).to_le_bytes());
    sink.extend_from_slice(raw);
    Ok(FRAME_HEADER_BYTES + raw.len())
}

/// Compresses `raw` as one frame appended to `sink` (stored instead when compression
/// saves under a fifth); returns the frame's size in bytes.
pub fn encode_frame(raw: &[u8], sink: &mut Vec<u8>) -> Result<usize> {
    check_frame_len(raw)?;
    let start = sink.len();
    let body = start + FRAME_HEADER_BYTES;
    sink.resize(body + get_maximum_output_size(raw.len()), 0);
    let compressed = match compress_into(raw, &mut sink[body..]) {
        Ok(n) => n,
        Err(e) => {
            sink.truncate(start);
            return Err(ShuffleError::ser("shuffle frame", e));
        }
    };
    if compressed * 5 > raw.len() * 4 {
        sink.truncate(start);
        return store_frame(raw, sink);
    }
    sink[start..start + 4].copy_from_slice(&(raw.len() as u32).to_le_bytes());
    sink[start + 4..body].copy_from_slice(&(compressed as u32).to_le_bytes());
    sink.truncate(body + compressed);
    Ok(FRAME_HEADER_BYTES + compressed)
}

/// Decodes records one at a time from a stream of frames, one frame in memory at a time.
///
/// Reads exactly two `read` calls' worth per frame (header, body), so wrapping a `File` in
/// a `BufReader` is unnecessary. Errors are `ShuffleError::Corrupt` (what = "shuffle frame
/// stream") naming the frame number and byte offset; after an error the decoder should be
/// dropped.
#[derive(Debug)]
pub struct FrameDecoder<R> {
    src: R,
    compressed: Vec<u8>,
    raw: Vec<u8>,
    pos: usize,
    frames: u64,
    offset: u64,
}

impl<R: Read> FrameDecoder<R> {
    /// A decoder reading frames from `src` until it reports end of stream.
    pub fn new(src: R) -> Self {
        FrameDecoder {
            src,
            compressed: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            frames: 0,
            offset: 0,
        }
    }

    /// The next record, or `None` at a clean end of stream (on a frame boundary).
    pub fn next_record<T: DeserializeOwned>(&mut self) -> Result<Option<T>> {
        while self.pos >= self.raw.len() {
            if !self.next_frame()? {
                return Ok(None);
            }
        }
        match decode_prefix::<T>(&self.raw[self.pos..]) {
            Ok((record, used)) if used > 0 => {
                self.pos += used;
                Ok(Some(record))
            }
            // A zero-sized record: its marker byte.
            Ok((record, _)) if self.raw[self.pos] == ZERO_SIZED_MARKER => {
                self.pos += 1;
                Ok(Some(record))
            }
            Ok(_) => Err(self.corrupt(format!(
                "record at byte {} of the frame consumed no bytes (wrong record type?)",
                self.pos
            ))),
            Err(e) => Err(self.corrupt(format!(
                "undecodable record at byte {} of the frame: {e}",
                self.pos
            ))),
        }
    }

    /// Frames fully read so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// The underlying reader.
    pub fn get_ref(&self) -> &R {
        &self.src
    }

    /// Reads and decompresses the next frame; `false` at a clean end of stream.
    fn next_frame(&mut self) -> Result<bool> {
        let mut header = [0u8; FRAME_HEADER_BYTES];
        let got = read_full(&mut self.src, &mut header).map_err(|e| self.io_error(e))?;
        if got == 0 {
            return Ok(false);
        }
        if got < FRAME_HEADER_BYTES {
            return Err(self.corrupt(format!("truncated frame header ({got} of 8 bytes)")));
        }
        let raw_word = u32::from_le_bytes(header[..4].try_into().unwrap());
        let body_word = u32::from_le_bytes(header[4..].try_into().unwrap());
        let raw_len = raw_word as usize;
        let Some(comp_len) = frame_body_len(raw_word, body_word) else {
            return Err(self.corrupt(format!(
                "implausible frame header: uncompressed {raw_len} bytes, body word {body_word:#x}"
            )));
        };
        let stored = body_word & STORED != 0;
        // A stored body is the frame's records themselves.
        let body = if stored {
            &mut self.raw
        } else {
            &mut self.compressed
        };
        match read_body(&mut self.src, comp_len, body) {
            Ok(n) if n == comp_len => {}
            Ok(_) => {
                return Err(
                    self.corrupt(format!("truncated frame body (expected {comp_len} bytes)"))
                )
            }
            Err(e) => return Err(self.io_error(e)),
        }
        if !stored {
            self.raw.resize(raw_len, 0);
            match decompress_into(&self.compressed, &mut self.raw) {
                Ok(n) if n == raw_len => {}
                Ok(n) => {
                    return Err(self.corrupt(format!(
                        "frame decompressed to {n} bytes, header says {raw_len}"
                    )))
                }
                Err(e) => return Err(self.corrupt(format!("lz4 decompression failed: {e}"))),
            }
        }
        self.pos = 0;
        self.frames += 1;
        self.offset += (FRAME_HEADER_BYTES + comp_len) as u64;
        Ok(true)
    }

    fn corrupt(&self, message: String) -> ShuffleError {
        ShuffleError::Corrupt {
            what: "shuffle frame stream".into(),
            message: format!("frame {} at byte {}: {message}", self.frames, self.offset),
        }
    }

    fn io_error(&self, e: io::Error) -> ShuffleError {
        self.corrupt(format!("read failed: {e}"))
    }
}

/// Reads `len` bytes (or up to the end of stream) into `buf`, replacing its contents;
/// the buffer grows with the bytes that arrive, not with what a header claims.
fn read_body(src: &mut impl Read, len: usize, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    src.take(len as u64).read_to_end(buf)
}

/// Reads until `buf` is full or end of stream; returns the bytes read.
fn read_full(src: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match src.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
